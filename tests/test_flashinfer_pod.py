"""The flashinfer backend's fused strategy (POD): on the CPU through the fake `flashinfer`, and on a GPU.

Where the prefill's pages are gathered (in the launch for an engine, once outside the timed
launch when the caller promises static caches: Plan.static_kv, which the kernel sweep calls), and
steps with several prefill requests (chunked prefill): POD on the largest, BatchPrefill on the
rest. Outputs are checked against test_backend_contract's paged_oracle, which reads the block table
itself; every Plan.run runs under `no_host_reads`. The GPU class checks both gathers and the
several-prefill route against the float32 reference, eager and as a CUDA-graph replay.
"""

from __future__ import annotations

import pytest
import torch
from conftest import rel_l2
from fake_flashinfer import FakeFlashInfer, FakePOD, FakePrefill
from test_flashinfer import _GPU, TINY, oracle, pod_compiled, point, run_guarded

from attnbench.e2e.model import random_model
from attnbench.e2e.runner import ModelEngines
from attnbench.e2e.scheduler import make_prompts
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_pod import fused_refusal
from attnbench.kernels.backends.reference import reference_attention
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.check import check_output
from attnbench.kernels.inputs import Inputs, make_inputs
from attnbench.kernels.metadata import build_block_table, build_split, num_cache_blocks
from attnbench.kernels.sweep import SweepPlan, run_sweep
from attnbench.kernels.timing import TimedKernel, TimingConfig
from attnbench.kernels.workload import Batch, SweepPoint

CPU = torch.device("cpu")
DECODES = ((1, 1, 1), (30, 7, 50), (True, True, True))


def step(prefill_q: tuple[int, ...], prefill_kv: tuple[int, ...], seed: int = 0, p: SweepPoint | None = None,
         decode_kv: tuple[int, ...] = DECODES[1], device: str = "cpu") -> Inputs:
    """Decodes, then prefill requests (an engine step's order), on a scattered paged cache."""
    n = len(decode_kv)
    batch = Batch((1,) * n + prefill_q, decode_kv + prefill_kv, (True,) * n + (False,) * len(prefill_q))
    p = p or point("mixed")
    gen = torch.Generator().manual_seed(seed)
    shape = (num_cache_blocks(batch, p.block_size) + 2, p.block_size, p.num_kv_heads, p.head_dim)
    k, v = (torch.randn(shape, generator=gen).to(device, torch.bfloat16) for _ in range(2))
    q = torch.randn((batch.num_tokens, p.num_heads, p.head_dim), generator=gen).to(device, torch.bfloat16)
    return Inputs(p, batch, q, k, v, build_block_table(batch, p.block_size, seed))


def fused(backend, inputs: Inputs):
    return backend.plan("fused", inputs.point, build_split(inputs.batch, inputs.block_table).to(inputs.device))


class CountGathers:
    """torch.index_select calls, counted (the gather of POD's prefill pages is two of them)."""

    def __init__(self, monkeypatch):
        self.calls, real = 0, torch.index_select

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(torch, "index_select", counted)


