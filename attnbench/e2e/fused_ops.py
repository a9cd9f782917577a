"""The model's four small elementwise ops, and the paged K/V write (with RoPE or without), as
hand-written Triton kernels launched directly.

Why it exists: torch.compile fused these ops into one kernel each, but every eager call then went
through dynamo's frame check, AOTAutograd's wrapper and Inductor's launcher before the kernel ran,
and an eager step makes four such calls a layer. Under CUDA graphs that cost vanishes; in the eager
steps (`--cudagraph none`, and the eager check run every graph row makes) it dominated the time a
step takes to issue. A `@triton.jit` kernel called straight from Python costs one Triton launch.

Each op is one launch over a simple grid whose block sizes follow from the shapes by a fixed rule
(no autotuning), reads its inputs through their strides, computes in float32 and rounds once to
the input's dtype. Outputs come from torch.empty, so the launches can be captured in CUDA graphs.
model.py keeps the plain-torch definitions: they are the reference, the CPU path and the fallback.
The kernels are written for this file; the work is split as vLLM's csrc/layernorm_kernels.cu
(one block per token for fused_add_rms_norm) and Liger-Kernel's ops/rope.py (one program rotates
a token's q and k heads) split theirs.

write_kv stores a layer's new K and V in one launch where attention.write_kv's two index_copy_
calls take two, and rope_write_kv turns q and k and stores k and v in one launch where rope_qk
and write_kv take two; the engine runs them when asked (PagedAttention's kv_write), not by default
(benchmarks/e2e_floor.py --engines times them in the step). The one-pass GEMV lives in
fused_gemv.py and is re-exported here, so `fused_ops` is every Triton kernel the model may run.

This module imports triton at the top: elementwise.py imports it only on the first CUDA call, so
the CPU path and CI (no triton) never need it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnbench.e2e.fused_gemv import GEMV_CONFIGS, gemv, gemv_config, rows_view  # noqa: F401  (gemv re-exported)

MAX_HEAD_BLOCK = 4096  # elements of one program of the per-token kernels (heads x columns)


@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, sum_ptr, x_row_stride, residual_row_stride,
                     n_cols, eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    """One program a row: out = weight * h / rms(h), h = x (+ residual, rounded to x's dtype and
    written to sum_ptr). out and sum are contiguous."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(x.dtype)
        tl.store(sum_ptr + row * n_cols + cols, x, mask=mask)
    h = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (h * rstd * weight).to(x.dtype), mask=mask)


@triton.jit
def _rope_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr,
                 q_token_stride, q_head_stride, k_token_stride, k_head_stride, cos_token_stride,
                 n_q_heads, n_heads, half, HEADS: tl.constexpr, HALF: tl.constexpr):
    """One program per (token, block of HEADS heads), the heads counted over q's then k's, so
    one launch rotates both. Pairs (x[i], x[i + half]) turn by the token's angle i (rotate-half)."""
    token = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * HEADS + tl.arange(0, HEADS)[:, None]
    cols = tl.arange(0, HALF)[None, :]
    in_half = cols < half
    is_q = (heads < n_q_heads) & in_half
    is_k = (heads >= n_q_heads) & (heads < n_heads) & in_half
    k_heads = heads - n_q_heads
    q_at = q_ptr + token * q_token_stride + heads * q_head_stride + cols
    k_at = k_ptr + token * k_token_stride + k_heads * k_head_stride + cols
    x1 = tl.where(is_q, tl.load(q_at, mask=is_q, other=0.0), tl.load(k_at, mask=is_k, other=0.0)).to(tl.float32)
    x2 = tl.where(is_q, tl.load(q_at + half, mask=is_q, other=0.0),
                  tl.load(k_at + half, mask=is_k, other=0.0)).to(tl.float32)
    cos = tl.load(cos_ptr + token * cos_token_stride + cols, mask=in_half, other=0.0)
    sin = tl.load(sin_ptr + token * cos_token_stride + cols, mask=in_half, other=0.0)
    out1, out2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    dtype = q_out_ptr.dtype.element_ty
    q_to = q_out_ptr + (token * n_q_heads + heads) * 2 * half + cols
    k_to = k_out_ptr + (token * (n_heads - n_q_heads) + k_heads) * 2 * half + cols
    tl.store(q_to, out1.to(dtype), mask=is_q)
    tl.store(q_to + half, out2.to(dtype), mask=is_q)
    tl.store(k_to, out1.to(dtype), mask=is_k)
    tl.store(k_to + half, out2.to(dtype), mask=is_k)


