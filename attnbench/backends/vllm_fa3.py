"""vllm-flash-attn FA3 (Hopper): the kernel vLLM runs on H100/H200, beside FA2.

FA3 has one forward op, `torch.ops._vllm_fa3_C.fwd`, reached through vLLM's own
`flash_attn_varlen_func(..., fa_version=3)`. Unified is one varlen call over the batch; split
calls the same op twice: the decode sequences as a batched 4-D q with `cu_seqlens_q=None` (FA3's
kvcache path), the rest as varlen. No persistent `scheduler_metadata` is passed: each point is
captured and replayed with its own metadata, so the op's own per-call scheduling is what runs.
"""

from __future__ import annotations

import functools
import importlib
from importlib import metadata as importlib_metadata

import torch

from attnbench.inputs import Inputs
from attnbench.metadata import VarlenMetadata

HEAD_DIMS = (64, 96, 128, 192, 256)


@functools.lru_cache(maxsize=1)
def find_module():
    """vLLM's flash_attn_interface with FA3 loaded, or None and the reason."""
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
    return module, None


def batched_fwd_kwargs(q4, k_cache, v_cache, out4, cache_seqlens, block_table, max_seqlen_q, max_seqlen_k,
                       scale, causal) -> dict:
    """Arguments of `_vllm_fa3_C.fwd` for a batched 4-D q over a paged cache, filled by schema name.

    Known names get their values; every other argument takes its schema default or None, so a
    build whose schema gained optional arguments still works, and one whose required arguments
    changed fails with the schema in the message.
    """
    known = {
        "q": q4, "k": k_cache, "v": v_cache, "out": out4, "seqused_k": cache_seqlens,
        "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k, "page_table": block_table,
        "softmax_scale": scale, "is_causal": causal, "causal": causal, "window_size_left": -1,
        "window_size_right": -1, "softcap": 0.0, "is_rotary_interleaved": True, "num_splits": 0,
        "sm_margin": 0, "cp_world_size": 1, "cp_rank": 0,
    }
    kwargs = {}
    for arg in torch.ops._vllm_fa3_C.fwd.default._schema.arguments:
        if arg.name in known:
            kwargs[arg.name] = known[arg.name]
        elif arg.has_default_value():
            kwargs[arg.name] = arg.default_value
        elif isinstance(arg.type, torch.OptionalType):
            kwargs[arg.name] = None
        else:
            raise RuntimeError(f"_vllm_fa3_C.fwd wants {arg.name!r}, unknown to attnbench: "
                               f"{torch.ops._vllm_fa3_C.fwd.default._schema}")
    return kwargs


class VllmFA3Backend:
    name = "vllm-fa3"
    description = "vllm-flash-attn FA3 (Hopper): fwd as varlen (unified) / batched + varlen (split)"
    graph_safe = True

    def unavailable_reason(self) -> str | None:
        if not torch.cuda.is_available():
            return "needs a CUDA GPU (none visible)"
        if torch.cuda.get_device_capability() != (9, 0):
            major, minor = torch.cuda.get_device_capability()
            return f"FA3 runs on Hopper (sm_90), this GPU is sm_{major}{minor}"
        return find_module()[1]

    def library(self) -> tuple[str, str]:
        try:
            return "vllm.vllm_flash_attn[fa3]", importlib_metadata.version("vllm")
        except importlib_metadata.PackageNotFoundError:
            return "vllm.vllm_flash_attn[fa3]", "unknown"

    def supports(self, point, strategy, device) -> str | None:
        if device.type != "cuda":
            return "runs on CUDA only"
        if point.head_dim not in HEAD_DIMS:
            return f"--dim: FA3 here supports head dims {HEAD_DIMS}, not {point.head_dim}"
        return None

    def prepare(self, strategy: str, inputs: Inputs, metadata, out: torch.Tensor):
        module, reason = find_module()
        if module is None:
            raise RuntimeError(reason)
        q, kc, vc = inputs.q, inputs.k_cache, inputs.v_cache
        causal, scale = inputs.point.causal, inputs.softmax_scale

        def varlen(q_part, out_part, md: VarlenMetadata) -> None:
            module.flash_attn_varlen_func(
                q_part, kc, vc, max_seqlen_q=md.max_seqlen_q, cu_seqlens_q=md.cu_seqlens_q,
                max_seqlen_k=md.max_seqlen_k, seqused_k=md.seqused_k, softmax_scale=scale, causal=causal,
                block_table=md.block_table, out=out_part, fa_version=3)

        if isinstance(metadata, VarlenMetadata):
            def unified() -> torch.Tensor:
                varlen(q, out, metadata)
                return out
            return unified

        dec, pre = metadata.decode, metadata.prefill
        calls = []
        if dec is not None:
            n_tok = dec.num_seqs * dec.query_len
            shape4 = (dec.num_seqs, dec.query_len, q.shape[1], q.shape[2])
            q4, out4 = q[:n_tok].view(shape4), out[:n_tok].view(shape4)
            # vLLM's Python wrapper needs cu_seqlens_q, so the batched (kvcache) form calls the op
            kwargs = batched_fwd_kwargs(q4, kc, vc, out4, dec.cache_seqlens, dec.block_table,
                                        dec.query_len, int(dec.cache_seqlens.max()), scale, causal)
            calls.append(lambda: torch.ops._vllm_fa3_C.fwd(**kwargs))
        if pre is not None:
            q_pre, out_pre = q[pre.token_offset:], out[pre.token_offset:]
            calls.append(lambda: varlen(q_pre, out_pre, pre))

        def split() -> torch.Tensor:
            for call in calls:
                call()
            return out
        return split
