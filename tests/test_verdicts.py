"""Verdicts the data can support (issue 20): identical CPU runs get no verdict in either order, a GPU
pair gets one only beyond its own noise, calibrate's threshold covers every change an A/A pair
showed (none on the CPU), and an e2e scenario is refused before calibrate runs anything.

Run directories are written here from synthetic rows (no sweep runs): `run_dir` and its helpers are
shared with tests/test_bad_input_verdicts.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results import files
from attnbench.results.calibrate import calibrate_pair
from attnbench.results.compare import compare_runs, judge
from attnbench.results.verdicts import on_cpu, spread_interval

pytest_plugins = ["results_fixtures"]

POINT = dict(kind="decode", num_tokens=8, num_heads=4, num_kv_heads=4, head_dim=32, dtype="bfloat16", block_size=16,
             causal=True, context="64", decode_share=0.5, prefix_ratio=0.5, spec_k=4, prefill_len=512, seed=0,
             decode_seqs=0, backend="reference", library="torch", library_version="2.5", strategy="unified",
             mode="eager", l2="warm")
ENVS = {"cpu": {"gpu": None, "cpu": "x86_64", "torch": "2.5"}, "cuda": {"gpu": {"name": "NVIDIA H200"}, "torch": "2.5"}}
E2E_ROW = dict(model="tiny", dtype="bfloat16", block_size=16, chunk_size=512, tp=1, input_len=8, output_len=4,
               batch_size=1, backend="reference", strategy="unified", mode="eager", cudagraph="none",
               device="cuda", verdict="pass", request_p50_s=0.5, request_p90_s=0.52)
CONFIGS = [(kind, tokens, strategy) for kind in ("decode", "prefill") for tokens in (8, 16)
           for strategy in ("unified", "split")]  # 8 rows, as the CPU run


def timed_row(samples, device: str, replicates=(), **key) -> dict:
    s = np.asarray(samples, dtype=float)
    median = float(np.median(replicates)) if len(replicates) else float(np.median(s))
    return {**POINT, **key, "device": device, "gpu": "cpu" if device == "cpu" else "NVIDIA H200",
            "median_ms": median, "p10_ms": min(median, float(np.quantile(s, 0.1))),
            "p90_ms": max(median, float(np.quantile(s, 0.9))), "samples": len(s),
            "samples_ms": " ".join(f"{x:.6g}" for x in s), "replicates": max(len(replicates), 1),
            "replicate_medians_ms": " ".join(f"{m:.6g}" for m in replicates), "verdict": "pass"}


def run_rows(device: str, seed: int, shifts=None, spread: float = 0.1, n: int = 40) -> list[dict]:
    """One run of CONFIGS: lognormal samples (sd `spread`) around 1 ms, times a per-row shift."""
    rng = np.random.default_rng(seed)
    shifts = shifts or [1.0] * len(CONFIGS)
    return [timed_row(shift * np.exp(rng.normal(0, spread, n)), device, kind=kind, num_tokens=tokens,
                      strategy=strategy) for (kind, tokens, strategy), shift in zip(CONFIGS, shifts)]


def run_dir(path: Path, rows: list[dict], env: dict | None) -> Path:
    path.mkdir(parents=True)
    writer = files.RowWriter(path)
    for row in rows:
        writer.write(row)
    writer.close()
    if env is not None:
        files.write_env(path, env)
    return path


def cpu_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Two runs of one CPU command, rows 8 to 21 % apart either way, as the issue saw."""
    drift = [1.08, 1 / 1.12, 1.21, 1 / 1.15, 1.09, 1.18, 1 / 1.10, 1.2]
    return (run_dir(tmp_path / "a", run_rows("cpu", 1), ENVS["cpu"]),
            run_dir(tmp_path / "b", run_rows("cpu", 2, drift, spread=0.02), ENVS["cpu"]))


