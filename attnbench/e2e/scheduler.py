"""The engine's host-side bookkeeping: requests, the token-budget scheduler and the paged KV cache.

nano-vllm's `Sequence`, `Scheduler` and `BlockManager` in their plainest form: `schedule` picks
rows (decode rows first, one token each, then prompt chunks within the token budget) and
`KVCache` hands out blocks in a seeded shuffled order, so pages are scattered as in a long run.
`Step` is what the engine's `prepare` makes of a schedule: the rows as plain lists and a host block
table, which the engine's eager path and its graphs (decode, full, piecewise) each load.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from attnbench.e2e.model import ModelArgs
from attnbench.errors import AttnbenchError
from attnbench.kernels.workload import Batch


def make_prompts(batch_size: int, input_len: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch_size, input_len), generator=gen).tolist()


@dataclass
class Sequence:
    index: int
    tokens: list[int]  # prompt, then generated tokens
    prompt_len: int
    output_len: int
    num_cached: int = 0  # tokens whose K/V are in the cache
    block_table: list[int] = field(default_factory=list)

    @property
    def num_outputs(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def finished(self) -> bool:
        return self.num_outputs >= self.output_len

    @property
    def decoding(self) -> bool:
        return self.num_cached >= self.prompt_len


def schedule(seqs: list[Sequence], token_budget: int) -> list[tuple[Sequence, int]]:
    """(sequence, new tokens) rows: decode rows first, then prompt chunks in what budget is left."""
    rows, budget = [], token_budget
    for seq in seqs:
        if not seq.finished and seq.decoding and budget > 0:
            rows.append((seq, 1))
            budget -= 1
    for seq in seqs:
        if not seq.decoding and budget > 0:
            n = min(seq.prompt_len - seq.num_cached, budget)
            rows.append((seq, n))
            budget -= n
    return rows


class KVCache:
    """Every layer's pages, (num_blocks, block_size, kv_heads, head_dim) each, and the free blocks.

    One block past the end is a scratch block, never handed out: graph padding rows write there.
    """

    def __init__(self, args: ModelArgs, num_blocks: int, block_size: int, dtype: torch.dtype, device, seed: int = 0):
        self.num_blocks, self.block_size, self.seed = num_blocks, block_size, seed
        shape = (args.n_layer, num_blocks + 1, block_size, args.n_kv_head, args.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.scratch_slot = num_blocks * block_size
        self.reset()

    @staticmethod
    def blocks_for(max_num_seqs: int, max_model_len: int, block_size: int) -> int:
        return max_num_seqs * math.ceil(max_model_len / block_size)

    def reset(self) -> None:
        """All blocks free, handed out in a seeded shuffled order: scattered pages, as in a long run."""
        self.free = list(range(self.num_blocks))
        random.Random(self.seed).shuffle(self.free)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        need = math.ceil(num_tokens / self.block_size) - len(seq.block_table)
        if need > len(self.free):
            raise AttnbenchError(f"KV cache out of blocks: need {need}, {len(self.free)} free")
        seq.block_table += [self.free.pop() for _ in range(max(need, 0))]

    def release(self, seq: Sequence) -> None:
        self.free += seq.block_table
        seq.block_table = []


@dataclass
class Step:
    """One engine step, prepared on the host; decode rows come first, as metadata.split_batch expects."""

    rows: list[tuple[Sequence, int]]
    batch: Batch
    input_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]
    block_table: torch.Tensor  # int32 [rows, max blocks], host
    sample_rows: list[int]  # rows whose last token is sampled (prompt complete, or decode)
    logits_indices: list[int]  # those rows' last token in the flat batch

    @property
    def kind(self) -> str:
        decode = self.batch.num_decode_seqs
        return "decode" if decode == self.batch.num_seqs else ("prefill" if decode == 0 else "mixed")
