"""The graph-safety recipe for varlen attention, as pure functions, and the replay check behind
`attnbench verify`.

Why: vLLM PR #6052's one real bug was garbage under CUDA graphs. A graph freezes the host-side
arguments of every launch it captured (`max_seqlen_q/k`, the launch grid, the tensors' shapes and
addresses) and re-reads only device memory on replay. A varlen call captured on one batch's
metadata and replayed on another batch written into the same buffers therefore computes with the
capture batch's `max_seqlen_q` (FA2 sizes its grid by it, and takes a packed, non-causal path when
it is 1) and `max_seqlen_k` (FA2's split-KV partitions are sized by it).

Two policies for copying a batch into fixed buffers sized for a bucket (max sequences, max tokens,
max blocks per sequence):

- `naive`: the plan is made once from the capture batch's metadata and never changes (its
  `max_seqlen_q/k`, its parts); each batch is copied into the buffers' prefixes, the tail left as
  it was (zeros, or an earlier batch's values). q/out have the bucket's rows under both policies,
  as an e2e full-graph bucket shared by a decode and a mixed step has: a decode capture batch
  then sits in more rows than it has sequences (what FA2's packed-GQA path refuses: verify.py).
- `safe` (the seed PR's fix for that bug): `max_seqlen_q/k` are the bucket's upper bounds; the
  tail of `cu_seqlens_q` repeats its last value (padding sequences are empty, the array
  non-decreasing); padding rows have `seqused_k`/`cache_seqlens` 0 and block-table rows pointing
  at a scratch block; a split plan has both parts whenever the bucket has them, a part absent from
  a batch being all padding.

`replay_check` captures `Plan.run` in a CUDA graph on the capture batch and replays it on each
other batch, comparing the real rows with the float32 reference. On the CPU there is no graph:
"replay" calls the same plan's `run` again after the buffers were rewritten, which models a replay
only for backends whose launches read the metadata tensors when they execute (the tests' fake FA2
ops); the reference backend reads lengths at plan time and fails every replay, as it should.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch

from attnbench.errors import error_reason
from attnbench.kernels.backends.base import Backend
from attnbench.kernels.backends.reference import reference_attention
from attnbench.kernels.check import check_output
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.metadata import (KVCacheMetadata, SplitMetadata, VarlenMetadata, build_block_table,
                                        build_metadata, num_cache_blocks)
from attnbench.kernels.workload import Batch, SweepPoint

POLICIES = ("naive", "safe")
Metadata = VarlenMetadata | SplitMetadata


@dataclass(frozen=True)
class Bucket:
    """The static sizes a graph is captured at: what every batch replayed on it must fit."""

    max_decode_seqs: int  # split's decode part (unified counts them in max_seqs)
    max_prefill_seqs: int
    max_tokens: int
    max_query_len: int  # the safe max_seqlen_q
    max_blocks_per_seq: int
    block_size: int
    decode_query_len: int = 1

    @property
    def max_seqs(self) -> int:
        return self.max_decode_seqs + self.max_prefill_seqs

    @property
    def max_seqlen_k(self) -> int:  # the safe max_seqlen_k: every key a block-table row can reach
        return self.max_blocks_per_seq * self.block_size


def bucket_for(batches: list[Batch], block_size: int) -> Bucket:
    """The smallest bucket every batch fits (an engine would take the model's limits)."""
    decode_lens = {q for b in batches for q, d in zip(b.query_lens, b.is_decode) if d}
    if len(decode_lens) > 1:
        raise ValueError(f"decode sequences need one query length across batches, got {sorted(decode_lens)}")
    return Bucket(max(b.num_decode_seqs for b in batches), max(b.num_seqs - b.num_decode_seqs for b in batches),
                  max(b.num_tokens for b in batches), max(max(b.query_lens) for b in batches),
                  max(math.ceil(kv / block_size) for b in batches for kv in b.kv_lens), block_size,
                  decode_lens.pop() if decode_lens else 1)


@dataclass(frozen=True)
class Buffers:
    """Device metadata at the bucket's size, at fixed addresses, and where q/out rows go."""

    strategy: str
    bucket: Bucket
    metadata: Metadata  # full-bucket views, the safe upper bounds
    scratch_block: int  # a KV block no sequence owns: padding rows point at it
    num_rows: int  # rows of the static q and out


def _varlen_buffers(seqs: int, bucket: Bucket, offset: int, device) -> VarlenMetadata:
    zeros = lambda *shape: torch.zeros(shape, dtype=torch.int32, device=device)  # noqa: E731
    return VarlenMetadata(zeros(seqs + 1), zeros(seqs), zeros(seqs, bucket.max_blocks_per_seq),
                          bucket.max_query_len, bucket.max_seqlen_k, offset)


def static_buffers(strategy: str, bucket: Bucket, scratch_block: int, device: torch.device | str) -> Buffers:
    """Zeroed metadata buffers for `strategy` at the bucket's size. Split: the decode part's rows
    first in q (max_decode_seqs x decode_query_len), then the prefill part's max_tokens rows."""
    if strategy == "unified":
        return Buffers(strategy, bucket, _varlen_buffers(bucket.max_seqs, bucket, 0, device), scratch_block,
                       bucket.max_tokens)
    decode_rows = bucket.max_decode_seqs * bucket.decode_query_len
    decode = prefill = None
    if bucket.max_decode_seqs:
        decode = KVCacheMetadata(torch.zeros(bucket.max_decode_seqs, dtype=torch.int32, device=device),
                                 torch.zeros((bucket.max_decode_seqs, bucket.max_blocks_per_seq), dtype=torch.int32,
                                             device=device),
                                 bucket.decode_query_len, bucket.max_seqlen_k, 0)
    if bucket.max_prefill_seqs:
        prefill = _varlen_buffers(bucket.max_prefill_seqs, bucket, decode_rows, device)
    return Buffers(strategy, bucket, SplitMetadata(decode, prefill), scratch_block,
                   decode_rows + (bucket.max_tokens if prefill else 0))


def plan_metadata(buffers: Buffers, capture: Metadata, policy: str) -> Metadata:
    """What the plan is made from: the buffers with the safe bounds, or (naive) with the capture
    batch's host ints and only the parts the capture batch had."""
    if policy == "safe":
        return buffers.metadata
    md = buffers.metadata
    if isinstance(md, VarlenMetadata):
        return dataclasses.replace(md, max_seqlen_q=capture.max_seqlen_q, max_seqlen_k=capture.max_seqlen_k)
    decode = prefill = None
    if capture.decode is not None:
        decode = dataclasses.replace(md.decode, max_seqlen_k=capture.decode.max_seqlen_k)
    if capture.prefill is not None:
        prefill = dataclasses.replace(md.prefill, max_seqlen_q=capture.prefill.max_seqlen_q,
                                      max_seqlen_k=capture.prefill.max_seqlen_k)
    return SplitMetadata(decode, prefill)


def _pad_rows(rows: torch.Tensor, seqs: int, width: int, fill: int) -> torch.Tensor:
    table = torch.full((seqs, width), fill, dtype=torch.int32)
    table[:rows.shape[0], :rows.shape[1]] = rows
    return table


def _fits(what: str, have: int, room: int) -> None:
    if have > room:
        raise ValueError(f"the batch does not fit the bucket: {what} {have} > {room}")


def _write_varlen(buf: VarlenMetadata, md: VarlenMetadata | None, policy: str, scratch: int) -> VarlenMetadata:
    seqs, width = buf.block_table.shape
    empty = torch.zeros(0, dtype=torch.int32)
    cu, used = (md.cu_seqlens_q, md.seqused_k) if md else (torch.zeros(1, dtype=torch.int32), empty)
    table = md.block_table if md else empty.view(0, 0)
    n = used.shape[0]
    _fits("sequences", n, seqs)
    _fits("blocks per sequence", table.shape[1], width)
    if policy == "naive":
        if md is not None:  # a part the batch lacks is left as it was
            buf.cu_seqlens_q[:n + 1].copy_(cu)
            buf.seqused_k[:n].copy_(used)
            buf.block_table[:n, :table.shape[1]].copy_(table)
        return dataclasses.replace(buf, cu_seqlens_q=buf.cu_seqlens_q.cpu(), seqused_k=buf.seqused_k.cpu(),
                                   block_table=buf.block_table.cpu())
    host = dataclasses.replace(
        buf, cu_seqlens_q=torch.cat([cu, cu[-1:].expand(seqs - n)]),
        seqused_k=torch.cat([used, torch.zeros(seqs - n, dtype=torch.int32)]),
        block_table=_pad_rows(table, seqs, width, scratch))
    for name in ("cu_seqlens_q", "seqused_k", "block_table"):
        getattr(buf, name).copy_(getattr(host, name))
    return host


def _write_kvcache(buf: KVCacheMetadata, md: KVCacheMetadata | None, policy: str, scratch: int) -> KVCacheMetadata:
    seqs, width = buf.block_table.shape
    lens = md.cache_seqlens if md else torch.zeros(0, dtype=torch.int32)
    table = md.block_table if md else torch.zeros((0, 0), dtype=torch.int32)
    n = lens.shape[0]
    _fits("decode sequences", n, seqs)
    _fits("blocks per sequence", table.shape[1], width)
    if md is not None and md.query_len != buf.query_len:
        raise ValueError(f"the batch does not fit the bucket: decode query length {md.query_len} != {buf.query_len}")
    if policy == "naive":
        if md is not None:
            buf.cache_seqlens[:n].copy_(lens)
            buf.block_table[:n, :table.shape[1]].copy_(table)
        return dataclasses.replace(buf, cache_seqlens=buf.cache_seqlens.cpu(), block_table=buf.block_table.cpu())
    host = dataclasses.replace(buf, cache_seqlens=torch.cat([lens, torch.zeros(seqs - n, dtype=torch.int32)]),
                               block_table=_pad_rows(table, seqs, width, scratch))
    buf.cache_seqlens.copy_(host.cache_seqlens)
    buf.block_table.copy_(host.block_table)
    return host


def write_batch(buffers: Buffers, metadata: Metadata, policy: str) -> Metadata:
    """Copy a batch's host metadata (build_metadata's) into the buffers under `policy`; return
    the host metadata the buffers now hold, for a library's Plan.refresh."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    md, scratch = buffers.metadata, buffers.scratch_block
    if isinstance(md, VarlenMetadata):
        return _write_varlen(md, metadata, policy, scratch)
    for have, room, what in ((metadata.decode, md.decode, "decode"), (metadata.prefill, md.prefill, "prefill")):
        if have is not None and room is None:
            raise ValueError(f"the batch does not fit the bucket: it has a {what} part, the bucket none")
    return SplitMetadata(_write_kvcache(md.decode, metadata.decode, policy, scratch) if md.decode else None,
                         _write_varlen(md.prefill, metadata.prefill, policy, scratch) if md.prefill else None)


def real_rows(buffers: Buffers, metadata: Metadata) -> torch.Tensor:
    """Rows of the static q/out that hold the batch's tokens, in the batch's order (decode first)."""
    if isinstance(metadata, VarlenMetadata):
        return torch.arange(metadata.num_tokens)
    parts = []
    if metadata.decode is not None:
        parts.append(torch.arange(metadata.decode.num_seqs * metadata.decode.query_len))
    if metadata.prefill is not None:
        parts.append(buffers.metadata.prefill.token_offset + torch.arange(metadata.prefill.num_tokens))
    return torch.cat(parts)


def captured(launch: Callable[[], object], device: torch.device, sync: Callable[[], None]) -> Callable[[], object]:
    """What replays `launch` on the device: on CUDA a graph captured after one warm-up call (lazy
    initialisation stays out of the graph); on the CPU, where there are no graphs, the call itself."""
    if device.type != "cuda":
        return launch
    launch()
    sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return graph.replay


def replay_check(backend: Backend, strategy: str, point: SweepPoint, capture_batch: Batch,
                 replay_batches: list[Batch], policy: str, device: torch.device | str,
                 synchronize: Callable[[], None] | None = None) -> list[dict]:
    """Capture `strategy`'s plan on the capture batch, replay it on each batch (the capture batch
    first, as a baseline), and check each replay's real rows against the reference. One dict per
    replay: check_output's fields plus `replay` (0 = the capture batch) and `error` (an exception)."""
    device = torch.device(device)
    sync = synchronize or (lambda: torch.cuda.synchronize(device) if device.type == "cuda" else None)
    batches = [capture_batch, *replay_batches]
    bucket = bucket_for(batches, point.block_size)
    tables = [build_block_table(b, point.block_size, point.seed + i) for i, b in enumerate(batches)]
    scratch = max(num_cache_blocks(b, point.block_size) for b in batches)  # the block after every real one
    host = [build_metadata(strategy, b, t) for b, t in zip(batches, tables)]
    buffers = static_buffers(strategy, bucket, scratch, device)
    dtype = torch_dtype(point.dtype)
    gen = torch.Generator(device=device).manual_seed(point.seed)
    q = torch.zeros((buffers.num_rows, point.num_heads, point.head_dim), dtype=dtype, device=device)
    out = torch.zeros_like(q)
    cache_shape = (scratch + 1, point.block_size, point.num_kv_heads, point.head_dim)
    k_cache = torch.zeros(cache_shape, dtype=dtype, device=device)
    v_cache = torch.zeros_like(k_cache)

    def load(i: int) -> Metadata:  # the batch's metadata into the buffers, fresh values into q/K/V
        written = write_batch(buffers, host[i], policy)
        for t in (q, k_cache, v_cache):
            t.normal_(generator=gen)
        return written

    results = []
    try:
        load(0)
        plan = backend.plan(strategy, point, plan_metadata(buffers, host[0], policy))
        launch = captured(lambda: plan.run(q, k_cache, v_cache, out), device, sync)
    except Exception as exc:
        return [{"replay": i, "verdict": "fail", "reason": f"capture failed: {error_reason(exc)}",
                 "rel_l2_error": float("nan")} for i in range(len(batches))]
    for i, batch in enumerate(batches):
        try:
            written = load(i)
            if plan.refresh is not None:
                plan.refresh(written)
            out.fill_(float("nan"))
            launch()
            sync()
            rows = real_rows(buffers, host[i]).to(device)
            ref = reference_attention(q[rows], k_cache, v_cache, list(batch.query_lens), list(batch.kv_lens),
                                      tables[i], point.causal, point.softmax_scale)
            result = check_output(out[rows], ref, point.dtype)
            unwritten = int((~torch.isfinite(out[rows].float())).flatten(1).any(1).sum())
            if unwritten:  # rows the replayed launch never reached keep the NaN they were filled with
                result["reason"] += f" ({unwritten} of {len(rows)} real rows never written or NaN)"
            results.append({"replay": i, **result})
        except Exception as exc:
            results.append({"replay": i, "verdict": "fail", "reason": error_reason(exc),
                            "rel_l2_error": float("nan")})
    return results
