"""Each part of a mixed batch timed alone (kernels/parts.py), the fused / best-of table
(results/fusion.py), and what the balanced-point scenarios need from the workload and flags
(--decode-seqs, a decode-share list, HEADS/KVxDIM shapes). The part timing is checked against a
backend whose decode and prefill launches cost known, different times (a busy wait on the CPU)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
import pytest
from fused_backend import FusedReference

from attnbench.cli import flags, options, scenario
from attnbench.errors import UsageError
from attnbench.kernels import plan as kernel_plan
from attnbench.kernels.sweep import SweepPlan, run_sweep
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import SweepPoint, build_batch
from attnbench.results import files
from attnbench.results.fusion import fusion_table
from attnbench.results.read import load_run

# what each part's launch costs on top of its arithmetic: far enough apart that a part timed with the other's
# launch, or with both, cannot pass for itself, even when the CPU reference's own arithmetic and a loaded
# machine add a few ms (each part may run up to the other part's cost over its own)
DECODE_MS, PREFILL_MS = 5.0, 25.0
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def busy(launch, ms: float):
    def run(q, k_cache, v_cache, out):
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass
        launch(q, k_cache, v_cache, out)
    return run


class CostedParts(FusedReference):
    """The reference's kernels, each decode launch DECODE_MS longer and each varlen launch PREFILL_MS."""

    name = "costed-parts"

    def plan_kvcache(self, ctx, md):
        return busy(super().plan_kvcache(ctx, md), DECODE_MS)

    def plan_varlen(self, ctx, md):
        return busy(super().plan_varlen(ctx, md), PREFILL_MS)


@pytest.fixture
def costed(monkeypatch):
    from attnbench.kernels.backends import registry
    monkeypatch.setitem(registry.REGISTRY, CostedParts.name, CostedParts())


def sweep_rows(points) -> pd.DataFrame:
    plan = SweepPlan(points=tuple(points), backends=(CostedParts.name,), strategies=("unified", "split", "fused"),
                     modes=("eager",), timing=TimingConfig(warmup_ms=0.0, budget_ms=40.0, min_samples=3),
                     device="cpu")
    rows: list[dict] = []
    run_sweep(plan, None, rows.append)
    return pd.DataFrame(rows)


def tiny(kind: str, **kw) -> SweepPoint:
    return SweepPoint(kind=kind, num_tokens=8, num_heads=2, num_kv_heads=2, head_dim=16, context="16", **kw)


def test_each_part_is_timed_alone_on_its_own_launch(costed):
    df = sweep_rows([tiny("mixed"), tiny("decode")]).set_index(["kind", "strategy"])
    assert set(df["verdict"]) == {"pass"}
    split = df.loc[("mixed", "split")]
    # the parts' costs, not swapped (decode < PREFILL_MS), not summed (prefill < PREFILL_MS + DECODE_MS)
    assert PREFILL_MS <= split["prefill_part_ms"] < PREFILL_MS + DECODE_MS
    assert DECODE_MS <= split["decode_part_ms"] < PREFILL_MS
    assert split["median_ms"] >= PREFILL_MS + DECODE_MS  # the split row times both launches
    fused = df.loc[("mixed", "fused")]
    assert (fused["prefill_part_ms"], fused["decode_part_ms"]) == (split["prefill_part_ms"], split["decode_part_ms"])
    for key in [("mixed", "unified"), ("decode", "unified"), ("decode", "split"), ("decode", "fused")]:
        assert pd.isna(df.loc[key].get("prefill_part_ms")) and pd.isna(df.loc[key].get("decode_part_ms")), key


def test_part_columns_reach_results_csv_and_the_fusion_table(costed, tmp_path):
    writer = files.RowWriter(tmp_path)
    writer.write_many(sweep_rows([tiny("mixed"), tiny("decode")]).to_dict("records"))
    writer.close()
    df = load_run(tmp_path, "RESULTS").rows
    mixed, decode = df[df["kind"] == "mixed"], df[df["kind"] == "decode"]
    split = mixed[mixed["strategy"] == "split"].iloc[0]
    assert math.isfinite(split["prefill_part_ms"]) and math.isfinite(split["decode_part_ms"])
    assert decode["prefill_part_ms"].isna().all() and decode["decode_part_ms"].isna().all()
    table = fusion_table(df).set_index("kind")
    assert table.loc["mixed", "prefill / decode"] == pytest.approx(split["prefill_part_ms"] / split["decode_part_ms"])
    assert table.loc["mixed", "parts sum ms"] == pytest.approx(split["prefill_part_ms"] + split["decode_part_ms"])
    assert pd.isna(table.loc["decode", "prefill / decode"])
    summary = files.write_summary(df, tmp_path, {}).read_text()
    assert "## Fused against the best of the others" in summary and "prefill alone ms" in summary


