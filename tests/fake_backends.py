"""Test-only backends that misbehave on purpose in a launch over 8 query tokens: hang, kill their
process, run out of memory, fault, or kill the CUDA context. In a kernel sweep that is the
`--tokens 8` point; in an e2e run, the decode steps at batch size 8 (keep input_len x batch size
!= 8 elsewhere). They join the registry through ATTNBENCH_EXTRA_BACKENDS (so worker processes
see them too) and compute like the reference everywhere else. A test module that names this
file in `pytest_plugins` gets the `misbehaving` fixture, which adds them for one test."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from attnbench.kernels.backends.reference import ReferenceBackend

TRIGGER_TOKENS = 8  # the launch that misbehaves: over this many query tokens


def query_tokens(q: torch.Tensor) -> int:
    """Tokens in a launch's q: [tokens, heads, dim], or [seqs, query_len, heads, dim] batched."""
    return q.shape[:-2].numel()


class _Misbehaving(ReferenceBackend):
    oracle = False

    def misbehave(self, q: torch.Tensor) -> None:
        raise NotImplementedError

    def _wrap(self, launch):
        def maybe_bad(q, k_cache, v_cache, out):
            if query_tokens(q) == TRIGGER_TOKENS:
                self.misbehave(q)
            return launch(q, k_cache, v_cache, out)
        return maybe_bad

    def plan_varlen(self, ctx, md):
        return self._wrap(super().plan_varlen(ctx, md))

    def plan_kvcache(self, ctx, md):
        return self._wrap(super().plan_kvcache(ctx, md))


class HangingBackend(_Misbehaving):
    name = "test-hang"
    description = "test only: a launch that never returns at 8 tokens"

    def misbehave(self, q: torch.Tensor) -> None:
        time.sleep(3600)


class CrashingBackend(_Misbehaving):
    name = "test-crash"
    description = "test only: a launch that kills its process at 8 tokens"

    def misbehave(self, q: torch.Tensor) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class OOMBackend(_Misbehaving):
    name = "test-oom"
    description = "test only: a launch that runs out of memory at 8 tokens"

    def misbehave(self, q: torch.Tensor) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 TiB")


class FaultingBackend(_Misbehaving):
    """On a GPU an out-of-range gather is a device-side assert: the CUDA context is dead after it,
    as after an illegal memory access. On the CPU the same gather raises IndexError."""

    name = "test-fault"
    description = "test only: a launch that reads far out of bounds at 8 tokens"

    def misbehave(self, q: torch.Tensor) -> None:
        q.reshape(-1)[torch.full((1,), 2**40, dtype=torch.long, device=q.device)].sum()
        if q.is_cuda:
            torch.cuda.synchronize()


class DeadContextBackend(_Misbehaving):
    """What a worker sees after a kernel fault on a GPU, on any device: the launch raises the error
    a dead CUDA context raises, and from then on the worker's health check says the context is
    dead, as torch.cuda.synchronize() would. Test seam: it replaces cuda_healthy in
    attnbench.workers.pool in the process that runs it, so use it with --isolate only (a worker
    process, gone after the point)."""

    name = "test-dead-context"
    description = "test only: a launch that kills the CUDA context at 8 tokens (simulated on the CPU)"

    def misbehave(self, q: torch.Tensor) -> None:
        from attnbench.workers import pool  # not at import: the registry imports this module

        pool.cuda_healthy = lambda: False
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class UnifiedOnlyBackend(ReferenceBackend):
    """A kernel backend with the unified strategy only, as FlashInfer's BatchAttention
    (flashinfer-ba): computes like the reference, misbehaves nowhere."""

    name = "test-unified-only"
    description = "test only: a backend without a split strategy"
    oracle = False
    strategies = ("unified",)


ALL = ",".join(f"fake_backends:{name}" for name in ("HangingBackend", "CrashingBackend", "OOMBackend", "FaultingBackend",
                                                    "DeadContextBackend"))


def pid_or_death():
    """A worker pool's setup for tests of the pool itself: a task "die" kills the worker, any
    other task gets the worker's pid back."""
    def handle(task, send):
        if task == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        send(os.getpid())
    return handle


@pytest.fixture
def misbehaving(monkeypatch):
    """These backends in the registry, of this process and of the workers it starts, for one test."""
    from attnbench.kernels.backends import registry
    from attnbench.workers import pool

    monkeypatch.setenv("ATTNBENCH_EXTRA_BACKENDS", ALL)  # for the workers
    monkeypatch.setattr(pool, "cuda_healthy", pool.cuda_healthy)  # undone, should one run here
    before = dict(registry.REGISTRY)
    registry._load_extra_backends(ALL)  # for this process
    assert not registry.EXTRA_BACKEND_ERRORS
    yield
    registry.REGISTRY.clear()
    registry.REGISTRY.update(before)
