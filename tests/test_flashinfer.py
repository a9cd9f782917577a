"""The flashinfer and flashinfer-ba backends: on the CPU through a fake `flashinfer`, and on a GPU.

The fake module (tests/fake_flashinfer.py) computes from the index arrays the backend planned;
outputs are compared with test_backend_contract's paged_oracle, which reads the block table
directly, so a wrong indptr, page, length or token slice shows. Plan.run runs under
`no_host_reads`. The GPU class checks every strategy against the float32 reference, eager and
as a CUDA-graph replay, and skips with the reason where there is no GPU or no flashinfer.
The fused strategy's own routes (where POD's pages are gathered, several prefill requests):
test_flashinfer_pod.py.
"""

from __future__ import annotations

import functools
import gc
import sys

import pytest
import torch
from conftest import rel_l2
from fake_flashinfer import FakeDecode, FakeFlashInfer, FakePOD, FakePrefill
from test_backend_contract import no_host_reads, paged_oracle

from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.runner import ModelEngines
from attnbench.e2e.scheduler import make_prompts
from attnbench.kernels.backends import flashinfer_common
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.flashinfer_common import paged_kv_arrays
from attnbench.kernels.backends.reference import reference_attention
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.check import check_output
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.timing import TimedKernel
from attnbench.kernels.workload import KINDS, STRATEGIES, Batch, SweepPoint

CPU = torch.device("cpu")
TINY = ModelArgs.from_name("tiny")


def point(kind: str, **kwargs) -> SweepPoint:
    fields = {"kind": kind, "num_tokens": 24, "num_heads": 4, "num_kv_heads": 2, "head_dim": 64, "dtype": "bf16",
              "context": "uniform:1:40", "prefill_len": 16, "spec_k": 3}
    return SweepPoint(**{**fields, **kwargs})


def planned(backend, strategy: str, inputs, batch=None, table=None):
    md = build_metadata(strategy, batch or inputs.batch, inputs.block_table if table is None else table)
    return backend.plan(strategy, inputs.point, md.to(inputs.device))


def run_guarded(plan, inputs) -> torch.Tensor:
    out = torch.full_like(inputs.q, float("nan"))
    with no_host_reads():
        plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)
    assert not torch.isnan(out).any(), "some output tokens were never written"
    return out


def oracle(inputs, batch=None, table=None) -> torch.Tensor:
    b = batch or inputs.batch
    return paged_oracle(inputs.q, inputs.k_cache, inputs.v_cache, list(b.query_lens), list(b.kv_lens),
                        inputs.block_table if table is None else table, inputs.point.causal, inputs.point.softmax_scale)


# --- CPU: translation, routing, buffers -----------------------------------------------------------

def test_paged_kv_arrays_from_a_known_block_table():
    table = torch.tensor([[7, 3, 9], [4, 0, 0], [5, 8, 0], [0, 0, 0]], dtype=torch.int32)
    indptr, indices, last = paged_kv_arrays(torch.tensor([33, 16, 17, 0]), table, page_size=16)
    assert indptr.tolist() == [0, 3, 4, 6, 6] and indices.tolist() == [7, 3, 9, 4, 5, 8]
    assert last.tolist() == [1, 16, 1, 0]  # a full last page holds 16; a padding row has no page
    assert {t.dtype for t in (indptr, indices, last)} == {torch.int32}


CASES = [("flashinfer", s, k) for s in STRATEGIES for k in KINDS] + [("flashinfer-ba", "unified", k) for k in KINDS]


@pytest.mark.parametrize("name,strategy,kind", CASES)
def test_every_strategy_matches_the_oracle_and_its_run_only_launches(name, strategy, kind):
    fi = FakeFlashInfer()
    backend = (FlashInferBackend if name == "flashinfer" else FlashInferBABackend)(fi, workspace_bytes=1024)
    inputs = make_inputs(point(kind), "cpu")
    assert backend.supports(inputs.point, strategy, CPU) is None
    plan = planned(backend, strategy, inputs)
    assert not any(w.runs for w in fi.made), "planning ran a kernel"
    assert rel_l2(run_guarded(plan, inputs), oracle(inputs)) < 1e-2
    assert plan.details.get("fi_prefill_backend", "fa2") == "fa2"
    if strategy == "fused":  # POD where both parts are there, else the one part's wrapper alone
        assert plan.details["fi_fused"].startswith("POD" if kind == "mixed" else "Batch")


