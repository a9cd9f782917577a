"""The oracle: attention over the gathered pages in float32, one plain softmax per sequence.

It runs on any device and is the CPU default. It shares no code with the kernels it checks:
it gathers each sequence's pages through the block table, expands KV heads for GQA, masks
bottom-right causally, and softmaxes in float32. Its plan reads the lengths and tables back to
the host once; its launches then loop over sequences with Python ints. It is not graph-safe:
a launch per sequence per head group is not what a graph is for.
"""

from __future__ import annotations

import torch

from attnbench.kernels.backends.base import Backend, PlanContext
from attnbench.kernels.backends.launch import Launch
from attnbench.kernels.metadata import KVCacheMetadata, VarlenMetadata


def gather_kv(cache: torch.Tensor, pages: torch.Tensor, kv_len: int) -> torch.Tensor:
    """The first kv_len tokens a sequence owns in a paged cache: [kv_len, kv_heads, dim]."""
    return cache[pages].reshape(-1, cache.shape[2], cache.shape[3])[:kv_len]


def sequence_pages(block_table, kv_lens: list[int], block_size: int, device) -> list[torch.Tensor]:
    """Each sequence's used block ids, as index tensors on `device` (made once, at plan time)."""
    rows = block_table.tolist() if isinstance(block_table, torch.Tensor) else block_table
    return [torch.tensor(row[:(kv + block_size - 1) // block_size], dtype=torch.long, device=device)
            for row, kv in zip(rows, kv_lens)]


def reference_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        query_lens: list[int], kv_lens: list[int], block_table,
                        causal: bool, softmax_scale: float, pages: list[torch.Tensor] | None = None) -> torch.Tensor:
    """float32 attention output for q's tokens, sequences laid out back to back in q.

    GQA without copying K/V per query head: each KV head's group of query heads is stacked into
    one [group * q_len, dim] matrix, query row r being token r % q_len.
    """
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    num_heads, dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[2]
    group = num_heads // kv_heads
    if pages is None:
        pages = sequence_pages(block_table, kv_lens, k_cache.shape[1], k_cache.device)
    start = 0
    for seq, (q_len, kv_len) in enumerate(zip(query_lens, kv_lens)):
        qs = q[start:start + q_len].float().view(q_len, kv_heads, group, dim)
        qs = qs.permute(1, 2, 0, 3).reshape(kv_heads, group * q_len, dim)
        k = gather_kv(k_cache, pages[seq], kv_len).float().transpose(0, 1)  # [kv_heads, kv_len, dim]
        v = gather_kv(v_cache, pages[seq], kv_len).float().transpose(0, 1)
        scores = torch.matmul(qs, k.transpose(1, 2)) * softmax_scale  # [kv_heads, group*q_len, kv_len]
        if causal:
            # query token i sees keys up to kv_len - q_len + i (bottom-right alignment)
            token = torch.arange(group * q_len, device=q.device) % q_len
            masked = torch.arange(kv_len, device=q.device)[None, :] > (token + kv_len - q_len)[:, None]
            scores = scores.masked_fill(masked, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        # a query that sees no key (q_len > kv_len) outputs zeros, as FlashAttention does
        probs = torch.nan_to_num(probs, nan=0.0)
        o = torch.matmul(probs, v)  # [kv_heads, group*q_len, dim]
        out[start:start + q_len] = o.view(kv_heads, group, q_len, dim).permute(2, 0, 1, 3).reshape(q_len, num_heads, dim)
        start += q_len
    return out


def _launch(point, query_lens: list[int], kv_lens: list[int], block_table: torch.Tensor) -> Launch:
    pages = sequence_pages(block_table, kv_lens, point.block_size, block_table.device)
    num_tokens = sum(query_lens)

    def launch(q, k_cache, v_cache, out):
        flat_q, flat_out = q.reshape(-1, *q.shape[-2:]), out.view(-1, *out.shape[-2:])
        flat_out[:num_tokens] = reference_attention(
            flat_q[:num_tokens], k_cache, v_cache, query_lens, kv_lens, None, point.causal,
            point.softmax_scale, pages)
    return launch


class ReferenceBackend(Backend):
    name = "reference"
    description = "plain torch, float32 per-sequence softmax over gathered pages (the oracle)"
    graph_safe = False
    oracle = True

    def unavailable_reason(self) -> str | None:
        return None

    def library(self) -> tuple[str, str]:
        return "torch", torch.__version__

    def plan_varlen(self, ctx: PlanContext, md: VarlenMetadata) -> Launch:
        cu = md.cu_seqlens_q.tolist()
        return _launch(ctx.point, [b - a for a, b in zip(cu, cu[1:])], md.seqused_k.tolist(), md.block_table)

    def plan_kvcache(self, ctx: PlanContext, md: KVCacheMetadata) -> Launch:
        return _launch(ctx.point, [md.query_len] * md.num_seqs, md.cache_seqlens.tolist(), md.block_table)
