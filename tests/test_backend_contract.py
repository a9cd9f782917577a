"""The backend contract on the CPU: plan once, then `Plan.run` only launches kernels.

The vllm-fa2 and vllm-fa3 backends are driven through fake ops that behave like a GPU stream:
a call only enqueues its work (with exactly the arguments the backend passed, by schema name),
and `synchronize()` executes the queue with an independent float64 oracle. `Plan.run` runs
under `no_host_reads()`, which makes every Python-level device->host read (`.item()`,
`.tolist()`, `int(t)`, `bool(t)`, ...) and every synchronize raise, as CUDA-graph capture would
fail on them. A wrong view, offset, length, table or argument name gives a wrong output here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

import pytest
import torch
from conftest import naive_attention, rel_l2

from attnbench.kernels.backends.base import Backend, Plan
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend, raw_ops_library
from attnbench.kernels.backends.vllm_fa3 import VllmFA3Backend
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import KINDS, STRATEGIES, SweepPoint

HOST_READS = ("item", "tolist", "numpy", "cpu", "__int__", "__float__", "__bool__", "__index__")


@contextlib.contextmanager
def no_host_reads():
    """Every Python-level read of a tensor's values, and every synchronize, raises inside."""
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def refuse(name):
        def method(*args, **kwargs):
            raise AssertionError(f"host read in Plan.run: Tensor.{name}")
        return method

    try:
        for name in HOST_READS:
            setattr(torch.Tensor, name, refuse(name))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.cuda, "synchronize", refuse("synchronize (torch.cuda)"))
            yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


# --- the fake device --------------------------------------------------------------------------

class Stream:
    """Launches enqueue; synchronize() runs them in order, as a device would."""

    def __init__(self):
        self.queue: list = []
        self.launches = 0

    def launch(self, work) -> None:
        self.queue.append(work)
        self.launches += 1

    def synchronize(self) -> None:
        while self.queue:
            self.queue.pop(0)()


