"""FlashInfer under CUDA-graph replays of other batches, on the CPU through the fake `flashinfer`.

What `attnbench verify` and e2e's graphs rely on: the backend declares graph_replay "decode-only"
(vLLM's UNIFORM_SINGLE_TOKEN_DECODE on Hopper), verify reports cases outside it `unsupported`
without running them, a graph-mode plan made on a bucket's padded buffers takes any batch of the
bucket on refresh (more sequences than the capture batch included), and a refresh maps each part
of the plan to its share of the new metadata by role. The fake wrappers copy the index arrays
at plan time, as FlashInfer does, so a "replay" (run after refresh) computes what the re-plan put
in the wrappers' fixed buffers; outputs are checked against test_backend_contract's paged_oracle.
"""

from __future__ import annotations

import gc

import pytest
import torch
from conftest import rel_l2
from fake_flashinfer import FakeFlashInfer, FakePrefill, FakeWrapper
from test_backend_contract import paged_oracle

from attnbench.kernels import graphsafe
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.flashinfer_common import plan_choice
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import SplitMetadata, VarlenMetadata, build_block_table, build_metadata
from attnbench.kernels.verify import gating_failures, replay_cases, verify_rows
from attnbench.kernels.workload import Batch, SweepPoint

CPU = torch.device("cpu")
POINT = SweepPoint(kind="mixed", num_tokens=4, num_heads=4, num_kv_heads=2, head_dim=64, dtype="bf16")
CASES = {c.name: c for c in replay_cases(short=16, long=80, seqs=4)}


@pytest.fixture(autouse=True)
def prefix_rows(monkeypatch):
    """FlashInfer's prefill run writes the planned rows of a longer q/out (safe padding sequences
    bring no rows: qo_indptr ends before q does, as on the H200's verify runs); the fake's run
    copies into the whole of out, so here it writes the prefix."""
    def run(self, q, kv, out):
        result = self.kernel(q, kv, self.causal)
        out[:result.shape[0]].copy_(result.to(out.dtype))
    monkeypatch.setattr(FakePrefill, "run", run)


def decode(*kv_lens: int) -> Batch:
    return Batch((1,) * len(kv_lens), kv_lens, (True,) * len(kv_lens))


def bucket_plan(backend, strategy: str, capture: Batch, others: list[Batch]):
    """The safe recipe by hand: buffers for a bucket all batches fit, the capture batch written in
    with padding, the plan made on the buffers; returns the plan, buffers and each batch's metadata."""
    batches = [capture, *others]
    tables = [build_block_table(b, POINT.block_size, i) for i, b in enumerate(batches)]
    scratch = max(int(t.max()) for t in tables) + 1
    buffers = graphsafe.static_buffers(strategy, graphsafe.bucket_for(batches, POINT.block_size), scratch, CPU)
    host = [build_metadata(strategy, b, t) for b, t in zip(batches, tables)]
    graphsafe.write_batch(buffers, host[0], "safe")
    return backend.plan(strategy, POINT, buffers.metadata), buffers, host, tables


def replay(plan, buffers, md, batch: Batch, table: torch.Tensor) -> float:
    """Write `batch` into the buffers, refresh, run: the relative error of its real rows."""
    plan.refresh(graphsafe.write_batch(buffers, md, "safe"))
    gen = torch.Generator().manual_seed(batch.num_seqs)
    q = torch.randn(buffers.num_rows, POINT.num_heads, POINT.head_dim, generator=gen).bfloat16()
    kv = torch.randn(buffers.scratch_block + 1, POINT.block_size, POINT.num_kv_heads, POINT.head_dim,
                     generator=gen).bfloat16()
    out = torch.full_like(q, float("nan"))
    plan.run(q, kv, kv, out)
    rows = graphsafe.real_rows(buffers, md)
    ref = paged_oracle(q[rows], kv, kv, list(batch.query_lens), list(batch.kv_lens), table, POINT.causal,
                       POINT.softmax_scale)
    return rel_l2(out[rows], ref)


def test_the_declared_capability():
    assert FlashInferBackend.graph_replay == "decode-only" and FlashInferBABackend.graph_replay == "decode-only"
    assert all(REGISTRY[name].graph_replay == "any" for name in ("vllm-fa2", "vllm-fa3"))
    assert REGISTRY["flex"].graph_replay == "none" and "batch it was captured on" in REGISTRY["flex"].graph_replay_refusal(
        decode(5, 9))
    fi = FlashInferBackend(FakeFlashInfer())
    assert fi.graph_replay_refusal(decode(5, 9)) is None
    assert "graph_replay='decode-only'" in fi.graph_replay_refusal(CASES["decode -> mixed"].replay)
    assert REGISTRY["vllm-fa2"].graph_replay_refusal(CASES["decode -> mixed"].replay) is None


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_a_bucket_plan_takes_more_sequences_than_its_capture_batch(strategy):
    """fewer -> more under safe: FlashInfer fixes a graph-mode wrapper's query rows at its first
    plan; a capture batch of 2 sequences in a 6-sequence bucket must not fix them at 2."""
    fi = FakeFlashInfer()
    few, more = CASES["fewer -> more sequences"].capture, CASES["fewer -> more sequences"].replay
    plan, buffers, (md_few, md_more), (t_few, t_more) = bucket_plan(FlashInferBackend(fi), strategy, few, [more])
    assert plan.details["fi_graph_mode"]
    if strategy == "unified":
        (wrapper,) = fi.of(FakePrefill)
        assert wrapper.plans[0]["qo"].tolist() == list(range(more.num_seqs + 1))  # the bucket's rows first
        assert wrapper.plans[1]["qo"].tolist() == [0, 1, 2, 2, 2, 2, 2]  # then the capture batch, padded
    assert replay(plan, buffers, md_more, more, t_more) < 1e-2
    assert replay(plan, buffers, md_few, few, t_few) < 1e-2


