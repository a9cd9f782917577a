"""FlashInfer's paged attention: `flashinfer` (unified, split, fused) and `flashinfer-ba` (unified).

The strategies, as vLLM's FLASHINFER backend and POD-Attention use FlashInfer's wrappers:

- unified: BatchPrefillWithPagedKVCacheWrapper over the whole batch (decode rows are 1-token
  queries, spec-decode rows k-token ones). backend="auto": FlashInfer picks fa3 on Hopper
  (utils.determine_attention_backend), fa2 elsewhere; the row records which (fi_prefill_backend).
- split: BatchDecodeWithPagedKVCacheWrapper for the decode rows + the prefill wrapper for the
  rest. Decode uses tensor cores (FlashInfer's fa2 prefill kernel with query length 1), as vLLM's
  v1 backend always does ("at least as good as cuda cores ... in latest gpus"; vLLM v0 and SGLang
  chose them by GQA group size): fi_decode_tensor_cores. BatchDecode takes one query token per
  request, so spec-decode rows go through the prefill wrapper, as in vLLM (fi_decode_wrapper).
- fused: PODWithPagedKVCacheWrapper, one prefill request beside single-token decodes
  (flashinfer_pod.py). A batch with only one of the parts runs that part's wrapper, as split
  does (fi_fused says so). A step with more prefill requests (chunked prefill) runs the largest
  in POD and the others through BatchPrefill (fi_pod_extra_prefills); a kernel-sweep point with
  more is skipped with the reason (supports).
- flashinfer-ba (flashinfer_ba.py): BatchAttention, one persistent kernel for the whole batch.

Each `plan` reads the metadata back to the host, builds FlashInfer's paged index arrays from the
block table and KV lengths, and calls the wrappers' own `plan()`; `Plan.run` only launches. The
strategy plumbing is base.Backend.plan's, as for every backend: each primitive returns a Part
holding one planned wrapper's launch, its choices (the row's fi_* details), its in-place re-plan
(Plan.refresh), POD's one-time gather (Plan.static_kv) and its release back to the pool.
Workspaces, wrapper reuse and why live plans never share a schedule: flashinfer_common.py.

CUDA graphs. FlashInfer copies the index arrays into its own buffers at plan time and schedules
by the lengths, so a captured graph replays the batch it was planned for until the wrappers are
re-planned. A plan of a single-token decode batch (what serving engines capture) is made in
FlashInfer's CUDA-graph mode (use_cuda_graph=True: fixed index buffers, a grid padded for any
lengths), and its `Plan.refresh(metadata)` re-plans the next batch of that shape into the same
buffers, as vLLM re-plans its graph wrappers every step (the e2e engine calls it before a replay).
Other batches are planned in eager mode, since graph mode plans a padded worst case (fa2: one
query tile size for all rows, sized by the longest possible query; always split-KV), which is not
what an engine runs for a mixed batch; such a plan still replays under a graph, and its refresh
refuses. fi_graph_mode says which. Hence graph_replay = "decode-only" (base.py): a graph captured
on one batch replays another only when both are single-token decode batches, as vLLM's
FlashInferMetadataBuilder declares on Hopper (AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE). A
graph-mode prefill wrapper is first planned on its buffers' full rows, since FlashInfer fixes its
query rows at the first plan; its batch size and page room are the buffers' (graph_buffers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from attnbench.kernels.backends.base import LibraryBackend, PlanContext
from attnbench.kernels.backends.flashinfer_common import (
    FLOAT_WORKSPACE_BYTES,
    HEAD_DIMS,
    Workspace,
    WrapperPool,
    find_flashinfer,
    float_overflow,
    graph_buffers,
    library_version,
    paged_kv_arrays,
    plan_choice,
    plan_info_details,
    refresher,
    wrapper_decisions,
)
from attnbench.kernels.backends.flashinfer_bugs import BUGS
from attnbench.kernels.backends.flashinfer_pod import fused_refusal, pod_parts
from attnbench.kernels.backends.launch import Part
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata
from attnbench.kernels.workload import SweepPoint, build_batch

DECODE_TENSOR_CORES = True  # vLLM v1's choice (v1/attention/backends/flashinfer.py, _get_decode_wrapper)
PLAN_ATTEMPTS = 4  # a plan that overflows the float workspace is retried on a larger one


def single_token_decode(metadata: VarlenMetadata | SplitMetadata) -> bool:
    """Every sequence brings one query token: the batches engines capture, planned in graph mode."""
    if isinstance(metadata, VarlenMetadata):
        return metadata.max_seqlen_q == 1
    return metadata.prefill is None and metadata.decode is not None and metadata.decode.query_len == 1


class FlashInferBackend(LibraryBackend):
    name = "flashinfer"
    description = "FlashInfer: BatchPrefill (unified) / BatchDecode + BatchPrefill (split) / POD (fused)"
    strategies = ("unified", "split", "fused")
    graph_replay = "decode-only"  # base.py: graph-mode plans (re-plannable in place) are made for such batches only
    head_dims = HEAD_DIMS

    def __init__(self, library: Any = None, workspace_bytes: int = FLOAT_WORKSPACE_BYTES):
        super().__init__(library)  # tests hand in a fake module; None: import flashinfer
        # the backend's shared resources, not any plan's: each plan holds its wrappers through its parts
        self.workspace = Workspace(workspace_bytes)
        self.pool = WrapperPool()

    def find_library(self) -> tuple[Any, str | None]:
        return find_flashinfer()

    def describe(self, module: Any) -> tuple[str, str]:
        return "flashinfer", library_version(module)

    def unavailable_reason(self) -> str | None:
        if self._library is None and (reason := find_flashinfer()[1]):
            return reason  # what is missing to import it, before what the GPU lacks
        return super().unavailable_reason()

    def installed_version(self) -> str:
        """The flashinfer version that runs (the test's stand-in's), or "unknown" where none imports."""
        module = self._library if self._library is not None else find_flashinfer()[0]
        return "unknown" if module is None else library_version(module)

    def graph_refusal(self, strategy: str) -> str | None:
        if strategy != "fused":
            return super().graph_refusal(strategy)
        reason = BUGS["pod-memset"].refusal(self.installed_version())
        return f"fused: {reason}; POD is timed eagerly" if reason else None

    def supports(self, point: SweepPoint, strategy: str, device: torch.device) -> str | None:
        reason = super().supports(point, strategy, device)
        if reason is not None or strategy != "fused":
            return reason
        batch = build_batch(point)
        decode = [q for q, d in zip(batch.query_lens, batch.is_decode) if d]
        return fused_refusal(len(decode), decode[0] if decode else 1, batch.num_seqs - len(decode),
                             point.num_heads // point.num_kv_heads)

    # --- planning: base.Backend.plan's plumbing, with these primitives and hooks ----------------

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Part:
        return self.prefill_part(ctx.point, md, single_token_decode(ctx.metadata))

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Part:
        return self.decode_part(ctx.point, md, single_token_decode(ctx.metadata))

    def plan_fused(self, ctx: PlanContext, md: SplitMetadata) -> dict[str, Part]:
        return pod_parts(self.lib(), ctx.point, md, self.planned,
                         lambda sub: self.prefill_part(ctx.point, sub, graph=False))

    def plan_details(self, ctx: PlanContext, parts: dict[str, Part]) -> dict:
        details = {}
        if ctx.strategy == "fused" and "fused" not in parts:  # a batch with one part: that part's wrapper
            no_prefill = "prefill" not in parts
            details["fi_fused"] = (f"{'BatchDecode' if no_prefill else 'BatchPrefill'} alone: the batch has "
                                   f"no {'prefill' if no_prefill else 'decode'} part to fuse")
        return details | super().plan_details(ctx, parts)

    def plan_refresh(self, ctx: PlanContext, parts: dict[str, Part]) -> Callable:
        return refresher(self.name, ctx.strategy, parts)

    def planned(self, kind: str, key: tuple, device: torch.device, make: Callable[[torch.Tensor], Any],
                plan: Callable[[Any], None]) -> tuple[Any, Callable[[], None]]:
        """A wrapper of this kind and shape (idle or new), planned, and its Part.release (back to the
        pool). A plan that overflows the float workspace runs again on a larger one, with a new wrapper."""
        for _ in range(PLAN_ATTEMPTS):
            workspace = self.workspace.get(device)
            lease_key = (kind, device, self.workspace.generation[device], *key)
            wrapper = self.pool.take(lease_key, lambda workspace=workspace: make(workspace))
            try:
                plan(wrapper)
                return wrapper, self.pool.releaser(lease_key, wrapper)
            except Exception as exc:
                needed = float_overflow(exc)
                if needed is None:
                    raise
                self.workspace.grow(device, needed)
        raise RuntimeError(f"FlashInfer's {kind} plan still overflows a {self.workspace.get(device).numel()}-byte "
                           "float workspace")

    def prefill_part(self, point: SweepPoint, md: VarlenMetadata, graph: bool) -> Part:
        """BatchPrefillWithPagedKVCacheWrapper over md's sequences; q/out are their tokens."""
        fi, device, dtype = self.lib(), md.seqused_k.device, torch_dtype(point.dtype)
        num_seqs, capacity = md.num_seqs, md.block_table.numel()
        rows = num_seqs * md.max_seqlen_q  # the most query rows a batch of md's buffers can bring
        made: list = []

        def make(workspace):
            buffers = {}
            if graph:
                buffers = graph_buffers(device, num_seqs, capacity, suffix="_buf")
                buffers["qo_indptr_buf"] = torch.zeros(num_seqs + 1, dtype=torch.int32, device=device)
            made.append(fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph=graph, **buffers))
            return made[-1]

        def plan(wrapper, md: VarlenMetadata) -> None:
            indptr, indices, last_page_len = paged_kv_arrays(md.seqused_k, md.block_table, point.block_size)
            wrapper.plan(md.cu_seqlens_q.to("cpu"), indptr, indices, last_page_len, point.num_heads,
                         point.num_kv_heads, point.head_dim, point.block_size, causal=point.causal,
                         sm_scale=point.softmax_scale, q_data_type=dtype, kv_data_type=dtype)

        def first_plan(wrapper) -> None:
            if graph and any(w is wrapper for w in made):
                # A graph-mode wrapper's query rows are fixed by its first plan (prefill.py plan: "cannot
                # exceed the number of rows set during initialization"; its schedule is sized by them):
                # a new one is planned first on the buffers' full rows with no keys, so that a batch with
                # more sequences than this one (padding rows now) can be re-planned into it.
                full = torch.arange(num_seqs + 1, dtype=torch.int32) * md.max_seqlen_q
                plan(wrapper, dataclasses.replace(md, cu_seqlens_q=full,
                                                  seqused_k=torch.zeros(num_seqs, dtype=torch.int32)))
            plan(wrapper, md)

        key = (True, num_seqs, rows, capacity) if graph else (False,)
        wrapper, release = self.planned("prefill", key, device, make, first_plan)

        def launch(q, k_cache, v_cache, out):
            wrapper.run(q, (k_cache, v_cache), out=out)

        details = {"fi_graph_mode": graph, "fi_prefill_backend": str(plan_choice(wrapper, "_backend")),
                   **plan_info_details(wrapper, "prefill")}
        return Part(launch, details, replan=(lambda md: plan(wrapper, md)) if graph else None, release=release,
                    decide=wrapper_decisions(wrapper))

    def decode_part(self, point: SweepPoint, md: KVCacheMetadata, graph: bool) -> Part:
        """BatchDecodeWithPagedKVCacheWrapper over md's sequences; q/out are [seqs, 1, heads, dim].
        Spec-decode rows (query_len > 1) go through the prefill wrapper: BatchDecode takes one."""
        n, query_len = md.num_seqs, md.query_len
        if query_len > 1:
            cu_seqlens_q = torch.arange(0, (n + 1) * query_len, query_len, dtype=torch.int32)
            varlen = VarlenMetadata(cu_seqlens_q, md.cache_seqlens, md.block_table, query_len, md.max_seqlen_k,
                                    md.token_offset)
            part = self.prefill_part(point, varlen, graph=False)
            flat = part.launch
            part.details["fi_decode_wrapper"] = f"BatchPrefill (query_len {query_len}; BatchDecode takes 1)"
            return dataclasses.replace(part, launch=lambda q4, k_cache, v_cache, out4: flat(
                q4.flatten(0, 1), k_cache, v_cache, out4.flatten(0, 1)))
        fi, device, dtype = self.lib(), md.cache_seqlens.device, torch_dtype(point.dtype)
        capacity = md.block_table.numel()

        def make(workspace):
            buffers = graph_buffers(device, n, capacity) if graph else {}
            return fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph=graph,
                                                         use_tensor_cores=DECODE_TENSOR_CORES, **buffers)

        def plan(wrapper, md: KVCacheMetadata) -> None:
            indptr, indices, last_page_len = paged_kv_arrays(md.cache_seqlens, md.block_table, point.block_size)
            wrapper.plan(indptr, indices, last_page_len, point.num_heads, point.num_kv_heads, point.head_dim,
                         point.block_size, sm_scale=point.softmax_scale, q_data_type=dtype, kv_data_type=dtype)

        key = (True, n, capacity) if graph else (False,)
        wrapper, release = self.planned(f"decode-tc{int(DECODE_TENSOR_CORES)}", key, device, make,
                                        lambda w: plan(w, md))

        def launch(q4, k_cache, v_cache, out4):
            wrapper.run(q4.flatten(0, 1), (k_cache, v_cache), out=out4.flatten(0, 1))

        details = {"fi_graph_mode": graph, "fi_decode_wrapper": "BatchDecode",
                   "fi_decode_tensor_cores": DECODE_TENSOR_CORES, **plan_info_details(wrapper, "decode")}
        return Part(launch, details, replan=(lambda md: plan(wrapper, md)) if graph else None, release=release,
                    decide=wrapper_decisions(wrapper, tensor_cores=getattr(wrapper, "use_tensor_cores",
                                                                           DECODE_TENSOR_CORES)))