def paged_oracle(q, k_cache, v_cache, query_lens, kv_lens, block_table, causal, scale) -> torch.Tensor:
    """float64 attention of q's sequences over their pages, gathered with a plain loop."""
    block_size = k_cache.shape[1]
    keys, values = [], []
    for seq, kv_len in enumerate(kv_lens):
        rows = [int(block_table[seq, p // block_size]) * block_size + p % block_size for p in range(kv_len)]
        keys.append(k_cache.reshape(-1, *k_cache.shape[2:])[rows])
        values.append(v_cache.reshape(-1, *v_cache.shape[2:])[rows])
    return naive_attention(q, keys, values, query_lens, causal, scale)


def _lens_from_cu(cu_seqlens_q) -> list[int]:
    cu = cu_seqlens_q.tolist()
    return [b - a for a, b in zip(cu, cu[1:])]


class FakeOp:
    """A torch op stand-in: a schema of argument names, a call that enqueues `compute(kwargs)`."""

    def __init__(self, stream: Stream, args: list, compute):
        self.stream, self.compute = stream, compute
        self.default = types.SimpleNamespace(_schema=types.SimpleNamespace(arguments=args))

    def __call__(self, **kwargs):
        names = {a.name for a in self.default._schema.arguments}
        unknown = set(kwargs) - names
        assert not unknown, f"arguments not in the op's schema: {unknown}"
        self.stream.launch(lambda: self.compute(kwargs))


class Arg:
    def __init__(self, name: str, optional: bool = False, default=None, has_default: bool = False):
        self.name, self.default_value, self._has_default = name, default, has_default
        self.type = torch.OptionalType(torch.TensorType.get()) if optional else torch.TensorType.get()

    def has_default_value(self) -> bool:
        return self._has_default


def _write(out, q_lens, kv_lens, table, q, k, v, causal, scale):
    out.copy_(paged_oracle(q, k, v, q_lens, kv_lens, table, causal, scale).to(out.dtype))


def fake_fa2_ops(stream: Stream):
    """`_vllm_fa2_C.varlen_fwd` / `fwd_kvcache` with their schema names (vLLM 0.24.0)."""
    varlen_names = ["q", "k", "v", "out", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "leftpad_k", "block_table",
                    "alibi_slopes", "max_seqlen_q", "max_seqlen_k", "p_dropout", "softmax_scale", "zero_tensors",
                    "is_causal", "window_size_left", "window_size_right", "softcap", "return_softmax", "num_splits",
                    "gen"]
    kvcache_names = ["q", "kcache", "vcache", "k", "v", "seqlens_k", "rotary_cos", "rotary_sin", "cache_batch_idx",
                     "leftpad_k", "block_table", "alibi_slopes", "out", "softmax_scale", "is_causal",
                     "window_size_left", "window_size_right", "softcap", "is_rotary_interleaved", "num_splits"]

    def varlen(kw):
        q_lens, kv_lens = _lens_from_cu(kw["cu_seqlens_q"]), kw["seqused_k"].tolist()
        assert kw["max_seqlen_q"] >= max(q_lens) and kw["max_seqlen_k"] >= max(kv_lens)
        _write(kw["out"], q_lens, kv_lens, kw["block_table"], kw["q"], kw["k"], kw["v"], kw["is_causal"],
               kw["softmax_scale"])

    def kvcache(kw):
        b, s, h, d = kw["q"].shape
        ref = paged_oracle(kw["q"].reshape(-1, h, d), kw["kcache"], kw["vcache"], [s] * b, kw["seqlens_k"].tolist(),
                           kw["block_table"], kw["is_causal"], kw["softmax_scale"])
        kw["out"].copy_(ref.view(b, s, h, d).to(kw["out"].dtype))

    return types.SimpleNamespace(varlen_fwd=FakeOp(stream, [Arg(n) for n in varlen_names], varlen),
                                 fwd_kvcache=FakeOp(stream, [Arg(n) for n in kvcache_names], kvcache))


FA3_SCHEMA = [  # (name, optional): _vllm_fa3_C.fwd's arguments, in order (vLLM 0.24.0)
    ("q", False), ("k", False), ("v", False), ("k_new", True), ("v_new", True), ("q_v", True), ("out", True),
    ("cu_seqlens_q", True), ("cu_seqlens_k", True), ("cu_seqlens_k_new", True), ("seqused_q", True),
    ("seqused_k", True), ("max_seqlen_q", True), ("max_seqlen_k", True), ("page_table", True),
    ("kv_batch_idx", True), ("leftpad_k", True), ("rotary_cos", True), ("rotary_sin", True),
    ("seqlens_rotary", True), ("q_descale", True), ("k_descale", True), ("v_descale", True),
    ("softmax_scale", True), ("is_causal", False), ("window_size_left", False), ("window_size_right", False),
    ("softcap", False), ("is_rotary_interleaved", False), ("scheduler_metadata", True), ("num_splits", False),
    ("pack_gqa", True), ("sm_margin", False), ("s_aux", True), ("cp_world_size", False), ("cp_rank", False),
    ("cp_tot_seqused_k", True)]


def fake_fa3_fwd(stream: Stream) -> FakeOp:
    def fwd(kw):
        assert set(kw) == {name for name, _ in FA3_SCHEMA}, "every argument is passed"
        q, seqused_k = kw["q"], kw["seqused_k"]
        assert kw["scheduler_metadata"] is not None, "planned ahead, as vLLM does"
        if q.dim() == 4:  # the batched (kvcache) form
            assert kw["cu_seqlens_q"] is None and q.shape[1] == kw["max_seqlen_q"]
            b, s, h, d = q.shape
            ref = paged_oracle(q.reshape(-1, h, d), kw["k"], kw["v"], [s] * b, seqused_k.tolist(), kw["page_table"],
                               kw["is_causal"], kw["softmax_scale"])
            kw["out"].copy_(ref.view(b, s, h, d).to(kw["out"].dtype))
            assert kw["max_seqlen_k"] >= int(seqused_k.max())
            return
        q_lens = _lens_from_cu(kw["cu_seqlens_q"])
        assert kw["max_seqlen_q"] >= max(q_lens) and kw["max_seqlen_k"] >= int(seqused_k.max())
        _write(kw["out"], q_lens, seqused_k.tolist(), kw["page_table"], q, kw["k"], kw["v"], kw["is_causal"],
               kw["softmax_scale"])

    return FakeOp(stream, [Arg(name, optional) for name, optional in FA3_SCHEMA], fwd)


def fake_fa3_scheduler(*, batch_size, max_seqlen_q, headdim, cache_seqlens, causal, num_splits, **_) -> torch.Tensor:
    """get_scheduler_metadata's tensor in flash_api.cpp's layout (vectors of round_up(b, 4) ints:
    prepare_seqlen_q, num_splits_dynamic when the cap is over one, num_nheads_in_l2 when FA3 runs it
    causal; then a semaphore), each sequence split once per 8 keys up to the cap."""
    rounded = -(-batch_size // 4) * 4
    swizzle = causal and not (max_seqlen_q == 1 and (headdim <= 64 or headdim > 128))
    dynamic = num_splits > 1
    metadata = torch.zeros(rounded * (1 + dynamic + swizzle) + 1, dtype=torch.int32)
    if dynamic:
        metadata[rounded:rounded + batch_size] = ((cache_seqlens.cpu() + 7) // 8).clamp(1, num_splits)
    return metadata.to(cache_seqlens.device)


def backends(stream: Stream) -> dict[str, Backend]:
    return {"vllm-fa2": VllmFA2Backend(raw_ops_library(fake_fa2_ops(stream), "fake", "0")),
            "vllm-fa3": VllmFA3Backend(fake_fa3_fwd(stream), fake_fa3_scheduler),
            "reference": ReferenceBackend()}


def point(kind: str) -> SweepPoint:
    return SweepPoint(kind=kind, num_tokens=24, num_heads=4, num_kv_heads=2, head_dim=16, dtype="bf16",
                      context="uniform:1:40", prefill_len=16, spec_k=3, decode_share=0.5)


def expected(inputs) -> torch.Tensor:
    b = inputs.batch
    return paged_oracle(inputs.q, inputs.k_cache, inputs.v_cache, list(b.query_lens), list(b.kv_lens),
                        inputs.block_table, inputs.point.causal, inputs.point.softmax_scale)


# --- the contract ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("name", ["vllm-fa2", "vllm-fa3", "reference"])
def test_run_only_launches_and_every_plan_matches_the_oracle(name, strategy, kind):
    stream = Stream()
    backend = backends(stream)[name]
    inputs = make_inputs(point(kind), "cpu")
    metadata = build_metadata(strategy, inputs.batch, inputs.block_table)
    plan = backend.plan(strategy, inputs.point, metadata)
    assert stream.launches == 0, "planning launched a kernel"
    out = torch.full_like(inputs.q, float("nan"))
    with no_host_reads():
        plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)
    stream.synchronize()
    if name != "reference":  # the reference computes in run; the fakes enqueue one call per launch
        want = 1 if strategy == "unified" else sum(p is not None for p in (metadata.decode, metadata.prefill))
        assert stream.launches == len(plan.launches) == want
    assert not torch.isnan(out).any(), "some output tokens were never written"
    assert rel_l2(out, expected(inputs)) < 1e-2


@pytest.mark.parametrize("name", ["vllm-fa2", "vllm-fa3", "reference"])
def test_one_plan_serves_many_calls_with_new_q_and_caches(name):
    """An engine step plans once and every layer runs the plan on its own q, cache and out."""
    stream = Stream()
    backend = backends(stream)[name]
    a = make_inputs(point("mixed"), "cpu")
    # same batch and table, other values: what one layer after another sees
    b = dataclasses.replace(a, q=torch.randn_like(a.q), k_cache=torch.randn_like(a.k_cache),
                            v_cache=torch.randn_like(a.v_cache))
    plan = backend.plan("split", a.point, build_metadata("split", a.batch, a.block_table))
    outs = [torch.full_like(x.q, float("nan")) for x in (a, b)]
    with no_host_reads():
        for x, out in zip((a, b), outs):
            plan.run(x.q, x.k_cache, x.v_cache, out)
    stream.synchronize()
    for x, out in zip((a, b), outs):
        assert rel_l2(out, expected(x)) < 1e-2


def test_the_guard_catches_a_plan_that_reads_lengths_at_run_time():
    """The bug this contract exists for: FA3 split read cache_seqlens.max() back on every call,
    which fails inside CUDA-graph capture. A launch doing that must fail here."""
    class ReadsBack(VllmFA3Backend):
        def plan_kvcache(self, ctx, md):
            def launch(q4, k_cache, v_cache, out4):
                int(md.cache_seqlens.max())
            return launch

    inputs = make_inputs(point("decode"), "cpu")
    plan = ReadsBack(fake_fa3_fwd(Stream())).plan("split", inputs.point,
                                                  build_metadata("split", inputs.batch, inputs.block_table))
    with no_host_reads(), pytest.raises(AssertionError, match="host read in Plan.run"):
        plan.run(inputs.q, inputs.k_cache, inputs.v_cache, torch.empty_like(inputs.q))


def test_capabilities_are_declared_on_every_backend():
    for backend in REGISTRY.values():
        assert isinstance(backend, Backend)
        assert isinstance(backend.graph_safe, bool) and isinstance(backend.oracle, bool)
        assert set(backend.strategies) <= set(STRATEGIES) and backend.strategies
    assert [b.name for b in REGISTRY.values() if b.oracle] == ["reference"]
    assert REGISTRY["vllm-fa2"].graph_safe and REGISTRY["vllm-fa3"].graph_safe
    assert not REGISTRY["reference"].graph_safe


def test_a_strategy_a_backend_does_not_declare_is_refused():
    class UnifiedOnly(ReferenceBackend):
        strategies = ("unified",)

    p = point("decode")
    assert "no split strategy" in UnifiedOnly().supports(p, "split", torch.device("cpu"))
    assert UnifiedOnly().supports(p, "unified", torch.device("cpu")) is None
    with pytest.raises(ValueError, match="no split strategy"):
        inputs = make_inputs(p, "cpu")
        UnifiedOnly().plan("split", p, build_metadata("split", inputs.batch, inputs.block_table))


def test_a_plan_is_data_that_names_what_it_runs():
    inputs = make_inputs(point("mixed"), "cpu")
    plan = ReferenceBackend().plan("split", inputs.point, build_metadata("split", inputs.batch, inputs.block_table))
    assert isinstance(plan, Plan) and (plan.backend, plan.strategy, len(plan.launches)) == ("reference", "split", 2)