@triton.jit
def _silu_and_mul_kernel(gate_up_ptr, out_ptr, gate_up_row_stride, n_cols, BLOCK: tl.constexpr):
    """Program (row, column block): out = silu(gate) * up, gate_up = [gate | up] along a row."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate_at = gate_up_ptr + row * gate_up_row_stride + cols
    gate = tl.load(gate_at, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_at + n_cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * n_cols + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _write_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, k_token_stride, k_head_stride,
                     v_token_stride, v_head_stride, cache_slot_stride, cache_head_stride, n_kv_heads, head_dim,
                     HEADS: tl.constexpr, DIM: tl.constexpr):
    """Program (token, block of HEADS kv heads): the token's k and v heads stored at its slot of
    both caches, as vLLM's reshape_and_cache_flash stores both in one launch."""
    token = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * HEADS + tl.arange(0, HEADS)[:, None]
    cols = tl.arange(0, DIM)[None, :]
    mask = (heads < n_kv_heads) & (cols < head_dim)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    to = slot * cache_slot_stride + heads * cache_head_stride + cols
    k = tl.load(k_ptr + token * k_token_stride + heads * k_head_stride + cols, mask=mask)
    v = tl.load(v_ptr + token * v_token_stride + heads * v_head_stride + cols, mask=mask)
    tl.store(k_cache_ptr + to, k, mask=mask)
    tl.store(v_cache_ptr + to, v, mask=mask)


@triton.jit
def _rope_write_kv_kernel(q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                          q_token_stride, q_head_stride, k_token_stride, k_head_stride, v_token_stride, v_head_stride,
                          cos_token_stride, cache_slot_stride, cache_head_stride, n_q_heads, n_kv_heads, half,
                          HEADS: tl.constexpr, HALF: tl.constexpr):
    """_rope_kernel and _write_kv_kernel as one: program (token, block of HEADS heads), the heads
    counted over q's, then k's, then v's. q and k turn by the token's angles (rotate-half); q goes
    to q_out, k (turned) and v (as it is) to the token's slot of the caches."""
    token = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * HEADS + tl.arange(0, HEADS)[:, None]
    cols = tl.arange(0, HALF)[None, :]
    in_half = cols < half
    k_heads, v_heads = heads - n_q_heads, heads - n_q_heads - n_kv_heads
    is_q = (heads < n_q_heads) & in_half
    is_k = (k_heads >= 0) & (k_heads < n_kv_heads) & in_half
    is_v = (v_heads >= 0) & (v_heads < n_kv_heads) & in_half
    q_at = q_ptr + token * q_token_stride + heads * q_head_stride + cols
    k_at = k_ptr + token * k_token_stride + k_heads * k_head_stride + cols
    v_at = v_ptr + token * v_token_stride + v_heads * v_head_stride + cols
    x1 = tl.where(is_q, tl.load(q_at, mask=is_q, other=0.0),
                  tl.where(is_k, tl.load(k_at, mask=is_k, other=0.0), tl.load(v_at, mask=is_v, other=0.0)))
    x2 = tl.where(is_q, tl.load(q_at + half, mask=is_q, other=0.0),
                  tl.where(is_k, tl.load(k_at + half, mask=is_k, other=0.0), tl.load(v_at + half, mask=is_v, other=0.0)))
    cos = tl.load(cos_ptr + token * cos_token_stride + cols, mask=in_half, other=0.0)
    sin = tl.load(sin_ptr + token * cos_token_stride + cols, mask=in_half, other=0.0)
    f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
    out1, out2 = f1 * cos - f2 * sin, f2 * cos + f1 * sin
    dtype = q_out_ptr.dtype.element_ty
    q_to = q_out_ptr + (token * n_q_heads + heads) * 2 * half + cols
    tl.store(q_to, out1.to(dtype), mask=is_q)
    tl.store(q_to + half, out2.to(dtype), mask=is_q)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    k_to = k_cache_ptr + slot * cache_slot_stride + k_heads * cache_head_stride + cols
    tl.store(k_to, out1.to(dtype), mask=is_k)
    tl.store(k_to + half, out2.to(dtype), mask=is_k)
    v_to = v_cache_ptr + slot * cache_slot_stride + v_heads * cache_head_stride + cols
    tl.store(v_to, x1, mask=is_v)  # v as loaded: a copy, bit for bit
    tl.store(v_to + half, x2, mask=is_v)


