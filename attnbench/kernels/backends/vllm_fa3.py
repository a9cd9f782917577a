"""vllm-flash-attn FA3 (Hopper): the kernel vLLM runs on H100/H200, beside FA2.

FA3 has one forward op, `torch.ops._vllm_fa3_C.fwd`. Both strategies call it directly, with
arguments filled by schema name (vLLM's Python `flash_attn_varlen_func(..., fa_version=3)`
allocates a dummy `cu_seqlens_k` on every call and cannot take the batched form, which needs
`cu_seqlens_q=None`). Unified is one varlen call over the batch (3-D q, `cu_seqlens_q`); split
adds the decode sequences as a batched 4-D q with `cu_seqlens_q=None` (FA3's kvcache path).
`max_seqlen_k` comes from the metadata's host ints, never from the device, so a plan made inside
CUDA-graph capture reads nothing back. No persistent `scheduler_metadata` is passed: the op's own
per-call scheduling is what runs.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import torch

from attnbench.kernels.backends.base import LibraryBackend, PlanContext, dist_version
from attnbench.kernels.backends.launch import Launch
from attnbench.kernels.metadata import KVCacheMetadata, VarlenMetadata

HEAD_DIMS = (64, 96, 128, 192, 256)
TENSOR_ARGS = ("q", "k", "v", "out")  # bound at run time; everything else at plan time


@functools.lru_cache(maxsize=1)
def find_op() -> tuple[Any, str | None]:
    """`torch.ops._vllm_fa3_C.fwd` once vLLM's FA3 module loads, or None and the reason."""
    try:
        importlib.import_module("flash_attn")  # before vllm's, which can install a virtual flash_attn
    except Exception:
        pass
    try:
        module = importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
    except Exception as exc:
        return None, f"vllm.vllm_flash_attn does not import ({type(exc).__name__}: {str(exc)[:120]})"
    if not getattr(module, "FA3_AVAILABLE", False):
        return None, f"FA3 module does not load: {getattr(module, 'FA3_UNAVAILABLE_REASON', 'unknown')}"
    return torch.ops._vllm_fa3_C.fwd, None


def fwd_kwargs(op, **known) -> dict:
    """Every argument of `op` but q, k, v and out: known names get their values, the rest their
    schema default or None. A build whose schema gained optional arguments still works; one whose
    required arguments changed fails with the schema in the message."""
    kwargs = {}
    for arg in op.default._schema.arguments:
        if arg.name in TENSOR_ARGS:
            continue
        if arg.name in known:
            kwargs[arg.name] = known[arg.name]
        elif arg.has_default_value():
            kwargs[arg.name] = arg.default_value
        elif isinstance(arg.type, torch.OptionalType):
            kwargs[arg.name] = None
        else:
            raise RuntimeError(f"_vllm_fa3_C.fwd wants {arg.name!r}, unknown to attnbench: {op.default._schema}")
    return kwargs


def common_kwargs(scale: float, causal: bool) -> dict:
    return {"softmax_scale": scale, "is_causal": causal, "causal": causal, "window_size_left": -1,
            "window_size_right": -1, "softcap": 0.0, "is_rotary_interleaved": True, "num_splits": 0,
            "sm_margin": 0, "cp_world_size": 1, "cp_rank": 0}


def bind(op, static: dict) -> Launch:
    def launch(q, k_cache, v_cache, out):
        op(q=q, k=k_cache, v=v_cache, out=out, **static)
    return launch


class VllmFA3Backend(LibraryBackend):
    name = "vllm-fa3"
    description = "vllm-flash-attn FA3 (Hopper): fwd as varlen (unified) / batched + varlen (split)"
    head_dims = HEAD_DIMS

    def find_library(self) -> tuple[Any, str | None]:
        return find_op()

    def device_refusal(self) -> str | None:
        if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
            major, minor = torch.cuda.get_device_capability()
            return f"FA3 runs on Hopper (sm_90), this GPU is sm_{major}{minor}"
        return super().device_refusal()

    def describe(self, op: Any) -> tuple[str, str]:
        """The op carries no version: the vllm wheel's."""
        return "vllm.vllm_flash_attn[fa3]", dist_version("vllm")

    def library(self) -> tuple[str, str]:
        return self.describe(self._library)  # without loading the op: a row of an unavailable FA3 still names it

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Launch:
        op, point = self.lib(), ctx.point
        return bind(op, fwd_kwargs(
            op, cu_seqlens_q=md.cu_seqlens_q, seqused_k=md.seqused_k, page_table=md.block_table,
            max_seqlen_q=md.max_seqlen_q, max_seqlen_k=md.max_seqlen_k,
            **common_kwargs(point.softmax_scale, point.causal)))

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Launch:
        op, point = self.lib(), ctx.point
        return bind(op, fwd_kwargs(
            op, cu_seqlens_q=None, seqused_k=md.cache_seqlens, page_table=md.block_table,
            max_seqlen_q=md.query_len, max_seqlen_k=md.max_seqlen_k,
            **common_kwargs(point.softmax_scale, point.causal)))