@pytest.mark.parametrize("order", ["a-b", "b-a"])
def test_identical_cpu_runs_get_no_verdict_in_either_order(tmp_path, cli, order):
    a, b = cpu_pair(tmp_path)
    base, new = (a, b) if order == "a-b" else (b, a)
    result = cli("compare", base, new, "--threshold", "1%", "--markdown", tmp_path / "c.md")
    assert result.exit_code == 0, result.output
    assert result.output.count("CPU timings: no verdict") == 1
    assert "8 rows compared: 0 slower, 0 faster, 0 noisy, 0 same, 8 unjudged" in result.output
    report = (tmp_path / "c.md").read_text()
    assert report.startswith("### attnbench compare: no regression shown (CPU timings: no verdict)")
    assert "slower |" not in report and "faster |" not in report


def test_a_cpu_run_is_known_by_its_rows_or_else_its_env():
    assert on_cpu(pd.DataFrame({"device": ["cpu"]}), {}) and not on_cpu(pd.DataFrame({"device": ["cuda"]}), {})
    older = pd.DataFrame({"verdict": ["pass"]})
    assert on_cpu(older, ENVS["cpu"]) and not on_cpu(older, ENVS["cuda"]) and not on_cpu(older, {})


def test_a_cpu_row_that_breaks_is_still_a_regression(tmp_path, cli):
    """No timing verdict on the CPU, but accuracy is no timing: pass -> fail still exits 1."""
    rows = run_rows("cpu", 1)
    broken = [{**rows[0], "verdict": "fail"}, *rows[1:]]
    result = cli("compare", run_dir(tmp_path / "a", rows, ENVS["cpu"]), run_dir(tmp_path / "b", broken, ENVS["cpu"]))
    assert result.exit_code == 1 and "correctness regression" in result.output, result.output


def test_a_gpu_regression_beyond_the_noise_is_slower_and_exits_1(tmp_path, cli):
    shifts = [1.0] * 7 + [1.25]
    base = run_dir(tmp_path / "base", run_rows("cuda", 1, spread=0.005), ENVS["cuda"])
    new = run_dir(tmp_path / "new", run_rows("cuda", 2, shifts, spread=0.005), ENVS["cuda"])
    result = cli("compare", base, new, "--threshold", "5%")
    assert result.exit_code == 1, result.output
    assert "1 slower, 0 faster, 0 noisy, 7 same" in result.output and "CPU timings" not in result.output
    slower = [line for line in result.output.splitlines() if "slower" in line and "prefill N=16 split" in line]
    assert len(slower) == 1


def test_a_gpu_shift_within_the_runs_own_spread_gets_no_verdict(tmp_path, cli):
    """A 3 % shift in rows whose samples spread 10 %: one run's bootstrap calls it slower, but the
    runs' own p10..p90 spread cannot tell it from drift between runs."""
    base, new = run_rows("cuda", 1, n=200), run_rows("cuda", 2, [1.03] * 8, n=200)
    assert judge(pd.Series(base[0]), pd.Series(new[0]), 0.01)["verdict"] == "slower"
    result = compare_runs(pd.DataFrame(base), pd.DataFrame(new), 0.01)
    assert set(result.rows["verdict"]) <= {"noisy", "same"} and set(result.rows["method"]) == {"p10-p90"}
    cli_result = cli("compare", run_dir(tmp_path / "b", base, ENVS["cuda"]), run_dir(tmp_path / "n", new, ENVS["cuda"]),
                     "--threshold", "1%")
    assert cli_result.exit_code == 0 and "0 slower, 0 faster" in cli_result.output, cli_result.output


def test_replicates_keep_their_own_interval_and_a_row_with_no_spread_gets_no_verdict():
    base = timed_row([1.0] * 20, "cuda", replicates=[1.0, 1.01, 0.99])
    new = timed_row([1.2] * 20, "cuda", replicates=[1.2, 1.21, 1.19])
    rows = compare_runs(pd.DataFrame([base]), pd.DataFrame([new]), 0.05).rows
    assert (rows.loc[0, "method"], rows.loc[0, "verdict"]) == ("replicates", "slower")
    bare = {c: v for c, v in base.items() if c not in ("p10_ms", "p90_ms", "samples_ms", "replicate_medians_ms")}
    result = compare_runs(pd.DataFrame([bare]), pd.DataFrame([{**bare, "median_ms": 2.0}]), 0.05)
    assert result.rows.loc[0, "verdict"] == "unjudged" and not result.regressed
    assert any("store no spread" in line for line in result.notes())


