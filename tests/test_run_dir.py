"""One run owns its directory; Ctrl-C and SIGTERM keep what was measured; --resume finishes a run.

Kernel runs and e2e runs on the CPU (reference backend, tiny sizes). Interrupts are sent for real
to a subprocess (SIGINT, SIGTERM), and also raised in-process at a chosen point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.e2e import runner as e2e_runner
from attnbench.errors import UsageError
from attnbench.kernels import sweep
from attnbench.results.atomic import replace_atomic, write_text_atomic
from attnbench.runs import rundir

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "4,8,12", "--kind", "decode,mixed",
          "--context", "32", "--budget-ms", "3", "--device", "cpu"]
E2E = ["e2e", "--model", "tiny", "--input-len", "6", "--output-len", "2", "--batch-size", "1,2,3", "--warmup", "0",
       "--iters", "1", "--device", "cpu"]
POINT = ["kind", "num_tokens", "backend", "strategy", "mode"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def last_line(result) -> str:
    return result.output.strip().splitlines()[-1]


def keys(out: Path, columns=POINT) -> list[tuple]:
    return sorted(map(tuple, pd.read_csv(out / "results.csv")[columns].astype(str).values.tolist()))


# --- claiming the directory ---------------------------------------------------------------------

@pytest.mark.parametrize("command", [KERNEL, E2E], ids=["kernel", "e2e"])
def test_a_directory_holding_a_run_is_refused_and_left_as_it_was(tmp_path, command):
    out = tmp_path / "run"
    assert invoke(*command, "--out", out).exit_code == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    result = invoke(*command, "--out", out)
    assert result.exit_code == 1 and last_line(result).startswith("error: --out:") and "not empty" in result.output
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_force_replaces_attnbench_outputs_only_and_never_follows_a_link(tmp_path):
    out, elsewhere = tmp_path / "run", tmp_path / "precious.csv"
    out.mkdir()
    elsewhere.write_text("keep me\n")
    (out / "results.csv").symlink_to(elsewhere)
    (out / "results.parquet").write_text("stale parquet of an older run")
    (out / "notes.txt").write_text("mine")
    (out / rundir.RECORD).write_text(json.dumps({"written": ["results.csv", "results.parquet"]}))
    result = invoke(*KERNEL, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert elsewhere.read_text() == "keep me\n" and not (out / "results.csv").is_symlink()
    assert (out / "notes.txt").read_text() == "mine"
    assert len(pd.read_csv(out / "results.csv")) == 3 * 2 * 2  # tokens x kinds x strategies
    assert not (out / "results.parquet").exists() or (out / "results.parquet").read_bytes()[:4] == b"PAR1"


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.write_text("x"), "is a file"),
    (lambda p: (p.parent / "f").write_text("x"), "cannot use"),
])
def test_an_out_that_cannot_be_a_directory_is_one_line(tmp_path, make, needle):
    target = tmp_path / "out"
    make(target)
    out = target if target.exists() else tmp_path / "f" / "under-a-file"
    result = invoke(*KERNEL, "--out", out)
    assert result.exit_code == 1 and needle in last_line(result) and "Traceback" not in result.output


def test_a_live_run_holds_the_lock_and_a_dead_ones_lock_is_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / rundir.LOCK).write_text(str(other.pid))
        result = invoke(*KERNEL, "--out", out)
        assert result.exit_code == 1 and f"pid {other.pid}" in last_line(result)
    finally:
        other.kill()
        other.wait()
    assert invoke(*KERNEL, "--out", out).exit_code == 0  # that pid is gone: a stale lock
    assert not (out / rundir.LOCK).exists()


def test_atomic_writes_replace_a_link_and_leave_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("untouched")
    (tmp_path / "out.txt").symlink_to(target)
    write_text_atomic(tmp_path / "out.txt", "new")
    assert target.read_text() == "untouched" and (tmp_path / "out.txt").read_text() == "new"
    with pytest.raises(ZeroDivisionError):
        replace_atomic(tmp_path / "x.txt", lambda tmp: 1 / 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "target.txt"]


def test_a_scenarios_out_stays_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('command = "kernel"\nheads = 4\ndim = 32\nout = "../../escape"\n')
    result = invoke("run", "s.toml", "--device", "cpu", "--tokens", "4", "--kind", "decode", "--check")
    assert result.exit_code == 1 and "outside the working directory" in last_line(result)
    escape = tmp_path / "given-on-the-command-line"
    result = invoke("run", "s.toml", "--device", "cpu", "--tokens", "4", "--kind", "decode", "--context", "32",
                    "--budget-ms", "3", "--out", escape)
    assert result.exit_code == 0, result.output
    assert (escape / "results.csv").exists() and (escape / "scenario.json").exists()


# --- interruption and resume ---------------------------------------------------------------------

def interrupt_at(monkeypatch, n: int, exc: BaseException) -> None:
    """Raise `exc` when the sweep starts its n-th point (1-based)."""
    real, calls = sweep.PointRunner.rows, []

    def rows(self):
        calls.append(self.point)
        if len(calls) == n:
            raise exc
        yield from real(self)

    monkeypatch.setattr(sweep.PointRunner, "rows", rows)


def test_ctrl_c_keeps_finished_points_then_resume_measures_only_the_rest(tmp_path, monkeypatch):
    full, out = tmp_path / "full", tmp_path / "run"
    assert invoke(*KERNEL, "--out", full).exit_code == 0
    with monkeypatch.context() as m:
        interrupt_at(m, 3, KeyboardInterrupt())
        result = invoke(*KERNEL, "--out", out)
    assert result.exit_code == 130 and "interrupted by SIGINT after 2 of 6" in last_line(result)
    assert f"--resume {out}" in " ".join(result.output.split())
    assert len(pd.read_csv(out / "results.csv")) == 2 * 2  # two whole points, the third abandoned
    assert (out / "summary.md").exists() and any(out.glob("*.png"))  # outputs of what was measured
    measured = []
    real = sweep.PointRunner.rows
    monkeypatch.setattr(sweep.PointRunner, "rows", lambda self: (measured.append(self.point), (yield from real(self))))
    result = invoke(*KERNEL, "--resume", out)
    assert result.exit_code == 0, result.output
    assert len(measured) == 4 and "2 of 6 points already measured" in result.output
    assert keys(out) == keys(full)


def test_resume_refuses_a_run_from_another_gpu_or_library(tmp_path):
    out = tmp_path / "run"
    assert invoke(*KERNEL, "--out", out).exit_code == 0
    env = json.loads((out / "env.json").read_text())
    (out / "env.json").write_text(json.dumps({**env, "torch": "0.0.1"}))
    result = invoke(*KERNEL, "--resume", out)
    assert result.exit_code == 1 and "torch" in last_line(result) and "0.0.1" in last_line(result)
    result = invoke(*KERNEL, "--resume", tmp_path / "nothing-here")
    assert result.exit_code == 1 and last_line(result).startswith("error: --resume:")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_real_signal_mid_sweep_then_resume(tmp_path, sig, code):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "attnbench", *KERNEL, "--tokens", "4,8,12,16,20", "--budget-ms", "10",
            "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # wait for the first finished point
        if (out / "results.csv").exists() and len((out / "results.csv").read_text().splitlines()) > 1:
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the signal arrived")
    assert proc.returncode == code, stdout + stderr
    assert "Traceback" not in stderr and f"interrupted by {signal.Signals(sig).name}" in " ".join(stderr.split())
    partial = pd.read_csv(out / "results.csv")
    assert len(partial) % 2 == 0  # whole points only: two strategies each
    assert not (out / rundir.LOCK).exists()
    result = invoke(*KERNEL, "--tokens", "4,8,12,16,20", "--budget-ms", "10", "--resume", out)
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(out / "results.csv")) == 5 * 2 * 2


def test_e2e_ctrl_c_then_resume_gives_the_rows_of_an_uninterrupted_run(tmp_path, monkeypatch):
    full, out = tmp_path / "full", tmp_path / "run"
    assert invoke(*E2E, "--out", full).exit_code == 0
    real, calls = e2e_runner.run_point, []

    def run_point(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr("attnbench.runs.e2e.run_point", run_point)
        result = invoke(*E2E, "--out", out)
    assert result.exit_code == 130 and "after 1 of 3" in last_line(result)
    assert (out / "summary.md").exists()
    result = invoke(*E2E, "--resume", out)
    assert result.exit_code == 0, result.output
    columns = ["input_len", "output_len", "batch_size", "backend", "strategy", "mode", "verdict"]
    assert keys(out, columns) == keys(full, columns)
    assert len(pd.read_csv(out / "agreement.csv")) == len(pd.read_csv(full / "agreement.csv"))


def test_resume_and_a_different_out_are_refused(tmp_path):
    out = tmp_path / "run"
    assert invoke(*KERNEL, "--out", out).exit_code == 0
    result = invoke(*KERNEL, "--resume", out, "--out", tmp_path / "elsewhere")
    assert result.exit_code == 1 and last_line(result).startswith("error: --resume/--out:")
    assert not (tmp_path / "elsewhere").exists()


def test_prepare_keeps_what_a_resume_needs_and_clears_the_rest(tmp_path):
    for name in ("results.csv", "env.json", "results.parquet", "summary.md", "latency_x.png"):
        (tmp_path / name).write_text("x")
    (tmp_path / "profile").mkdir()
    (tmp_path / rundir.RECORD).write_text(json.dumps({"written": sorted(p.name for p in tmp_path.iterdir())}))
    run = rundir.RunDir.prepare(tmp_path, resume=True)
    assert len(list(tmp_path.iterdir())) == 7  # nothing is removed before the resume's checks have passed
    run.reopen()
    assert sorted(p.name for p in tmp_path.iterdir()) == [rundir.RECORD, "env.json", "results.csv"]
    with pytest.raises(UsageError, match="not empty"):
        rundir.RunDir.prepare(tmp_path)
