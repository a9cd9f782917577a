"""`attnbench compare`: verdicts on synthetic samples with known answers, matching, exit codes,
environment differences, the Markdown report, and real runs (the CPU run, results/examples/)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results import compare
from attnbench.results import files as report

pytest_plugins = ["results_fixtures"]

POINT = dict(kind="decode", num_tokens=100, num_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16",
             block_size=16, causal=True, context="1024", decode_share=0.5, prefix_ratio=0.5, spec_k=4,
             prefill_len=512, seed=0, gpu="NVIDIA H200", backend="vllm-fa2", library="vllm",
             library_version="0.9.0", strategy="unified", mode="graph", l2="warm")


def normal(mean: float, sd: float, n: int = 60, seed: int = 7) -> np.ndarray:
    return np.clip(np.random.default_rng(seed).normal(mean, sd, n), 0.05, None)


def row(samples, verdict: str = "pass", **key) -> dict:
    s = np.asarray(samples, dtype=float)
    return {**POINT, **key, "median_ms": float(np.median(s)), "p10_ms": float(np.quantile(s, 0.1)),
            "p90_ms": float(np.quantile(s, 0.9)), "samples": len(s),
            "samples_ms": " ".join(f"{x:.6g}" for x in s), "verdict": verdict}


def judge(base, new, threshold: float = 0.05) -> dict:
    return compare.judge(pd.Series(row(base)), pd.Series(row(new)), threshold)


@pytest.mark.parametrize("new, expected", [
    (normal(1.10, 0.005, seed=8), "slower"),
    (normal(0.90, 0.005, seed=8), "faster"),
    (normal(1.00, 0.005, seed=8), "same"),
], ids=["10%-slower", "10%-faster", "unchanged"])
def test_tight_samples_give_the_known_answer(new, expected):
    result = judge(normal(1.0, 0.005), new)
    assert result["verdict"] == expected
    assert result["method"] == "bootstrap"
    assert result["ci_low"] <= result["ratio"] <= result["ci_high"]


def test_a_shift_lost_in_large_variance_is_noisy():
    """10 % slower by the medians, but 20 samples spread over a factor of ~2 cannot tell that from noise."""
    rng = np.random.default_rng(7)
    base, new = np.exp(rng.normal(0, 0.5, 20)), 1.10 * np.exp(rng.normal(0, 0.5, 20))
    result = judge(base, new)
    assert result["verdict"] == "noisy"
    assert result["ci_low"] < 1.05 < result["ci_high"]


def test_the_threshold_is_the_smallest_effect_that_counts():
    base, new = normal(1.0, 0.002), normal(1.02, 0.002, seed=8)  # a real 2 % change
    assert judge(base, new, threshold=0.05)["verdict"] == "same"
    assert judge(base, new, threshold=0.01)["verdict"] == "slower"


def test_few_samples_fall_back_to_the_p10_p90_spread():
    far = judge([1.0, 1.01, 1.02], [1.20, 1.21, 1.22])
    assert (far["method"], far["verdict"]) == ("p10-p90", "slower")
    assert far["ci_low"] == pytest.approx(1.20 / 1.02, rel=1e-2)
    assert judge([1.0, 1.1, 1.2], [1.1, 1.2, 1.3])["verdict"] == "noisy"  # spreads overlap


def test_without_samples_or_spread_the_threshold_alone_decides():
    base = pd.Series({**POINT, "median_ms": 1.0, "p10_ms": np.nan, "p90_ms": np.nan, "samples_ms": np.nan})
    result = compare.judge(base, base.copy().replace({1.0: 1.2}), 0.05)
    assert (result["method"], result["verdict"], result["ratio"]) == ("median only", "slower", pytest.approx(1.2))


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(1e-3, 1e3), shift=st.floats(0.8, 1.25), seed=st.integers(0, 2**16))
def test_verdicts_do_not_depend_on_the_unit(scale, shift, seed):
    base, new = normal(1.0, 0.02, 30, seed), normal(shift, 0.02, 30, seed + 1)
    plain, scaled = judge(base, new), judge(base * scale, new * scale)
    assert scaled["verdict"] == plain["verdict"]
    assert scaled["ratio"] == pytest.approx(plain["ratio"], rel=1e-4)


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("0", 0.0)])
def test_threshold_parsing(text, value):
    assert compare.parse_threshold(text) == pytest.approx(value)


def write_run(path, rows: list[dict], env: dict | None = None):
    path.mkdir(parents=True)
    writer = report.RowWriter(path)
    for r in rows:
        writer.write(r)
    writer.close()
    report.write_env(path, env or {"gpu": {"name": "NVIDIA H200", "driver": "560.35"}, "torch": "2.5.1"})
    return path


def synthetic_runs(tmp_path, slower: bool):
    tokens = (100, 500, 1000)
    base = [row(normal(1.0 + t / 1000, 0.005, seed=t), num_tokens=t) for t in tokens]
    new = [row(normal(1.0 + t / 1000, 0.005, seed=t + 1), num_tokens=t) for t in tokens]
    if slower:
        new[1] = row(normal(1.5 * 1.10, 0.005, seed=3), num_tokens=500)
    return write_run(tmp_path / "base", base), write_run(tmp_path / "new", new)


def test_cli_exits_1_on_a_regression_and_reports_it(tmp_path, cli):
    base, new = synthetic_runs(tmp_path, slower=True)
    md = tmp_path / "compare.md"
    result = cli("compare", base, new, "--threshold", "5%", "--markdown", md)
    assert result.exit_code == 1, result.output
    assert "1 slower" in result.output
    text = md.read_text()
    assert "**regression**" in text
    slower = [line for line in text.splitlines() if "**slower**" in line]
    assert len(slower) == 1 and "N=500" in slower[0] and "1.100" in slower[0]
    assert "<details>" in text and "2 rows the same" in text


def test_cli_exits_0_when_nothing_got_slower(tmp_path, cli):
    base, new = synthetic_runs(tmp_path, slower=False)
    result = cli("compare", base, new)
    assert result.exit_code == 0, result.output
    assert "3 same" in result.output


def test_environment_differences_come_first(tmp_path, cli):
    rows = [row(normal(1.0, 0.005))]
    base = write_run(tmp_path / "h100", rows, {"gpu": {"name": "NVIDIA H100", "driver": "550.54"}, "torch": "2.5.1",
                                                "timestamp": "a"})
    new = write_run(tmp_path / "h200", rows, {"gpu": {"name": "NVIDIA H200", "driver": "560.35"}, "torch": "2.5.1",
                                               "timestamp": "b"})
    assert compare.env_differences(compare.load_env(base), compare.load_env(new)) == [
        ("gpu.name", "NVIDIA H100", "NVIDIA H200"), ("gpu.driver", "550.54", "560.35")]
    result = cli("compare", base, new, "--markdown", tmp_path / "c.md")
    assert result.exit_code == 0
    assert result.output.index("gpu.driver") < result.output.index("base ms")
    assert "| gpu.name | NVIDIA H100 | NVIDIA H200 |" in (tmp_path / "c.md").read_text()


def test_unmatched_and_untimed_rows_are_listed(tmp_path, cli):
    s = normal(1.0, 0.005)
    base = write_run(tmp_path / "base", [row(s, num_tokens=100), row(s, num_tokens=500), row(s, num_tokens=1000)])
    new = write_run(tmp_path / "new", [row(s, num_tokens=100), row(s, num_tokens=2000),
                                       {**row(s, num_tokens=1000), "verdict": "skipped", "median_ms": ""}])
    result = compare.compare_runs(report.load_results(base), report.load_results(new), 0.05)
    assert list(result.rows["num_tokens"]) == [100]
    assert list(result.only_base["num_tokens"]) == [500]
    assert list(result.only_new["num_tokens"]) == [2000]
    assert list(result.untimed["new"]) == ["skipped"]
    output = cli("compare", base, new).output
    assert "1 row(s) only in BASE: decode N=500" in output
    assert "1 row(s) only in NEW: decode N=2000" in output
    assert "decode N=1000 (base pass, new skipped)" in output


def test_rows_match_across_file_formats(cpu_run, tmp_path):
    """results.csv against results.parquet of the same run: every row matches, whatever the dtypes."""
    csv = report.load_results(cpu_run / "results.csv")
    parquet = csv.astype({"context": str, "causal": str})  # how another run may have typed them
    parquet.to_parquet(tmp_path / "results.parquet")
    result = compare.compare_runs(csv, report.load_results(tmp_path / "results.parquet"), 0.05)
    assert result.only_base.empty and result.only_new.empty
    assert len(result.rows) == csv["verdict"].isin(["pass", "fail"]).sum()


@pytest.mark.parametrize("args, message", [
    (["--threshold", "five"], "--threshold"),
    (["--threshold", "150%"], "--threshold"),
])
def test_bad_threshold_is_refused(cpu_run, args, message, cli):
    result = cli("compare", cpu_run, cpu_run, *args)
    assert result.exit_code == 1
    assert result.output.startswith("error: " + message)


def test_nothing_in_common_and_missing_runs_are_errors(cpu_run, tmp_path, cli):
    other = write_run(tmp_path / "other", [row(normal(1.0, 0.005), num_heads=7)])
    assert "no configuration in common" in cli("compare", cpu_run, other).output
    missing = cli("compare", cpu_run, tmp_path / "nope")
    assert missing.exit_code == 1 and "NEW" in missing.output and "does not exist" in missing.output


def slowed(results_dir, tmp_path, factor: float):
    """A copy of a real run with every timing multiplied by factor."""
    df = report.load_results(results_dir)
    for col in ("median_ms", "p10_ms", "p90_ms"):
        df[col] = df[col] * factor
    if "samples_ms" in df:  # an example kept small may come without its per-sample timings
        df["samples_ms"] = [" ".join(f"{float(x) * factor:.6g}" for x in s.split()) if isinstance(s, str) else s
                            for s in df["samples_ms"]]
    out = tmp_path / "slowed"
    out.mkdir()
    (out / "results.csv").write_text(df.reindex(columns=report.COLUMNS).to_csv(index=False))
    (out / "env.json").write_text(json.dumps(compare.load_env(results_dir)))
    return out


def test_real_run_against_itself_passes_and_against_a_slowed_copy_fails(results_dir, tmp_path, cli):
    """On a GPU run the slowed copy is a regression; CPU timings get no verdict (issue 20), so the
    CPU run's slowed copy exits 0 and says why once."""
    same = cli("compare", results_dir, results_dir)
    assert same.exit_code == 0, same.output
    assert "0 slower" in same.output
    slow = cli("compare", results_dir, slowed(results_dir, tmp_path, 1.5))
    cpu = results_dir.name.startswith("cpu-run")
    assert slow.exit_code == (0 if cpu else 1), slow.output
    assert slow.output.count("CPU timings: no verdict") == (1 if cpu else 0)


