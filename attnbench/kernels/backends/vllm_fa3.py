"""vllm-flash-attn FA3 (Hopper): the kernel vLLM runs on H100/H200, beside FA2.

FA3 has one forward op, `torch.ops._vllm_fa3_C.fwd`. Both strategies call it directly, with
arguments filled by schema name (vLLM's Python `flash_attn_varlen_func(..., fa_version=3)`
allocates a dummy `cu_seqlens_k` on every call and cannot take the batched form, which needs
`cu_seqlens_q=None`). Unified is one varlen call over the batch (3-D q, `cu_seqlens_q`); split
adds the decode sequences as a batched 4-D q with `cu_seqlens_q=None` (FA3's kvcache path).
`max_seqlen_k` comes from the metadata's host ints, never from the device.

Each launch is scheduled ahead, as vLLM's FlashAttentionMetadataBuilder does on Hopper (aot_schedule,
v1/attention/backends/flash_attn.py): the plan calls vllm_flash_attn's `get_scheduler_metadata`
with the launch's own arguments and passes the tensor it returns as the op's `scheduler_metadata`,
with vLLM's cap on the splits: `max_num_splits` = 16 (_DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH) for a
step of at most 512 tokens (vLLM's default largest CUDA-graph capture size; vLLM sets the cap for
every such step once full graphs are on, whether or not that step replays one), else 0 (FA3's own
heuristic). A captured graph reads that tensor, so `Plan.refresh` recomputes it for the next batch
of the bucket (the same number of sequences) into the same memory, as vLLM copies it into a
persistent buffer each step. The row records what FA3 chose (decisions.py): decision_num_splits
read back from the metadata, decision_pack_gqa derived, decision_max_splits the cap passed.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import torch

from attnbench.kernels.backends.base import LibraryBackend, PlanContext, dist_version
from attnbench.kernels.backends.decisions import fa3_effective_causal, fa3_num_splits, fa3_pack_gqa
from attnbench.kernels.backends.launch import Part
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata
from attnbench.kernels.workload import SweepPoint

HEAD_DIMS = (64, 96, 128, 192, 256)
TENSOR_ARGS = ("q", "k", "v", "out")  # bound at run time; everything else at plan time
VLLM_MAX_SPLITS = 16  # vLLM's _DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH
VLLM_GRAPH_TOKENS = 512  # vLLM's default max_cudagraph_capture_size: larger steps get cap 0


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


def find_scheduler() -> Any:
    """vllm_flash_attn's `get_scheduler_metadata` (its Python signature), once find_op found FA3."""
    return importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface").get_scheduler_metadata


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


def common_kwargs(scale: float, causal: bool, num_splits: int) -> dict:
    return {"softmax_scale": scale, "is_causal": causal, "causal": causal, "window_size_left": -1,
            "window_size_right": -1, "softcap": 0.0, "is_rotary_interleaved": True, "num_splits": num_splits,
            "sm_margin": 0, "cp_world_size": 1, "cp_rank": 0}


def max_splits(metadata: VarlenMetadata | SplitMetadata) -> int:
    """vLLM's cap for this step: VLLM_MAX_SPLITS up to VLLM_GRAPH_TOKENS tokens, else 0 (FA3 decides)."""
    parts = [metadata] if isinstance(metadata, VarlenMetadata) else [metadata.decode, metadata.prefill]
    tokens = sum(p.num_tokens if isinstance(p, VarlenMetadata) else p.num_seqs * p.query_len
                 for p in parts if p is not None)
    return VLLM_MAX_SPLITS if tokens <= VLLM_GRAPH_TOKENS else 0


