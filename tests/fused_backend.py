"""A test-only backend with a fused strategy, so the third strategy's plumbing (planning, sweep
rows, tables, ratios, plots, e2e pairs) is tested on the CPU. It is the reference backend whose
fused launch runs the decode part and the prefill part one after the other inside one launch:
the contract (one launch, the whole batch, decode tokens first), not POD's concurrency."""

from __future__ import annotations

from attnbench.kernels.backends.base import PlanContext
from attnbench.kernels.backends.launch import Launch
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.metadata import SplitMetadata


class FusedReference(ReferenceBackend):
    name = "fused-ref"
    description = "test only: the reference, with split's two parts in one fused launch"
    strategies = ("unified", "split", "fused")
    oracle = False

    def plan_fused(self, ctx: PlanContext, md: SplitMetadata) -> Launch:
        parts = ReferenceBackend.plan(self, "split", ctx.point, md).launches  # split's two launches, as one

        def launch(q, k_cache, v_cache, out):
            for part in parts:
                part(q, k_cache, v_cache, out)
        return launch