def test_a_reused_graph_wrapper_is_not_planned_on_its_full_rows_again():
    fi = FakeFlashInfer()
    backend = FlashInferBackend(fi)
    few, more = CASES["fewer -> more sequences"].capture, CASES["fewer -> more sequences"].replay
    plan, *_ = bucket_plan(backend, "unified", few, [more])
    del plan
    gc.collect()
    bucket_plan(backend, "unified", few, [more])
    (wrapper,) = fi.of(FakePrefill)
    assert len(wrapper.plans) == 3  # reserve + plan, then the reused wrapper's one plan


def test_a_split_refresh_maps_parts_by_role():
    """A decode-only split plan refreshed with metadata that also has a prefill share (a bucket's
    part the capture batch lacked): empty, it is ignored; with tokens, refused; never a zip error."""
    fi = FakeFlashInfer()
    batch = decode(9, 17, 30)
    table = build_block_table(batch, POINT.block_size, 0)
    md = build_metadata("split", batch, table)
    plan = FlashInferBackend(fi).plan("split", POINT, md)
    empty = VarlenMetadata(torch.zeros(2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                           torch.zeros((1, table.shape[1]), dtype=torch.int32), 1, 16, md.decode.num_seqs)
    plan.refresh(SplitMetadata(md.decode, empty))
    chunk = VarlenMetadata(torch.tensor([0, 4], dtype=torch.int32), torch.tensor([8], dtype=torch.int32),
                           table[:1], 4, 8, md.decode.num_seqs)
    with pytest.raises(RuntimeError, match="has no prefill part"):
        plan.refresh(SplitMetadata(md.decode, chunk))
    with pytest.raises(RuntimeError, match="no decode part"):
        plan.refresh(SplitMetadata(None, empty))


def test_verify_reports_mixed_replays_unsupported_and_passes_the_rest(monkeypatch):
    fi = FakeFlashInfer()
    monkeypatch.setitem(REGISTRY, "flashinfer", FlashInferBackend(fi))
    rows = verify_rows(["flashinfer"], ["unified", "split"], ["naive", "safe"], POINT, list(CASES.values()), CPU)
    mixed = [r for r in rows if r["case"] == "decode -> mixed"]
    assert len(mixed) == 4 and all(r["verdict"] == "unsupported" and not r["gates"] for r in mixed)
    assert all("single-token decode batches only" in r["reason"] for r in mixed)
    safe = [r for r in rows if r["policy"] == "safe" and r["case"] != "decode -> mixed"]
    assert [r["verdict"] for r in safe] == ["pass"] * 4, [r["reason"] for r in safe]
    assert not gating_failures(rows)
    fi.made.clear()
    verify_rows(["flashinfer"], ["unified"], ["safe"], POINT, [CASES["decode -> mixed"]], CPU)
    assert not fi.made, "an unsupported case is not planned"


def test_pooled_wrappers_and_the_workspace_made_under_inference_mode_serve_plans_outside_it():
    """An e2e engine plans under inference mode, a kernel sweep does not; one backend instance serves
    both (the H200 raised "Inplace update to inference tensor outside InferenceMode" on a wrapper's
    __init__ buffer when a kernel test followed an e2e test). What outlives the call is made normal."""
    from attnbench.kernels.backends.flashinfer_common import Workspace, WrapperPool

    pool, workspace = WrapperPool(), Workspace(nbytes=64)
    with torch.inference_mode():
        made = pool.take(("k",), lambda: torch.zeros(4))
        buffer = workspace.get(torch.device("cpu"))
        workspace.grow(torch.device("cpu"), 8)
    for tensor in (made, buffer, workspace.get(torch.device("cpu"))):
        assert not tensor.is_inference()
        tensor.add_(1)  # what a later plan outside inference mode does to its buffers


def test_a_release_without_the_private_plan_attributes_records_unknown(monkeypatch):
    """FlashInfer has no public accessor for what a plan chose; flashinfer_common.plan_choice reads
    `_backend` and `_plan_info`. Without them the row says "unknown" (no split-KV columns), never fails."""
    store = FakeWrapper.store

    def store_without_private(self, *args, **kwargs):
        store(self, *args, **kwargs)
        del self._backend, self._plan_info

    monkeypatch.setattr(FakeWrapper, "store", store_without_private)
    inputs = make_inputs(SweepPoint(kind="mixed", num_tokens=24, num_heads=4, num_kv_heads=2, head_dim=64,
                                    dtype="bf16", context="uniform:1:40", prefill_len=16), "cpu")
    batch, want = inputs.batch, None
    for backend, strategy in ((FlashInferBackend(FakeFlashInfer()), "split"),
                              (FlashInferBABackend(FakeFlashInfer()), "unified")):
        plan = backend.plan(strategy, inputs.point, build_metadata(strategy, batch, inputs.block_table))
        assert not any(key.endswith(("_split_kv", "_cta_tile_q", "_ctas")) for key in plan.details), plan.details
        assert plan.details.get("fi_prefill_backend", "unknown") == "unknown"
        out = plan.run(inputs.q, inputs.k_cache, inputs.v_cache, torch.full_like(inputs.q, float("nan")))
        want = want if want is not None else paged_oracle(inputs.q, inputs.k_cache, inputs.v_cache,
                                                          list(batch.query_lens), list(batch.kv_lens),
                                                          inputs.block_table, True, inputs.point.softmax_scale)
        assert rel_l2(out, want) < 1e-2
    assert plan_choice(object(), "_backend") == "unknown"
