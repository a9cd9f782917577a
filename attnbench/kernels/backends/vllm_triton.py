"""vLLM's unified Triton attention (TRITON_ATTN): vLLM's third Hopper backend, beside FA2 and FA3.

`unified_attention` (vllm/v1/attention/ops/triton_unified_attention.py) is one launch over a varlen
batch, reading paged K and V as [num_blocks, block_size, kv_heads, head_dim] each: attnbench's
layout, the two halves of vLLM's [num_blocks, 2, ...] cache. It picks its form per call, on host
ints only: a 2-D grid (query blocks x KV heads), or a 3-D grid that also cuts each sequence's keys
into segments, reduced by a second kernel (`reduce_segments`). The 3-D form needs segment buffers
and a threshold from the caller; vLLM's metadata builder makes them (triton_attn.py), and so does
each plan here, sized the same way (see `segment_buffers`).

Unified: one call over the batch, as vLLM runs it. Split: the same function called on the decode
rows (one query length: the 3-D form when that is 1 and they are few enough) and then on the rest
(2-D). vLLM never splits a batch for this kernel, but the kernel is a varlen kernel and a slice of
the batch is a valid call: split asks whether letting the decode rows take the 3-D form pays for a
second launch, since a mixed batch's unified call is 2-D throughout.

Rows record the form each launch took (`triton_<part>_path`: 2d or 3d; `triton_<part>_segments`),
computed by `kernel_path`, which restates vLLM's decision rather than importing it (triton_attn.py
imports vLLM's config layer, which the pack leaves out); a CPU test checks it against the kernel's
own choice. Graph replay is "any": the form and the grid depend on q's token count, the number of
sequences and max_seqlen_q, which the graphsafe recipe fixes per bucket; the kernel reads every
length from device memory.
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch

from attnbench.kernels.backends.base import LibraryBackend, PlanContext, dist_version
from attnbench.kernels.backends.launch import Launch, Part
from attnbench.kernels.metadata import KVCacheMetadata, VarlenMetadata
from attnbench.kernels.workload import SweepPoint

KERNEL_MODULE = "vllm.v1.attention.ops.triton_unified_attention"
# vLLM 0.24.0, vllm/v1/attention/backends/triton_attn.py:54-55
MIN_LAUNCH_GRID_SIZE_2D = 128
NUM_PAR_SOFTMAX_SEGMENTS = 16
# the capture sizes vLLM's default (FULL_AND_PIECEWISE) graphs use below 256: vllm/config/vllm.py:1644
DEFAULT_CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8))
MIN_HEAD_DIM = 32  # TritonAttentionBackend.supports_head_size: head_size >= 32


@dataclass(frozen=True)
class TritonLibrary:
    """The kernel entry point, its version, and the one process-wide switch that changes its form."""

    unified_attention: Callable[..., Any]
    version: str
    batch_invariant: bool  # VLLM_BATCH_INVARIANT, read by the kernel module at import: always 2-D


@functools.lru_cache(maxsize=1)
def find_library() -> tuple[TritonLibrary | None, str | None]:
    """vLLM's kernel module once it imports with a working Triton, or None and why not."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # vLLM logs to stdout; --json rows go there
    try:
        module = importlib.import_module(KERNEL_MODULE)
        triton_utils = importlib.import_module("vllm.triton_utils")
    except Exception as exc:
        return None, (f"{KERNEL_MODULE} does not import ({type(exc).__name__}: {str(exc)[:120]}); without vLLM, "
                      "source the pack of scripts/device/prepare_triton.sh")
    if not triton_utils.HAS_TRITON:
        return None, "vllm.triton_utils found no working Triton and put a placeholder in its place"
    version = f"{dist_version('vllm')} (triton {dist_version('triton')})"
    return TritonLibrary(module.unified_attention, version, bool(module.is_batch_invariant)), None


def seq_threshold_3d(num_kv_heads: int) -> int:
    """The most sequences a call may have and still go 3-D: the least that fill a 2-D grid of
    MIN_LAUNCH_GRID_SIZE_2D programs (triton_attn.py:135), moved to the nearest CUDA-graph capture
    size as vLLM's default graph mode does (triton_attn.py:138-148)."""
    threshold = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads
    return min(DEFAULT_CAPTURE_SIZES, key=lambda size: abs(size - threshold))


