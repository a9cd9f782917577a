"""What `attnbench verify` judges of a backend that has no graph: its output on each batch against
a float64 attention written plainly here.

Why: the reference backend is the float32 oracle every other verdict rests on, and it is not
graph-safe (its plan reads the lengths to the host; no CUDA graph exists on the CPU), so its
replays judge nothing. What can be judged of it, on any machine, is whether it is right: on the
very batches verify replays (decode, mixed, long contexts, more sequences), planned on each batch
as `kernel` plans it. `float64_attention` shares no code with reference.py: keys are gathered one
position at a time through the block table, GQA repeats each KV head over its group, the causal
window is bottom-right, the softmax is torch's over float64 scores.
"""

from __future__ import annotations

import torch

from attnbench.errors import error_reason
from attnbench.kernels.backends.base import Backend
from attnbench.kernels.check import check_output, worst_check
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import Batch, SweepPoint


def float64_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch,
                      block_table: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """float64 attention of q's tokens (the batch's sequences back to back) over their pages."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    block, group = k_cache.shape[1], q.shape[1] // k_cache.shape[2]
    start = 0
    for q_len, kv_len, row in zip(batch.query_lens, batch.kv_lens, block_table.tolist()):
        pos = torch.arange(kv_len, device=q.device)
        blocks = torch.tensor(row, dtype=torch.long, device=q.device)[pos // block]
        keys = k_cache[blocks, pos % block].double().repeat_interleave(group, dim=1)  # [kv_len, heads, dim]
        values = v_cache[blocks, pos % block].double().repeat_interleave(group, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q[start:start + q_len].double(), keys) * scale
        if causal:  # query i of the sequence sees keys up to kv_len - q_len + i
            hidden = pos[None, :] > (torch.arange(q_len, device=q.device) + kv_len - q_len)[:, None]
            scores = scores.masked_fill(hidden, float("-inf"))
        probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)  # a query seeing no key: zeros
        out[start:start + q_len] = torch.einsum("hij,jhd->ihd", probs, values)
        start += q_len
    return out


def float64_bytes(point: SweepPoint, batch: Batch) -> int:
    """Peak bytes float64_attention adds: its output and one sequence's keys, values and scores."""
    per_seq = max(2 * kv * point.num_heads * point.head_dim * 8 + 3 * point.num_heads * q * kv * 8
                  for q, kv in zip(batch.query_lens, batch.kv_lens))
    return batch.num_tokens * point.num_heads * point.head_dim * 8 + per_seq


def eager_check(backend: Backend, strategy: str, point: SweepPoint, batches: tuple[Batch, ...],
                device: torch.device) -> dict:
    """verdict, reason and rel_l2_error of `strategy` planned on each batch and run once, against
    float64_attention; the first batch that fails names itself."""
    checks = []
    for i, batch in enumerate(batches):
        x = make_inputs(point, device, batch, point.seed + i)
        try:
            plan = backend.plan(strategy, point, build_metadata(strategy, batch, x.block_table).to(device))
            out = torch.full_like(x.q, float("nan"))
            plan.run(x.q, x.k_cache, x.v_cache, out)
            expected = float64_attention(x.q, x.k_cache, x.v_cache, batch, x.block_table, point.causal,
                                         point.softmax_scale)
            checks.append(check_output(out, expected.float(), point.dtype))
        except Exception as exc:  # noqa: BLE001  a backend's failure is this case's verdict, with its reason
            checks.append({"verdict": "fail", "reason": error_reason(exc), "rel_l2_error": float("nan")})
    result = worst_check(checks, lambda i, n: ("on the capture batch: {}", "on the replay batch: {}")[i])
    passed = result["verdict"] == "pass"
    return {"verdict": "pass" if passed else "FAIL",
            "reason": "no graph: planned on each batch, against float64" if passed else result["reason"],
            "rel_l2_error": result["rel_l2_error"]}
