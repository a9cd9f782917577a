"""A test-only planted slowdown for `attnbench ab` on the CPU: the reference backend under its own
name, each launch followed by a busy-wait of ATTNBENCH_SLOW_MS milliseconds (a fixed time, not a
share of the launch's: on a shared CPU the launch's own time is mostly noise).

Only a side given ATTNBENCH_EXTRA_BACKENDS="slow_backend:SlowReference" (with tests/ on its
PYTHONPATH) loads it, and it replaces `reference` there: the other side's rows keep their name, so
ab matches the two. benchmarks/planted_backend.py is the GPU version (device time, not host time).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from attnbench.kernels.backends.reference import ReferenceBackend


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
