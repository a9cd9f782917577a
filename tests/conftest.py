"""The independent oracle and the helpers the tests share.

`naive_attention` is written the slow, obvious way on purpose: float64, one KV head per query
head by `head // group`, one query token at a time, the causal window spelled out bottom-right,
a plain softmax. `page_kv` scatters contiguous K/V into a paged cache through a permuted block
table with its own loop. Neither imports anything from attnbench, so agreeing with them means
something.
"""

from __future__ import annotations

import math
import signal

import pytest
import torch

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def naive_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                    query_lens: list[int], causal: bool, scale: float) -> torch.Tensor:
    """float64 attention. q: [tokens, heads, dim]; keys[s], values[s]: [kv_len, kv_heads, dim]."""
    q = q.double()
    num_heads = q.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    start = 0
    for seq, q_len in enumerate(query_lens):
        k, v = keys[seq].double(), values[seq].double()
        kv_len, kv_heads = k.shape[0], k.shape[1]
        group = num_heads // kv_heads
        for head in range(num_heads):
            kv_head = head // group
            for i in range(q_len):
                # bottom-right: the last query token sees every key, the one before one key fewer
                visible = kv_len - q_len + i + 1 if causal else kv_len
                scores = k[:visible, kv_head] @ q[start + i, head] * scale
                weights = torch.exp(scores - scores.max())
                weights = weights / weights.sum()
                out[start + i, head] = weights @ v[:visible, kv_head]
        start += q_len
    return out


def page_kv(keys: list[torch.Tensor], values: list[torch.Tensor], block_size: int,
            generator: torch.Generator, spare_blocks: int = 3):
    """Scatter per-sequence K/V into (num_blocks, block_size, kv_heads, dim) caches.

    Blocks are handed out in a random order; every slot no sequence owns (spare blocks, the tail
    of each last block, the padding of the table) holds NaN, so reading one shows in the output.
    """
    kv_heads, dim = keys[0].shape[1], keys[0].shape[2]
    counts = [math.ceil(k.shape[0] / block_size) for k in keys]
    num_blocks = sum(counts) + spare_blocks
    order = torch.randperm(num_blocks, generator=generator).tolist()
    owned, spare = order[:sum(counts)], order[sum(counts):]
    shape = (num_blocks, block_size, kv_heads, dim)
    k_cache = torch.full(shape, float("nan"), dtype=keys[0].dtype)
    v_cache = torch.full(shape, float("nan"), dtype=values[0].dtype)
    pad = spare[0] if spare else owned[0]
    block_table = torch.full((len(keys), max(counts)), pad, dtype=torch.int32)
    for seq, (k, v) in enumerate(zip(keys, values)):
        for j in range(counts[seq]):
            block = owned.pop()
            block_table[seq, j] = block
            rows = slice(j * block_size, min((j + 1) * block_size, k.shape[0]))
            n = rows.stop - rows.start
            k_cache[block, :n] = k[rows]
            v_cache[block, :n] = v[rows]
    return k_cache, v_cache, block_table


def rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.double()
    return float((actual.double() - expected).norm() / expected.norm())


@pytest.fixture
def cpu_generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def pytest_configure(config):
    """Ctrl-C as KeyboardInterrupt, wherever the suite was started: a shell starts a background job
    (`cmd &`, nohup) with SIGINT ignored, and Python then installs no handler for it, so the tests
    that stop a run with SIGINT (and the attnbench processes they start, which inherit the
    disposition) would see nothing happen. CI ran its suite that way once and failed on it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
