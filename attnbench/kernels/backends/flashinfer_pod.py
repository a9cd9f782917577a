"""The `flashinfer` backend's fused strategy: POD-Attention, one prefill request beside the decodes.

POD-Attention (arXiv 2410.18038) runs a prefill and a batch of decodes in one launch, sharing the
SMs between a compute-bound part and a memory-bound one. FlashInfer ships it as
PODWithPagedKVCacheWrapper (flashinfer/pod.py in 0.6.6, the same API in 0.7.4), whose two sides
take different inputs:

- decode: paged, one query token per request (plan() sets qo_indptr to arange; the decode side
  is non-causal, which a single token does not notice), scheduled by FlashInfer's fa2 prefill
  planner (pod.py plan: get_batch_prefill_module("fa2", ...)): `plan(indptr, indices,
  last_page_len, ...)` as for BatchDecode;
- prefill: ONE request whose K/V are contiguous [kv_len, kv_heads, head_dim] tensors, not pages
  (`run(q_p, k_p, v_p, q_d, paged_kv_cache_d, causal_p=...)`; csrc/pod.cu reads kv_len from
  k_p.size(0)). 0.6.6's BatchPODWithPagedKVCacheWrapper takes many paged prefill requests, but has
  no CUDA-graph mode and is not in the GPU machine's pack.

The decode side's kernel runs 16-row query tiles (csrc/pod.cu: `constexpr size_t CTA_TILE_Q = 16`),
but its planner tiles each request's group_size packed query rows by FA2DetermineCtaTileQ (utils.cuh:
16 up to 16 rows, 64 or 128 above), so a GQA group above 16 query heads per KV head would leave rows
unwritten: such batches are refused.

So the fused launch gathers the prefill request's pages into two buffers the plan owns (two
index_select kernels: K/V change every layer and every step, and the launch is the only code that
sees the cache), and POD's run returns new output tensors, which are copied into `out` (two
copies). Those four kernels are timed with POD and named in the row (`fi_pod_extra_kernels`). The
wrapper is planned in eager mode (POD's prefill side has no plan to redo): a captured graph
replays the batch it was captured on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from attnbench.kernels.backends.flashinfer_common import (
    Part,
    paged_kv_arrays,
    plan_info_details,
)
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import SplitMetadata
from attnbench.kernels.workload import SweepPoint

POD_EXTRA_KERNELS = "2 index_select (prefill K/V pages to contiguous) + 2 copies (POD's outputs to out)"
POD_MAX_GROUP = 16  # csrc/pod.cu's decode CTA_TILE_Q: the planner's tile for groups of up to 16


def fused_refusal(num_decode_seqs: int, decode_query_len: int, num_prefill_seqs: int,
                  group_size: int = 1) -> str | None:
    """Why POD cannot run a batch with these parts, or None when it can (or when a part is missing:
    then there is nothing to fuse, and the other part runs alone). group_size: query heads per KV head."""
    if num_prefill_seqs and num_decode_seqs and group_size > POD_MAX_GROUP:
        return (f"fused: POD's decode side runs {POD_MAX_GROUP}-row query tiles (csrc/pod.cu), so GQA groups of at "
                f"most {POD_MAX_GROUP} query heads per KV head; this point has a GQA group of {group_size}")
    if num_decode_seqs and num_prefill_seqs > 1:
        return (f"fused: FlashInfer's POD runs one prefill request beside the decodes, this batch has "
                f"{num_prefill_seqs} (PODWithPagedKVCacheWrapper.run takes one request's k_p, v_p)")
    if num_prefill_seqs and num_decode_seqs and decode_query_len != 1:
        return (f"fused: POD's decode side takes one query token per request, this batch's decode rows "
                f"have {decode_query_len}")
    return None


def pod_part(fi: Any, point: SweepPoint, md: SplitMetadata,
             planned: Callable[[str, tuple, torch.device, Callable, Callable], tuple]) -> Part:
    """One POD launch over the whole batch (decode tokens first). `planned(kind, key, device, make,
    plan)` is the backend's wrapper source: a reused or new wrapper, planned, and its lease."""
    dec, pre = md.decode, md.prefill
    refusal = fused_refusal(dec.num_seqs, dec.query_len, pre.num_seqs, point.num_heads // point.num_kv_heads)
    if refusal:
        raise ValueError(refusal)
    device, dtype, page = dec.cache_seqlens.device, torch_dtype(point.dtype), point.block_size
    num_decode, start, q_len = dec.num_seqs, pre.token_offset, pre.num_tokens
    kv_len = int(pre.seqused_k[0])
    pages = pre.block_table[0, :math.ceil(kv_len / page)].to(device=device, dtype=torch.long)
    shape = (pages.numel(), page, point.num_kv_heads, point.head_dim)
    k_pages = torch.empty(shape, dtype=dtype, device=device)
    v_pages = torch.empty(shape, dtype=dtype, device=device)
    k_p = k_pages.view(-1, point.num_kv_heads, point.head_dim)[:kv_len]
    v_p = v_pages.view(-1, point.num_kv_heads, point.head_dim)[:kv_len]

    def make(workspace: torch.Tensor):
        return fi.PODWithPagedKVCacheWrapper(workspace, "NHD")

    def plan(wrapper) -> None:
        indptr, indices, last_page_len = paged_kv_arrays(dec.cache_seqlens, dec.block_table, page)
        wrapper.plan(indptr, indices, last_page_len, point.num_heads, point.num_kv_heads, point.head_dim, page,
                     q_data_type=dtype, kv_data_type=dtype, sm_scale=point.softmax_scale)

    wrapper, lease = planned("pod", (), device, make, plan)

    def launch(q, k_cache, v_cache, out):
        torch.index_select(k_cache, 0, pages, out=k_pages)
        torch.index_select(v_cache, 0, pages, out=v_pages)
        out_p, out_d = wrapper.run(q[start:start + q_len], k_p, v_p, q[:num_decode], (k_cache, v_cache),
                                   causal_p=point.causal, sm_scale_p=point.softmax_scale)
        out[:num_decode].copy_(out_d)
        out[start:start + q_len].copy_(out_p)

    details = {"fi_graph_mode": False,
               "fi_fused": f"POD: 1 prefill request ({q_len} tokens, {kv_len} keys) + {num_decode} decodes",
               "fi_pod_extra_kernels": POD_EXTRA_KERNELS, **plan_info_details(wrapper, "decode")}
    return Part(launch, details, lease)
