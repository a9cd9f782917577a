"""Plans of one backend stay apart: everything a plan holds lives in the Plan, never on the backend.

The registry hands every caller one instance per backend, so an engine's decode-graph buckets, a
sweep's interleaved strategies and a fused primitive that plans split's parts inside its own plan
all make several plans on one instance before (or while) another runs. For every backend that
runs here (the reference; flex, eagerly on the CPU; FA2, FA3 and FlashInfer through the fake ops
and the fake module), two plans of different batches, a decode batch and a mixed one, are made
before either runs: both outputs must match the float64 oracle (conftest.naive_attention), and each
plan's details must be what the same plan records when made alone. The second test makes one plan
while the other is being made (from inside its last primitive), which a backend keeping the plan
it is making on its instance cannot survive.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import rel_l2
from fake_flashinfer import FakeFlashInfer
from test_backend_contract import Stream, expected, fake_fa2_ops, fake_fa3_fwd, fake_fa3_scheduler, no_host_reads

from attnbench.kernels.backends.base import Backend
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend, raw_ops_library
from attnbench.kernels.backends.vllm_fa3 import VllmFA3Backend
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import SweepPoint

NAMES = ["reference", "flex", "vllm-fa2", "vllm-fa3", "flashinfer", "flashinfer-ba"]


def make_backend(name: str, stream: Stream) -> Backend:
    """The registry's shared instance where the backend runs here as it is; else one on a fake library."""
    makers = {"vllm-fa2": lambda: VllmFA2Backend(raw_ops_library(fake_fa2_ops(stream), "fake", "0")),
              "vllm-fa3": lambda: VllmFA3Backend(fake_fa3_fwd(stream), fake_fa3_scheduler),
              "flashinfer": lambda: FlashInferBackend(FakeFlashInfer(), workspace_bytes=1024),
              "flashinfer-ba": lambda: FlashInferBABackend(FakeFlashInfer(), workspace_bytes=1024)}
    return makers[name]() if name in makers else REGISTRY[name]


def batch_inputs(kind: str, num_tokens: int, seed: int):
    point = SweepPoint(kind=kind, num_tokens=num_tokens, num_heads=4, num_kv_heads=2, head_dim=64, dtype="bf16",
                       context="uniform:1:40", prefill_len=16, seed=seed)
    return make_inputs(point, "cpu")


DECODE, MIXED = batch_inputs("decode", 6, 11), batch_inputs("mixed", 24, 12)


def plan_of(backend: Backend, strategy: str, inputs):
    return backend.plan(strategy, inputs.point, build_metadata(strategy, inputs.batch, inputs.block_table))


def run_checked(plan, inputs, stream: Stream) -> None:
    out = torch.full_like(inputs.q, float("nan"))
    # flex on the CPU runs torch's eager flex_attention, which dynamo traces on a new shape and may
    # read host values while tracing; its compiled CUDA path is guarded in test_flex's GPU class
    with contextlib.nullcontext() if plan.backend == "flex" else no_host_reads():
        plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)
    stream.synchronize()  # the fake ops' queued work; nothing for the others
    assert not torch.isnan(out).any(), "some output tokens were never written"
    assert rel_l2(out, expected(inputs)) < 1e-2


def cases() -> list[tuple[str, str]]:
    return [(name, strategy) for name in NAMES for strategy in REGISTRY[name].strategies]


def alone(name: str, strategy: str, inputs) -> dict:
    """The details of `inputs`' plan made by itself, on an instance that made nothing else."""
    stream = Stream()
    return dict(plan_of(make_backend(name, stream), strategy, inputs).details)


@pytest.mark.parametrize("name,strategy", cases())
def test_two_plans_made_before_either_runs_are_both_right_and_keep_their_own_details(name, strategy):
    stream = Stream()
    backend = make_backend(name, stream)
    decode, mixed = plan_of(backend, strategy, DECODE), plan_of(backend, strategy, MIXED)
    run_checked(mixed, MIXED, stream)  # the later plan first: the earlier one must not have changed
    run_checked(decode, DECODE, stream)
    assert decode.details == alone(name, strategy, DECODE)
    assert mixed.details == alone(name, strategy, MIXED)


@pytest.mark.parametrize("name,strategy", cases())
def test_a_plan_made_while_another_is_being_made_leaves_that_one_whole(name, strategy, monkeypatch):
    """The decode batch's plan is made from inside the mixed batch's last primitive (split: after its
    decode part was planned), as a fused primitive planning split's parts through plan() does."""
    stream = Stream()
    backend = make_backend(name, stream)
    last = "plan_fused" if strategy == "fused" else "plan_varlen"
    primitive, inner = getattr(backend, last), {}

    def planning_another(*args):
        if "decode" not in inner:  # once: the inner plan's own primitives run as they are
            inner["decode"] = None
            inner["decode"] = plan_of(backend, strategy, DECODE)
        return primitive(*args)

    monkeypatch.setattr(backend, last, planning_another)
    mixed = plan_of(backend, strategy, MIXED)
    monkeypatch.undo()
    decode = inner["decode"]
    run_checked(decode, DECODE, stream)
    run_checked(mixed, MIXED, stream)
    assert mixed.details == alone(name, strategy, MIXED)
    assert decode.details == alone(name, strategy, DECODE)
