"""`attnbench calibrate`: the A/A-clean threshold from compare's own rule, the two runs it makes
(a scenario with overrides, or kernel flags; each in its own process), and a tiny CPU run end to end."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from attnbench.errors import UsageError
from attnbench.results.calibrate import calibrate_pair, clean_need, pair_commands, round_up, same_need
from attnbench.results.compare import classify

pytest_plugins = ["results_fixtures"]

KEY = dict(kind="decode", num_heads=2, num_kv_heads=2, head_dim=16, dtype="bfloat16", block_size=16, causal=True,
           context="16", decode_share=0.5, prefix_ratio=0.5, spec_k=4, prefill_len=512, seed=0, decode_seqs=0,
           backend="reference",
           strategy="unified", mode="eager", l2="warm", verdict="pass")


def rows(medians_by_tokens: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{**KEY, "num_tokens": n, "median_ms": float(np.median(m)), "replicates": len(m),
                          "replicate_medians_ms": " ".join(map(str, m)), "samples_ms": ""}
                         for n, m in medians_by_tokens.items()])


@pytest.mark.parametrize("ratio, low, high", [(1.03, 1.01, 1.05), (0.95, 0.93, 0.97), (1.01, 0.98, 1.04)])
def test_the_clean_need_is_where_compare_stops_calling_the_row_changed(ratio, low, high):
    need = round_up(clean_need(ratio, low, high))
    assert classify(ratio, low, high, need) in ("same", "noisy")
    if need > 0.001:
        assert classify(ratio, low, high, need - 0.002) in ("slower", "faster")
    assert classify(ratio, low, high, round_up(same_need(low, high))) == "same"


def test_a_pair_gives_the_largest_need_over_its_rows():
    a = rows({4: [1.00, 1.001, 0.999], 8: [2.0, 2.02, 1.98]})
    b = rows({4: [1.03, 1.031, 1.029], 8: [2.0, 2.01, 1.99]})  # N=4 moved 3 % with tight replicates
    result = calibrate_pair(a, b)
    assert result.clean == pytest.approx(0.031)
    assert result.rows.loc[0, "label"].startswith("decode N=4") and result.rows.loc[1, "clean_need"] == 0
    assert result.rows.loc[1, "spread_a"] == pytest.approx(2.02 / 1.98 - 1)
    assert result.all_same >= result.clean
    assert json.loads(result.to_json())["clean_threshold"] == pytest.approx(0.031)


def test_the_pair_runs_a_scenario_or_kernel_flags_each_into_its_own_directory(tmp_path):
    scenario = tmp_path / "tiny.toml"
    scenario.write_text('command = "kernel"\n')
    (a, b) = pair_commands([str(scenario), "--tokens", "4"], tmp_path)
    assert a[:3] == [sys.executable, "-m", "attnbench"] and a[3:7] == ["run", str(scenario), "--tokens", "4"]
    assert (a[-2:], b[-2:]) == (["--out", str(tmp_path / "a")], ["--out", str(tmp_path / "b")])
    assert pair_commands(["--heads", "2", "--dim", "16"], tmp_path)[0][3:6] == ["kernel", "--heads", "2"]
    for bad, message in [([], "SCENARIO_OR_FLAGS"), (["nope.toml"], "no such scenario"),
                         ([str(scenario), "--resume", "x"], "--resume")]:
        with pytest.raises(UsageError, match=message):
            pair_commands(bad, tmp_path)


def test_calibrate_a_tiny_cpu_scenario_end_to_end(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text('command = "kernel"\nheads = 2\ndim = 16\ntokens = [4]\nkind = "decode"\n'
                                        'context = 16\ndevice = "cpu"\nbudget_ms = 3\nreplicates = 2\n')
    result = cli("calibrate", "tiny.toml", "--out", "cal")
    assert result.exit_code == 0, result.output
    assert "run a:" in result.output and "run b:" in result.output
    assert "no A/A-clean threshold: the pair timed on the CPU" in result.output  # issue 20: no CPU threshold
    saved = json.loads((tmp_path / "cal" / "calibrate.json").read_text())
    assert saved["clean_threshold"] is None and saved["no_threshold"].startswith("no A/A-clean threshold")
    assert len(saved["rows"]) == 2 and {r["method"] for r in saved["rows"]} == {"replicates"}
    assert (tmp_path / "cal" / "a" / "results.csv").is_file() and (tmp_path / "cal" / "b" / "scenario.json").is_file()
    refused = cli("calibrate", "tiny.toml", "--out", "cal")
    assert refused.exit_code == 1 and refused.output.startswith("error: --out")


def test_planted_backends_join_only_through_the_environment_and_add_their_time(monkeypatch, tmp_path):
    """benchmarks/planted_backend.py (aa_check's planted regression): not in a normal registry;
    through ATTNBENCH_EXTRA_BACKENDS it appends one launch of the planted extra time to each plan."""
    import time
    from pathlib import Path

    from attnbench.kernels.backends.registry import REGISTRY
    from attnbench.kernels.inputs import make_inputs
    from attnbench.kernels.metadata import build_metadata
    from attnbench.kernels.workload import SweepPoint

    assert not any(name.startswith("planted") for name in REGISTRY)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import planted_backend

    point = SweepPoint(kind="decode", num_tokens=4, num_heads=2, num_kv_heads=2, head_dim=16, context="16")
    (tmp_path / "t.json").write_text(json.dumps({planted_backend.planted_key(point, "unified"): 3.0}))
    monkeypatch.setenv("ATTNBENCH_PLANTED_TABLE", str(tmp_path / "t.json"))
    planted_backend.planted_table.cache_clear()
    inputs = make_inputs(point, "cpu")
    plan = planted_backend.PlantedReference().plan("unified", point,
                                                   build_metadata("unified", inputs.batch, inputs.block_table))
    assert plan.details["planted_ms"] == 3.0 and len(plan.launches) == 2
    start = time.perf_counter()
    plan.launches[-1](inputs.q, inputs.k_cache, inputs.v_cache, inputs.q)
    assert time.perf_counter() - start >= 0.003
    planted_backend.planted_table.cache_clear()
