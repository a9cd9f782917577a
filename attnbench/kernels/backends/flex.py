"""torch FlexAttention over the paged KV cache: the compiler's kernel, not a hand-written one.

Formulation. The whole physical cache is one KV "sequence" of pages * block_size slots, read in
place. A BlockMask built at plan time (flex_mask.py) lists, per query tile, the physical pages its
rows may see (pages are shuffled; nothing assumes contiguity), so the kernel skips all others: its
KV block is the page. A `mask_mod` masks inside partly visible pages with int32 tables made once: slot ->
sequence, slot -> logical position, and per query token the last position it sees (bottom-right
causal: query i of q_len sees up to kv_len - q_len + i; kv_len - 1 if not causal). Pages a whole
tile sees are full blocks, which skip the mask_mod.

- unified (`plan_varlen`): the batch's query tokens are one query sequence, run by the general
  flex_attention kernel (FORCE_USE_FLEX_ATTENTION). When the mean query length is under 16,
  each KV head's group of query heads is folded into rows ([1, Hkv, tokens * group, D], a copy
  of q; FA3's PackGQA): a 16-row tile of decodes then spans 16 / group sequences, not 16, and
  reads a page once per KV head (faster on decodes, slower on prefill, so not there:
  docs/kernels/flex.md). `q_block` is the largest power of two in [16, 128] <= mean rows/seq.
- split (`plan_kvcache`): the decode part is batched, [seqs, H, query_len, D] against the cache
  broadcast over the batch, one page list per sequence: torch's split-KV flex_decoding kernel
  (query_len < 128, power-of-two GQA ratio). The rest is unified.

Not torch's experimental `PagedAttention` helper: it maps a logical BlockMask through [batch,
pages] tables and pads queries to [batch, max_q_len] (a 500-token chunk beside 500 decodes:
500 x 501 rows); the block table already says what it would.

On CUDA `flex_attention` is compiled (torch.compile, static shapes, fullgraph) once per shape, at
plan time, on scratch tensors of the same shapes; rows record `compile_s` and `compile_cache`
(fresh, fx-graph-cache, dynamo-cache, or process: compiled earlier here). The compiled call only
launches kernels: graph-safe. On CPU it runs eagerly on torch's dense path (every score made, the
page lists unused): for correctness only, and points too big for it are skipped.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
import warnings
from collections.abc import Callable
from importlib.util import find_spec

import torch

from attnbench.kernels.backends.base import Backend, PlanContext
from attnbench.kernels.backends.flex_mask import PagedLayout, build_mask, flex_api, mask_shape, tile_spans
from attnbench.kernels.backends.launch import Part
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import KVCacheMetadata, VarlenMetadata, num_cache_blocks, split_batch
from attnbench.kernels.workload import Batch, SweepPoint, build_batch

MAX_MASK_ENTRIES = 1 << 26  # kv_indices entries of one BlockMask (int32): 256 MiB
MAX_EAGER_BYTES = 4 << 30  # CPU eager path: its dense [B, H, q, slots] score working set
def _layout(point: SweepPoint, batch: int, tokens: int, mean_q: float, decoding: bool) -> PagedLayout:
    group = point.num_heads // point.num_kv_heads
    block_n = min(64, point.block_size & -point.block_size)  # a power of two dividing the page
    if decoding and tokens < 128 and group & (group - 1) == 0:  # torch's _use_flex_decoding rule
        # it packs tokens * group rows in a tile itself; the mask's tile must be a multiple of that
        q_block = max(16, 1 << max(0, tokens * group - 1).bit_length())
        return PagedLayout(batch, tokens, 1, q_block, "flex_decoding", (("BLOCK_N", block_n),))
    pack = group if mean_q < 16 else 1  # fold heads only where a 16-row tile spans several sequences
    q_block = max(16, min(128, 1 << max(0, round(mean_q * pack).bit_length() - 1)))  # a power of two
    options = (("FORCE_USE_FLEX_ATTENTION", True), ("BLOCK_M", q_block), ("BLOCK_N", block_n))
    return PagedLayout(batch, tokens, pack, q_block, "flex_attention",
                       options + ((("num_warps", 4),) if q_block <= 64 else ()))


def _launch_shapes(point: SweepPoint, strategy: str, batch: Batch):
    """(layout, [(query lens, kv lens)] per batch entry) of each launch a strategy makes."""
    decode, prefill = split_batch(batch) if strategy == "split" else ([], list(range(batch.num_seqs)))
    out = []
    if decode:  # decode sequences come first, one query length
        n = batch.query_lens[0]
        out.append((_layout(point, len(decode), n, n, True), [([n], [batch.kv_lens[i]]) for i in decode]))
    if prefill:
        q, kv = [batch.query_lens[i] for i in prefill], [batch.kv_lens[i] for i in prefill]
        out.append((_layout(point, 1, sum(q), sum(q) / len(q), False), [(q, kv)]))
    return out


def _attend(flex, layout: PagedLayout, block_mask, slots: int, scale: float, options, q, k_cache, v_cache):
    q4, k4 = _q_rows(layout, q), _kv_slots(k_cache, slots)
    return flex(q4, k4, _kv_slots(v_cache, slots), block_mask=block_mask, scale=scale,
                enable_gqa=q4.shape[1] != k4.shape[1], kernel_options=options)


def _q_rows(layout: PagedLayout, q: torch.Tensor) -> torch.Tensor:
    """q's tokens as flex's [batch, H / pack, tokens * pack, D]: a view when pack is 1, else a copy
    in which one token's group of heads is adjacent rows (q is small next to the cache)."""
    q = q.view(-1, *q.shape[-2:])[:layout.batch * layout.tokens]
    heads = q.shape[1] // layout.pack
    return q.view(layout.batch, layout.tokens, heads, layout.pack, -1).transpose(1, 2).reshape(
        layout.batch, heads, layout.tokens * layout.pack, -1)