def kernel_path(max_seqlen_q: int, num_seqs: int, num_kv_heads: int, batch_invariant: bool) -> tuple[str, int]:
    """(form, segments per sequence) of one unified_attention call given segment buffers:
    3-D only when every query is one token, the call has at most seq_threshold_3d sequences and
    batch invariance is off (triton_unified_attention.py:969-978); 2-D is one segment."""
    if max_seqlen_q <= 1 and num_seqs <= seq_threshold_3d(num_kv_heads) and not batch_invariant:
        return "3d", NUM_PAR_SOFTMAX_SEGMENTS
    return "2d", 1


def segment_buffers(point: SweepPoint, device: torch.device) -> dict:
    """The 3-D form's arguments, shaped as vLLM's TritonAttentionMetadataBuilder allocates them
    (triton_attn.py:150-171): float32 partial outputs, maxima and sums per sequence, head, segment."""
    threshold, heads = seq_threshold_3d(point.num_kv_heads), point.num_heads
    dim = 1 << (point.head_dim - 1).bit_length()
    scalars = (threshold, heads, NUM_PAR_SOFTMAX_SEGMENTS)
    return {"seq_threshold_3D": threshold, "num_par_softmax_segments": NUM_PAR_SOFTMAX_SEGMENTS,
            "softmax_segm_output": torch.empty((*scalars, dim), dtype=torch.float32, device=device),
            "softmax_segm_max": torch.empty(scalars, dtype=torch.float32, device=device),
            "softmax_segm_expsum": torch.empty(scalars, dtype=torch.float32, device=device)}


class VllmTritonBackend(LibraryBackend):
    name = "vllm-triton"
    description = "vLLM's unified Triton attention (TRITON_ATTN): one launch (unified) / decode + prefill launches (split)"

    def find_library(self) -> tuple[TritonLibrary | None, str | None]:
        return find_library()

    def describe(self, library: TritonLibrary) -> tuple[str, str]:
        return KERNEL_MODULE, library.version

    def supports(self, point: SweepPoint, strategy: str, device: torch.device) -> str | None:
        if point.head_dim < MIN_HEAD_DIM:
            return f"--dim: {self.name} supports head dims >= {MIN_HEAD_DIM}, not {point.head_dim}"
        return super().supports(point, strategy, device)

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Part:
        role = "unified" if ctx.strategy == "unified" else "prefill"
        return self._part(ctx, role, md.cu_seqlens_q, md.seqused_k, md.block_table, md.max_seqlen_q,
                          md.max_seqlen_k, md.num_seqs, flatten=False)

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Part:
        """The decode rows as a varlen call: cu_seqlens_q is every query_len-th token, made once here."""
        device = md.cache_seqlens.device
        cu_seqlens_q = torch.arange(0, md.num_seqs + 1, dtype=torch.int32, device=device) * md.query_len
        return self._part(ctx, "decode", cu_seqlens_q, md.cache_seqlens, md.block_table, md.query_len,
                          md.max_seqlen_k, md.num_seqs, flatten=True)

    def _part(self, ctx: PlanContext, role: str, cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor,
              block_table: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, num_seqs: int, flatten: bool) -> Part:
        """One unified_attention call, every argument but q, the caches and out bound now; `flatten`:
        q and out arrive as the batched [seqs, query_len, heads, dim] view of their tokens."""
        lib, point = self.lib(), ctx.point
        static = {"cu_seqlens_q": cu_seqlens_q, "max_seqlen_q": max_seqlen_q, "seqused_k": seqused_k,
                  "max_seqlen_k": max_seqlen_k, "softmax_scale": point.softmax_scale, "causal": point.causal,
                  "window_size": (-1, -1), "block_table": block_table, "softcap": 0.0, "q_descale": None,
                  "k_descale": None, "v_descale": None, **segment_buffers(point, seqused_k.device)}
        kernel = lib.unified_attention

        def launch(q, k_cache, v_cache, out):
            if flatten:
                q, out = q.flatten(0, 1), out.flatten(0, 1)
            kernel(q=q, k=k_cache, v=v_cache, out=out, **static)

        path, segments = kernel_path(max_seqlen_q, num_seqs, point.num_kv_heads, lib.batch_invariant)
        return Part(launch, {f"triton_{role}_path": path, f"triton_{role}_segments": segments},
                    decide=lambda: {"triton_path": path, "segments": segments})
