"""The `flashinfer` backend's fused strategy: POD-Attention, one prefill request beside the decodes.

POD-Attention (arXiv 2410.18038) runs a prefill and a batch of decodes in one launch, sharing the
SMs between a compute-bound part and a memory-bound one. FlashInfer ships it as
PODWithPagedKVCacheWrapper (flashinfer/pod.py in 0.6.6, the same API in 0.7.2.post1 and 0.7.4), whose two sides
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

Where the prefill's pages are gathered. POD's run returns new output tensors, copied into `out`
(two copies, always in the launch). The prefill request's pages are gathered into two buffers the
plan owns (two index_select kernels). By default in the launch: an engine writes new K/V into the
cache every layer, right before attention, and runs one plan over every layer's cache. The kernel
sweep times one batch on caches that never change, and says so through `Plan.static_kv(k_cache,
v_cache)`: the pages are gathered there, once, outside the timed launch, and the gather's own
device time is measured then (fi_pod_gather_us) so a reader can add it back. fi_pod_kv_gather
says which (`in-launch` or `outside-timing`); fi_pod_extra_kernels names what the launch runs
besides POD.

More prefill requests. A chunked-prefill engine step holds two prompt chunks (one request
finishing its prompt, the next starting), or more, beside its decodes. POD takes the largest
(most query tokens); the others run through BatchPrefillWithPagedKVCacheWrapper on their pages,
one launch per contiguous run of their tokens (one, or two when POD's request sits between
others): fi_pod_extra_prefills counts them. A kernel-sweep point is refused such a batch
(`fused_refusal`, from `supports`): its fused row measures POD's one launch. The wrapper is planned
in eager mode (POD's prefill side has no plan to redo): a captured graph replays the batch it was
captured on.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from attnbench.kernels.backends.flashinfer_common import paged_kv_arrays, plan_info_details, wrapper_decisions
from attnbench.kernels.backends.launch import Part, on_tokens
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata
from attnbench.kernels.workload import SweepPoint

POD_MAX_GROUP = 16  # csrc/pod.cu's decode CTA_TILE_Q: the planner's tile for groups of up to 16
GATHER_REPEATS = 5  # timed gathers behind fi_pod_gather_us (their median)
IN_LAUNCH_KERNELS = "2 index_select (prefill K/V pages to contiguous) + 2 copies (POD's outputs to out)"
STATIC_KERNELS = ("2 copies (POD's outputs to out); the 2 index_select gathering the prefill's pages ran once "
                  "before timing (fi_pod_gather_us)")


def pod_refusal(num_decode_seqs: int, decode_query_len: int, group_size: int) -> str | None:
    """Why POD cannot run decodes of this shape beside a prefill request, or None."""
    if group_size > POD_MAX_GROUP:
        return (f"fused: POD's decode side runs {POD_MAX_GROUP}-row query tiles (csrc/pod.cu), so GQA groups of at "
                f"most {POD_MAX_GROUP} query heads per KV head; this point has a GQA group of {group_size}")
    if num_decode_seqs and decode_query_len != 1:
        return (f"fused: POD's decode side takes one query token per request, this batch's decode rows "
                f"have {decode_query_len}")
    return None


def fused_refusal(num_decode_seqs: int, decode_query_len: int, num_prefill_seqs: int,
                  group_size: int = 1) -> str | None:
    """Why a kernel-sweep point's batch cannot be measured as POD, or None when it can (or when a part
    is missing: then there is nothing to fuse, and the other part runs alone). group_size: query
    heads per KV head. A batch of several prefill requests is refused here, not by the plan: an
    engine step runs the others beside POD (pod_parts), but a kernel row measures POD's launch."""
    if not (num_decode_seqs and num_prefill_seqs):
        return None
    refusal = pod_refusal(num_decode_seqs, decode_query_len, group_size)
    if refusal is None and num_prefill_seqs > 1:
        return (f"fused: FlashInfer's POD runs one prefill request beside the decodes, this batch has "
                f"{num_prefill_seqs} (PODWithPagedKVCacheWrapper.run takes one request's k_p, v_p; an e2e step "
                "runs the others through BatchPrefill, fi_pod_extra_prefills)")
    return refusal


def device_us(fn: Callable[[], None], device: torch.device, repeats: int = GATHER_REPEATS) -> float:
    """Median time (µs) of fn() on the device: CUDA events around each call (on the CPU, the clock)."""
    fn()  # untimed: first calls may load modules
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            begin = time.perf_counter()
            fn()
            times.append((time.perf_counter() - begin) * 1e6)
    return statistics.median(times)


def sub_varlen(md: VarlenMetadata, lo: int, hi: int, cu: list[int], kv_lens: list[int]) -> VarlenMetadata:
    """md's requests lo..hi-1 (contiguous tokens) as their own varlen metadata; cu and kv_lens are
    md's cu_seqlens_q and seqused_k, read to the host once."""
    device = md.seqused_k.device
    cu_seqlens_q = torch.tensor([x - cu[lo] for x in cu[lo:hi + 1]], dtype=torch.int32).to(device)
    return VarlenMetadata(cu_seqlens_q, md.seqused_k[lo:hi], md.block_table[lo:hi],
                          max(b - a for a, b in zip(cu[lo:hi], cu[lo + 1:hi + 1])), max(kv_lens[lo:hi]),
                          md.token_offset + cu[lo])


