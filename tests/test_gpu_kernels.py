"""vllm-flash-attn FA2 (and FA3 on Hopper; vLLM's unified Triton attention where its pack is sourced) on a CUDA
GPU: unified and split against the float32
reference on every batch kind, and a CUDA-graph replay against the eager call (the seed PR's
garbage-with-graphs bug).

Inputs are made on the GPU by `make_inputs`; every output buffer is poisoned with NaN first, so
a token a kernel never writes fails the check.
"""

from __future__ import annotations

import pytest
import torch
from conftest import rel_l2

from attnbench.kernels.backends.reference import reference_attention
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend
from attnbench.kernels.backends.vllm_fa3 import VllmFA3Backend
from attnbench.kernels.backends.vllm_triton import VllmTritonBackend
from attnbench.kernels.inputs import Inputs, make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.check import REL_L2_TOLERANCE as TOLERANCE
from attnbench.kernels.sweep import PointRunner, SweepPlan
from attnbench.kernels.timing import TimedKernel, TimingConfig
from attnbench.kernels.workload import KINDS, SweepPoint

FA2 = VllmFA2Backend()
_UNAVAILABLE = FA2.unavailable_reason()  # says "needs a CUDA GPU" without importing anything

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(_UNAVAILABLE is not None, reason=f"vllm-fa2 unavailable: {_UNAVAILABLE}"),
]

SHAPES = {"32q8kv128d": (32, 8, 128), "12h64d": (12, 12, 64)}  # the shapes the FA2 JIT cache covers
GRAPH_VS_EAGER = 1e-3

FA3 = VllmFA3Backend()
_FA3_UNAVAILABLE = FA3.unavailable_reason()
KERNELS = [
    pytest.param(FA2, id="vllm-fa2"),
    pytest.param(FA3, id="vllm-fa3", marks=pytest.mark.skipif(
        _FA3_UNAVAILABLE is not None, reason=f"vllm-fa3 unavailable: {_FA3_UNAVAILABLE}")),
    pytest.param(TRITON := VllmTritonBackend(), id="vllm-triton", marks=pytest.mark.skipif(
        TRITON.unavailable_reason() is not None, reason=f"vllm-triton unavailable: {TRITON.unavailable_reason()}")),
]


def point(kind: str, num_tokens: int, shape=SHAPES["32q8kv128d"], dtype: str = "bf16") -> SweepPoint:
    heads, kv_heads, dim = shape
    return SweepPoint(kind=kind, num_tokens=num_tokens, num_heads=heads, num_kv_heads=kv_heads, head_dim=dim,
                      dtype=dtype, context="uniform:1:1024", prefill_len=256)


def reference(inputs: Inputs) -> torch.Tensor:
    batch = inputs.batch
    return reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(batch.query_lens),
                               list(batch.kv_lens), inputs.block_table.to(inputs.device),
                               inputs.point.causal, inputs.point.softmax_scale)


def prepare(strategy: str, inputs: Inputs, backend=FA2):
    """The backend's planned strategy as a callable, writing into a NaN-poisoned output."""
    metadata = build_metadata(strategy, inputs.batch, inputs.block_table).to(inputs.device)
    out = torch.full_like(inputs.q, float("nan"))
    plan = backend.plan(strategy, inputs.point, metadata)
    return (lambda: plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)), out


def assert_matches(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> None:
    assert not torch.isnan(out).any(), "some output tokens were never written"
    assert rel_l2(out, ref) < TOLERANCE[dtype]


def assert_both_strategies_match(inputs: Inputs, backend=FA2) -> None:
    ref = reference(inputs)
    for strategy in ("unified", "split"):
        fn, out = prepare(strategy, inputs, backend)
        fn()
        torch.cuda.synchronize()
        assert_matches(out, ref, inputs.point.dtype)


@pytest.mark.parametrize("num_tokens", [100, 1000])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", KERNELS)
def test_unified_and_split_match_the_reference(backend, kind, shape, num_tokens):
    assert_both_strategies_match(make_inputs(point(kind, num_tokens, shape), "cuda"), backend)


def test_fp16_matches_the_reference():
    assert_both_strategies_match(make_inputs(point("mixed", 100, dtype="fp16"), "cuda"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("backend", KERNELS)
def test_graph_replay_agrees_with_eager(backend, kind, strategy):
    inputs = make_inputs(point(kind, 100), "cuda")
    ref = reference(inputs)
    fn, out = prepare(strategy, inputs, backend)
    fn()
    torch.cuda.synchronize()
    eager = out.clone()

    runner = TimedKernel(fn, "graph", torch.device("cuda"))
    out.fill_(float("nan"))
    runner()
    torch.cuda.synchronize()

    assert_matches(eager, ref, "bfloat16")
    assert_matches(out, ref, "bfloat16")
    assert rel_l2(out, eager) < GRAPH_VS_EAGER


def test_point_runner_measures_every_row_and_records_the_library():
    plan = SweepPlan(points=(), backends=("vllm-fa2", "reference"), strategies=("unified", "split"),
                     modes=("eager", "graph"), timing=TimingConfig(warmup_ms=1.0, budget_ms=20.0, min_samples=3),
                     device="cuda")
    rows = list(PointRunner(plan, point("mixed", 100), torch.cuda.get_device_name()).rows())

    fa2 = {(r["strategy"], r["mode"]): r for r in rows if r["backend"] == "vllm-fa2"}
    assert sorted(fa2) == [("split", "eager"), ("split", "graph"), ("unified", "eager"), ("unified", "graph")]
    assert all(r["verdict"] == "pass" for r in fa2.values()), [r.get("reason") for r in fa2.values()]
    assert all(r["library"] != "none" and r["median_ms"] > 0 and r["device"] == "cuda" for r in fa2.values())
    assert [fa2[(s, "eager")]["kernel_launches"] for s in ("unified", "split")] == [1, 2]  # mixed: two launches
    assert all(r["host_plan_us"] > 0 and r["host_metadata_us"] > 0 for r in fa2.values())
    ref_graph = [r for r in rows if r["backend"] == "reference" and r["mode"] == "graph"]
    assert {r["verdict"] for r in ref_graph} == {"skipped"}  # it cannot be captured; said, not hidden


def test_graph_samples_hold_enough_calls_to_hide_the_graph_launch():
    """inner comes from a replay's device time, not the (launch-bound) eager host estimate."""
    from attnbench.kernels.timing import estimate_call_ms, make_timed_kernel

    inputs = make_inputs(point("prefill", 100), "cuda")
    fn, _ = prepare("unified", inputs)
    device = torch.device("cuda")
    runner = make_timed_kernel(fn, "graph", device, TimingConfig(), estimate_call_ms(fn, device))
    assert runner.inner >= 20  # a ~6 µs kernel: ~100 calls make a 0.5 ms sample
