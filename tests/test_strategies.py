"""The third strategy (fused) through everything that handles strategies: the contract's plan,
flag validation, sweep rows, summary tables with a ratio per strategy, plots, and e2e pairs.
The kernels are the reference's (tests/fused_backend.py); the GPU's fused kernels are tested
with their backends."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from fused_backend import FusedReference
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.results.e2e_report import e2e_table
from attnbench.kernels.backends import registry
from attnbench.kernels.backends.reference import ReferenceBackend, reference_attention
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import STRATEGIES, SweepPoint
from attnbench.results import files, tables
from attnbench.results.plots import plot_runs

SMALL = ["--heads", "4", "--kv-heads", "2", "--dim", "32", "--tokens", "8,24", "--context", "32", "--budget-ms", "5",
         "--device", "cpu", "--kind", "mixed,decode"]


@pytest.fixture
def fused_registered(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, "fused-ref", FusedReference())


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_fused_plans_one_launch_that_matches_the_reference():
    point = SweepPoint(kind="mixed", num_tokens=24, num_heads=4, num_kv_heads=2, head_dim=32, context=32)
    inputs = make_inputs(point, torch.device("cpu"))
    backend = FusedReference()
    plan = backend.plan("fused", point, build_metadata("fused", inputs.batch, inputs.block_table))
    assert len(plan.launches) == 1
    out = plan.run(inputs.q, inputs.k_cache, inputs.v_cache, torch.full_like(inputs.q, float("nan")))
    want = reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(inputs.batch.query_lens),
                               list(inputs.batch.kv_lens), inputs.block_table, point.causal, point.softmax_scale)
    assert torch.allclose(out.float(), want, atol=1e-2, rtol=1e-2)


def test_a_backend_without_fused_refuses_to_plan_it():
    point = SweepPoint(kind="mixed", num_tokens=24, num_heads=4, num_kv_heads=2, head_dim=32, context=32)
    assert "has no fused strategy" in ReferenceBackend().supports(point, "fused", torch.device("cpu"))
    inputs = make_inputs(point, torch.device("cpu"))
    with pytest.raises(ValueError, match="no fused"):
        ReferenceBackend().plan("fused", point, build_metadata("fused", inputs.batch, inputs.block_table))


def test_fused_asked_of_backends_that_lack_it_is_refused_before_the_run(tmp_path):
    result = invoke("kernel", *SMALL, "--strategy", "unified,fused", "--out", str(tmp_path / "r"))
    assert result.exit_code == 1 and "none of reference has a fused strategy" in result.output
    assert not (tmp_path / "r").exists()


def test_a_three_strategy_sweep_tabulates_each_against_unified(fused_registered, tmp_path):
    out = tmp_path / "r"
    result = invoke("kernel", *SMALL, "--backend", "reference,fused-ref", "--strategy", "unified,split,fused",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    df = pd.read_csv(out / "results.csv")
    fused = df[df["strategy"] == "fused"]
    assert set(fused.loc[fused["backend"] == "fused-ref", "verdict"]) == {"pass"}
    assert (fused.loc[fused["backend"] == "fused-ref", "kernel_launches"] == 1).all()
    skipped = fused[fused["backend"] == "reference"]
    assert set(skipped["verdict"]) == {"skipped"} and skipped["reason"].str.contains("no fused strategy").all()
    summary = (out / "summary.md").read_text()
    assert "| unified ms | split ms | fused ms | split / unified | fused / unified | check |" in summary
    assert "fused / unified" in result.output  # the console table too
    assert (out / "ratio_4x32_kv2.png").exists() or any(out.glob("ratio_*.png"))


def test_strategies_are_ordered_unified_first_and_unknown_ones_kept():
    assert tables.strategies_in(["fused", "split", "unified"]) == list(STRATEGIES)
    assert tables.strategies_in(["split", "zz-custom", float("nan")]) == ["split", "zz-custom"]


def test_a_table_without_unified_has_no_ratios():
    rows = [{"kind": "decode", "backend": "b", "mode": "eager", "l2": "warm", "prefix_ratio": 0.0, "num_tokens": 8,
             "num_heads": 4, "num_kv_heads": 4, "head_dim": 32, "strategy": s, "median_ms": ms, "verdict": "pass"}
            for s, ms in (("split", 1.0), ("fused", 0.5))]
    table = tables.seed_table(pd.DataFrame(rows))
    assert "split ms" in table and "fused ms" in table
    assert not [c for c in table.columns if " / " in c]


def test_ratio_plot_draws_a_line_per_strategy(tmp_path):
    rows = [{"kind": "mixed", "backend": "b", "mode": "eager", "l2": "warm", "prefix_ratio": 0.0, "num_tokens": n,
             "num_heads": 4, "num_kv_heads": 4, "head_dim": 32, "strategy": s, "median_ms": ms * n,
             "p10_ms": ms * n, "p90_ms": ms * n, "verdict": "pass"}
            for n in (8, 64) for s, ms in (("unified", 1.0), ("split", 1.2), ("fused", 0.8))]
    written = plot_runs([("", pd.DataFrame(rows))], tmp_path)
    assert any(p.name.startswith("ratio_") for p in written)


def test_e2e_table_has_a_column_and_a_ratio_per_strategy():
    rows = [{"backend": "b", "mode": "graph", "input_len": 8, "output_len": 2, "batch_size": 1, "strategy": s,
             "request_p50_s": v, "agreement": "match", "verdict": "pass"}
            for s, v in (("unified", 2.0), ("split", 1.0), ("fused", 4.0))]
    table = e2e_table(pd.DataFrame(rows))
    assert table[["split / unified", "fused / unified"]].iloc[0].tolist() == [0.5, 2.0]


def test_e2e_runs_fused_and_checks_it_against_unified(fused_registered, tmp_path):
    out = tmp_path / "e2e"
    result = invoke("e2e", "--model", "tiny", "--warmup", "1", "--iters", "2", "--device", "cpu", "--backend",
                    "fused-ref", "--strategy", "unified,fused", "--input-len", "8", "--output-len", "3",
                    "--batch-size", "2", "--chunk-size", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    df = pd.read_csv(out / "results.csv")
    assert set(df["strategy"]) == {"unified", "fused"} and set(df["verdict"]) == {"pass"}
    assert "fused / unified" in (out / "summary.md").read_text()
    assert set(pd.read_csv(out / "agreement.csv")["run"].str.contains("fused")) >= {True}


def test_fused_over_a_decode_only_batch_runs_the_decode_kernel_as_split_does():
    point = SweepPoint(kind="decode", num_tokens=8, num_heads=4, num_kv_heads=2, head_dim=32, context=32)
    inputs = make_inputs(point, torch.device("cpu"))
    plan = FusedReference().plan("fused", point, build_metadata("fused", inputs.batch, inputs.block_table))
    split = FusedReference().plan("split", point, build_metadata("split", inputs.batch, inputs.block_table))
    assert (plan.strategy, len(plan.launches), plan.refresh) == ("fused", len(split.launches), None)
    out = plan.run(inputs.q, inputs.k_cache, inputs.v_cache, torch.full_like(inputs.q, float("nan")))
    assert torch.isfinite(out).all()


def test_what_a_library_chose_reaches_results_csv_in_the_details_cell(tmp_path):
    writer = files.RowWriter(tmp_path)
    writer.write({"kind": "mixed", "strategy": "split", "verdict": "pass", "fi_prefill_backend": "fa3", "_window": 3,
                  "fi_decode_tensor_cores": True})
    writer.close()
    df = files.load_results(tmp_path)
    assert df["details"].iloc[0] == "fi_decode_tensor_cores=True fi_prefill_backend=fa3"


def test_an_opt_in_backend_runs_only_when_named():
    gpu = torch.device("cuda")
    assert "flex" not in registry.resolve_backends(None, gpu)
    assert registry.resolve_backends(["flex"], gpu) == ["flex"]
