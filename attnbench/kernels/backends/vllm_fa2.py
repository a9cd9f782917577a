"""vllm-flash-attn FA2: the two kernels of the seed PR, varlen_fwd and fwd_kvcache.

Where it is found, in order: vLLM's bundled `vllm.vllm_flash_attn` (raw ops
`torch.ops._vllm_fa2_C.varlen_fwd` / `fwd_kvcache`; its Python wrapper for the kvcache kernel was
removed), the standalone `vllm_flash_attn` package, then Dao-AILab `flash_attn` (both export
`flash_attn_varlen_func` and `flash_attn_with_kvcache`). Every row records which one ran.
`flash_attn` is imported before `vllm.vllm_flash_attn`, which can install a virtual `flash_attn`.

Planning binds every argument but q, the caches and out: for the raw ops a keyword dict filtered
by the op's schema (num_splits came and went between builds), read once per plan. num_splits=0
lets FA2 choose its KV splits; with vLLM's build on a GPU the row records the number it chooses,
derived from its heuristic (decisions.fa2_num_splits: decision_num_splits).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from attnbench.kernels.backends.base import LibraryBackend, PlanContext, dist_version
from attnbench.kernels.backends.decisions import fa2_num_splits
from attnbench.kernels.backends.launch import Launch, Part
from attnbench.kernels.metadata import KVCacheMetadata, VarlenMetadata

HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
VLLM_PACKAGE = "vllm.vllm_flash_attn"  # the build whose split heuristic decisions.fa2_num_splits follows


@dataclass(frozen=True)
class FA2Library:
    """One FA2 build: its two planners, each (metadata, causal, softmax_scale) -> Launch."""

    package: str
    version: str
    plan_varlen: Callable[[VarlenMetadata, bool, float], Launch]
    plan_kvcache: Callable[[KVCacheMetadata, bool, float], Launch]


def schema_kwargs(op, **kwargs) -> dict:
    """Keep only the arguments this build's op schema has."""
    names = {a.name for a in op.default._schema.arguments}
    return {k: v for k, v in kwargs.items() if k in names}


def raw_ops_library(ops: Any, package: str, version: str) -> FA2Library:
    """FA2 through the raw ops `ops.varlen_fwd` / `ops.fwd_kvcache` (vLLM's `_vllm_fa2_C`)."""

    def plan_varlen(md: VarlenMetadata, causal: bool, scale: float) -> Launch:
        static = schema_kwargs(
            ops.varlen_fwd, cu_seqlens_q=md.cu_seqlens_q,
            cu_seqlens_k=md.cu_seqlens_q,  # unused with seqused_k + block_table, but must be a tensor
            seqused_k=md.seqused_k, leftpad_k=None, block_table=md.block_table, alibi_slopes=None,
            max_seqlen_q=md.max_seqlen_q, max_seqlen_k=md.max_seqlen_k, p_dropout=0.0,
            softmax_scale=scale, zero_tensors=False, is_causal=causal, window_size_left=-1,
            window_size_right=-1, softcap=0.0, return_softmax=False, num_splits=0, gen=None)
        op = ops.varlen_fwd

        def launch(q, k_cache, v_cache, out):
            op(q=q, k=k_cache, v=v_cache, out=out, **static)
        return launch

    def plan_kvcache(md: KVCacheMetadata, causal: bool, scale: float) -> Launch:
        static = schema_kwargs(
            ops.fwd_kvcache, k=None, v=None, seqlens_k=md.cache_seqlens, rotary_cos=None, rotary_sin=None,
            cache_batch_idx=None, leftpad_k=None, block_table=md.block_table, alibi_slopes=None,
            softmax_scale=scale, is_causal=causal, window_size_left=-1, window_size_right=-1,
            softcap=0.0, is_rotary_interleaved=False, num_splits=0)
        op = ops.fwd_kvcache

        def launch(q4, k_cache, v_cache, out4):
            op(q=q4, kcache=k_cache, vcache=v_cache, out=out4, **static)
        return launch

    return FA2Library(package, version, plan_varlen, plan_kvcache)


def _vllm_bundled() -> FA2Library:
    try:
        importlib.import_module("flash_attn")
    except Exception:  # only imported first so vLLM's virtual module cannot shadow it
        pass
    importlib.import_module("vllm.vllm_flash_attn._vllm_fa2_C")
    return raw_ops_library(torch.ops._vllm_fa2_C, VLLM_PACKAGE, dist_version("vllm"))


def _python_api(module_name: str, dist: str) -> FA2Library:
    """The pip packages' Python API; it returns a new tensor, which is copied into out."""
    module = importlib.import_module(module_name)

    def plan_varlen(md: VarlenMetadata, causal: bool, scale: float) -> Launch:
        cu_seqlens_k = md.cu_seqlens_k  # computed once, here

        def launch(q, k_cache, v_cache, out):
            out.copy_(module.flash_attn_varlen_func(
                q, k_cache, v_cache, md.cu_seqlens_q, cu_seqlens_k, md.max_seqlen_q, md.max_seqlen_k,
                softmax_scale=scale, causal=causal, block_table=md.block_table))
        return launch

    def plan_kvcache(md: KVCacheMetadata, causal: bool, scale: float) -> Launch:
        def launch(q4, k_cache, v_cache, out4):
            out4.copy_(module.flash_attn_with_kvcache(
                q4, k_cache, v_cache, cache_seqlens=md.cache_seqlens, block_table=md.block_table,
                softmax_scale=scale, causal=causal))
        return launch

    return FA2Library(module_name, dist_version(dist), plan_varlen, plan_kvcache)


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


class VllmFA2Backend(LibraryBackend):
    name = "vllm-fa2"
    description = "vllm-flash-attn FA2: varlen_fwd (unified) / fwd_kvcache + varlen_fwd (split)"
    head_dims = HEAD_DIMS

    def find_library(self) -> tuple[FA2Library | None, str | None]:
        return find_library()

    def describe(self, library: FA2Library) -> tuple[str, str]:
        return library.package, library.version

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Part:
        launch = self.lib().plan_varlen(md, ctx.point.causal, ctx.point.softmax_scale)
        return Part(launch, decide=self.splits(ctx, md.num_seqs, md.max_seqlen_q, md.max_seqlen_k, md.seqused_k,
                                               kvcache=False))

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Part:
        launch = self.lib().plan_kvcache(md, ctx.point.causal, ctx.point.softmax_scale)
        width = md.block_table.shape[1] * ctx.point.block_size  # fwd_kvcache's seqlen_k with a paged cache
        return Part(launch, decide=self.splits(ctx, md.num_seqs, md.query_len, width, md.cache_seqlens, kvcache=True))

    def splits(self, ctx: PlanContext, batch_size: int, seqlen_q: int, seqlen_k: int, lengths: torch.Tensor,
               kvcache: bool):
        """Part.decide: FA2's derived splits, for vLLM's build on a CUDA device (the SM count), else None."""
        if self.lib().package != VLLM_PACKAGE or lengths.device.type != "cuda":
            return None
        sms = torch.cuda.get_device_properties(lengths.device).multi_processor_count
        p = ctx.point
        splits = fa2_num_splits(batch_size, p.num_heads, p.num_kv_heads, seqlen_q, seqlen_k, p.head_dim, sms, kvcache)
        return lambda: {"num_splits": splits}