def _kv_slots(cache: torch.Tensor, slots: int) -> torch.Tensor:
    """The cache's first `slots` slots as [1, Hkv, slots, D]: a view, read in place."""
    return cache.view(-1, *cache.shape[2:])[:slots].unsqueeze(0).transpose(1, 2)


def _write_out(layout: PagedLayout, result: torch.Tensor, out: torch.Tensor) -> None:
    out, heads = out.view(-1, *out.shape[-2:])[:layout.batch * layout.tokens], result.shape[1]
    out.view(layout.batch, layout.tokens, heads, layout.pack, -1).copy_(
        result.view(layout.batch, heads, layout.tokens, layout.pack, -1).transpose(1, 2))


@functools.cache
def _compiledflex_api() -> Callable:
    """One torch.compile'd flex_attention for the process: a new shape adds a graph to it."""
    # a sweep compiles a graph per shape; past dynamo's limit (8) the rest would run eagerly, unsaid
    for limit in ("recompile_limit", "accumulated_recompile_limit"):
        setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 4096))
    return torch.compile(flex_api()[1], fullgraph=True, dynamic=False)


class FlexBackend(Backend):
    name = "flex"
    description = "torch FlexAttention, BlockMask over the paged cache (compiled on CUDA, eager on CPU)"
    strategies = ("unified", "split")
    graph_safe = True  # CUDA: compiled at plan time, the call then only launches kernels
    graph_replay = "none"  # base.py: the BlockMask is the plan's batch's; a graph replays that batch only
    # its Triton kernels offset K/V pointers in int32 (pytorch#190857, vllm#50427): past 2^31 they wrap
    max_cache_elements = 2**31
    cache_limit_why = ("past the 2^31 that its Triton kernels' int32 offsets reach (pytorch#190857, vllm#50427); "
                       "use fewer or shorter sequences")
    dtypes = ("bfloat16", "float16")
    opt_in = True  # every new shape compiles for seconds (docs/kernels/flex.md): a default sweep would pay it per point

    def __init__(self):
        # shape key -> seconds its first call took: the process's compile cache, shared by every plan
        self._compiles: dict[tuple, float] = {}

    def unavailable_reason(self) -> str | None:
        try:
            flex_api()
        except Exception as exc:  # ImportError, or a torch whose module fails to load: said, not raised
            return f"torch {torch.__version__} has no torch.nn.attention.flex_attention ({type(exc).__name__}: {exc})"
        return None

    def library(self) -> tuple[str, str]:
        return "torch", torch.__version__

    def supports(self, point: SweepPoint, strategy: str, device: torch.device) -> str | None:
        reason = super().supports(point, strategy, device)
        if reason or strategy not in self.strategies:
            return reason
        if device.type == "cuda" and (not 16 <= point.head_dim <= 256 or find_spec("triton") is None):
            return (f"--dim: flex's Triton kernels take head dims 16..256, not {point.head_dim}"
                    if find_spec("triton") else "flex on CUDA compiles Triton kernels; triton is not installed")
        batch = build_batch(point)
        slots = num_cache_blocks(batch, point.block_size) * point.block_size
        for layout, groups in _launch_shapes(point, strategy, batch):
            tiles = [tile_spans(q, kv, layout.q_block, point.block_size, point.causal, layout.pack) for q, kv in groups]
            entries = layout.batch * math.prod(mask_shape(tiles))
            if entries > MAX_MASK_ENTRIES:
                return f"flex: its BlockMask would list {entries:,} pages (limit {MAX_MASK_ENTRIES:,})"
            dense = layout.batch * point.num_heads * layout.tokens * slots * 16
            if device.type != "cuda" and dense > MAX_EAGER_BYTES:
                return (f"flex on {device.type} runs eagerly on dense scores: {dense / 2**30:.1f} GiB here "
                        f"(limit {MAX_EAGER_BYTES // 2**30} GiB); use fewer tokens or a GPU")
        return None

    def plan_details(self, ctx: PlanContext, parts: dict[str, Part]) -> dict:
        """Each part's choices, joined in launch order (decode first): one row describes both."""
        chosen = [part.details for part in parts.values()]
        joined = lambda key: "+".join(str(p[key]) for p in chosen)  # noqa: E731
        compiled = chosen[0]["flex_mode"] == "compiled"
        return {"flex_mode": chosen[0]["flex_mode"], "flex_kernel": joined("flex_kernel"),
                "compile_s": sum(p["compile_s"] for p in chosen) if compiled else None,
                "compile_cache": joined("compile_cache"),
                "flex_q_block": joined("q_block"), "flex_kv_block": ctx.point.block_size,
                "flex_mask_entries": sum(p["entries"] for p in chosen)}

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Part:
        cu = md.cu_seqlens_q.tolist()
        layout = _layout(ctx.point, 1, md.num_tokens, md.num_tokens / md.num_seqs, False)
        q_lens = [b - a for a, b in itertools.pairwise(cu)]
        return self._plan(ctx.point, layout, q_lens, md.seqused_k.tolist(), md.block_table)

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Part:
        layout = _layout(ctx.point, md.num_seqs, md.query_len, md.query_len, True)
        return self._plan(ctx.point, layout, [md.query_len] * md.num_seqs, md.cache_seqlens.tolist(), md.block_table)

    def _plan(self, point, layout: PagedLayout, q_lens, kv_lens, block_table) -> Part:
        block_mask, slots, entries = build_mask(layout, q_lens, kv_lens, block_table.tolist(), point.block_size,
                                                point.causal, block_table.device)
        compiled = block_table.device.type == "cuda"
        if compiled:  # e2e: a cache sized by the engine, not by a sweep point (supports checks those)
            self.require_cache(slots * point.num_kv_heads * point.head_dim)
        flex, options = (_compiledflex_api(), dict(layout.kernel_options)) if compiled else (flex_api()[1], None)
        compile_s, cache = self._warm(point, layout, slots, block_mask, flex) if compiled else (None, "none")
        chose = {"flex_mode": "compiled" if compiled else "eager", "compile_s": compile_s,
                 "flex_kernel": layout.kernel if compiled else "dense-math", "compile_cache": cache,
                 "q_block": layout.q_block, "entries": entries}

        def launch(q, k_cache, v_cache, out):
            with warnings.catch_warnings():  # eager: torch's "without torch.compile" note (flex_mode says it)
                warnings.simplefilter("ignore", UserWarning)
                result = _attend(flex, layout, block_mask, slots, point.softmax_scale, options, q, k_cache, v_cache)
            _write_out(layout, result, out)
        return Part(launch, chose)

    def _warm(self, point, layout: PagedLayout, slots: int, block_mask, flex) -> tuple[float, str]:
        """The first call for these shapes, on scratch tensors of the same shapes and strides:
        (its seconds, where its code came from: fresh, fx-graph-cache, dynamo-cache, process)."""
        device = block_mask.kv_indices.device
        key = (layout, slots, point.num_heads, point.num_kv_heads, point.head_dim, point.dtype, point.block_size,
               tuple(block_mask.kv_indices.shape), str(device))
        if key in self._compiles:
            return self._compiles[key], "process"
        from torch._dynamo.utils import counters
        dtype = torch_dtype(point.dtype)
        q = torch.empty((layout.batch * layout.tokens, point.num_heads, point.head_dim), dtype=dtype, device=device)
        cache = torch.empty((2, slots, 1, point.num_kv_heads, point.head_dim), dtype=dtype, device=device)
        graphs, hits = counters["stats"]["unique_graphs"], counters["inductor"]["fxgraph_cache_hit"]
        start = time.perf_counter()
        _attend(flex, layout, block_mask, slots, point.softmax_scale, dict(layout.kernel_options), q, *cache)
        torch.cuda.synchronize(device)
        self._compiles[key] = seconds = time.perf_counter() - start
        if counters["stats"]["unique_graphs"] == graphs:
            return seconds, "dynamo-cache"  # guards matched a graph another plan compiled
        return seconds, "fx-graph-cache" if counters["inductor"]["fxgraph_cache_hit"] > hits else "fresh"
