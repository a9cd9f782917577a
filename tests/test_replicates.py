"""Replicates (issue 9), on the CPU: each replicate allocates its inputs afresh, re-plans and is
checked; replicate r of every backend and strategy runs before replicate r + 1 of any; a row keeps
every replicate's median and samples, and its median is the median of replicate medians; the CPU
default stays one replicate; results written before replicates existed still load and compare;
summary.md and the console say what the numbers are."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.errors import UsageError
from attnbench.kernels import sweep
from attnbench.kernels.backends import registry
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.plan import KernelArgs, plan_sweep
from attnbench.kernels.sweep import SweepPlan, run_sweep
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import SweepPoint
from attnbench.results import files, notes
from attnbench.results.read import load_run

pytest_plugins = ["results_fixtures"]

POINT = SweepPoint(kind="mixed", num_tokens=8, num_heads=2, num_kv_heads=2, head_dim=16, context="16")
QUICK = TimingConfig(warmup_ms=0.0, budget_ms=1.0, min_samples=3, max_samples=6)
LOG: list[tuple[int, str, str]] = []  # (replicate, backend, strategy) of every launch
REPLICATE = [0]  # which replicate's inputs were made last


class Logging(ReferenceBackend):
    """The reference, logging each launch; `nan_in` replicate leaves its output unwritten."""

    oracle = False
    nan_in: int | None = None

    def __init__(self, name: str):
        self.name = name

    def plan(self, strategy, point, metadata):
        plan = super().plan(strategy, point, metadata)
        run = plan.run

        def logged(q, k_cache, v_cache, out):
            LOG.append((REPLICATE[0], self.name, strategy))
            return out if REPLICATE[0] == self.nan_in else run(q, k_cache, v_cache, out)
        object.__setattr__(plan, "run", logged)
        return plan


@pytest.fixture
def counted(monkeypatch):
    """make_inputs counted (each call is a replicate's fresh inputs), two logging backends."""
    made = []
    real = sweep.make_inputs

    def make_inputs(point, device):
        made.append(point)
        REPLICATE[0] = len(made)
        return real(point, device)

    LOG.clear()
    monkeypatch.setattr(sweep, "make_inputs", make_inputs)
    for name in ("log-a", "log-b"):
        monkeypatch.setitem(registry.REGISTRY, name, Logging(name))
    return made


def sweep_rows(replicates: int, points=(POINT,)) -> list[dict]:
    plan = SweepPlan(tuple(points), ("log-a", "log-b"), ("unified", "split"), ("eager",), QUICK, "cpu",
                     replicates=replicates)
    rows = []
    run_sweep(plan, None, rows.append)
    return rows


def test_each_replicate_makes_fresh_inputs_and_every_row_keeps_each_median(counted):
    other = SweepPoint(kind="decode", num_tokens=4, num_heads=2, num_kv_heads=2, head_dim=16, context="16")
    rows = sweep_rows(3, points=(POINT, other))
    assert len(counted) == 2 * 3  # 3 replicates of 2 points
    assert len(rows) == 2 * 2 * 2 and {r["verdict"] for r in rows} == {"pass"}
    for row in rows:
        medians = [float(m) for m in row["replicate_medians_ms"].split()]
        counts = [int(n) for n in row["replicate_samples"].split()]
        assert row["replicates"] == len(medians) == len(counts) == 3
        assert sum(counts) == row["samples"] == len(row["samples_ms"].split())
        assert row["median_ms"] == pytest.approx(statistics.median(medians), rel=1e-5)
        assert row["p10_ms"] <= row["median_ms"] <= row["p90_ms"]
        assert row["_window"][0] <= row["_window"][1]


def test_replicate_r_of_every_row_runs_before_replicate_r_plus_1(counted):
    sweep_rows(3)
    replicates = [r for r, _, _ in LOG]
    assert replicates == sorted(replicates)  # never back to an earlier replicate
    for r in (1, 2, 3):
        assert {(b, s) for rr, b, s in LOG if rr == r} == {(b, s) for b in ("log-a", "log-b")
                                                           for s in ("unified", "split")}


def test_every_replicate_is_checked_and_one_bad_replicate_fails_the_row(counted, monkeypatch):
    monkeypatch.setattr(registry.REGISTRY["log-b"], "nan_in", 2, raising=False)
    rows = {(r["backend"], r["strategy"]): r for r in sweep_rows(3)}
    assert {rows[("log-a", s)]["verdict"] for s in ("unified", "split")} == {"pass"}
    for strategy in ("unified", "split"):
        bad = rows[("log-b", strategy)]
        assert bad["verdict"] == "fail" and bad["reason"] == "replicate 2 of 3: output has NaN/inf"


def test_the_gpu_defaults_to_three_replicates_the_cpu_to_one_and_bad_counts_are_refused():
    args = KernelArgs(shapes=[(2, 16)], tokens=[4], kind=["decode"], context="16", device="cpu")
    assert plan_sweep(args).replicates == 1
    assert plan_sweep(args, machine=False).replicates == 3
    assert plan_sweep(KernelArgs(**{**args.__dict__, "replicates": 5})).replicates == 5
    for bad in (0, -1, 101, 2.5):
        with pytest.raises(UsageError, match="--replicates"):
            plan_sweep(KernelArgs(**{**args.__dict__, "replicates": bad}))


def test_the_cli_writes_replicate_columns_and_says_what_the_numbers_are(tmp_path):
    result = CliRunner().invoke(app, ["kernel", "--heads", "2", "--dim", "16", "--tokens", "4", "--kind", "decode,mixed",
                                      "--context", "16", "--budget-ms", "3", "--device", "cpu", "--replicates", "2",
                                      "--rel-spread", "0", "--out", str(tmp_path / "r")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    df = pd.read_csv(tmp_path / "r" / "results.csv", dtype=files.TEXT_COLUMNS)
    assert set(df["replicates"]) == {2} and df["replicate_medians_ms"].str.split().str.len().eq(2).all()
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "median of 2 replicate medians" in summary and notes.CPU_NOTE in summary
    assert f"{len(df)} of {len(df)} timed rows did not converge" in summary  # --rel-spread 0 never converges
    assert "## Ratios over paired replicates (95% intervals)" in summary and "split / unified" in summary
    assert "note: 4 of 4 timed rows did not converge" in result.output and "note: CPU run" in result.output
    assert not (tmp_path / "r" / "telemetry.csv").exists()  # no GPU: no telemetry, no error
    assert df["sm_clock_median_mhz"].isna().all() and df["clock_flag"].isna().all()


def test_the_default_cpu_run_has_one_replicate_and_says_so(cpu_run):
    summary = (cpu_run / "summary.md").read_text()
    assert "one replicate per row" in summary and notes.CPU_NOTE in summary


def test_results_from_before_replicates_still_load_and_compare(cpu_run, tmp_path, cli):
    old = pd.read_csv(cpu_run / "results.csv", dtype=files.TEXT_COLUMNS)
    old = old.drop(columns=["replicates", "replicate_medians_ms", "replicate_samples"])
    (tmp_path / "old").mkdir()
    old.to_csv(tmp_path / "old" / "results.csv", index=False)
    assert "replicate_medians_ms" not in load_run(tmp_path / "old", "BASE").rows  # loads as it is
    result = cli("compare", tmp_path / "old", cpu_run, "--threshold", "50%")
    assert result.exit_code == 0, result.output
    assert "lack replicates in one run or both" in result.output and "° bootstrap over one run's samples" in result.output


def test_unconverged_and_throttled_rows_are_counted():
    df = pd.DataFrame({"verdict": ["pass", "pass", "fail", "skipped"], "converged": [True, False, False, None],
                       "device": "cuda", "replicates": 3, "replicate_medians_ms": ["1 1.01 1.02"] * 4,
                       "sm_clock_min_mhz": [1980.0, 1200.0, 1980.0, None], "sm_clock_median_mhz": [1980.0, 1500, 1980, None],
                       "throttle_reasons": ["", "sw_power_cap", "", None], "clock_flag": ["", "throttled; below max clock", "", None]})
    lines = notes.run_notes(df)
    assert any("2 of 3 timed rows did not converge" in line for line in lines)
    assert not any("CPU run" in line for line in lines)
    assert any("1200 MHz at lowest" in line and "1 row(s) throttled (sw_power_cap)" in line for line in lines)


def test_a_gpu_run_frees_the_last_replicate_first_only_when_two_copies_do_not_fit(monkeypatch):
    runner = sweep.PointRunner(SweepPlan((POINT,), ("reference",), ("unified",), ("eager",), QUICK, "cpu"), POINT, None)
    assert runner._room_for_two() is False  # the CPU frees first: host placement is not what varies
    if torch.cuda.is_available():
        runner.device = torch.device("cuda")
        assert runner._room_for_two() is True
