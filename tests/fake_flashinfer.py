"""A fake `flashinfer` module for the CPU tests of the flashinfer backends (tests/test_flashinfer.py).

It has FlashInfer's wrapper classes with their 0.6.6 signatures. Like FlashInfer, a wrapper
copies the index arrays at plan() (into its fixed buffers in CUDA-graph mode) and its run()
computes from those copies: each sequence's pages gathered through paged_kv_indices, a float64
softmax. It checks what FlashInfer requires of the arrays (indptr from 0 and non-decreasing, one
index per page, last_page_len in 1..page_size exactly where a sequence has pages), raises
FlashInfer's float-workspace overflow when told to, and records every wrapper it makes and every
plan and run. Its kernels read their own buffers with Tensor.tolist bound at import, before
`no_host_reads` patches it, as a device reads its own memory.
"""

from __future__ import annotations

import functools
import types

import torch
from conftest import naive_attention

_tolist = torch.Tensor.tolist  # the fake device reading its own memory (bound before any guard)


def attend(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_lens, causal, scale) -> torch.Tensor:
    """A fake kernel: each sequence's keys gathered page by page through kv_indices."""
    qo, kvp, pages, lens = (_tolist(t) for t in (qo_indptr, kv_indptr, kv_indices, kv_lens))
    page, flat_k, flat_v = k_cache.shape[1], k_cache.flatten(0, 1), v_cache.flatten(0, 1)
    out = torch.zeros((qo[-1], *q.shape[1:]), dtype=torch.float64)
    for i, kv_len in enumerate(lens):
        rows = [p * page + j for p in pages[kvp[i]:kvp[i + 1]] for j in range(page)][:kv_len]
        if kv_len and qo[i + 1] > qo[i]:
            out[qo[i]:qo[i + 1]] = naive_attention(q[qo[i]:qo[i + 1]], [flat_k[rows]], [flat_v[rows]],
                                                   [qo[i + 1] - qo[i]], causal, scale)
    return out


class FakeWrapper:
    BUFFERS = {}  # this class's graph-buffer argument name -> the index array it holds
    PLAN_INFO = [0] * 14 + [1]  # a PrefillPlanInfo that chose split-KV

    def __init__(self, fi, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 **buffers):
        assert kv_layout == "NHD" and (set(buffers) == set(self.BUFFERS) if use_cuda_graph else not buffers)
        self.fi, self.workspace = fi, float_workspace_buffer
        self.graph, self.tensor_cores = use_cuda_graph, use_tensor_cores
        self.buffers = {self.BUFFERS[name]: buf for name, buf in buffers.items()}
        self._int_workspace_buffer = torch.zeros(16, dtype=torch.uint8)
        self.plans, self.runs = [], []
        fi.made.append(self)

    def store(self, page_size, sm_scale, dtype, causal=False, **arrays):
        if self.workspace.numel() < self.fi.float_bytes_needed:
            raise RuntimeError(  # FlashInfer's message (include/flashinfer/allocator.h)
                f"Buffer overflow when allocating memory for batch_prefill_tmp_v with size {self.fi.float_bytes_needed} "
                f"and alignment 16, but only {self.workspace.numel()} bytes available in AlignedAllocator. "
                "Increase the workspace buffer size.")
        indptr, indices, last = (_tolist(arrays[k]) for k in ("indptr", "indices", "last"))
        assert indptr[0] == 0 and indptr == sorted(indptr) and len(indices) == indptr[-1]
        assert all((0 < n <= page_size) == (b > a) for a, b, n in zip(indptr, indptr[1:], last))
        for name, value in arrays.items():
            if self.graph:  # FlashInfer's CUDA-graph mode: copy into the fixed buffers
                buf = self.buffers[name]
                assert value.numel() <= buf.numel() and (name == "indices" or value.numel() == buf.numel())
                buf[:value.numel()].copy_(value)
            setattr(self, name, self.buffers[name] if self.graph else value.clone())
        self.page_size, self.sm_scale, self.dtype, self.causal = page_size, sm_scale, dtype, causal
        self.plans.append(dict(arrays, causal=causal))
        self._backend, self._plan_info = "fa2", list(self.PLAN_INFO)

    def lens(self):
        counts = self.indptr[1:] - self.indptr[:-1]
        return torch.where(counts > 0, (counts - 1) * self.page_size + self.last, 0)

    def kernel(self, q, kv, causal):
        assert q.dtype == self.dtype
        self.runs.append(q)
        return attend(q, *kv, self.qo, self.indptr, self.indices, self.lens(), causal, self.sm_scale)


