"""Test-only backends that misbehave on purpose, at one token count: hang, kill their process,
run out of memory. They join the registry through ATTNBENCH_EXTRA_BACKENDS (so worker processes
see them too) and compute like the reference everywhere else."""

from __future__ import annotations

import os
import signal
import time

import torch

from attnbench.kernels.backends.reference import ReferenceBackend

TRIGGER_TOKENS = 8  # the point whose launch misbehaves


class _Misbehaving(ReferenceBackend):
    oracle = False

    def misbehave(self) -> None:
        raise NotImplementedError

    def _wrap(self, point, launch):
        if point.num_tokens != TRIGGER_TOKENS:
            return launch

        def bad(q, k_cache, v_cache, out):
            self.misbehave()
        return bad

    def plan_varlen(self, point, md):
        return self._wrap(point, super().plan_varlen(point, md))

    def plan_kvcache(self, point, md):
        return self._wrap(point, super().plan_kvcache(point, md))


class HangingBackend(_Misbehaving):
    name = "test-hang"
    description = "test only: a launch that never returns at 8 tokens"

    def misbehave(self) -> None:
        time.sleep(3600)


class CrashingBackend(_Misbehaving):
    name = "test-crash"
    description = "test only: a launch that kills its process at 8 tokens"

    def misbehave(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class OOMBackend(_Misbehaving):
    name = "test-oom"
    description = "test only: a launch that runs out of memory at 8 tokens"

    def misbehave(self) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 TiB")


class FaultingBackend(_Misbehaving):
    """On a GPU an out-of-range gather is a device-side assert: the CUDA context is dead after it,
    as after an illegal memory access. On the CPU the same gather raises IndexError."""

    name = "test-fault"
    description = "test only: a launch that reads far out of bounds at 8 tokens"

    def _wrap(self, point, launch):
        if point.num_tokens != TRIGGER_TOKENS:
            return launch

        def bad(q, k_cache, v_cache, out):
            out.view(-1)[:1] = q.view(-1)[torch.full((1,), 2**40, dtype=torch.long, device=q.device)]
            if q.is_cuda:
                torch.cuda.synchronize()
        return bad


ALL = ",".join(f"fake_backends:{name}" for name in ("HangingBackend", "CrashingBackend", "OOMBackend", "FaultingBackend"))
