"""Every command the README, the rule guide and the examples' READMEs run on results/examples runs as
written and exits 0 (CPU: the rule reads saved rows).

Why: the shipped examples refused each other (`rule apply` of the example rule on the example
replay exited 1, its rows older than the rule's features) and `rule fit` on the example replay told
the reader to measure again. The commands are taken from the docs' ```bash blocks, not copied here,
and run in a copy of results/examples (a command that writes, writes there); the re-rendering of
the example rule.py must leave it as the repository has it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from rule_fixtures import ROOT

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")

DOCS = [ROOT / "README.md", ROOT / "docs" / "guides" / "rule.md", *sorted((ROOT / "results" / "examples").glob("*/README.md"))]


def documented() -> list[tuple[str, str]]:
    """(file, command) of every attnbench or python command in a ```bash block that names results/examples."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.S):
            for command in block.replace("\\\n", " ").splitlines():
                command = command.split(" #")[0].strip()
                if command.startswith(("attnbench ", "python ")) and "results/examples" in command:
                    found.append((str(doc.relative_to(ROOT)), command))
    return found


def test_the_documented_commands_are_found():
    commands = [c for _, c in documented()]
    assert "attnbench rule fit results/examples/h200-replay-chat-high --out rules/h200-chat-high" in commands
    assert "attnbench rule apply results/examples/h200-rule results/examples/h200-replay-chat-high" in commands
    assert any(c.startswith("python -c") and "rule_py" in c for c in commands)


@pytest.mark.parametrize("doc, command", documented(), ids=[f"{d}: {c[:60]}" for d, c in documented()])
def test_a_documented_command_on_the_examples_runs_as_written(tmp_path, doc, command):
    shutil.copytree(ROOT / "results" / "examples", tmp_path / "results" / "examples")
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")  # the replay's trace, where the replay read it
    argv = shlex.split(command)
    argv = [sys.executable, "-m", "attnbench", *argv[1:]] if argv[0] == "attnbench" else [sys.executable, *argv[1:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{doc}: {command}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr and "Measure again" not in done.stdout, done.stdout
    rendered = tmp_path / "results" / "examples" / "h200-rule" / "rule.py"
    assert rendered.read_text() == (ROOT / "results" / "examples" / "h200-rule" / "rule.py").read_text()