def test_an_engine_plan_gathers_in_the_launch_and_a_static_one_once_outside_it(monkeypatch):
    inputs = make_inputs(point("mixed"), "cpu")
    backend = FlashInferBackend(FakeFlashInfer())
    engine_plan, static_plan = fused(backend, inputs), fused(backend, inputs)
    assert engine_plan.details["fi_pod_kv_gather"] == "in-launch" and "fi_pod_gather_us" not in engine_plan.details
    assert engine_plan.details["fi_pod_extra_kernels"].startswith("2 index_select")
    static_plan.static_kv(inputs.k_cache, inputs.v_cache)
    assert static_plan.details["fi_pod_kv_gather"] == "outside-timing"
    assert static_plan.details["fi_pod_gather_us"] > 0
    assert static_plan.details["fi_pod_extra_kernels"].startswith("2 copies")
    before = oracle(inputs)
    gathers = CountGathers(monkeypatch)
    assert rel_l2(run_guarded(static_plan, inputs), before) < 1e-2 and gathers.calls == 0
    assert rel_l2(run_guarded(engine_plan, inputs), before) < 1e-2 and gathers.calls == 2

    # an engine writes new K/V before each layer's attention: only the in-launch gather sees them
    block = inputs.point.block_size
    prefill_pages = inputs.block_table[-1, :(inputs.batch.kv_lens[-1] + block - 1) // block].long()
    inputs.k_cache[prefill_pages] *= -1
    after = oracle(inputs)
    prefill = slice(inputs.batch.num_decode_seqs, None)
    assert rel_l2(run_guarded(engine_plan, inputs), after) < 1e-2
    stale = run_guarded(static_plan, inputs)  # its prefill rows: the pages as they were at static_kv
    assert rel_l2(stale[prefill], before[prefill]) < 1e-2 and rel_l2(stale[prefill], after[prefill]) > 0.1


def test_a_static_plan_refuses_caches_it_did_not_gather_from():
    inputs = make_inputs(point("mixed"), "cpu")
    plan = fused(FlashInferBackend(FakeFlashInfer()), inputs)
    plan.static_kv(inputs.k_cache, inputs.v_cache)
    with pytest.raises(RuntimeError, match="gathered its prefill's pages from other caches"):
        plan.run(inputs.q, inputs.k_cache.clone(), inputs.v_cache, torch.empty_like(inputs.q))


def test_live_static_plans_keep_their_own_gathered_pages():
    fi = FakeFlashInfer()
    backend = FlashInferBackend(fi)
    first, second = step((9,), (40,), seed=1), step((9,), (40,), seed=2)  # one shape, other values
    plans = [fused(backend, inputs) for inputs in (first, second)]
    for plan, inputs in zip(plans, (first, second)):
        plan.static_kv(inputs.k_cache, inputs.v_cache)
    for plan, inputs in zip(plans, (first, second)):  # the second gather did not land in the first's pages
        assert rel_l2(run_guarded(plan, inputs), oracle(inputs)) < 1e-2
    assert len({id(w) for w in fi.of(FakePOD)}) == 2


def test_a_batch_pod_cannot_take_is_refused_with_the_reason():
    batch = Batch((1, 1, 5, 6), (10, 12, 20, 8), (True, True, False, False))
    table = torch.arange(8, dtype=torch.int32).view(4, 2)
    with pytest.raises(ValueError, match="GQA group of 32"):  # the plan refuses what POD cannot run
        FlashInferBackend(FakeFlashInfer()).plan("fused", point("mixed", num_heads=32, num_kv_heads=1),
                                                 build_split(batch, table))
    # a kernel row measures POD alone: more prefill requests are skipped there (an engine step runs them)
    assert "one prefill request beside the decodes, this batch has 2" in fused_refusal(3, 1, 2)
    assert "one query token per request" in fused_refusal(3, 4, 1)
    assert "GQA group of 32" in fused_refusal(3, 1, 1, 32) and fused_refusal(3, 1, 1, 16) is None  # pod.cu tiles
    assert "GQA group of 32" in FlashInferBackend(FakeFlashInfer()).supports(
        point("mixed", num_heads=32, num_kv_heads=1), "fused", CPU)
    assert fused_refusal(0, 1, 2) is None and fused_refusal(3, 4, 0) is None  # one part: it runs alone


@pytest.mark.parametrize("prefill_q,prefill_kv,pod_request,extra_runs", [
    ((5, 12), (37, 12), 1, [(0, 1)]),  # one request finishing its prompt, the next starting: POD takes the 2nd
    ((12, 5), (44, 5), 0, [(1, 2)]),
    ((3, 14, 6), (20, 14, 6), 1, [(0, 1), (2, 3)]),  # the largest between two others: two BatchPrefill launches
])
def test_a_step_with_several_prefill_requests_runs_pod_on_the_largest_and_batch_prefill_on_the_rest(
        prefill_q, prefill_kv, pod_request, extra_runs):
    fi = FakeFlashInfer()
    inputs = step(prefill_q, prefill_kv)
    plan = fused(FlashInferBackend(fi), inputs)
    assert not any(w.runs for w in fi.made), "planning ran a kernel"
    assert rel_l2(run_guarded(plan, inputs), oracle(inputs)) < 1e-2
    assert plan.details["fi_pod_extra_prefills"] == len(prefill_q) - 1 and len(plan.launches) == 1 + len(extra_runs)
    assert f"({prefill_q[pod_request]} tokens, {prefill_kv[pod_request]} keys)" in plan.details["fi_fused"]
    (pod,) = fi.of(FakePOD)
    first_prefill = inputs.q[3:]
    offsets = [0, *torch.tensor(prefill_q).cumsum(0).tolist()]
    pods_q = pod.runs[0]  # POD's decode side: the decode rows; its prefill side runs in FakePOD.run
    assert pods_q.data_ptr() == inputs.q.data_ptr() and pods_q.shape[0] == 3
    prefills = fi.of(FakePrefill)
    assert len(prefills) == len(extra_runs), "live parts of one plan share a wrapper"
    for wrapper, (lo, hi) in zip(prefills, extra_runs):
        (q,) = wrapper.runs
        assert q.data_ptr() == first_prefill[offsets[lo]:].data_ptr() and q.shape[0] == offsets[hi] - offsets[lo]
        assert wrapper.plans[0]["qo"].tolist() == [x - offsets[lo] for x in offsets[lo:hi + 1]]


def test_an_extra_prefill_request_is_gathered_once_outside_timing_too():
    inputs = step((5, 12), (37, 12))
    plan = fused(FlashInferBackend(FakeFlashInfer()), inputs)
    plan.static_kv(inputs.k_cache, inputs.v_cache)
    assert plan.details["fi_pod_kv_gather"] == "outside-timing" and plan.details["fi_pod_extra_prefills"] == 1
    assert rel_l2(run_guarded(plan, inputs), oracle(inputs)) < 1e-2


def test_a_kernel_sweep_row_gathers_outside_timing_and_records_the_gather(monkeypatch):
    monkeypatch.setitem(REGISTRY, "flashinfer", FlashInferBackend(FakeFlashInfer()))
    rows = []
    sweep = SweepPlan(points=(point("mixed"), point("decode")), backends=("flashinfer",), strategies=("fused",),
                      modes=("eager",), timing=TimingConfig(budget_ms=5, min_samples=3, max_samples=5), device="cpu")
    run_sweep(sweep, None, rows.append)
    mixed, decode = rows
    assert mixed["verdict"] == "pass" and mixed["kernel_launches"] == 1, mixed.get("reason")
    assert mixed["fi_pod_kv_gather"] == "outside-timing" and mixed["fi_pod_gather_us"] > 0
    assert mixed["fi_pod_extra_prefills"] == 0
    assert decode["verdict"] == "pass" and "fi_pod_kv_gather" not in decode  # BatchDecode alone: nothing gathered


def test_an_engine_with_chunked_prefill_runs_two_prompt_chunks_beside_decodes(monkeypatch):
    """chunk 16, prompts of 20: step 3 holds a decode, the end of one prompt and the start of the next."""
    backend = FlashInferBackend(FakeFlashInfer())
    details, plan = [], backend.plan

    def recorded(*args):
        made = plan(*args)
        details.append(made.details)
        return made
    monkeypatch.setattr(backend, "plan", recorded)
    monkeypatch.setitem(REGISTRY, "flashinfer", backend)
    model = random_model(TINY, torch.bfloat16, "cpu", seed=5)
    engines = ModelEngines(model, max_num_seqs=3, max_model_len=64, chunk_size=16)
    prompts = make_prompts(3, 20, TINY.vocab_size, seed=5)
    ours = engines.engine("flashinfer", "fused").generate(prompts, 3, record_logits=True)
    theirs = engines.engine("reference", "unified").generate(prompts, 3, record_logits=True)
    assert rel_l2(ours.logits, theirs.logits) < 2e-2
    assert any(d.get("fi_pod_extra_prefills") == 1 for d in details), [d.get("fi_fused") for d in details]
    assert all(d.get("fi_pod_kv_gather", "in-launch") == "in-launch" for d in details)



# --- GPU: both gathers and the several-prefill route against the reference, eager and graph -------

STEPS = {"one-prefill": ((300,), (900,)), "two-chunks": ((40, 300), (1000, 300)),
         "largest-between": ((20, 200, 90), (500, 200, 90))}


@pytest.mark.gpu
@pytest.mark.skipif(_GPU is not None, reason=f"flashinfer unavailable: {_GPU}")
class TestPodOnTheGPU:
    @pytest.mark.parametrize("static", [False, True], ids=["in-launch", "outside-timing"])
    @pytest.mark.parametrize("mode", ["eager", "graph"])
    @pytest.mark.parametrize("prefills", STEPS.values(), ids=STEPS.keys())
    @pytest.mark.parametrize("dim", [128, 64])
    def test_matches_the_reference(self, dim, prefills, mode, static):
        if not pod_compiled(dim):
            pytest.skip(f"POD for head dim {dim} is not compiled here (warm_flashinfer.py --groups pod)")
        p = SweepPoint(kind="mixed", num_tokens=200, num_heads=32, num_kv_heads=8, head_dim=dim)
        decode_kv = tuple(torch.randint(1, 2048, (64,), generator=torch.Generator().manual_seed(3)).tolist())
        inputs = step(*prefills, p=p, decode_kv=decode_kv, device="cuda")
        plan = fused(REGISTRY["flashinfer"], inputs)
        if static:
            plan.static_kv(inputs.k_cache, inputs.v_cache)
        out = torch.full_like(inputs.q, float("nan"))
        runner = TimedKernel(lambda: plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out), mode,
                             torch.device("cuda"))
        out.fill_(float("nan"))
        runner()
        torch.cuda.synchronize()
        ref = reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(inputs.batch.query_lens),
                                  list(inputs.batch.kv_lens), inputs.block_table.cuda(), p.causal, p.softmax_scale)
        check = check_output(out, ref, p.dtype)
        assert check["verdict"] == "pass", (check["reason"], plan.details)
        assert plan.details["fi_pod_extra_prefills"] == len(prefills[0]) - 1


def test_pod_is_timed_eagerly_only_and_the_others_under_graphs():
    """0.6.6's POD zeroes its scheduler counters outside any graph (pod.cuh): a replay after the
    first does none of the work, so `kernel --mode graph` skips fused with that reason."""
    backend = FlashInferBackend(FakeFlashInfer())
    assert "cudaMemset on the legacy stream" in backend.graph_refusal("fused")
    assert backend.graph_refusal("unified") is None and backend.graph_refusal("split") is None
