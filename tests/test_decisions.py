"""The decision_* columns: the hook (Part.decide -> Plan.decisions), the merge of a plan's parts,
FA3's decisions read from its scheduler metadata (flash_api.cpp's layout, on its documented cases),
FlashInfer's from its wrappers, and the columns reaching results.csv through a kernel sweep. The
FA3 and FlashInfer runs here are on fake libraries; on the GPU, tests/test_gpu_kernels.py runs them."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from fake_flashinfer import FakeFlashInfer
from bad_input_cli import invoke
from test_backend_contract import Stream, fake_fa3_fwd, fake_fa3_scheduler
from test_replay import write_trace
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels.backends import registry
from attnbench.kernels.backends.decisions import (DECISIONS, fa2_num_splits, fa2_split_heuristic, fa3_effective_causal,
                                                  fa3_num_splits, fa3_pack_gqa, merged)
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.vllm_fa3 import VLLM_GRAPH_TOKENS, VLLM_MAX_SPLITS, VllmFA3Backend
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.rows import Decisions, names
from attnbench.kernels.workload import SweepPoint
from attnbench.results import files


def point(kind: str, **more) -> SweepPoint:
    return SweepPoint(kind=kind, num_tokens=24, num_heads=4, num_kv_heads=2, head_dim=16, dtype="bf16",
                      context="uniform:9:70", prefill_len=16, decode_share=0.5, **more)


def planned(backend, kind: str, strategy: str):
    inputs = make_inputs(point(kind), "cpu")
    return inputs, backend.plan(strategy, inputs.point, build_metadata(strategy, inputs.batch, inputs.block_table))


def test_every_declared_decision_is_a_row_column_and_the_reverse():
    assert names(Decisions) == [f"decision_{key}" for key in DECISIONS]
    assert set(names(Decisions)) <= set(files.COLUMNS) and set(names(Decisions)) <= set(files.TEXT_COLUMNS)


def test_parts_that_agree_give_one_value_and_parts_that_differ_say_which_is_which():
    assert merged({"unified": {"num_splits": 3, "pack_gqa": True}}) == {"num_splits": "3", "pack_gqa": "true"}
    assert merged({"decode": {"num_splits": 4, "pack_gqa": True}, "prefill": {"num_splits": 1, "pack_gqa": True}}) \
        == {"num_splits": "decode=4 prefill=1", "pack_gqa": "true"}
    assert merged({"decode": {"tensor_cores": True, "fi_backend": None}, "prefill": {"fi_backend": "fa3"}}) \
        == {"tensor_cores": "true", "fi_backend": "fa3"}  # None: that part did not say
    with pytest.raises(ValueError, match="undeclared decision"):
        merged({"unified": {"splits": 2}})


def test_fa3_num_splits_is_read_from_the_metadata_layout():
    # b=5 -> vectors of 8; non-causal with dynamic splits: prepare, num_splits_dynamic, semaphore
    dynamic = [0] * 8 + [3, 1, 7, 2, 1, 0, 0, 0] + [0]
    assert fa3_num_splits(dynamic, 5, causal=False) == 7
    # causal adds num_nheads_in_l2 after the splits
    assert fa3_num_splits(dynamic[:-1] + [9] * 8 + [0], 5, causal=True) == 7
    # no dynamic vector (static count 1, or past 992 sequences): one split
    assert fa3_num_splits([0] * 8 + [0], 5, causal=False) == 1
    assert fa3_num_splits([0] * 16 + [0], 5, causal=True) == 1
    # a length the layout cannot give: unknown, never a guess
    assert fa3_num_splits([0] * 10, 5, causal=False) is None
    assert fa3_num_splits([0] * 32 + [0], 5, causal=False) is None


def test_fa3_effective_causal_and_pack_gqa_follow_flash_api():
    assert fa3_effective_causal(True, 1, 128) and not fa3_effective_causal(True, 1, 64)
    assert not fa3_effective_causal(True, 1, 256) and fa3_effective_causal(True, 2, 64)
    assert not fa3_effective_causal(False, 7, 128)
    assert fa3_pack_gqa(16, 256, 512) is True  # it splits
    assert fa3_pack_gqa(1, 16, 512) is True  # 16-token pages: no TMA for the paged cache
    assert fa3_pack_gqa(1, 256, 8) is True  # seqlen_q * group under every kBlockM
    assert fa3_pack_gqa(0, 256, 512) is None  # needs the tile sizes


def test_fa2_split_heuristic_on_flash_api_s_own_example_and_its_edges():
    # flash_api.cpp: "batch * n_heads = 48 and we have 108 SMs, having 2 splits (efficiency = 0.89) is
    # better than having 3 splits (efficiency = 0.67)"
    assert fa2_split_heuristic(48, 108, 64, 128) == 2
    assert fa2_split_heuristic(90, 108, 64, 128) == 1  # nearly fills the SMs
    assert fa2_split_heuristic(1, 100, 3, 128) == 3  # capped by the KV blocks
    # 4 blocks: 3 splits are 2+2+0 blocks, the same as 2, so never chosen; 4 waves fill 4 SMs
    assert fa2_split_heuristic(1, 4, 4, 128) == 4


def test_fa2_regroups_a_one_token_gqa_query_and_leaves_paged_varlen_prefill_unsplit():
    # decode, 32 query heads on 8 KV heads: 8 sequences x 8 heads x 1 m-block = 64 tiles on 264 slots
    assert fa2_num_splits(8, 32, 8, 1, 4096, 128, 132, kvcache=False) == \
        fa2_split_heuristic(64, 264, 32, 128)
    assert fa2_num_splits(8, 32, 8, 16, 4096, 128, 132, kvcache=False) == 1
    assert fa2_num_splits(8, 32, 32, 1, 4096, 128, 132, kvcache=False) == 1  # no GQA: no regrouping
    assert fa2_num_splits(8, 32, 32, 1, 4096, 128, 132, kvcache=True) == fa2_split_heuristic(256, 264, 32, 128)


def fa3() -> VllmFA3Backend:
    return VllmFA3Backend(fake_fa3_fwd(Stream()), fake_fa3_scheduler)


def test_fa3_records_the_splits_its_scheduler_metadata_holds_and_vllm_s_cap():
    inputs, plan = planned(fa3(), "decode", "unified")
    assert inputs.batch.num_tokens <= VLLM_GRAPH_TOKENS
    want = min(VLLM_MAX_SPLITS, max((k + 7) // 8 for k in inputs.batch.kv_lens))  # the fake's rule
    assert plan.decisions() == {"decision_num_splits": str(want), "decision_max_splits": str(VLLM_MAX_SPLITS),
                                "decision_pack_gqa": "true"}


def test_fa3_split_names_each_launch_where_they_differ():
    inputs, plan = planned(fa3(), "mixed", "split")
    batch = inputs.batch
    dec = max((k + 7) // 8 for k, d in zip(batch.kv_lens, batch.is_decode) if d)
    pre = max((k + 7) // 8 for k, d in zip(batch.kv_lens, batch.is_decode) if not d)
    got = plan.decisions()["decision_num_splits"]
    assert got == (str(dec) if dec == pre else f"decode={dec} prefill={pre}")


def test_fa3_refresh_recomputes_the_metadata_a_graph_reads_in_place():
    inputs, plan = planned(fa3(), "decode", "unified")
    longer = SweepPoint(**{**point("decode").__dict__, "context": "uniform:120:127"})
    other = make_inputs(longer, "cpu")
    assert other.batch.num_seqs == inputs.batch.num_seqs
    plan.refresh(build_metadata("unified", other.batch, other.block_table))
    assert plan.decisions()["decision_num_splits"] == str(VLLM_MAX_SPLITS)  # 120+ keys: 15-16 splits each


def test_flashinfer_records_its_backend_tensor_core_decode_and_split_kv():
    # the fake's wrappers resolve to "fa2"; its decode plan_info has no split-KV, its prefill one has
    decisions = planned(FlashInferBackend(FakeFlashInfer(), workspace_bytes=1024), "mixed", "split")[1].decisions()
    assert decisions == {"decision_fi_backend": "fa2", "decision_tensor_cores": "true",
                         "decision_split_kv": "decode=false prefill=true"}


def test_batch_attention_records_its_ctas():
    decisions = planned(FlashInferBABackend(FakeFlashInfer(), workspace_bytes=1024), "mixed", "unified")[1].decisions()
    assert decisions == {"decision_ctas": str(2 * 66)}  # the fake's plan_info: num_blks_x=2, num_blks_y=66


def test_a_backend_that_decides_nothing_has_no_decisions():
    assert planned(registry.REGISTRY["reference"], "mixed", "split")[1].decisions() == {}


def test_the_columns_reach_results_csv_through_a_kernel_sweep(tmp_path, fake_fa3):
    result = CliRunner().invoke(app, ["kernel", "--backend", "vllm-fa3,reference", "--heads", "4", "--kv-heads", "2",
                                      "--dim", "64", "--tokens", "8", "--kind", "decode", "--context", "40",
                                      "--budget-ms", "3", "--device", "cpu", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    df = pd.read_csv(tmp_path / "r" / "results.csv", dtype=files.TEXT_COLUMNS).set_index(["backend", "strategy"])
    assert df.loc[("vllm-fa3", "unified"), "decision_num_splits"] == "5"  # 40 keys, one split per 8
    assert df.loc[("vllm-fa3", "split"), "decision_max_splits"] == str(VLLM_MAX_SPLITS)
    assert df.loc[("reference", "unified"), ["decision_num_splits", "decision_pack_gqa"]].isna().all()
    assert "decision_num_splits" in (tmp_path / "r" / "summary.md").read_text()


@pytest.fixture
def fake_fa3(monkeypatch):
    """vllm-fa3 on its fake op and scheduler, run at once (a CPU sweep never synchronizes a stream)."""
    class EagerStream(Stream):
        def launch(self, work) -> None:
            work()
    monkeypatch.setitem(registry.REGISTRY, "vllm-fa3", VllmFA3Backend(fake_fa3_fwd(EagerStream()), fake_fa3_scheduler))


def test_replay_and_atlas_rows_carry_the_columns(tmp_path, fake_fa3):
    trace = tmp_path / "t.jsonl"
    write_trace(trace)
    replayed = invoke("replay", trace, "--backend", "vllm-fa3", "--heads", "4", "--kv-heads", "2", "--dim", "64",
                      "--budget-ms", "2", "--device", "cpu",
                      "--bucket-ratio", "2", "--out", tmp_path / "replay")
    assert replayed.exit_code == 0, replayed.output
    atlas = invoke("atlas", "--backend", "vllm-fa3", "--decode-share", "0:1:2", "--decode-context", "16",
                   "--chunk", "8", "--head-dim", "64", "--gqa-group", "2", "--heads", "4", "--tokens", "4:8:2",
                   "--budget-ms", "2", "--device", "cpu", "--out", tmp_path / "atlas")
    assert atlas.exit_code == 0, atlas.output
    for run in ("replay", "atlas"):
        df = pd.read_csv(tmp_path / run / "results.csv", dtype=files.TEXT_COLUMNS)
        measured = df[df["verdict"] == "pass"]
        assert not measured.empty and measured["decision_max_splits"].eq(str(VLLM_MAX_SPLITS)).all(), run
        assert measured["decision_num_splits"].notna().all(), run
        assert "- vllm-fa3 unified: num_splits " in (tmp_path / run / "summary.md").read_text(), run