def test_an_e2e_row_mirrors_its_p90_for_the_lower_end():
    base, new = pd.Series({"request_p50_s": 1.0, "request_p90_s": 1.1}), pd.Series({"request_p50_s": 2.0,
                                                                                      "request_p90_s": 2.2})
    low, high = spread_interval(base, new, "request_p50_s", ("", "request_p90_s"))
    assert low == pytest.approx((2.0 ** 2 / 2.2) / 1.1) and high == pytest.approx(2.2 / (1.0 ** 2 / 1.1))
    assert spread_interval(base, pd.Series({"request_p50_s": 2.0}), "request_p50_s", ("", "request_p90_s")) is None


@pytest.mark.parametrize("factor, exit_code, counts", [(1.5, 1, "2 slower"), (1.01, 0, "0 slower, 0 faster")])
def test_a_gpu_e2e_pair_is_judged_within_its_p50_to_p90_spread(tmp_path, cli, factor, exit_code, counts):
    rows = [{**E2E_ROW, "batch_size": n} for n in (1, 2)]
    slow = [{**r, "request_p50_s": r["request_p50_s"] * factor, "request_p90_s": r["request_p90_s"] * factor}
            for r in rows]
    for name, table in (("base", rows), ("new", slow)):
        (tmp_path / name).mkdir()
        pd.DataFrame(table).to_csv(tmp_path / name / "results.csv", index=False)
    result = cli("compare", tmp_path / "base", tmp_path / "new")
    assert result.exit_code == exit_code and counts in result.output, result.output


def replicated_rows(medians: list[list[float]], device: str = "cuda") -> pd.DataFrame:
    return pd.DataFrame([timed_row(m, device, replicates=m if len(m) > 1 else (), kind=kind, num_tokens=tokens,
                                   strategy=strategy) for m, (kind, tokens, strategy) in zip(medians, CONFIGS)])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), replicates=st.integers(1, 4), rows=st.integers(1, len(CONFIGS)))
def test_calibrate_threshold_covers_every_change_the_a_a_pair_showed(data, replicates, rows):
    """Any A/A pair: the clean threshold is at least each row's change between the runs, and compare
    at that threshold calls no row slower or faster."""
    offsets = st.floats(-0.25, 0.25)
    medians = [[data.draw(st.lists(st.floats(0.5, 2.0), min_size=replicates, max_size=replicates))
                for _ in range(rows)] for _ in range(2)]
    shifted = [[m * math.exp(data.draw(offsets)) for m in row] for row in medians[1]]
    a, b = replicated_rows(medians[0]), replicated_rows(shifted)
    result = calibrate_pair(a, b)
    changes = [max(r, 1 / r) - 1 for r in b["median_ms"] / a["median_ms"]]
    assert result.clean >= max(changes) and result.all_same >= result.clean
    verdicts = compare_runs(a, b, result.clean).rows["verdict"]
    assert not verdicts.isin(["slower", "faster"]).any()


def test_calibrate_gives_no_threshold_for_a_cpu_pair():
    result = calibrate_pair(replicated_rows([[1.0, 1.01]] * 4, "cpu"), replicated_rows([[1.2, 1.19]] * 4, "cpu"))
    assert result.clean is None and result.all_same is None and "CPU" in result.no_threshold
    assert '"clean_threshold": null' in result.to_json()


def test_calibrate_refuses_an_e2e_scenario_before_running_anything(tmp_path, cli, monkeypatch):
    import subprocess

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("calibrate started a run"))
    (tmp_path / "e2e.toml").write_text('command = "e2e"\nmodel = "tiny"\ndevice = "cpu"\n')
    result = cli("calibrate", "e2e.toml", "--out", "cal")
    assert result.exit_code == 1 and "command = 'e2e'; calibrate takes kernel sweeps" in result.output
    assert not (tmp_path / "cal").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["e2e.toml"]
