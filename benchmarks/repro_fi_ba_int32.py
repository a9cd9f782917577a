"""Standalone reproducer for FlashInfer's BatchAttention reading wrong keys past 2^32 K elements.

Plain torch + flashinfer (no attnbench), for an upstream bug report
(docs/kernels/flashinfer-bug-ba-int32.md). Runs on one H100/H200 (about 18 GB of memory).

The same batch (8 decode rows, 2048 keys each, 12 heads x 64, page 16) is run twice through
BatchAttention: once with its pages at the start of a paged cache of just over 2^32 K elements, once
with the same pages at its end, past 2^32 elements. The keys and values are identical; only the
page ids differ. Each output is compared with a float32 reference, and BatchPrefill (fa2) runs the
same high pages as a control. Usage: python benchmarks/repro_fi_ba_int32.py
"""

import math

import flashinfer
import torch

HEADS, DIM, PAGE, SEQS, KV_LEN = 12, 64, 16, 8, 2048


def reference(q, k, v, scale):
    """Float32 attention of one query token per row over its own keys: q [n, h, d], k/v [n, L, h, d]."""
    s = torch.einsum("nhd,nlhd->nhl", q.float(), k.float()) * scale
    return torch.einsum("nhl,nlhd->nhd", s.softmax(-1), v.float())


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main():
    dev, dtype = torch.device("cuda"), torch.bfloat16
    stride = PAGE * HEADS * DIM  # elements per page of the K cache (NHD)
    pages_per_seq = KV_LEN // PAGE
    used = SEQS * pages_per_seq
    num_pages = math.ceil(2**32 / stride) + used  # the last `used` pages lie past 2^32 elements
    print(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"cache: {num_pages} pages x {stride} elements = {num_pages * stride:,} K elements (2^32 = {2**32:,})")
    k_cache = torch.zeros(num_pages, PAGE, HEADS, DIM, dtype=dtype, device=dev)
    v_cache = torch.zeros_like(k_cache)
    gen = torch.Generator(device=dev).manual_seed(0)
    k = torch.randn(SEQS, KV_LEN, HEADS, DIM, generator=gen, device=dev).to(dtype)
    v = torch.randn(SEQS, KV_LEN, HEADS, DIM, generator=gen, device=dev).to(dtype)
    q = torch.randn(SEQS, HEADS, DIM, generator=gen, device=dev).to(dtype)
    scale = DIM ** -0.5
    ref = reference(q, k, v, scale)
    qo_indptr = torch.arange(SEQS + 1, dtype=torch.int32)
    kv_indptr = torch.arange(SEQS + 1, dtype=torch.int32) * pages_per_seq
    kv_lens = torch.full((SEQS,), KV_LEN, dtype=torch.int32)
    last_page_len = torch.full((SEQS,), PAGE, dtype=torch.int32)
    workspace = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    for where, first in [("low pages (offsets < 2^32)", 0), ("high pages (offsets > 2^32)", num_pages - used)]:
        ids = torch.arange(first, first + used, dtype=torch.int32, device=dev)
        k_cache[ids.long()] = k.reshape(used, PAGE, HEADS, DIM)
        v_cache[ids.long()] = v.reshape(used, PAGE, HEADS, DIM)
        ba = flashinfer.BatchAttention("NHD", device="cuda")
        ba.plan(qo_indptr, kv_indptr, ids, kv_lens, HEADS, HEADS, DIM, DIM, PAGE, causal=False, sm_scale=scale,
                q_data_type=dtype, kv_data_type=dtype)
        out, _ = ba.run(q, (k_cache, v_cache))
        print(f"BatchAttention, {where}: first page id {first}, rel L2 error {rel_l2(out, ref):.2e}")
        if first:
            fa2 = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")
            fa2.plan(qo_indptr, kv_indptr, ids.cpu(), last_page_len, HEADS, HEADS, DIM, PAGE, causal=False,
                     sm_scale=scale, q_data_type=dtype, kv_data_type=dtype)
            out = fa2.run(q, (k_cache, v_cache))
            print(f"BatchPrefill fa2 (control), {where}: rel L2 error {rel_l2(out, ref):.2e}")
        k_cache[ids.long()] = 0
        v_cache[ids.long()] = 0
    print("expected on a fixed build: every error about 1e-2 or below; the bug: BatchAttention's high-page error near 1")


if __name__ == "__main__":
    main()