def row(strategy, ms, prefill=math.nan, decode=math.nan, backend="b", tokens=8):
    return {"kind": "mixed", "num_tokens": tokens, "num_heads": 4, "num_kv_heads": 4, "head_dim": 32,
            "context": "64", "decode_share": 0.5, "prefix_ratio": 0.5, "backend": backend, "mode": "graph",
            "l2": "warm", "strategy": strategy, "median_ms": ms, "verdict": "pass", "prefill_part_ms": prefill,
            "decode_part_ms": decode}


def test_fusion_table_divides_fused_by_the_best_other_strategy():
    rows = [row("unified", 1.5), row("split", 1.2, 0.6, 0.5), row("fused", 1.0, 0.6, 0.5),
            row("unified", 1.0, backend="nofused"), row("split", 0.9, backend="nofused")]
    table = fusion_table(pd.DataFrame(rows))
    assert list(table["backend"]) == ["b"]  # a backend without a fused row has no line
    line = table.iloc[0]
    assert line["best"] == "split" and line["fused / best(unified,split)"] == pytest.approx(1.0 / 1.2)
    assert (line["prefill / decode"], line["parts sum ms"]) == (pytest.approx(1.2), pytest.approx(1.1))
    older = pd.DataFrame(rows).drop(columns=["prefill_part_ms", "decode_part_ms"])  # results from before the parts
    assert pd.isna(fusion_table(older).iloc[0]["prefill alone ms"])
    assert fusion_table(pd.DataFrame(rows[:2])).empty  # no fused row: no table


def test_decode_seqs_puts_r_decode_rows_beside_a_chunk_of_all_n_tokens():
    batch = build_batch(SweepPoint(kind="mixed", num_tokens=40, num_heads=4, head_dim=16, context="32",
                                   decode_seqs=6))
    assert batch.query_lens == (1,) * 6 + (40,) and batch.kv_lens[-1] == 72 and batch.num_decode_seqs == 6
    share = build_batch(SweepPoint(kind="mixed", num_tokens=40, num_heads=4, head_dim=16, context="32"))
    assert share.num_decode_seqs == 20 and share.query_lens[-1] == 20  # without it, the decode share decides
    with pytest.raises(UsageError, match="--decode-seqs"):
        SweepPoint(kind="mixed", num_tokens=4, num_heads=4, head_dim=16, decode_seqs=-1)


def test_shapes_with_kv_heads_and_decode_lists_become_points():
    args = flags.kernel_args({"shapes": "32/8x128,12x64", "heads": None, "dim": None, "kind": "mixed,decode",
                              "tokens": "100", "decode_share": "0.5,0.9", "context": "64"})
    points = kernel_plan.build_points(args)
    assert {(p.num_heads, p.num_kv_heads, p.head_dim) for p in points} == {(32, 8, 128), (12, 12, 64)}
    assert sorted(p.decode_share for p in points if p.kind == "mixed") == [0.5, 0.5, 0.9, 0.9]
    assert len([p for p in points if p.kind == "decode"]) == 2  # the share does not shape a decode batch
    with pytest.raises(UsageError, match="--decode-share/--decode-seqs"):
        kernel_plan.check_lists(flags.kernel_args({"shapes": "4x16", "heads": None, "dim": None,
                                                    "decode_share": "0.5,0.9", "decode_seqs": "4"}))
    with pytest.raises(UsageError, match="HEADS/KVxDIM"):
        options.parse_shapes("32:8x128")


def test_older_results_without_the_new_columns_still_load(tmp_path):
    old = [c for c in files.COLUMNS if c not in ("decode_seqs", *files.PART_COLUMNS)]
    pd.DataFrame([{**row("split", 1.0), "seed": 0, "block_size": 16, "dtype": "bfloat16", "causal": True,
                   "spec_k": 4, "prefill_len": 512}]).reindex(columns=old).to_csv(tmp_path / "results.csv", index=False)
    df = load_run(tmp_path, "RESULTS").rows
    assert (df["decode_seqs"] == 0).all() and "prefill_part_ms" not in df


def test_the_balanced_scenarios_hold_the_points_they_describe():
    pod = scenario.load_scenario(SCENARIOS / "pod-balanced.toml")
    points = kernel_plan.build_points(flags.kernel_args({**pod.values, "context": pod.contexts[0]}))
    assert {(p.num_tokens, p.decode_seqs) for p in points} == {(n, r) for n in (2048, 4096, 8192)
                                                              for r in (32, 64, 128, 256)}
    assert {(p.num_heads, p.num_kv_heads, p.head_dim, p.context) for p in points} == {(32, 8, 128, "8192")}
    mixed = scenario.load_scenario(SCENARIOS / "mixed-families.toml", ["--backend", "vllm-fa2,flashinfer"])
    assert mixed.contexts == ["1024", "8192"]
    args = flags.kernel_args({**mixed.values, "context": mixed.contexts[1]})
    assert args.backend == ["vllm-fa2", "flashinfer"]  # the command line overrides the file's list
    assert {(p.num_heads, p.num_kv_heads, p.head_dim) for p in kernel_plan.build_points(args)} == {
        (32, 8, 128), (12, 12, 64)}