def pod_parts(fi: Any, point: SweepPoint, md: SplitMetadata,
              planned: Callable[[str, tuple, torch.device, Callable, Callable], tuple],
              plan_prefill: Callable[[VarlenMetadata], Part]) -> dict[str, Part]:
    """POD over the decodes and the largest prefill request ("fused"); BatchPrefill (`plan_prefill`:
    the backend's eager prefill part) over the other prefill requests before and after it in q
    ("fused-prefill-before", "fused-prefill-after"), where there are any. Each part's launch takes
    the whole batch (decode tokens first). `planned(kind, key, device, make, plan)` is
    the backend's wrapper source: a reused or new wrapper, planned, and its Part.release."""
    dec, pre = md.decode, md.prefill
    refusal = pod_refusal(dec.num_seqs, dec.query_len, point.num_heads // point.num_kv_heads)
    if refusal:
        raise ValueError(refusal)
    cu, kv_lens = pre.cu_seqlens_q.to("cpu").tolist(), pre.seqused_k.to("cpu").tolist()
    q_lens = [b - a for a, b in zip(cu, cu[1:])]
    chosen = max(range(pre.num_seqs), key=lambda i: q_lens[i])  # the first of the largest
    extras = {side: sub_varlen(pre, lo, hi, cu, kv_lens)
              for side, lo, hi in (("before", 0, chosen), ("after", chosen + 1, pre.num_seqs)) if lo < hi}
    pod = pod_part(fi, point, dec, pre.block_table[chosen], pre.token_offset + cu[chosen], q_lens[chosen],
                   kv_lens[chosen], planned)
    pod.details["fi_pod_extra_prefills"] = pre.num_seqs - 1
    if extras:
        pod.details["fi_fused"] += (f"; BatchPrefill over the other {pre.num_seqs - 1} prefill requests "
                                    f"({len(extras)} launch{'es' if len(extras) > 1 else ''})")
    parts = {"fused": pod}
    for side, sub in extras.items():
        part = plan_prefill(sub)
        parts[f"fused-prefill-{side}"] = dataclasses.replace(
            part, launch=on_tokens(part.launch, sub.token_offset, sub.token_offset + sub.num_tokens))
    return parts


def pod_part(fi: Any, point: SweepPoint, dec: KVCacheMetadata, block_row: torch.Tensor, start: int, q_len: int,
             kv_len: int, planned: Callable[[str, tuple, torch.device, Callable, Callable], tuple]) -> Part:
    """One POD launch: dec's decodes and the prefill request of q[start:start + q_len], whose
    kv_len keys are in block_row's pages."""
    device, dtype, page = dec.cache_seqlens.device, torch_dtype(point.dtype), point.block_size
    num_decode = dec.num_seqs
    pages = block_row[:math.ceil(kv_len / page)].to(device=device, dtype=torch.long)
    shape = (pages.numel(), page, point.num_kv_heads, point.head_dim)
    k_pages = torch.empty(shape, dtype=dtype, device=device)  # this plan's own: live plans never share them
    v_pages = torch.empty(shape, dtype=dtype, device=device)
    k_p = k_pages.view(-1, point.num_kv_heads, point.head_dim)[:kv_len]
    v_p = v_pages.view(-1, point.num_kv_heads, point.head_dim)[:kv_len]
    gathered_from: list[int] = []  # data_ptr of the caches static_kv gathered from; empty: gather per launch

    def make(workspace: torch.Tensor):
        return fi.PODWithPagedKVCacheWrapper(workspace, "NHD")

    def plan(wrapper) -> None:
        indptr, indices, last_page_len = paged_kv_arrays(dec.cache_seqlens, dec.block_table, page)
        wrapper.plan(indptr, indices, last_page_len, point.num_heads, point.num_kv_heads, point.head_dim, page,
                     q_data_type=dtype, kv_data_type=dtype, sm_scale=point.softmax_scale)

    wrapper, release = planned("pod", (), device, make, plan)

    def gather(k_cache, v_cache) -> None:
        torch.index_select(k_cache, 0, pages, out=k_pages)
        torch.index_select(v_cache, 0, pages, out=v_pages)

    def launch(q, k_cache, v_cache, out):
        if not gathered_from:
            gather(k_cache, v_cache)
        elif gathered_from != [k_cache.data_ptr(), v_cache.data_ptr()]:
            raise RuntimeError("fused: this POD plan gathered its prefill's pages from other caches (Plan.static_kv); "
                               "plan again for these")
        out_p, out_d = wrapper.run(q[start:start + q_len], k_p, v_p, q[:num_decode], (k_cache, v_cache),
                                   causal_p=point.causal, sm_scale_p=point.softmax_scale)
        out[:num_decode].copy_(out_d)
        out[start:start + q_len].copy_(out_p)

    def static_kv(k_cache, v_cache) -> dict:
        """The caches every later launch reads, unchanged: gather now, once, and time that gather."""
        gather(k_cache, v_cache)
        gathered_from[:] = [k_cache.data_ptr(), v_cache.data_ptr()]
        gather_us = device_us(lambda: gather(k_cache, v_cache), k_cache.device)
        return {"fi_pod_kv_gather": "outside-timing", "fi_pod_gather_us": round(gather_us, 3),
                "fi_pod_extra_kernels": STATIC_KERNELS}

    details = {"fi_graph_mode": False,
               "fi_fused": f"POD: 1 prefill request ({q_len} tokens, {kv_len} keys) + {num_decode} decodes",
               "fi_pod_kv_gather": "in-launch", "fi_pod_extra_kernels": IN_LAUNCH_KERNELS,
               **plan_info_details(wrapper, "decode")}
    return Part(launch, details, static_kv=static_kv, release=release, decide=wrapper_decisions(wrapper))
