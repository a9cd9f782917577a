"""--isolate: each point in a worker process with a watchdog, on the CPU.

Test-only backends (tests/fake_backends.py) hang, kill their process, run out of memory or kill
the CUDA context at one point; that point becomes `timeout`, `crashed` or `oom` rows and every
other point is measured. The backends reach the spawned workers through ATTNBENCH_EXTRA_BACKENDS,
as a user's own would. The pool itself: a healthy worker is reused, a lost one replaced.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels.backends import registry
from attnbench.workers.pool import WorkerPool

pytest_plugins = ["fake_backends"]

SWEEP = ["kernel", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "4,8,12", "--kind", "decode",
         "--context", "32", "--budget-ms", "3", "--device", "cpu"]


def run(tmp_path, *extra):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [*SWEEP, *extra, "--out", str(out)], env={"COLUMNS": "200"})
    return result, out


def by_tokens(out) -> dict[int, set[str]]:
    df = pd.read_csv(out / "results.csv")
    return {n: set(g["verdict"]) for n, g in df.groupby("num_tokens")}


@pytest.mark.parametrize("backend, verdict, reason", [
    ("test-hang", "timeout", "no result within --point-timeout 3 s"),
    ("test-crash", "crashed", "killed by SIGKILL"),
    ("test-oom", "oom", "OutOfMemoryError"),
    ("test-fault", "error", "IndexError"),  # on a GPU: a device-side assert, so crashed as the next one
    ("test-dead-context", "crashed", "the CUDA context died: RuntimeError: CUDA error: an illegal memory access"),
])
def test_a_bad_point_costs_that_point_only(tmp_path, misbehaving, backend, verdict, reason):
    start = time.monotonic()
    result, out = run(tmp_path, "--backend", backend, "--isolate", "--point-timeout", "3")
    assert result.exit_code == 0, result.output
    verdicts = by_tokens(out)
    assert verdicts[4] == {"pass"} and verdicts[12] == {"pass"}, verdicts
    assert verdicts[8] == {verdict}
    rows = pd.read_csv(out / "results.csv")
    assert rows.loc[rows["num_tokens"] == 8, "reason"].str.contains(reason).all()
    assert time.monotonic() - start < 90


def test_out_of_memory_is_its_own_verdict_in_process_too(tmp_path, misbehaving):
    result, out = run(tmp_path, "--backend", "test-oom")
    assert result.exit_code == 0, result.output
    assert by_tokens(out)[8] == {"oom"}


def test_isolated_rows_match_in_process_rows(tmp_path):
    isolated, out_iso = run(tmp_path / "a", "--isolate")
    inline, out_inline = run(tmp_path / "b")
    assert isolated.exit_code == inline.exit_code == 0
    columns = ["kind", "num_tokens", "backend", "strategy", "mode", "verdict", "kernel_launches"]
    iso, inl = pd.read_csv(out_iso / "results.csv"), pd.read_csv(out_inline / "results.csv")
    pd.testing.assert_frame_equal(iso[columns], inl[columns])


def test_a_backend_from_the_environment_that_does_not_load_is_one_line(tmp_path):
    registry._load_extra_backends("no_such_module:Backend")
    try:
        result, _ = run(tmp_path)
    finally:
        registry.EXTRA_BACKEND_ERRORS.clear()
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("error: ATTNBENCH_EXTRA_BACKENDS: cannot load")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e9"])
def test_point_timeout_must_be_a_sane_number(tmp_path, value):
    result, _ = run(tmp_path, "--isolate", "--point-timeout", value)
    assert result.exit_code == 1 and "--point-timeout" in result.output.strip().splitlines()[-1]


def test_a_healthy_worker_is_reused_and_a_lost_one_replaced():
    from fake_backends import pid_or_death  # a plugin of this module: imported once pytest has it

    with WorkerPool(pid_or_death, (), timeout=60) as pool:
        first, again, lost, fresh = (pool.run(task) for task in ("pid", "pid", "die", "pid"))
    assert first.items == again.items and first.failure is None
    assert lost.failure[0] == "crashed" and "killed by SIGKILL" in lost.failure[1]
    assert fresh.items and fresh.items != first.items