def test_split_routes_decode_rows_to_batch_decode_and_the_rest_to_batch_prefill():
    fi = FakeFlashInfer()
    inputs = make_inputs(point("mixed"), "cpu")
    plan = planned(FlashInferBackend(fi), "split", inputs)
    run_guarded(plan, inputs)
    decodes = inputs.batch.num_decode_seqs
    (dec,), (pre,) = fi.of(FakeDecode), fi.of(FakePrefill)
    assert dec.tensor_cores and dec.runs[0].shape[0] == decodes and dec.runs[0].data_ptr() == inputs.q.data_ptr()
    assert pre.runs[0].data_ptr() == inputs.q[decodes:].data_ptr() and pre.runs[0].shape[0] == 12
    assert pre.plans[0]["qo"].tolist() == [0, 12] and pre.plans[0]["causal"]
    assert plan.details == {"fi_graph_mode": False, "fi_decode_wrapper": "BatchDecode", "fi_decode_tensor_cores": True,
                            "fi_decode_split_kv": False, "fi_decode_cta_tile_q": 16, "fi_prefill_backend": "fa2",
                            "fi_prefill_split_kv": True, "fi_prefill_cta_tile_q": 0}


def test_spec_decode_rows_go_through_the_prefill_wrapper():
    fi = FakeFlashInfer()
    inputs = make_inputs(point("specdec"), "cpu")
    plan = planned(FlashInferBackend(fi), "split", inputs)
    assert plan.details["fi_decode_wrapper"].startswith("BatchPrefill (query_len 3") and not fi.of(FakeDecode)


def test_fused_is_one_pod_launch_over_one_prefill_request_and_the_decodes():
    fi = FakeFlashInfer()
    inputs = make_inputs(point("mixed"), "cpu")
    plan = planned(FlashInferBackend(fi), "fused", inputs)
    run_guarded(plan, inputs)
    (pod,) = fi.made
    decodes, prefill_kv = inputs.batch.num_decode_seqs, inputs.batch.kv_lens[-1]
    assert type(pod) is FakePOD and len(plan.launches) == 1 and pod.indptr.numel() == decodes + 1
    assert pod.runs[0].data_ptr() == inputs.q.data_ptr() and plan.details["fi_fused"].startswith("POD: 1 prefill")
    assert f"{prefill_kv} keys" in plan.details["fi_fused"]


def test_live_plans_never_share_a_schedule_and_a_dead_plans_wrappers_are_reused():
    fi = FakeFlashInfer()
    backend = FlashInferBackend(fi, workspace_bytes=1024)
    inputs = make_inputs(point("mixed"), "cpu")
    plans = [planned(backend, s, inputs) for s in ("unified", "split", "unified")]
    assert len(fi.made) == 4 and len({id(w._int_workspace_buffer) for w in fi.made}) == 4
    assert len({id(w.workspace) for w in fi.made}) == 1  # one float workspace per backend and device
    for plan in plans:  # each plan still computes its own batch after the others planned
        assert rel_l2(run_guarded(plan, inputs), oracle(inputs)) < 1e-2
    del plans, plan
    gc.collect()
    planned(backend, "split", inputs)
    assert len(fi.made) == 4, "a collected plan's wrappers are re-planned, not made again"


def test_the_float_workspace_grows_when_a_plan_asks_for_more():
    fi = FakeFlashInfer()
    fi.float_bytes_needed = 5000
    backend = FlashInferBackend(fi, workspace_bytes=1024)
    inputs = make_inputs(point("prefill"), "cpu")
    plan = planned(backend, "unified", inputs)
    assert backend.workspace.get(CPU).numel() >= 5000 and backend.workspace.generation[CPU] == 1
    assert rel_l2(run_guarded(plan, inputs), oracle(inputs)) < 1e-2


@pytest.mark.parametrize("name,strategy", [("flashinfer", "unified"), ("flashinfer", "split"),
                                           ("flashinfer-ba", "unified")])
