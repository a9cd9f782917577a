"""vllm-flash-attn FA2: the two kernels of the seed PR, varlen_fwd and fwd_kvcache.

Where it is found, in order: vLLM's bundled `vllm.vllm_flash_attn` (raw ops
`torch.ops._vllm_fa2_C.varlen_fwd` / `fwd_kvcache`; its Python wrapper for the kvcache kernel was
removed), the standalone `vllm_flash_attn` package, then Dao-AILab `flash_attn` (both export
`flash_attn_varlen_func` and `flash_attn_with_kvcache`). Every row records which one ran.
`flash_attn` is imported before `vllm.vllm_flash_attn`, which can install a virtual `flash_attn`.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from typing import Any, Callable

import torch

from attnbench.inputs import Inputs
from attnbench.metadata import SplitMetadata, VarlenMetadata

HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)


@dataclass(frozen=True)
class FA2Library:
    package: str
    version: str
    varlen: Callable[..., Any]  # (q, k_cache, v_cache, out, md: VarlenMetadata, causal, scale)
    kvcache: Callable[..., Any]  # (q4, k_cache, v_cache, out4, cache_seqlens, block_table, causal, scale)


def _version(dist: str) -> str:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=None)
def _schema_names(op) -> frozenset[str]:
    return frozenset(a.name for a in op.default._schema.arguments)


def _schema_kwargs(op, **kwargs) -> dict:
    """Keep only the arguments this build's op schema has (num_splits came and went)."""
    names = _schema_names(op)
    return {k: v for k, v in kwargs.items() if k in names}


def _vllm_bundled() -> FA2Library:
    try:
        importlib.import_module("flash_attn")
    except Exception:  # only imported first so vLLM's virtual module cannot shadow it
        pass
    importlib.import_module("vllm.vllm_flash_attn._vllm_fa2_C")
    ops = torch.ops._vllm_fa2_C

    def varlen(q, k_cache, v_cache, out, md: VarlenMetadata, causal, scale):
        kwargs = _schema_kwargs(
            ops.varlen_fwd, q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=md.cu_seqlens_q,
            cu_seqlens_k=md.cu_seqlens_q,  # unused with seqused_k + block_table, but must be a tensor
            seqused_k=md.seqused_k, leftpad_k=None, block_table=md.block_table, alibi_slopes=None,
            max_seqlen_q=md.max_seqlen_q, max_seqlen_k=md.max_seqlen_k, p_dropout=0.0,
            softmax_scale=scale, zero_tensors=False, is_causal=causal, window_size_left=-1,
            window_size_right=-1, softcap=0.0, return_softmax=False, num_splits=0, gen=None)
        ops.varlen_fwd(**kwargs)

    def kvcache(q4, k_cache, v_cache, out4, cache_seqlens, block_table, causal, scale):
        kwargs = _schema_kwargs(
            ops.fwd_kvcache, q=q4, kcache=k_cache, vcache=v_cache, k=None, v=None,
            seqlens_k=cache_seqlens, rotary_cos=None, rotary_sin=None, cache_batch_idx=None,
            leftpad_k=None, block_table=block_table, alibi_slopes=None, out=out4,
            softmax_scale=scale, is_causal=causal, window_size_left=-1, window_size_right=-1,
            softcap=0.0, is_rotary_interleaved=False, num_splits=0)
        ops.fwd_kvcache(**kwargs)

    return FA2Library("vllm.vllm_flash_attn", _version("vllm"), varlen, kvcache)


def _python_api(module_name: str, dist: str) -> FA2Library:
    module = importlib.import_module(module_name)

    def varlen(q, k_cache, v_cache, out, md: VarlenMetadata, causal, scale):
        out.copy_(module.flash_attn_varlen_func(
            q, k_cache, v_cache, md.cu_seqlens_q, md.cu_seqlens_k, md.max_seqlen_q, md.max_seqlen_k,
            softmax_scale=scale, causal=causal, block_table=md.block_table))

    def kvcache(q4, k_cache, v_cache, out4, cache_seqlens, block_table, causal, scale):
        out4.copy_(module.flash_attn_with_kvcache(
            q4, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
            softmax_scale=scale, causal=causal))

    return FA2Library(module_name, _version(dist), varlen, kvcache)


@functools.lru_cache(maxsize=1)
def find_library() -> tuple[FA2Library | None, str | None]:
    """The first FA2 build that loads, or None and every reason the candidates failed."""
    reasons = []
    for loader in (_vllm_bundled, lambda: _python_api("vllm_flash_attn", "vllm-flash-attn"),
                   lambda: _python_api("flash_attn", "flash-attn")):
        try:
            return loader(), None
        except Exception as exc:  # ImportError, undefined symbols in an old wheel, ...
            reasons.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
    return None, "no FA2 build loads (" + "; ".join(reasons) + ")"


class VllmFA2Backend:
    name = "vllm-fa2"
    description = "vllm-flash-attn FA2: varlen_fwd (unified) / fwd_kvcache + varlen_fwd (split)"
    graph_safe = True

    def unavailable_reason(self) -> str | None:
        if not torch.cuda.is_available():
            return "needs a CUDA GPU (none visible)"
        major, _ = torch.cuda.get_device_capability()
        if major < 8:
            return f"FA2 needs compute capability >= 8.0, this GPU has {major}.x"
        return find_library()[1]

    def library(self) -> tuple[str, str]:
        lib, _ = find_library()
        return (lib.package, lib.version) if lib else ("none", "")

    def supports(self, point, strategy, device) -> str | None:
        if device.type != "cuda":
            return "runs on CUDA only"
        if point.head_dim not in HEAD_DIMS:
            return f"--dim: FA2 supports head dims {HEAD_DIMS}, not {point.head_dim}"
        if point.dtype not in ("bfloat16", "float16"):
            return f"--dtype: FA2 runs bf16/fp16, not {point.dtype}"
        return None

    def prepare(self, strategy: str, inputs: Inputs, metadata, out: torch.Tensor):
        lib, reason = find_library()
        if lib is None:
            raise RuntimeError(reason)
        q, kc, vc = inputs.q, inputs.k_cache, inputs.v_cache
        causal, scale = inputs.point.causal, inputs.softmax_scale
        if isinstance(metadata, VarlenMetadata):
            def unified() -> torch.Tensor:
                lib.varlen(q, kc, vc, out, metadata, causal, scale)
                return out
            return unified

        assert isinstance(metadata, SplitMetadata)
        dec, pre = metadata.decode, metadata.prefill
        calls = []
        if dec is not None:
            n_tok = dec.num_seqs * dec.query_len
            shape4 = (dec.num_seqs, dec.query_len, q.shape[1], q.shape[2])
            q4, out4 = q[:n_tok].view(shape4), out[:n_tok].view(shape4)
            calls.append(lambda: lib.kvcache(q4, kc, vc, out4, dec.cache_seqlens, dec.block_table, causal, scale))
        if pre is not None:
            q_pre, out_pre = q[pre.token_offset:], out[pre.token_offset:]
            calls.append(lambda: lib.varlen(q_pre, kc, vc, out_pre, pre, causal, scale))

        def split() -> torch.Tensor:
            for call in calls:
                call()
            return out
        return split
