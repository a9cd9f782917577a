"""Test-only candidates for `attnbench ab` on the CPU, each under the reference backend's own name:
SlowReference busy-waits ATTNBENCH_SLOW_MS milliseconds after each launch (a fixed time, not a
share of the launch's: on a shared CPU the launch's own time is mostly noise); CrashingReference
kills its process in a launch over 8 query tokens (tests/fake_backends.py's CrashingBackend).

Only a side given ATTNBENCH_EXTRA_BACKENDS="ab_backends:SlowReference" (with tests/ on its
PYTHONPATH) loads one, and it replaces `reference` there: the other side's rows keep their name,
so ab matches the two. benchmarks/planted_backend.py is the GPU version (device time, not host time).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from attnbench.kernels.backends.reference import ReferenceBackend
from fake_backends import CrashingBackend


class SlowReference(ReferenceBackend):
    description = "test only: the reference, each launch ATTNBENCH_SLOW_MS longer (busy-wait)"

    def plan(self, strategy, point, metadata):
        plan = super().plan(strategy, point, metadata)
        extra_ms = float(os.environ["ATTNBENCH_SLOW_MS"])
        return replace(plan, launches=tuple(self._slower(launch, extra_ms) for launch in plan.launches),
                       details={**plan.details, "slow_ms": extra_ms})

    @staticmethod
    def _slower(launch, extra_ms: float):
        def slower(q, k_cache, v_cache, out):
            result = launch(q, k_cache, v_cache, out)
            end = time.perf_counter() + extra_ms / 1e3
            while time.perf_counter() < end:
                pass
            return result
        return slower


class CrashingReference(CrashingBackend):
    name = "reference"
    oracle = True  # as the reference it replaces