class VllmFA3Backend(LibraryBackend):
    name = "vllm-fa3"
    description = "vllm-flash-attn FA3 (Hopper): fwd as varlen (unified) / batched + varlen (split)"
    head_dims = HEAD_DIMS

    def __init__(self, library: Any = None, scheduler: Any = None):
        super().__init__(library)  # a test's stand-in op and its get_scheduler_metadata; None: vLLM's
        self._scheduler = scheduler

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

    def scheduler(self) -> Any:
        return self._scheduler if self._library is not None else find_scheduler()

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Part:
        return self.scheduled(ctx, md.seqused_k, md.block_table, md.max_seqlen_q, md.max_seqlen_k, md.cu_seqlens_q)

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Part:
        return self.scheduled(ctx, md.cache_seqlens, md.block_table, md.query_len, md.max_seqlen_k, None)

    def plan_refresh(self, ctx: PlanContext, parts: dict[str, Part]) -> Any:
        def refresh(md: VarlenMetadata | SplitMetadata) -> None:
            shares = {"unified": md} if ctx.strategy == "unified" else {"decode": md.decode, "prefill": md.prefill}
            for role, part in parts.items():
                if shares.get(role) is not None:
                    part.replan(shares[role])
        return refresh

    def scheduled(self, ctx: PlanContext, seqused_k: torch.Tensor, page_table: torch.Tensor, max_seqlen_q: int,
                  max_seqlen_k: int, cu_seqlens_q: torch.Tensor | None) -> Part:
        """One fwd launch with its scheduler metadata computed now (get_scheduler_metadata, vLLM's
        cap), re-computable in place for another batch of the same shape (Part.replan)."""
        op, point, cap = self.lib(), ctx.point, max_splits(ctx.metadata)
        schedule = scheduler_call(self.scheduler(), point, max_seqlen_q, max_seqlen_k, cap)
        metadata = schedule(seqused_k, cu_seqlens_q)
        static = fwd_kwargs(op, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, page_table=page_table,
                            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, scheduler_metadata=metadata,
                            **common_kwargs(point.softmax_scale, point.causal, cap))

        def launch(q, k_cache, v_cache, out):
            op(q=q, k=k_cache, v=v_cache, out=out, **static)

        def replan(share: VarlenMetadata | KVCacheMetadata) -> None:
            lens = share.seqused_k if isinstance(share, VarlenMetadata) else share.cache_seqlens
            cu = share.cu_seqlens_q.to(metadata.device) if cu_seqlens_q is not None else None
            fresh = schedule(lens.to(metadata.device), cu)
            if fresh.numel() != metadata.numel():
                raise RuntimeError(f"vllm-fa3: the new batch's scheduler metadata has {fresh.numel()} entries, the "
                                   f"captured launch reads {metadata.numel()} (another batch size)")
            metadata.copy_(fresh)

        def decide() -> dict:
            splits = fa3_num_splits(metadata.tolist(), seqused_k.numel(),
                                    fa3_effective_causal(point.causal, max_seqlen_q, point.head_dim))
            rows = max_seqlen_q * (point.num_heads // point.num_kv_heads)
            return {"num_splits": splits, "max_splits": cap,
                    "pack_gqa": fa3_pack_gqa(max(cap, splits or 0), point.block_size, rows)}
        return Part(launch, {}, replan=replan, decide=decide)


def scheduler_call(get_scheduler_metadata: Any, point: SweepPoint, max_seqlen_q: int, max_seqlen_k: int, cap: int):
    """(seqused_k, cu_seqlens_q) -> the scheduler metadata of a launch with these static arguments,
    called as vLLM's builder calls it (`schedule` in v1/attention/backends/flash_attn.py)."""
    def schedule(seqused_k: torch.Tensor, cu_seqlens_q: torch.Tensor | None) -> torch.Tensor:
        return get_scheduler_metadata(
            batch_size=seqused_k.numel(), max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            num_heads_q=point.num_heads, num_heads_kv=point.num_kv_heads, headdim=point.head_dim,
            cache_seqlens=seqused_k, qkv_dtype=torch_dtype(point.dtype), cu_seqlens_q=cu_seqlens_q,
            page_size=point.block_size, causal=point.causal, num_splits=cap)
    return schedule
