"""Metadata builders: cu_seqlens, seqused_k, block tables and the split into decode and prefill parts."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.kernels.metadata import (
    KVCacheMetadata,
    VarlenMetadata,
    build_block_table,
    build_metadata,
    build_split,
    build_unified,
    measure_host_us,
    num_cache_blocks,
    split_batch,
)
from attnbench.kernels.workload import Batch, SweepPoint, build_batch

# decode 3 x 1 token, then two prefill sequences of 5 and 7 tokens
MIXED = Batch(query_lens=(1, 1, 1, 5, 7), kv_lens=(17, 33, 1, 5, 40), is_decode=(True, True, True, False, False))


def batch_of(kind: str, num_tokens: int, **overrides) -> Batch:
    return build_batch(SweepPoint(kind=kind, num_tokens=num_tokens, num_heads=4, head_dim=16,
                                  **{"context": "uniform:1:64", "prefill_len": 16, **overrides}))


def owned_blocks(table: torch.Tensor, kv_lens, block_size: int) -> list[list[int]]:
    return [table[i, :math.ceil(kv / block_size)].tolist() for i, kv in enumerate(kv_lens)]


def test_unified_metadata_of_a_mixed_batch():
    table = build_block_table(MIXED, 16)
    md = build_unified(MIXED, table)
    assert md.cu_seqlens_q.tolist() == [0, 1, 2, 3, 8, 15]
    assert md.seqused_k.tolist() == [17, 33, 1, 5, 40]
    assert md.cu_seqlens_k.tolist() == [0, 17, 50, 51, 56, 96]
    assert (md.max_seqlen_q, md.max_seqlen_k, md.token_offset) == (7, 40, 0)
    assert (md.num_seqs, md.num_tokens) == (5, 15)
    assert md.cu_seqlens_q.dtype == md.seqused_k.dtype == md.block_table.dtype == torch.int32
    assert md.block_table is table


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(["decode", "prefill", "mixed", "prefix", "specdec"]), n=st.integers(1, 60),
       block_size=st.sampled_from([16, 32, 48, 64]), seed=st.integers(0, 1000))
def test_every_sequence_owns_its_own_blocks(kind, n, block_size, seed):
    batch = batch_of(kind, n, spec_k=1 if kind == "specdec" else 4)
    table = build_block_table(batch, block_size, seed)
    owned = owned_blocks(table, batch.kv_lens, block_size)
    assert [len(row) for row in owned] == [math.ceil(kv / block_size) for kv in batch.kv_lens]
    flat = [b for row in owned for b in row]
    assert sorted(flat) == list(range(num_cache_blocks(batch, block_size)))  # distinct, none shared
    assert table.shape == (batch.num_seqs, max(len(row) for row in owned))


@settings(max_examples=50, deadline=None)
@given(kind=st.sampled_from(["decode", "mixed", "prefix"]), n=st.integers(1, 60))
def test_cu_seqlens_are_prefix_sums(kind, n):
    batch = batch_of(kind, n)
    md = build_unified(batch, build_block_table(batch, 16))
    cu_q, cu_k = md.cu_seqlens_q.tolist(), md.cu_seqlens_k.tolist()
    assert cu_q[0] == cu_k[0] == 0
    assert [b - a for a, b in pairwise(cu_q)] == list(batch.query_lens)
    assert [b - a for a, b in pairwise(cu_k)] == list(batch.kv_lens) == md.seqused_k.tolist()


def test_blocks_are_scattered_by_a_seeded_permutation():
    batch = batch_of("decode", 20, context="40")  # 20 sequences x 3 blocks
    table = build_block_table(batch, 16, seed=0)
    flat = [b for row in owned_blocks(table, batch.kv_lens, 16) for b in row]
    assert flat != sorted(flat)
    assert torch.equal(table, build_block_table(batch, 16, seed=0))
    assert not torch.equal(table, build_block_table(batch, 16, seed=1))


def test_split_of_a_mixed_batch():
    table = build_block_table(MIXED, 16)
    split = build_split(MIXED, table)
    assert split_batch(MIXED) == ([0, 1, 2], [3, 4])

    dec = split.decode
    assert isinstance(dec, KVCacheMetadata)
    assert dec.cache_seqlens.tolist() == [17, 33, 1]
    assert (dec.query_len, dec.token_offset, dec.num_seqs) == (1, 0, 3)
    assert torch.equal(dec.block_table, table[:3])

    pre = split.prefill
    assert isinstance(pre, VarlenMetadata)
    assert pre.cu_seqlens_q.tolist() == [0, 5, 12]  # restarts at 0 for the second launch
    assert pre.seqused_k.tolist() == [5, 40]
    assert pre.token_offset == 3  # its q starts after the three decode tokens
    assert (pre.max_seqlen_q, pre.max_seqlen_k) == (7, 40)
    assert torch.equal(pre.block_table, table[3:])


def test_split_of_specdec_has_a_uniform_query_length():
    batch = batch_of("specdec", 12, spec_k=3)
    split = build_split(batch, build_block_table(batch, 16))
    assert split.prefill is None
    assert (split.decode.query_len, split.decode.num_seqs) == (3, 4)


@pytest.mark.parametrize("kind, has_decode, has_prefill", [
    ("decode", True, False), ("prefill", False, True), ("prefix", False, True), ("mixed", True, True),
])
def test_split_parts_follow_the_kind(kind, has_decode, has_prefill):
    batch = batch_of(kind, 24)
    split = build_metadata("split", batch, build_block_table(batch, 16))
    assert (split.decode is not None, split.prefill is not None) == (has_decode, has_prefill)
    decode_tokens = split.decode.num_seqs * split.decode.query_len if split.decode else 0
    prefill_tokens = split.prefill.num_tokens if split.prefill else 0
    assert decode_tokens + prefill_tokens == batch.num_tokens
    if split.prefill:
        assert split.prefill.token_offset == decode_tokens


def test_split_refuses_decode_sequences_of_different_lengths():
    batch = Batch(query_lens=(1, 2), kv_lens=(4, 4), is_decode=(True, True))
    with pytest.raises(ValueError, match="one query length"):
        build_split(batch, build_block_table(batch, 16))


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="unknown strategy"):
        build_metadata("fission", MIXED, build_block_table(MIXED, 16))


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_host_cost_is_measured_and_metadata_moves(strategy):
    table = build_block_table(MIXED, 16)
    assert measure_host_us(strategy, MIXED, table, torch.device("cpu"), repeats=3) > 0
    moved = build_metadata(strategy, MIXED, table).to("cpu")
    assert type(moved) is type(build_metadata(strategy, MIXED, table))
