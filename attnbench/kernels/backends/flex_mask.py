"""flex's BlockMask over the paged KV cache: which physical pages each query tile of a launch reads.

The whole physical cache is one KV "sequence" of pages * block_size slots; a BlockMask lists, per
query tile, the pages its rows may see (partly visible pages, masked inside by a mask_mod over
int32 slot tables, and full pages, which skip it). flex.py plans and runs the launches over it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

NO_POSITION = torch.iinfo(torch.int32).max  # slot_pos of a slot no sequence owns


def flex_api():
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
    return BlockMask, flex_attention


def tile_spans(q_lens, kv_lens, q_block: int, block_size: int, causal: bool, pack: int = 1):
    """Per query tile of q_block rows (row = token * pack + head in its group): [(sequence, full
    pages, visible pages)], pages counted from logical 0. A page is full when the tile holds one
    sequence and every row of it sees every slot of the page."""
    starts, seq, tiles = [0, *itertools.accumulate(q_lens)], 0, []
    for row in range(0, starts[-1] * pack, q_block):  # the tile's tokens: [lo, hi)
        lo, hi = row // pack, math.ceil(min(row + q_block, starts[-1] * pack) / pack)
        while starts[seq + 1] <= lo:
            seq += 1
        spans, s = [], seq
        while s < len(q_lens) and starts[s] < hi:
            a, b = max(lo, starts[s]) - starts[s], min(hi, starts[s + 1]) - starts[s]
            shift = kv_lens[s] - q_lens[s] if causal else kv_lens[s] - 1
            lim_min, lim_max = (shift + a, shift + b - 1) if causal else (shift, shift)
            visible = min(math.ceil(kv_lens[s] / block_size), lim_max // block_size + 1) if lim_max >= 0 else 0
            single = starts[s] <= lo and starts[s + 1] >= hi
            full = min(visible, max(0, lim_min + 1) // block_size) if single else 0
            spans, s = spans + ([(s, full, visible)] if visible else []), s + 1
        tiles.append(spans)
    return tiles


def mask_shape(entries) -> tuple[int, int]:
    """(tiles per batch entry, pages the widest tile lists): the kv_indices shape, batch aside."""
    return max(map(len, entries)), max([sum(v for *_, v in tile) for tiles in entries for tile in tiles] + [1])


@dataclass(frozen=True)
class PagedLayout:
    """One launch's q as flex sees it: `batch` entries of `tokens`, row = token * pack + head in group."""

    batch: int
    tokens: int
    pack: int
    q_block: int  # query rows per tile
    kernel: str  # flex_attention or flex_decoding: torch's choice for these shapes, predicted
    kernel_options: tuple  # (name, value) pairs


def build_mask(layout: PagedLayout, q_lens, kv_lens, block_table: list, block_size: int, causal: bool, device):
    """The launch's BlockMask over the first `slots` cache slots, its slots and kv_indices entries."""
    BlockMask, _ = flex_api()
    pages = [row[:math.ceil(kv / block_size)] for row, kv in zip(block_table, kv_lens)]
    used = [p for row in pages for p in row]
    if len(set(used)) != len(used):
        raise ValueError("flex: a page is shared by two sequences; each page must belong to one")
    num_pages, pack = max(used) + 1, layout.pack
    page_seq, page_logical = torch.full((num_pages,), -1), torch.full((num_pages,), NO_POSITION // block_size)
    page_seq[used] = torch.tensor([s for s, row in enumerate(pages) for _ in row])
    page_logical[used] = torch.tensor([j for row in pages for j in range(len(row))])
    slot_seq = page_seq.repeat_interleave(block_size).to(torch.int32).to(device)
    slot_pos = (page_logical[:, None] * block_size + torch.arange(block_size)).flatten().to(torch.int32).to(device)
    limits = [kv - q + i if causal else kv - 1 for q, kv in zip(q_lens, kv_lens) for i in range(q)]
    q_limit = torch.tensor(limits, dtype=torch.int32).view(layout.batch, layout.tokens).to(device)
    q_seq = torch.repeat_interleave(torch.arange(len(q_lens), dtype=torch.int32), torch.tensor(q_lens)).view(
        layout.batch, layout.tokens).to(device)

    def mask_mod(b, h, q_idx, kv_idx):
        token = q_idx // pack
        return (slot_seq[kv_idx] == q_seq[b, token]) & (slot_pos[kv_idx] <= q_limit[b, token])

    groups = [(q_lens, kv_lens, pages)] if layout.batch == 1 else \
        [([q], [k], [p]) for q, k, p in zip(q_lens, kv_lens, pages)]  # batched: tiles of one sequence each
    tiles = [tile_spans(q, kv, layout.q_block, block_size, causal, pack) for q, kv, _ in groups]
    rows, width = mask_shape(tiles)
    tensors = []
    for part in (lambda row, full, vis: row[full:vis], lambda row, full, vis: row[:full]):  # partial, full
        lists = [[[p for s, full, vis in spans for p in part(group[2][s], full, vis)] for spans in entry]
                 + [[]] * (rows - len(entry)) for group, entry in zip(groups, tiles)]
        counts = torch.tensor([[len(t) for t in entry] for entry in lists], dtype=torch.int32)
        indices = torch.tensor([[t + [0] * (width - len(t)) for t in entry] for entry in lists], dtype=torch.int32)
        tensors += [counts.view(-1, 1, rows).to(device), indices.view(-1, 1, rows, width).to(device)]
    block_mask = BlockMask.from_kv_blocks(*tensors, (layout.q_block, block_size), mask_mod, compute_q_blocks=False,
                                          seq_lengths=(layout.tokens * pack, num_pages * block_size))
    return block_mask, num_pages * block_size, layout.batch * rows * width