def test_ignore_matches_across_a_key_column(tmp_path, cli):
    """Eager timings as NEW against graph timings as BASE: rows match once mode is ignored."""
    tokens = (100, 500)
    graph = write_run(tmp_path / "graph", [row(normal(1.0, 0.005, seed=t), num_tokens=t) for t in tokens])
    eager = write_run(tmp_path / "eager", [row(normal(1.3, 0.005, seed=t), num_tokens=t, mode="eager")
                                           for t in tokens])
    assert "no configuration in common" in cli("compare", graph, eager).output
    result = cli("compare", graph, eager, "--ignore", "mode")
    assert result.exit_code == 1 and "2 slower" in result.output
    bad = cli("compare", graph, eager, "--ignore", "gpu")
    assert bad.exit_code == 1 and bad.output.startswith("error: --ignore: 'gpu' is not a key column")


def test_a_row_that_passed_in_base_and_fails_in_new_is_a_regression(tmp_path, cli):
    s = normal(1.0, 0.005)
    base = write_run(tmp_path / "base", [row(s, num_tokens=100), row(s, num_tokens=500)])
    new = write_run(tmp_path / "new", [{**row(s, num_tokens=100), "verdict": "fail", "reason": "rel L2 error 3e-01 > 0.01"},
                                       {**row(s, num_tokens=500), "verdict": "error", "median_ms": ""}])
    result = cli("compare", base, new)
    assert result.exit_code == 1, result.output
    assert "correctness regression" in result.output and "N=100" in result.output and "N=500" in result.output


