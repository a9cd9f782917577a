"""Past one process, on the CPU: torchrun ranks over gloo, and `--devices` worker pools.

Real processes throughout: two torchrun ranks (a `python -m torch.distributed.run` subprocess
on a free port) must write one run with the keys of a one-process run, and a rank killed
midway must cost its own rows only; `--devices cpu,cpu` starts two worker processes that must
both take points. The one-process run is the oracle for keys. This module is also a backend
source for the ranks (ATTNBENCH_EXTRA_BACKENDS=test_distributed:LateCrashBackend), so it
imports little at the top: the ranks import it while the registry is loading.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from fake_backends import CrashingBackend

TESTS = Path(__file__).resolve().parent
SWEEP = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "4,8,12", "--kind", "decode",
         "--context", "32", "--budget-ms", "2", "--device", "cpu"]
KEY = ["kind", "num_tokens", "num_heads", "head_dim", "backend", "strategy", "mode"]
LATE_S = 3.0  # the killed rank dies this long into its 8-token point: rank 0 has finished and waits


class LateCrashBackend(CrashingBackend):
    """Kills its process at 8 query tokens, after a pause."""

    name = "test-late-crash"
    description = "test only: a launch that kills its process at 8 tokens, after a pause"

    def misbehave(self, q: torch.Tensor) -> None:
        time.sleep(LATE_S)
        super().misbehave(q)


def invoke(*args):
    from typer.testing import CliRunner

    from attnbench.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def keys(out: Path) -> set[tuple]:
    return set(pd.read_csv(out / "results.csv")[KEY].astype(str).itertuples(index=False, name=None))


def torchrun(*args, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run --standalone --nproc-per-node 2 -m attnbench ...`
    (standalone: a local rendezvous on a free port)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(extra_env or {})}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "attnbench", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    result = invoke(*SWEEP, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_two_gloo_ranks_write_one_run_with_the_keys_of_one_process(one_process, tmp_path):
    done = torchrun(*SWEEP, "--out", tmp_path / "ranks")
    assert done.returncode == 0, done.stdout + done.stderr
    assert keys(tmp_path / "ranks") == keys(one_process)
    ranks = json.loads((tmp_path / "ranks" / "env.json").read_text())["distributed"]["ranks"]
    assert [(r["shard"], r["status"]) for r in ranks] == [("0/2", "ok"), ("1/2", "ok")]
    assert sum(r["points"] for r in ranks) == 3 and all(r["points"] for r in ranks)
    assert set(pd.read_csv(tmp_path / "ranks" / "results.csv")["device"]) == {"cpu"}
    assert (tmp_path / "ranks" / "summary.md").is_file()


def test_a_killed_rank_costs_its_own_rows_only(tmp_path):
    out = tmp_path / "ranks"
    done = torchrun(*SWEEP, "--backend", "test-late-crash", "--out", out,
                    extra_env={"ATTNBENCH_EXTRA_BACKENDS": "test_distributed:LateCrashBackend",
                               "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode != 0
    said = " ".join((done.stdout + done.stderr).split())
    assert "error: shard(s) 1/2 (did not report" in said and f"--resume {out}" in said
    ranks = json.loads((out / "env.json").read_text())["distributed"]["ranks"]
    assert ranks[0]["status"] == "ok" and ranks[1]["status"].startswith("did not report")
    rows = pd.read_csv(out / "results.csv")
    assert set(rows["num_tokens"]) == {12} and set(rows["verdict"]) == {"pass"}  # rank 0's shard, whole
    assert (out / "summary.md").is_file()


def test_devices_spread_points_over_worker_processes(one_process, tmp_path):
    out = tmp_path / "pool"
    result = invoke(*[a for a in SWEEP if a not in ("--device", "cpu")], "--devices", "cpu,cpu", "--out", out)
    assert result.exit_code == 0, result.output
    assert keys(out) == keys(one_process)
    shares = json.loads((out / "env.json").read_text())["devices"]
    assert [s["device"] for s in shares] == ["cpu", "cpu"]
    assert all(s["points"] >= 1 and s["start_s"] > 0 for s in shares) and sum(s["points"] for s in shares) == 3


@pytest.mark.parametrize("flags, says", [
    (["--devices", "cuda:x"], "--devices: 'cuda:x' is not a device"),
    (["--devices", "gpu0"], "--devices: 'gpu0' is not a device"),
    (["--devices", "cuda:0,cuda:0"], "--devices: cuda:0 is listed twice"),
    (["--devices", ","], "--devices: empty list"),
    (["--devices", "cpu,cpu", "--device", "cpu"], "--device/--devices: give one of them"),
    pytest.param(["--devices", "all"], "--devices all: no GPU is visible",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")),
    pytest.param(["--devices", "cuda:0"], "--devices: cuda:0 does not exist",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")),
])
def test_bad_devices_are_one_line(tmp_path, flags, says):
    base = [a for a in SWEEP if a not in ("--device", "cpu")]
    result = invoke(*base, *flags, "--out", tmp_path / "run")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[-1].startswith(f"error: {says}"), result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, value, says", [
    ("shard", "0/2", "--shard: under torchrun rank r of W measures shard r/W"),
    ("devices", "cpu,cpu", "--devices: under torchrun each rank uses one device"),
    ("device", "cuda:1", "--device: under torchrun each rank uses cuda:LOCAL_RANK"),
])
def test_flags_that_torchrun_decides_are_refused(flag, value, says):
    from attnbench.errors import UsageError
    from attnbench.kernels.plan import KernelArgs
    from attnbench.runs.kernel_ranks import RankRun, rank_args

    with pytest.raises(UsageError, match=says.replace("/", ".")):
        rank_args(KernelArgs(shapes=[(4, 32)], **{flag: value}), RankRun(rank=1, world=2, local_rank=1))
