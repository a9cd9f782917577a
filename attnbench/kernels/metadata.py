"""Pure builders for the attention metadata each strategy needs, from a Batch.

These run on the host before a kernel launches, as a serving engine's `prepare_*` step does; the
time they take is part of the unified-vs-split answer (splitting a batch costs CPU work), so
`measure_host_us` times them, including the copy to the device. The timed kernel callables
never build metadata.

Layout (vLLM's): the paged KV cache is (num_blocks, block_size, num_kv_heads, head_dim); sequence
i owns blocks block_table[i, :ceil(kv_len / block_size)], drawn from a seeded random permutation
of all blocks so that pages are scattered as in a long-running server.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from attnbench.kernels.timing import host_median_us
from attnbench.kernels.workload import Batch


@dataclass(frozen=True)
class VarlenMetadata:
    """Inputs of one paged varlen call over some sequences of the batch."""

    cu_seqlens_q: torch.Tensor  # int32 [num_seqs + 1]
    seqused_k: torch.Tensor  # int32 [num_seqs], keys each sequence attends to
    block_table: torch.Tensor  # int32 [num_seqs, max_blocks_per_seq]
    max_seqlen_q: int
    max_seqlen_k: int
    token_offset: int  # where these sequences' query tokens start in the batch's q

    @property
    def num_seqs(self) -> int:
        return self.seqused_k.shape[0]

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens_q[-1])

    @property
    def cu_seqlens_k(self) -> torch.Tensor:
        """Cumulative KV lengths: what older APIs want instead of seqused_k."""
        return torch.nn.functional.pad(torch.cumsum(self.seqused_k, 0, dtype=torch.int32), (1, 0))

    def to(self, device: torch.device | str) -> VarlenMetadata:
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return VarlenMetadata(move(self.cu_seqlens_q), move(self.seqused_k), move(self.block_table),
                              self.max_seqlen_q, self.max_seqlen_k, self.token_offset)


@dataclass(frozen=True)
class KVCacheMetadata:
    """Inputs of one flash_attn_with_kvcache call: uniform query length per sequence."""

    cache_seqlens: torch.Tensor  # int32 [num_seqs]
    block_table: torch.Tensor  # int32 [num_seqs, max_blocks_per_seq]
    query_len: int
    max_seqlen_k: int  # a host int, so a plan never reads cache_seqlens back
    token_offset: int

    @property
    def num_seqs(self) -> int:
        return self.cache_seqlens.shape[0]

    def to(self, device: torch.device | str) -> KVCacheMetadata:
        return KVCacheMetadata(self.cache_seqlens.to(device, non_blocking=True),
                               self.block_table.to(device, non_blocking=True),
                               self.query_len, self.max_seqlen_k, self.token_offset)


@dataclass(frozen=True)
class SplitMetadata:
    """The split strategy: decode sequences through kvcache, the rest through varlen."""

    decode: KVCacheMetadata | None
    prefill: VarlenMetadata | None

    def to(self, device: torch.device | str) -> SplitMetadata:
        return SplitMetadata(self.decode.to(device) if self.decode else None,
                             self.prefill.to(device) if self.prefill else None)


def blocks_needed(kv_lens: tuple[int, ...] | list[int], block_size: int) -> list[int]:
    return [math.ceil(kv / block_size) for kv in kv_lens]


def num_cache_blocks(batch: Batch, block_size: int) -> int:
    return sum(blocks_needed(batch.kv_lens, block_size))


def build_block_table(batch: Batch, block_size: int, seed: int = 0) -> torch.Tensor:
    """Rows of physical block ids, one row per sequence, padded with 0 (never read)."""
    counts = blocks_needed(batch.kv_lens, block_size)
    physical = list(range(sum(counts)))
    random.Random(seed).shuffle(physical)
    table = torch.zeros((batch.num_seqs, max(counts)), dtype=torch.int32)
    start = 0
    for row, count in enumerate(counts):
        table[row, :count] = torch.tensor(physical[start:start + count], dtype=torch.int32)
        start += count
    return table


def _varlen(query_lens, kv_lens, block_table, token_offset) -> VarlenMetadata:
    cu = [0]
    for q in query_lens:
        cu.append(cu[-1] + q)
    return VarlenMetadata(
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seqused_k=torch.tensor(kv_lens, dtype=torch.int32),
        block_table=block_table,
        max_seqlen_q=max(query_lens),
        max_seqlen_k=max(kv_lens),
        token_offset=token_offset,
    )


def build_unified(batch: Batch, block_table: torch.Tensor) -> VarlenMetadata:
    """One varlen call over every sequence of the batch."""
    return _varlen(batch.query_lens, batch.kv_lens, block_table, 0)


def split_batch(batch: Batch) -> tuple[list[int], list[int]]:
    """Indices of the decode-role sequences and of the others (decode ones come first)."""
    decode = [i for i, d in enumerate(batch.is_decode) if d]
    prefill = [i for i, d in enumerate(batch.is_decode) if not d]
    return decode, prefill


def build_split(batch: Batch, block_table: torch.Tensor) -> SplitMetadata:
    """Decode part for the kvcache kernel, prefill part for the varlen kernel."""
    decode_idx, prefill_idx = split_batch(batch)
    decode = prefill = None
    decode_tokens = sum(batch.query_lens[i] for i in decode_idx)
    if decode_idx:
        query_lens = {batch.query_lens[i] for i in decode_idx}
        if len(query_lens) != 1:
            raise ValueError(f"decode sequences need one query length, got {sorted(query_lens)}")
        n = len(decode_idx)
        kv_lens = [batch.kv_lens[i] for i in decode_idx]
        decode = KVCacheMetadata(
            cache_seqlens=torch.tensor(kv_lens, dtype=torch.int32),
            block_table=block_table[:n],
            query_len=query_lens.pop(),
            max_seqlen_k=max(kv_lens),
            token_offset=0,
        )
    if prefill_idx:
        start = len(decode_idx)
        prefill = _varlen([batch.query_lens[i] for i in prefill_idx],
                          [batch.kv_lens[i] for i in prefill_idx],
                          block_table[start:], decode_tokens)
    return SplitMetadata(decode, prefill)


def build_metadata(strategy: str, batch: Batch, block_table: torch.Tensor):
    if strategy == "unified":
        return build_unified(batch, block_table)
    if strategy in ("split", "fused"):  # fused runs split's two parts in one launch
        return build_split(batch, block_table)
    raise ValueError(f"unknown strategy {strategy!r}")


def measure_host_us(strategy: str, batch: Batch, block_table: torch.Tensor,
                    device: torch.device, repeats: int = 21) -> float:
    """Median host time (µs) to build a strategy's metadata and land it on the device."""
    def build_and_land() -> None:
        build_metadata(strategy, batch, block_table).to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return host_median_us(build_and_land, repeats)