class FakePrefill(FakeWrapper):
    BUFFERS = {"qo_indptr_buf": "qo", "paged_kv_indptr_buf": "indptr", "paged_kv_indices_buf": "indices",
               "paged_kv_last_page_len_buf": "last"}

    def plan(self, qo_indptr, indptr, indices, last, num_qo_heads, num_kv_heads, head_dim, page_size, *, causal,
             sm_scale, q_data_type, kv_data_type):
        rows = int(qo_indptr[-1])  # graph mode: no more query rows than the first plan's (prefill.py plan)
        self.max_rows = getattr(self, "max_rows", None) or rows
        assert not self.graph or rows <= self.max_rows
        self.store(page_size, sm_scale, q_data_type, causal, qo=qo_indptr, indptr=indptr, indices=indices, last=last)

    def run(self, q, kv, out):
        out.copy_(self.kernel(q, kv, self.causal).to(out.dtype))


class FakeDecode(FakeWrapper):
    BUFFERS = {"paged_kv_indptr_buffer": "indptr", "paged_kv_indices_buffer": "indices",
               "paged_kv_last_page_len_buffer": "last"}
    # tensor-core decode (and POD's decode side) plan with the fa2 prefill planner (decode.py plan,
    # pod.py plan): a PrefillPlanInfo, 16-row query tiles, here without split-KV
    PLAN_INFO = [0, 0, 0, 16] + [0] * 11

    def plan(self, indptr, indices, last, num_qo_heads, num_kv_heads, head_dim, page_size, *, sm_scale,
             q_data_type, kv_data_type):
        self.store(page_size, sm_scale, q_data_type, indptr=indptr, indices=indices, last=last)
        self.qo = torch.arange(last.numel() + 1)

    def run(self, q, kv, out):
        assert q.dim() == 3
        out.copy_(self.kernel(q, kv, False).to(out.dtype))


class FakePOD(FakeDecode):
    def run(self, q_p, k_p, v_p, q_d, kv_d, *, causal_p, sm_scale_p):
        out_p = naive_attention(q_p, [k_p], [v_p], [q_p.shape[0]], causal_p, sm_scale_p)
        return out_p.to(q_p.dtype), self.kernel(q_d, kv_d, False).to(q_d.dtype)


class FakeBatchAttention(FakeWrapper):
    PLAN_INFO = [2, 66]  # num_blks_x, num_blks_y, ...

    def __init__(self, fi, kv_layout="NHD", device="cuda"):
        super().__init__(fi, torch.zeros(0, dtype=torch.uint8), kv_layout)

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_qo_heads, num_kv_heads, head_dim_qk,
             head_dim_vo, page_size, *, causal, sm_scale, q_data_type, kv_data_type):
        self.workspace = self.float_workspace_buffer
        last = torch.where(kv_len_arr > 0, kv_len_arr - (kv_indptr[1:] - kv_indptr[:-1] - 1) * page_size, 0)
        self.store(page_size, sm_scale, q_data_type, causal, qo=qo_indptr, indptr=kv_indptr,
                   indices=kv_indices[:_tolist(kv_indptr)[-1]], last=last)
        self.indices = kv_indices  # BatchAttention keeps a reference, not a copy

    def run(self, q, kv, out, lse):
        out.copy_(self.kernel(q, kv, self.causal).to(out.dtype))


class FakeFlashInfer(types.ModuleType):
    def __init__(self):
        super().__init__("flashinfer")
        self.__version__, self.made, self.float_bytes_needed = "0.6.6+fake", [], 0
        for name, cls in [("BatchPrefillWithPagedKVCacheWrapper", FakePrefill), ("BatchAttention", FakeBatchAttention),
                          ("BatchDecodeWithPagedKVCacheWrapper", FakeDecode), ("PODWithPagedKVCacheWrapper", FakePOD)]:
            setattr(self, name, functools.partial(cls, self))

    def of(self, cls):
        return [w for w in self.made if type(w) is cls]
