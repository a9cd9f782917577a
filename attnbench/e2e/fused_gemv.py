"""A decode step's projection as one Triton launch with no split-K: y = x @ w^T for a few rows.

Why it exists: at batch 1 a decode step is weight-read bound, and cuBLAS splits K for some
projection shapes, adding a second reduction kernel per call. Here each program reads its
outputs' weight rows whole and sums in float32, rounding once. It runs where the model is asked
to (elementwise.projection "gemv", or "auto" per shape where it timed faster);
benchmarks/e2e_floor.py times it beside cuBLAS per projection shape and in the step. fused_ops.py
re-exports it. This module imports triton at the top; elementwise.py imports it only on CUDA.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, n_out, k_in, x_row_stride, w_row_stride, y_row_stride,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (block of BLOCK_N outputs, one row of x): y[m, n] = sum over k of x[m, k] w[n, k],
    the whole of K in one program (no split-K, so no second reduction kernel), in float32."""
    m = tl.program_id(1).to(tl.int64)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < n_out
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * w_row_stride
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, k_in, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_mask = k < k_in
        xk = tl.load(x_ptr + m * x_row_stride + k, mask=k_mask, other=0.0).to(tl.float32)
        w = tl.load(w_rows + k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0).to(tl.float32)
        acc += w * xk[None, :]
    tl.store(y_ptr + m * y_row_stride + offs_n, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=n_mask)


# (BLOCK_N, BLOCK_K, num_warps): from few outputs a program (many programs: every SM busy on a
# 4096-output projection) to many (fewer, longer programs); autotuned per (outputs, inputs) on CUDA
GEMV_CONFIGS = ((4, 1024, 4), (8, 512, 4), (16, 256, 4), (16, 512, 8), (32, 256, 8), (64, 128, 4))
_gemv_tuned = triton.autotune([triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w) for n, k, w in GEMV_CONFIGS],
                              key=["n_out", "k_in"])(_gemv_kernel)


def rows_view(x: torch.Tensor) -> torch.Tensor:
    """x as [rows, last dim] with unit stride along a row (a view for every tensor the model
    passes); fused_ops' kernels read their inputs through it too."""
    x = x.reshape(-1, x.shape[-1])
    return x if x.stride(-1) == 1 else x.contiguous()


def gemv(x: torch.Tensor, w: torch.Tensor, config: tuple[int, int, int] | None = None) -> torch.Tensor:
    """x [rows, K] @ w [N, K]^T for a decode step's few rows, one launch with no split-K: each
    program reads its outputs' weight rows whole. `config` (one of GEMV_CONFIGS) fixes the blocks;
    without it they are autotuned per shape on the first call (CUDA only: the interpreter cannot
    time), and gemv_config(N, K) says which won. Each row re-reads w: for batch-1 decode steps."""
    rows = rows_view(x)
    if w.stride(-1) != 1 or rows.shape[1] != w.shape[1]:
        raise ValueError(f"gemv: x {tuple(x.shape)} and w {tuple(w.shape)} (strides {w.stride()}) do not multiply")
    n_out, k_in = w.shape
    y = torch.empty((*x.shape[:-1], n_out), dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        args = (rows, w, y, n_out, k_in, rows.stride(0), w.stride(0), n_out)
        if config is None:
            _gemv_tuned[lambda meta: (triton.cdiv(n_out, meta["BLOCK_N"]), rows.shape[0])](*args)
        else:
            block_n, block_k, warps = config
            _gemv_kernel[(triton.cdiv(n_out, block_n), rows.shape[0])](*args, BLOCK_N=block_n, BLOCK_K=block_k,
                                                                       num_warps=warps)
    return y


def gemv_config(n_out: int, k_in: int) -> str:
    """The blocks the autotuner chose for this shape ("not tuned" before its first call)."""
    for key, config in getattr(_gemv_tuned, "cache", {}).items():
        if tuple(key[:2]) == (n_out, k_in):
            return f"BLOCK_N={config.kwargs['BLOCK_N']} BLOCK_K={config.kwargs['BLOCK_K']} warps={config.num_warps}"
    return "not tuned"