EXAMPLES = Path(__file__).resolve().parent.parent / "results" / "examples"


@pytest.mark.skipif(not (EXAMPLES / "h200-fa2-gqa-graph-repeat").exists(), reason="the H200 example runs are absent")
def test_real_h200_repeat_is_the_same_and_eager_against_graph_is_slower(cli):
    graph, repeat, eager = (EXAMPLES / name for name in
                            ("h200-fa2-gqa-graph", "h200-fa2-gqa-graph-repeat", "h200-fa2-gqa-eager"))
    assert cli("compare", graph, repeat).exit_code == 0
    result = cli("compare", graph, eager, "--ignore", "mode")
    assert result.exit_code == 1 and "prefill N=100 unified" in result.output


# ---- replicates (issue 9): an interval that knows between-run noise -----------------------------

def replicated(medians, within: float = 0.002, n: int = 20, seed: int = 0, **key) -> dict:
    """A row of several replicates: tight samples around each replicate's own median."""
    rng = np.random.default_rng(seed)
    samples = np.concatenate([m * (1 + rng.normal(0, within, n)) for m in medians])
    return {**row(samples, **key), "median_ms": float(np.median(medians)),
            "replicate_medians_ms": " ".join(f"{m:.6g}" for m in medians)}


def a_run(rng, shift: float = 1.0, between: float = 0.01, replicates: int = 3, per_run: float = 0.0) -> list[float]:
    """One run's replicate medians: each replicate lands ~between apart (a fresh allocation, plan
    and graph), plus a per_run offset shared by the whole run (what replicates cannot see)."""
    return list(shift * np.exp(rng.normal(0, per_run) + rng.normal(0, between, replicates)))


