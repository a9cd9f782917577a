"""The oracle: attention over the gathered pages in float32, one plain softmax per sequence.

It runs on any device and is the CPU default. It shares no code with the kernels it checks:
it gathers each sequence's pages through the block table, expands KV heads for GQA, masks
bottom-right causally, and softmaxes in float32.
"""

from __future__ import annotations

import torch

from attnbench.inputs import Inputs
from attnbench.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata


def gather_kv(cache: torch.Tensor, block_row: list[int], kv_len: int) -> torch.Tensor:
    """The first kv_len tokens a sequence owns in a paged cache: [kv_len, kv_heads, dim]."""
    block_size = cache.shape[1]
    blocks = block_row[: (kv_len + block_size - 1) // block_size]
    return cache[blocks].reshape(-1, cache.shape[2], cache.shape[3])[:kv_len]


def reference_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        query_lens: list[int], kv_lens: list[int], block_table: torch.Tensor,
                        causal: bool, softmax_scale: float) -> torch.Tensor:
    """float32 attention output for q's tokens, sequences laid out back to back in q.

    GQA without copying K/V per query head: each KV head's group of query heads is stacked into
    one [group * q_len, dim] matrix, query row r being token r % q_len.
    """
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    num_heads, dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[2]
    group = num_heads // kv_heads
    rows = block_table.tolist()
    start = 0
    for seq, (q_len, kv_len) in enumerate(zip(query_lens, kv_lens)):
        qs = q[start:start + q_len].float().view(q_len, kv_heads, group, dim)
        qs = qs.permute(1, 2, 0, 3).reshape(kv_heads, group * q_len, dim)
        k = gather_kv(k_cache, rows[seq], kv_len).float().transpose(0, 1)  # [kv_heads, kv_len, dim]
        v = gather_kv(v_cache, rows[seq], kv_len).float().transpose(0, 1)
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


def _lens(md: VarlenMetadata) -> tuple[list[int], list[int]]:
    cu = md.cu_seqlens_q.tolist()
    return [b - a for a, b in zip(cu, cu[1:])], md.seqused_k.tolist()


class ReferenceBackend:
    name = "reference"
    description = "plain torch, float32 per-sequence softmax over gathered pages (the oracle)"
    graph_safe = False  # it reads lengths back to the host, which a CUDA graph cannot capture

    def unavailable_reason(self) -> str | None:
        return None

    def library(self) -> tuple[str, str]:
        return "torch", torch.__version__

    def supports(self, point, strategy, device) -> str | None:
        return None

    def prepare(self, strategy: str, inputs: Inputs, metadata, out: torch.Tensor):
        causal, scale = inputs.point.causal, inputs.softmax_scale
        parts: list[tuple[int, list[int], list[int], torch.Tensor]] = []
        if isinstance(metadata, VarlenMetadata):
            parts.append((0, *_lens(metadata), metadata.block_table))
        else:
            assert isinstance(metadata, SplitMetadata)
            dec: KVCacheMetadata | None = metadata.decode
            if dec is not None:
                parts.append((0, [dec.query_len] * dec.num_seqs, dec.cache_seqlens.tolist(), dec.block_table))
            if metadata.prefill is not None:
                parts.append((metadata.prefill.token_offset, *_lens(metadata.prefill), metadata.prefill.block_table))

        def run() -> torch.Tensor:
            for offset, q_lens, kv_lens, table in parts:
                n = sum(q_lens)
                out[offset:offset + n] = reference_attention(
                    inputs.q[offset:offset + n], inputs.k_cache, inputs.v_cache,
                    q_lens, kv_lens, table, causal, scale)
            return out

        return run
