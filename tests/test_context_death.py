"""A kernel fault that kills the CUDA context in an in-process sweep (no --isolate), on the CPU.

After such a fault every later call fails, and on a GPU it may surface only at the cleanup after
a point (empty_cache, a synchronize). The run must stop there like an interrupted one: the rows
measured so far kept with their summary, the point's failed rows `crashed`, one `error:` line
that says to go on with --isolate --resume, a non-zero exit, and no traceback. Two ways in: the
health check an --isolate worker uses (workers/pool.py) raising the error a dead context raises,
and the test-only backend that kills the context at 8 tokens (tests/fake_backends.py), run for
real in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.workers import pool

pytest_plugins = ["fake_backends"]

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "4,8,12", "--kind", "decode",
         "--context", "32", "--budget-ms", "3", "--device", "cpu"]
ILLEGAL = "CUDA error: an illegal memory access was encountered"
DeadContextError = getattr(torch, "AcceleratorError", RuntimeError)  # what torch raises for it (>= 2.8)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def one_line(text: str) -> str:
    return " ".join(text.split())


def rows_by_tokens(out: Path) -> dict[int, list[str]]:
    df = pd.read_csv(out / "results.csv")
    return {int(n): sorted(g["verdict"]) for n, g in df.groupby("num_tokens")}


def dies_after_point(n: int):
    """A health check that finds the context dead after the n-th point, as a synchronize would:
    by raising the error a fault left (it is sticky, so every later check raises it too)."""
    calls = []

    def check() -> bool:
        calls.append(1)
        if len(calls) >= n:
            raise DeadContextError(f"{ILLEGAL}\nSearch for `cudaErrorIllegalAddress' in the CUDA docs")
        return True
    return check


def stops_in_one_line(monkeypatch, argv: list, last_line: str) -> None:
    """The run dies after its second point (dies_after_point), exits 1 and ends in `last_line`."""
    with monkeypatch.context() as m:
        m.setattr(pool, "cuda_healthy", dies_after_point(2))
        result = invoke(*argv)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == last_line


def test_a_fault_surfacing_after_a_point_stops_the_run_in_one_line_then_isolate_resume_finishes(
        tmp_path, monkeypatch):
    out = tmp_path / "run"
    stops_in_one_line(monkeypatch, [*SWEEP, "--out", out], (
        f"error: the CUDA context died at point decode N=8 4x32 ({DeadContextError.__name__}: {ILLEGAL}); "
        f"the 2 rows measured before it are in {out}; run again with --isolate --resume {out} to measure "
        "the rest (each point in its own process)"))
    # the points up to the one it died at are kept (here the fault left their rows passing), and
    # the outputs of an interrupted run are written from them
    assert rows_by_tokens(out) == {4: ["pass", "pass"], 8: ["pass", "pass"]}
    assert (out / "summary.md").exists() and (out / "results.parquet").exists()

    result = invoke(*SWEEP, "--isolate", "--resume", out)
    assert result.exit_code == 0, result.output
    assert "2 of 3 points already measured" in result.output
    assert rows_by_tokens(out) == {4: ["pass", "pass"], 8: ["pass", "pass"], 12: ["pass", "pass"]}


def test_a_kernel_that_kills_the_context_in_process_ends_with_one_line_not_a_traceback(tmp_path, misbehaving):
    out = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "attnbench", *SWEEP, "--backend", "test-dead-context",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    message = one_line(proc.stderr[proc.stderr.index("error:"):])
    assert message.startswith(f"error: the CUDA context died at point decode N=8 4x32 (RuntimeError: {ILLEGAL} ("), \
        message  # the reason of the point's last failed row: where the error was raised, too
    assert message.endswith(f"); the 2 rows measured before it are in {out}; run again with --isolate --resume "
                            f"{out} to measure the rest (each point in its own process)"), message
    # the point it died at: its rows `crashed`, with the error each saw, as under --isolate
    df = pd.read_csv(out / "results.csv")
    assert rows_by_tokens(out) == {4: ["pass", "pass"], 8: ["crashed", "crashed"]}
    assert df.loc[df["num_tokens"] == 8, "reason"].str.startswith(
        f"the CUDA context died: RuntimeError: {ILLEGAL}").all()
    assert (out / "summary.md").exists()

    result = invoke(*SWEEP, "--backend", "test-dead-context", "--isolate", "--resume", out)
    assert result.exit_code == 0, result.output
    assert rows_by_tokens(out) == {4: ["pass", "pass"], 8: ["crashed", "crashed"], 12: ["pass", "pass"]}


E2E = ["e2e", "--model", "tiny", "--input-len", "8", "--output-len", "3", "--batch-size", "1,2,3", "--warmup", "0",
       "--iters", "1", "--device", "cpu"]


def test_an_e2e_fault_after_a_point_stops_the_run_in_one_line_keeping_the_points_before(tmp_path, monkeypatch):
    """The headline e2e grid on a GPU met a fault mid-run and ended in a traceback from the agreement
    check (the check runs' logits lived in the dead context): now it stops as the kernel job does."""
    out = tmp_path / "run"
    stops_in_one_line(monkeypatch, [*E2E, "--out", out], (
        f"error: the CUDA context died at point in 8 / out 3 / batch 2 ({DeadContextError.__name__}: {ILLEGAL}); "
        f"the 1 point(s) measured before it are in {out}; run again with --isolate --resume {out} to measure "
        "the rest (each point in its own process)"))
    df = pd.read_csv(out / "results.csv")
    assert sorted(df["batch_size"].unique()) == [1, 2] and (out / "summary.md").exists()

    result = invoke(*E2E, "--isolate", "--resume", out)
    assert result.exit_code == 0, result.output
    assert sorted(pd.read_csv(out / "results.csv")["batch_size"].unique()) == [1, 2, 3]
