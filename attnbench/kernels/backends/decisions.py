"""What a library decided for a plan, as a few named values: the `decision_*` columns of a row.

Why: FA3's number of KV splits and packed GQA, FlashInfer's kernel family and tensor-core decode,
the Triton kernel's 2-D or 3-D grid move where unified and split cross over, and a row that does not say them cannot be explained.
A backend's parts return these through `Part.decide` (base.py says when it is called); this module
names the decisions (DECISIONS: key -> what it means), merges a plan's parts into one value per
key, and derives FA3's from what its scheduler metadata holds (hopper/flash_api.cpp of
vllm-project/flash-attention, read at commit 617264c1; docs/guides/kernel.md cites the lines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PREFIX = "decision_"
# key -> what the column means; a row's column is PREFIX + key (kernels/rows.py Decisions)
DECISIONS = {
    "num_splits": "KV splits per query tile: FA3 from its scheduler metadata, FA2 from its split heuristic",
    "pack_gqa": "FA3 packs the query heads of one KV head into one tile (derived, see kernel.md)",
    "max_splits": "the cap on FA3's splits passed with the scheduler metadata (vLLM's, 0: FA3's heuristic)",
    "fi_backend": "the kernel family FlashInfer's backend='auto' resolved to (fa2 or fa3)",
    "tensor_cores": "FlashInfer's BatchDecode runs its tensor-core (prefill) kernel",
    "split_kv": "FlashInfer's plan splits the KV of long requests across CTAs",
    "ctas": "CTAs FlashInfer's BatchAttention plan launches (num_blks_x * num_blks_y)",
    "triton_path": "the grid vLLM's unified Triton kernel takes: 2d, or 3d (each sequence's keys cut into segments)",
    "segments": "segments per sequence of the Triton kernel's 3-D form (1 in the 2-D form)",
}


def merged(by_part: Mapping[str, Mapping[str, object]]) -> dict[str, str]:
    """One text value per decision from each part's (role -> decisions): the value when every part
    that decides it agrees, else `role=value` pairs in launch order (`decode=4 prefill=1`)."""
    unknown = {key for values in by_part.values() for key in values} - DECISIONS.keys()
    if unknown:
        raise ValueError(f"undeclared decision(s) {sorted(unknown)}: declare them in decisions.DECISIONS")
    out = {}
    for key in DECISIONS:
        said = {role: text(values[key]) for role, values in by_part.items() if values.get(key) is not None}
        if said:
            distinct = set(said.values())
            out[key] = distinct.pop() if len(distinct) == 1 else " ".join(f"{r}={v}" for r, v in said.items())
    return out


def text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def columns(decisions: Mapping[str, str]) -> dict[str, str]:
    """{decision_<key>: value} for a row."""
    return {PREFIX + key: value for key, value in decisions.items()}


# ---- FA3 (vllm-project/flash-attention hopper/flash_api.cpp, mha_fwd_get_scheduler_metadata) --------

def fa3_effective_causal(causal: bool, max_seqlen_q: int, head_dim: int) -> bool:
    """FA3 treats a one-query-token causal batch as non-causal except at head dim 65..128 with a
    paged cache (get_scheduler_metadata's "Special case of hdim 128"); attnbench's cache is paged."""
    return causal and not (max_seqlen_q == 1 and (head_dim <= 64 or head_dim > 128))


def fa3_num_splits(metadata: Sequence[int], batch_size: int, causal: bool) -> int | None:
    """The most splits any sequence got, read from FA3's scheduler metadata, or None when its length
    does not match the layout. Layout (flash_api.cpp, "ORDER"): vectors of round_up(b, 4) ints,
    {prepare_seqlen_q, num_splits_dynamic (only when dynamic splits are on), num_nheads_in_l2 (only
    when causal or local)}, then one tile semaphore (sm90). No num_splits_dynamic vector: dynamic
    splits are off, so one split (the static count is 1, or the batch has more than
    PREPARE_VARLEN_MAX_BATCHES_1CTA = 992 sequences, where mha_fwd sets num_splits = 1)."""
    rounded = (batch_size + 3) // 4 * 4
    vectors, semaphore = divmod(len(metadata), rounded) if rounded else (0, 0)
    dynamic = vectors - 1 - int(causal)
    if semaphore != 1 or dynamic not in (0, 1):
        return None
    if not dynamic:
        return 1
    return max(1, *metadata[rounded:rounded + batch_size])


def fa3_pack_gqa(static_splits: int, block_size: int, query_rows_per_kv_head: int) -> bool | None:
    """Whether FA3 packs GQA (get_pack_gqa), where that follows without its tile sizes: always when its
    static split count (the cap passed, or one that turned dynamic splits on) is over one ("Always
    enable PackGQA for Split"), and always for a paged cache read without TMA, which
    is the case when the page size is not a multiple of kBlockN (every bf16/fp16 kBlockN in
    tile_size.h is >= 64) or when seqlen_q * (h / h_k) <= kBlockM (every kBlockM is >= 64)
    (get_pagedkv_tma). None: the answer needs the tile sizes."""
    if static_splits > 1:
        return True
    if block_size < 64 or query_rows_per_kv_head <= 64:
        return True
    return None


# ---- FA2 (vllm-project/flash-attention csrc/flash_attn/flash_api.cpp) ---------------------------------

def fa2_num_splits(batch_size: int, num_heads: int, num_kv_heads: int, seqlen_q: int, seqlen_k: int,
                   head_dim: int, num_sms: int, kvcache: bool) -> int:
    """FA2's KV splits for one launch, derived as set_params_splitkv decides them with num_splits=0.
    A one-token GQA query is first regrouped (seqlenq_ngroups_swapped: the query heads of a KV head
    become its query rows). varlen_fwd splits only such a launch (a paged varlen launch otherwise
    runs unsplit); fwd_kvcache always asks the heuristic, with seqlen_k the block table's width
    times the page size (what the caller passes here)."""
    if seqlen_q == 1 and num_heads > num_kv_heads:
        seqlen_q, num_heads = num_heads // num_kv_heads, num_kv_heads
    elif not kvcache:
        return 1
    block_n = 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64
    n_blocks, m_blocks = -(-seqlen_k // block_n), -(-seqlen_q // 64)
    return fa2_split_heuristic(batch_size * num_heads * m_blocks, 2 * num_sms, n_blocks, 128)


def fa2_split_heuristic(tiles: int, num_sms: int, n_blocks: int, max_splits: int) -> int:
    """FA2's num_splits_heuristic: one split when the tiles nearly fill the SMs (>= 80%); else the
    fewest splits whose wave efficiency is within 85% of the best, counting only split counts that
    change the blocks per split (the caller doubles the SMs: 128-thread blocks)."""
    if tiles <= 0 or tiles >= 0.8 * num_sms:
        return 1
    limit = min(max_splits, num_sms, n_blocks)
    eligible = [s for s in range(1, limit + 1) if s == 1 or -(-n_blocks // s) != -(-n_blocks // (s - 1))]
    efficiency = {}
    for splits in eligible:
        waves = tiles * splits / num_sms
        efficiency[splits] = waves / -(-waves // 1)
    best = max(efficiency.values(), default=0.0)
    return next((s for s in eligible if efficiency[s] >= 0.85 * best), 1)
