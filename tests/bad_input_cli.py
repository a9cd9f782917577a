"""What the bad-input tests share: the commands they start from, the in-process CLI, and the check
that a result is one `error:` line on stderr, exit 1, no traceback and nothing on stdout.

Used by tests/test_bad_input.py (flags, the convention) and tests/test_bad_input_files.py
(scenario files, checkpoint configs).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

from attnbench.cli.main import app

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KERNEL = ["kernel", "--heads", "4", "--dim", "32", "--tokens", "8", "--context", "32", "--kind", "decode",
          "--budget-ms", "5", "--backend", "reference", "--device", "cpu"]
E2E = ["e2e", "--model", "tiny", "--input-len", "8", "--output-len", "4", "--batch-size", "1", "--warmup", "0",
       "--iters", "1", "--device", "cpu"]
SCENARIO = 'command = "kernel"\nheads = 4\ndim = 32\ntokens = [8]\ncontext = 32\nkind = "decode"\n'


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


def assert_one_error_line(result, named: str = "") -> str:
    """Exit 1, nothing on stdout, one `error:` line on stderr (naming `named`), no traceback."""
    crashed = result.exception if not isinstance(result.exception, SystemExit) else None
    assert crashed is None, f"{type(crashed).__name__}: {crashed}"
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert named in lines[0], lines[0]
    assert not result.stdout.strip(), result.stdout
    return lines[0]
