"""e2e --isolate on the CPU: each (input, output, batch) point in a worker process that builds the
tiny model once and keeps it while it is healthy.

Test-only backends (tests/fake_backends.py) hang, kill their process or kill the CUDA context in
the decode steps at batch size 8 (a launch over 8 query tokens). That point's rows become
`timeout` / `crashed`, one per strategy, and the points at batch sizes 1 and 2, before and after
it, are measured and agree as usual. Each case starts two workers (the second after the lost
one), so each takes a few seconds. That a healthy worker is reused is tested on the pool itself
(tests/test_workers.py).
"""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app

pytest_plugins = ["fake_backends"]

E2E = ["e2e", "--model", "tiny", "--device", "cpu", "--input-len", "12", "--output-len", "3", "--batch-size", "1,8,2",
       "--warmup", "0", "--iters", "1"]


def run(tmp_path, *extra):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [*E2E, *extra, "--out", str(out)], env={"COLUMNS": "200"})
    return result, out


@pytest.mark.parametrize("backend, verdict, reason", [
    ("test-hang", "timeout", "no result within --point-timeout 3 s; the worker was killed"),
    ("test-crash", "crashed", "the worker was killed by SIGKILL"),
    ("test-dead-context", "crashed", "the CUDA context died: RuntimeError: CUDA error: an illegal memory access"),
])
def test_a_bad_e2e_point_costs_that_point_only(tmp_path, misbehaving, backend, verdict, reason):
    result, out = run(tmp_path, "--backend", backend, "--isolate", "--point-timeout", "3")
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out / "results.csv")
    verdicts = {b: set(g["verdict"]) for b, g in rows.groupby("batch_size")}
    assert verdicts == {1: {"pass"}, 2: {"pass"}, 8: {verdict}}, verdicts
    bad = rows[rows["batch_size"] == 8]
    assert sorted(bad["strategy"]) == ["split", "unified"]
    assert bad["reason"].str.contains(reason, regex=False).all(), list(bad["reason"])
    agreement = pd.read_csv(out / "agreement.csv")
    assert sorted(agreement["batch_size"]) == [1, 2] and set(agreement["verdict"]) == {"match"}


def test_an_e2e_row_out_of_memory_is_oom_in_process_too(tmp_path, misbehaving):
    result, out = run(tmp_path, "--backend", "test-oom")
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out / "results.csv")
    assert {b: set(g["verdict"]) for b, g in rows.groupby("batch_size")} == {1: {"pass"}, 2: {"pass"}, 8: {"oom"}}


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e9"])
def test_e2e_point_timeout_must_be_a_sane_number(tmp_path, value):
    result, out = run(tmp_path, "--isolate", "--point-timeout", value)
    assert result.exit_code == 1 and "--point-timeout" in result.output.strip().splitlines()[-1]
    assert not out.exists()
