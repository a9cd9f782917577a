"""`flashinfer-ba`: FlashInfer's persistent BatchAttention as a second unified variant.

BatchAttention (flashinfer/attention.py in 0.6.6, flashinfer/attention/_core.py in 0.7.x) runs
prefill and decode rows of one batch in a single persistent kernel: its planner splits every
request's KV into work items and spreads them over one CTA pair per SM (scheduler.cuh
TwoStageHolisticPlan), where BatchPrefill schedules query tiles. Everything else (paged index
arrays, workspaces, wrapper reuse, re-planning) is the `flashinfer` backend's.

Its limit: with 0.6.6 it returned wrong output (far from the float32 reference) once the paged K
cache spanned more than 2^32 elements (pages x page size x KV heads x head dim), and right output
below, whatever the mix of decode and prefill rows: its kernel forms a page's element offset as a
32-bit product (the `ba-int32` bug, flashinfer_bugs.py; 0.7.0 to 0.7.4 have the same source). On a
release carrying it such points are skipped with that reason, rather than measured and failed; on
one that fixes it they run. The bisection that found the limit: docs/kernels/flashinfer.md.
"""

from __future__ import annotations

import torch

from attnbench.kernels.backends.base import PlanContext
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_bugs import BUGS
from attnbench.kernels.backends.flashinfer_common import library_version, paged_kv_arrays, plan_info
from attnbench.kernels.backends.launch import Part
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import VarlenMetadata


class FlashInferBABackend(FlashInferBackend):
    """BatchAttention (flashinfer/attention.py): one persistent kernel for prefill and decode rows.

    It owns a 384 MB float workspace, too small for 32 KV heads x 128 (its planner reserves
    4 x 2 x SMs x 144 x kv_heads x (2 x head_dim + 4) bytes, scheduler.cuh TwoStageHolisticPlan;
    docs/kernels/flashinfer.md has the size on an H200), so the backend's shared, growing workspace
    replaces it. It keeps a reference to kv_indices instead of copying them: they live in a buffer
    the plan owns. Its grid is one CTA pair per SM whatever the batch, so it can be re-planned under
    a captured graph."""

    name = "flashinfer-ba"
    description = "FlashInfer BatchAttention: one persistent kernel over the whole batch (unified)"
    strategies = ("unified",)

    @property
    def max_cache_elements(self) -> int | None:  # type: ignore[override]  # by the installed version
        return 2**32 if BUGS["ba-int32"].refusal(self.installed_version()) else None

    @property
    def cache_limit_why(self) -> str:  # type: ignore[override]
        return BUGS["ba-int32"].refusal(self.installed_version()) or ""

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason is None and not hasattr(self.lib(), "BatchAttention"):
            return f"flashinfer {library_version(self.lib())} has no BatchAttention"
        return reason

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Part:
        """One BatchAttention over the whole batch (unified, its only strategy), re-plannable in place."""
        point = ctx.point
        fi, device, dtype = self.lib(), md.seqused_k.device, torch_dtype(point.dtype)
        kv_indices = torch.zeros(max(md.block_table.numel(), 1), dtype=torch.int32, device=device)
        lse = torch.empty((md.num_tokens, point.num_heads), dtype=torch.float32, device=device)

        def make(workspace):
            wrapper = fi.BatchAttention("NHD", device=str(device))
            wrapper.float_workspace_buffer = workspace
            return wrapper

        def plan(wrapper, md: VarlenMetadata) -> None:
            indptr, indices, _ = paged_kv_arrays(md.seqused_k, md.block_table, point.block_size)
            pages = int(indices.max()) + 1 if indices.numel() else 0  # the cache's extent this batch reaches
            self.require_cache(pages * point.block_size * point.num_kv_heads * point.head_dim)  # e2e: the engine's cache
            kv_indices[:indices.numel()].copy_(indices)
            wrapper.plan(md.cu_seqlens_q.to("cpu"), indptr, kv_indices, md.seqused_k.to("cpu", torch.int32),
                         point.num_heads, point.num_kv_heads, point.head_dim, point.head_dim, point.block_size,
                         causal=point.causal, sm_scale=point.softmax_scale, q_data_type=dtype, kv_data_type=dtype)

        wrapper, release = self.planned("ba", (), device, make, lambda w: plan(w, md))

        def launch(q, k_cache, v_cache, out):
            wrapper.run(q, (k_cache, v_cache), out=out, lse=lse)

        info = plan_info(wrapper) or []  # HolisticPlanInfo starts with num_blks_x, num_blks_y (scheduler.cuh)
        details = {"fi_ba_ctas": info[0] * info[1]} if len(info) >= 2 else {}
        decided = {"ctas": details.get("fi_ba_ctas")}
        return Part(launch, details, replan=lambda md: plan(wrapper, md), release=release, decide=lambda: decided)