def _warps(elements: int, most: int) -> int:
    """A warp per 512 elements of a program's block, 1 .. most."""
    return max(1, min(most, elements // 512))


def _norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float):
    rows = rows_view(x)
    res = rows_view(residual) if residual is not None else rows
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    summed = torch.empty_like(out) if residual is not None else out
    if rows.shape[0]:
        block = triton.next_power_of_2(rows.shape[1])
        _rms_norm_kernel[(rows.shape[0],)](rows, res, weight, out, summed, rows.stride(0), res.stride(0),
                                          rows.shape[1], eps, HAS_RESIDUAL=residual is not None,
                                          BLOCK=block, num_warps=_warps(block, 16))
    return out, summed


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """model.rms_norm as one launch."""
    return _norm(x, None, weight, eps)[0]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """model.add_rms_norm as one launch: (norm(x + residual), x + residual)."""
    return _norm(x, residual, weight, eps)


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """model.rope_qk as one launch. q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim]
    may be strided views (of the qkv GEMM's output) with unit stride along head_dim; cos and sin
    are float32 [tokens, head_dim / 2]. Returns contiguous rotated copies, in q's dtype."""
    tokens, n_q_heads, head_dim = q.shape
    n_heads, half = n_q_heads + k.shape[1], head_dim // 2
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        q, k = q.contiguous(), k.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if tokens:
        half_block = triton.next_power_of_2(half)
        heads = min(triton.next_power_of_2(n_heads), max(1, MAX_HEAD_BLOCK // half_block))
        _rope_kernel[(tokens, triton.cdiv(n_heads, heads))](
            q, k, cos, sin, q_out, k_out, q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0),
            n_q_heads, n_heads, half, HEADS=heads, HALF=half_block, num_warps=_warps(heads * half_block, 8))
    return q_out, k_out


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """model.silu_and_mul as one launch: silu(gate) * up, gate_up = [..., 2 * ffn]."""
    rows = rows_view(gate_up)
    n_cols = rows.shape[1] // 2
    out = torch.empty((*gate_up.shape[:-1], n_cols), dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0]:
        block = min(1024, triton.next_power_of_2(n_cols))
        _silu_and_mul_kernel[(rows.shape[0], triton.cdiv(n_cols, block))](
            rows, out, rows.stride(0), n_cols, BLOCK=block, num_warps=_warps(block, 4))
    return out


def _cache_slots(k_cache: torch.Tensor, v_cache: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
    """The caches [blocks, block_size, kv_heads, head_dim] as slots, checked for a write of
    `tensors` into them: strides shared and unit along head_dim, one dtype throughout (a copy, not
    a cast: index_copy_ refuses one too). The K cache's slot view (its strides are both caches')."""
    k_slots, v_slots = k_cache.view(-1, *k_cache.shape[2:]), v_cache.view(-1, *v_cache.shape[2:])
    if k_slots.stride() != v_slots.stride() or k_slots.stride(-1) != 1:
        raise ValueError(f"write_kv: the caches' strides differ or are not unit along head_dim "
                         f"({k_slots.stride()} and {v_slots.stride()})")
    dtypes = {t.dtype for t in (*tensors, k_cache, v_cache)}
    if len(dtypes) != 1:
        raise ValueError(f"write_kv: the tensors and the caches must share a dtype "
                         f"({', '.join(str(t.dtype) for t in (*tensors, k_cache, v_cache))})")
    return k_slots


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """attention.write_kv as one launch: k and v [tokens, kv_heads, head_dim] (strided views of the
    qkv GEMM's output will do) stored at slot_mapping's slots of the paged caches
    [blocks, block_size, kv_heads, head_dim]. The two caches must share their strides."""
    tokens, n_kv_heads, head_dim = k.shape
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        k, v = k.contiguous(), v.contiguous()
    k_slots = _cache_slots(k_cache, v_cache, k, v)
    if tokens:
        dim = triton.next_power_of_2(head_dim)
        heads = min(triton.next_power_of_2(n_kv_heads), max(1, MAX_HEAD_BLOCK // dim))
        _write_kv_kernel[(tokens, triton.cdiv(n_kv_heads, heads))](
            k, v, k_cache, v_cache, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            k_slots.stride(0), k_slots.stride(1), n_kv_heads, head_dim, HEADS=heads, DIM=dim,
            num_warps=_warps(heads * dim, 4))


def rope_write_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> torch.Tensor:
    """attention.rope_write_kv as one launch: rope_qk and write_kv together. q [tokens, heads,
    head_dim], k and v [tokens, kv_heads, head_dim] unrotated (strided views of the qkv GEMM's
    output will do); cos and sin float32 [tokens, head_dim / 2]. k turned and v as it is go to
    slot_mapping's slots of the caches; returns q turned, contiguous."""
    tokens, n_q_heads, head_dim = q.shape
    n_kv_heads = k.shape[1]
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    k_slots = _cache_slots(k_cache, v_cache, q, k, v)
    cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if tokens:
        half = head_dim // 2
        half_block = triton.next_power_of_2(half)
        n_heads = n_q_heads + 2 * n_kv_heads
        heads = min(triton.next_power_of_2(n_heads), max(1, MAX_HEAD_BLOCK // half_block))
        _rope_write_kv_kernel[(tokens, triton.cdiv(n_heads, heads))](
            q, k, v, cos, sin, q_out, k_cache, v_cache, slot_mapping, q.stride(0), q.stride(1), k.stride(0),
            k.stride(1), v.stride(0), v.stride(1), cos.stride(0), k_slots.stride(0), k_slots.stride(1), n_q_heads,
            n_kv_heads, half, HEADS=heads, HALF=half_block, num_warps=_warps(heads * half_block, 8))
    return q_out
