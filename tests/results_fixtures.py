"""Results directories for the tests of compare, export, plot and the notebook.

A pytest plugin (each test module names it in `pytest_plugins`), so the session-scoped CPU run
below is measured once for all of them. `results_dir` is that run plus every real results
directory in results/examples/, so the same tests also run on GPU data when it is there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "results" / "examples").glob("*")
                  if (p / "results.csv").exists() or (p / "results.parquet").exists())
# the small CPU run; a short sampling budget keeps it to a few seconds
CPU_RUN = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "8,16", "--context", "32",
           "--device", "cpu", "--budget-ms", "20"]
E2E_RUN = ["e2e", "--model", "tiny", "--device", "cpu", "--warmup", "1", "--iters", "2", "--input-len", "8",
           "--output-len", "2", "--batch-size", "1,2"]


def invoke(*args):
    from attnbench.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def cli():
    """`cli("compare", base, new)`: the attnbench app in-process, arguments as str()."""
    return invoke


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cpu-run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["attnbench", *CPU_RUN, "--out", str(out)])
        result = invoke(*CPU_RUN, "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory) -> Path:
    """A tiny e2e run on the CPU, as `attnbench e2e` writes it: two batch sizes, so its plots draw lines."""
    out = tmp_path_factory.mktemp("e2e") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["attnbench", *E2E_RUN, "--out", str(out)])
        result = invoke(*E2E_RUN, "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(params=["cpu-run", *[p.name for p in EXAMPLES]])
def results_dir(request) -> Path:
    """The CPU run, then each directory of results/examples/."""
    if request.param == "cpu-run":
        return request.getfixturevalue("cpu_run")
    return ROOT / "results" / "examples" / request.param