def test_a_decode_plan_is_replanned_in_place_as_a_captured_graph_needs(name, strategy):
    """The e2e engine's recipe: plan a bucket at zero lengths (padding rows), capture, then per step
    put the live batch in and re-plan in place: the buffers a graph captured must not move."""
    fi = FakeFlashInfer()
    backend = (FlashInferBackend if name == "flashinfer" else FlashInferBABackend)(fi)
    inputs = make_inputs(point("decode", num_tokens=6), "cpu")
    n, lens = inputs.batch.num_seqs, inputs.batch.kv_lens
    padding = Batch((1,) * n, (0,) * n, (True,) * n)
    plan = planned(backend, strategy, inputs, batch=padding)
    assert name == "flashinfer-ba" or plan.details["fi_graph_mode"]
    before = {id(w): w.indices.data_ptr() for w in fi.made}
    live = Batch((1,) * n, tuple(max(1, kv // 2) for kv in reversed(lens)), (True,) * n)
    table = inputs.block_table.flip(0)  # row i now reads row n-1-i's pages (enough for half its keys)
    plan.refresh(build_metadata(strategy, live, table))
    assert {id(w): w.indices.data_ptr() for w in fi.made} == before
    assert rel_l2(run_guarded(plan, inputs), oracle(inputs, live, table)) < 1e-2


def test_a_plan_with_prefill_rows_is_not_replanned():
    inputs = make_inputs(point("mixed"), "cpu")
    plan = planned(FlashInferBackend(FakeFlashInfer()), "unified", inputs)
    assert plan.details["fi_graph_mode"] is False
    with pytest.raises(RuntimeError, match="planned in FlashInfer's eager mode"):
        plan.refresh(build_metadata("unified", inputs.batch, inputs.block_table))


@pytest.fixture
def fresh_import(monkeypatch):
    flashinfer_common.find_flashinfer.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    flashinfer_common.find_flashinfer.cache_clear()


def test_unavailable_without_the_module_and_found_when_it_imports(fresh_import):
    fresh_import.setitem(sys.modules, "flashinfer", None)
    assert "pip install flashinfer-python" in FlashInferBackend().unavailable_reason()
    flashinfer_common.find_flashinfer.cache_clear()
    fresh_import.setitem(sys.modules, "flashinfer", FakeFlashInfer())
    assert FlashInferBackend().library() == ("flashinfer", "0.6.6+fake") and FlashInferBackend().needs_cuda()
    if not torch.cuda.is_available():
        assert FlashInferBackend().unavailable_reason() == "needs a CUDA GPU (none visible)"
    no_ba = FakeFlashInfer()
    del no_ba.BatchAttention
    assert "has no BatchAttention" in FlashInferBABackend(no_ba).unavailable_reason()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_eager_engine_generates_what_the_reference_generates(monkeypatch, strategy):
    """Every step planned once: a prefill step (fused: BatchPrefill alone), then decode steps."""
    model = random_model(TINY, torch.bfloat16, "cpu", seed=5)
    monkeypatch.setitem(REGISTRY, "flashinfer", FlashInferBackend(FakeFlashInfer()))
    engines = ModelEngines(model, max_num_seqs=3, max_model_len=64)
    prompts = make_prompts(3, 20, TINY.vocab_size, seed=5)
    ours = engines.engine("flashinfer", strategy).generate(prompts, 3, record_logits=True)
    theirs = engines.engine("reference", "unified").generate(prompts, 3, record_logits=True)
    assert rel_l2(ours.logits, theirs.logits) < 2e-2


@pytest.mark.parametrize("point, seen", [  # (the point, what BatchAttention 0.6.6 returned on the H200)
    (SweepPoint("decode", 680, 12, 64, context="8192"), "right"), (SweepPoint("decode", 700, 12, 64, context="8192"), "wrong"),
    (SweepPoint("decode", 1300, 12, 64, context="4096"), "right"), (SweepPoint("decode", 1400, 12, 64, context="4096"), "wrong"),
    (SweepPoint("decode", 900, 8, 64, num_kv_heads=1, context="8192"), "right"),
    (SweepPoint("mixed", 1000, 32, 128, num_kv_heads=8, context="8192", decode_share=0.5), "right"),
    (SweepPoint("mixed", 1000, 32, 128, num_kv_heads=8, context="8192", decode_share=0.9), "wrong"),
])
def test_batch_attention_skips_caches_past_2_32_elements_where_it_was_seen_wrong(point, seen):
    reason = FlashInferBABackend(FakeFlashInfer()).supports(point, "unified", torch.device("cuda"))
    assert (reason is not None and "past 2^32" in reason) == (seen == "wrong"), reason
    assert FlashInferBackend(FakeFlashInfer()).supports(point, "unified", torch.device("cuda")) is None


def test_the_registry_declares_both_backends():
    fi, ba = REGISTRY["flashinfer"], REGISTRY["flashinfer-ba"]
    assert fi.strategies == ("unified", "split", "fused") and ba.strategies == ("unified",)
    assert fi.graph_safe and ba.graph_safe and fi.head_dims == (64, 128, 256)
    assert "--dim: flashinfer supports head dims" in FlashInferBackend(FakeFlashInfer()).supports(
        point("decode", head_dim=96), "unified", CPU)


# --- GPU: every strategy against the reference, eager and graph ------------------------------------

_GPU = "needs a CUDA GPU" if not torch.cuda.is_available() else FlashInferBackend().unavailable_reason()
SHAPES = {"32q8kv128d": (32, 8, 128), "32h128d": (32, 32, 128), "32q8kv64d": (32, 8, 64), "32h64d": (32, 32, 64)}
GPU_CASES = [("flashinfer", "unified"), ("flashinfer", "split"), ("flashinfer", "fused"), ("flashinfer-ba", "unified")]


def pod_compiled(dim: int) -> bool:
    """POD's module for bf16 at this head dim is compiled here (a first use compiles it: ~2-3 min)."""
    try:
        from flashinfer.jit import gen_pod_module
        bf16 = torch.bfloat16
        return gen_pod_module(bf16, bf16, bf16, dim, 0, False, False, False, torch.int32, 0, False, False).is_compiled
    except Exception:  # another version's internals: let it compile
        return True


@pytest.mark.gpu
@pytest.mark.skipif(_GPU is not None, reason=f"flashinfer unavailable: {_GPU}")
class TestOnTheGPU:
    @pytest.mark.parametrize("mode", ["eager", "graph"])
    @pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
    @pytest.mark.parametrize("kind", ["decode", "prefill", "mixed"])
    @pytest.mark.parametrize("name,strategy", GPU_CASES)
    def test_matches_the_reference(self, name, strategy, kind, shape, mode):
        heads, kv_heads, dim = shape
        p = SweepPoint(kind=kind, num_tokens=200, num_heads=heads, num_kv_heads=kv_heads, head_dim=dim,
                       context="uniform:1:1024", prefill_len=128)
        backend = REGISTRY[name]
        reason = backend.supports(p, strategy, torch.device("cuda"))
        if reason or (strategy == "fused" and kind == "mixed" and not pod_compiled(dim)):
            pytest.skip(reason or f"POD for head dim {dim} is not compiled here (warm_flashinfer.py --groups pod)")
        inputs = make_inputs(p, "cuda")
        ref = reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(inputs.batch.query_lens),
                                  list(inputs.batch.kv_lens), inputs.block_table.cuda(), p.causal, p.softmax_scale)
        plan = planned(backend, strategy, inputs)
        out = torch.full_like(inputs.q, float("nan"))
        fn = functools.partial(plan.run, inputs.q, inputs.k_cache, inputs.v_cache, out)
        runner = TimedKernel(fn, mode, torch.device("cuda"))
        out.fill_(float("nan"))
        runner()
        torch.cuda.synchronize()
        check = check_output(out, ref, p.dtype)
        assert check["verdict"] == "pass", (check["reason"], plan.details)

    @pytest.mark.parametrize("name,strategy", [c for c in GPU_CASES if c[1] != "fused"])
    def test_a_decode_graph_captured_on_padding_replays_a_refreshed_batch(self, name, strategy):
        """The e2e engine's recipe: plan and capture a bucket on zero-length rows, then refresh."""
        p = SweepPoint(kind="decode", num_tokens=64, num_heads=32, num_kv_heads=8, head_dim=128,
                       context="uniform:1:2048")
        inputs = make_inputs(p, "cuda")
        n, lens = inputs.batch.num_seqs, inputs.batch.kv_lens
        plan = planned(REGISTRY[name], strategy, inputs, batch=Batch((1,) * n, (0,) * n, (True,) * n))
        out = torch.full_like(inputs.q, float("nan"))
        runner = TimedKernel(functools.partial(plan.run, inputs.q, inputs.k_cache, inputs.v_cache, out), "graph",
                             torch.device("cuda"))
        live = Batch((1,) * n, tuple(max(1, kv // 2) for kv in reversed(lens)), (True,) * n)
        table = inputs.block_table.flip(0)
        plan.refresh(build_metadata(strategy, live, table))  # host metadata, as the engine passes it
        out.fill_(float("nan"))
        runner()
        torch.cuda.synchronize()
        ref = reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, [1] * n, list(live.kv_lens),
                                  table.cuda(), p.causal, p.softmax_scale)
        check = check_output(out, ref, p.dtype)
        assert check["verdict"] == "pass", (check["reason"], plan.details)