def test_student_t_quantiles_match_the_tables():
    from attnbench.results.replicates import t_quantile

    for df, value in [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (1e6, 1.960)]:
        assert t_quantile(0.975, df) == pytest.approx(value, abs=1e-3)


def test_with_replicates_the_interval_comes_from_them():
    base, new = replicated([1.0, 1.01, 0.99]), replicated([1.10, 1.11, 1.09], seed=1)
    result = compare.judge(pd.Series(base), pd.Series(new), 0.02)
    assert (result["method"], result["verdict"]) == ("replicates", "slower")
    assert 1.05 < result["ci_low"] < 1.10 < result["ci_high"] < 1.15
    same = compare.judge(pd.Series(base), pd.Series(replicated([1.0, 1.01, 0.99], seed=2)), 0.02)
    assert same["method"] == "replicates" and same["verdict"] in ("same", "noisy")


def test_a_a_runs_with_between_run_noise_rarely_alarm_and_a_shift_is_found():
    """Synthetic runs whose replicates differ by ~1 % (as allocations do) while each replicate's
    samples are tight (0.2 %): the within-run bootstrap calls most A/A pairs changed; the interval
    from replicates keeps its false alarms near 5 % (95 % intervals, threshold 0) and still finds
    a 10 % shift at a 2 % threshold."""
    rng = np.random.default_rng(11)
    trials, replicate_alarms, bootstrap_alarms, found = 200, 0, 0, 0
    for i in range(trials):
        base, new = replicated(a_run(rng), seed=2 * i), replicated(a_run(rng), seed=2 * i + 1)
        verdict = compare.judge(pd.Series(base), pd.Series(new), 0.0)["verdict"]
        replicate_alarms += verdict in ("slower", "faster")
        old_b, old_n = (pd.Series({**r, "replicate_medians_ms": ""}) for r in (base, new))
        bootstrap_alarms += compare.judge(old_b, old_n, 0.0)["verdict"] in ("slower", "faster")
        shifted = replicated(a_run(rng, shift=1.10), seed=3 * i)
        found += compare.judge(pd.Series(base), pd.Series(shifted), 0.02)["verdict"] == "slower"
    assert replicate_alarms / trials < 0.08
    assert bootstrap_alarms / trials > 0.5
    assert found / trials > 0.9


def test_the_threshold_absorbs_what_replicates_cannot_see():
    """An offset shared by a whole run (0.5 %) is invisible to its replicates: at threshold 0 the
    intervals alarm often, at 2 % no row is called slower."""
    rng = np.random.default_rng(5)
    pairs = [(replicated(a_run(rng, per_run=0.005, between=0.002)), replicated(a_run(rng, per_run=0.005, between=0.002)))
             for _ in range(100)]
    verdicts = {t: [compare.judge(pd.Series(b), pd.Series(n), t)["verdict"] for b, n in pairs] for t in (0.0, 0.02)}
    assert verdicts[0.0].count("slower") + verdicts[0.0].count("faster") > 10
    assert verdicts[0.02].count("slower") == verdicts[0.02].count("faster") == 0


def test_one_replicate_on_either_side_falls_back_to_the_samples():
    base, new = replicated([1.0, 1.01, 0.99]), replicated([1.005], n=30)
    result = compare.judge(pd.Series(base), pd.Series(new), 0.05)
    assert result["method"] == "bootstrap"


def shown_not_judged(cli, tmp_path: Path, base: Path, new: Path, counts: str, note: str, verdict: str) -> None:
    """compare of BASE and NEW passes the gate, prints `counts` and `note`, and its Markdown names the
    row's `verdict` without calling a regression (host-bound and clock-shifted rows)."""
    result = cli("compare", base, new, "--threshold", "5%")
    assert result.exit_code == 0, result.output
    assert counts in result.output
    assert note in " ".join(result.output.split())
    md = tmp_path / "compare.md"
    assert cli("compare", base, new, "--markdown", md).exit_code == 0
    assert f"| {verdict} |" in md.read_text() and "**regression**" not in md.read_text()
