"""Batch kinds: each kind's documented rule, seeding, and the properties every batch must keep."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.errors import UsageError
from attnbench.kernels.workload import KINDS, ContextDist, SweepPoint, build_batch

SHAPE = {"num_heads": 4, "num_kv_heads": 2, "head_dim": 16}


def point(kind: str, num_tokens: int, **overrides) -> SweepPoint:
    return SweepPoint(kind=kind, num_tokens=num_tokens, **{**SHAPE, **overrides})


def test_decode_is_n_sequences_of_one_token_with_context_lengths():
    batch = build_batch(point("decode", 12, context="uniform:5:40"))
    assert batch.query_lens == (1,) * 12
    assert all(5 <= kv <= 40 for kv in batch.kv_lens)
    assert batch.is_decode == (True,) * 12


def test_prefill_has_no_cached_context_and_splits_by_prefill_len():
    batch = build_batch(point("prefill", 40, prefill_len=16))
    assert batch.query_lens == (14, 13, 13)  # ceil(40 / 16) = 3 sequences, as even as possible
    assert batch.kv_lens == batch.query_lens
    assert not any(batch.is_decode)


def test_mixed_is_one_chunk_after_decodes_with_the_decode_share():
    batch = build_batch(point("mixed", 40, decode_share=0.75, context="32"))
    assert batch.query_lens == (1,) * 30 + (10,)
    assert batch.is_decode == (True,) * 30 + (False,)
    assert batch.kv_lens == (32,) * 30 + (10 + 32,)  # the chunk sits on a cached prefix


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.5, 0.9])
def test_prefix_caches_the_requested_share_of_each_sequence(ratio):
    batch = build_batch(point("prefix", 37, prefill_len=8, prefix_ratio=ratio))
    for q, kv in zip(batch.query_lens, batch.kv_lens):
        cached = kv - q
        assert cached / kv == pytest.approx(ratio, abs=1 / kv)
    assert sum(batch.query_lens) == 37


def test_specdec_is_sequences_of_spec_k_tokens():
    batch = build_batch(point("specdec", 24, spec_k=3, context="uniform:1:64"))
    assert batch.query_lens == (3,) * 8
    assert all(kv >= 3 for kv in batch.kv_lens)  # a draft of k tokens needs k keys at least
    assert all(batch.is_decode)


def test_specdec_rounds_n_down_to_whole_drafts_and_says_so():
    batch = build_batch(point("specdec", 10, spec_k=4))
    assert batch.query_lens == (4, 4) and batch.num_tokens == 8
    assert "rounded down to a multiple of spec_k" in batch.rule
    assert build_batch(point("specdec", 3, spec_k=4)).query_lens == (3,)  # N < k: one draft of N


@pytest.mark.parametrize("kind", KINDS)
def test_same_point_gives_the_same_batch(kind):
    p = point(kind, 33, context="uniform:1:64")
    assert build_batch(p) == build_batch(pickle.loads(pickle.dumps(p)))


def test_lengths_do_not_depend_on_heads_or_dim():
    wide = SweepPoint(kind="decode", num_tokens=20, num_heads=32, head_dim=128, context="uniform:1:64")
    assert build_batch(wide) == build_batch(point("decode", 20, context="uniform:1:64"))


@pytest.mark.parametrize("kind", ["decode", "mixed", "specdec"])
def test_another_seed_draws_other_context_lengths(kind):
    a = build_batch(point(kind, 32, context="uniform:1:64", seed=0))
    b = build_batch(point(kind, 32, context="uniform:1:64", seed=1))
    assert a.kv_lens != b.kv_lens


def test_rule_is_recorded_with_the_batch():
    assert "spec_k=3" in build_batch(point("specdec", 12, spec_k=3)).rule
    assert "seed=7" in build_batch(point("decode", 4, seed=7)).rule


@pytest.mark.parametrize("text, low, high, shown", [
    ("64", 64, 64, "64"), (" 64 ", 64, 64, "64"), (64, 64, 64, "64"),
    ("uniform:1:4096", 1, 4096, "uniform:1:4096"), ("uniform:8:8", 8, 8, "8"),
])
def test_context_dist_parses(text, low, high, shown):
    dist = ContextDist.parse(text)
    assert (dist.low, dist.high, str(dist)) == (low, high, shown)


@pytest.mark.parametrize("text", ["", "abc", "0", "-3", "uniform:5", "uniform:9:3", "uniform:0:4", "normal:1:2"])
def test_context_dist_rejects_nonsense_naming_the_flag(text):
    with pytest.raises(UsageError, match="^--context"):
        ContextDist.parse(text)


@pytest.mark.parametrize("overrides, flag", [
    ({"kind": "bogus"}, "--kind"), ({"dtype": "fp8"}, "--dtype"), ({"num_tokens": 0}, "--tokens"),
    ({"num_kv_heads": 3}, "--kv-heads"), ({"num_kv_heads": -2}, "--kv-heads"), ({"head_dim": 12}, "--dim"),
    ({"block_size": 24}, "--block-size"), ({"decode_share": 1.0}, "--decode-share"),
    ({"prefix_ratio": 1.0}, "--prefix-ratio"), ({"spec_k": 0}, "--spec-k"),
])
def test_point_rejects_bad_fields_naming_the_flag(overrides, flag):
    fields = {"kind": "decode", "num_tokens": 8, **SHAPE, **overrides}
    with pytest.raises(UsageError, match=f"^{flag}:"):
        SweepPoint(**fields)


def test_zero_kv_heads_is_a_usage_error():
    with pytest.raises(UsageError, match="^--kv-heads:"):
        SweepPoint(kind="decode", num_tokens=8, num_heads=4, head_dim=16, num_kv_heads=0)


def test_point_defaults_and_aliases():
    p = SweepPoint(kind="decode", num_tokens=4, num_heads=8, head_dim=16, dtype="fp16", context="uniform:3:3")
    assert (p.num_kv_heads, p.dtype, p.context, p.num_heads // p.num_kv_heads) == (8, "float16", "3", 1)


# -- properties of every batch ------------------------------------------------------------------

contexts = st.tuples(st.integers(1, 64), st.integers(0, 64)).map(lambda t: f"uniform:{t[0]}:{t[0] + t[1]}")


@st.composite
def points(draw, kinds=KINDS):
    kind = draw(st.sampled_from(kinds))
    n = draw(st.integers(1, 120))
    spec_k = draw(st.integers(1, 8))
    if kind == "specdec":  # the rule rounds N down to whole drafts; keep N a multiple here
        n = draw(st.integers(1, 15)) * spec_k
    return point(kind, n, context=draw(contexts), spec_k=spec_k, seed=draw(st.integers(0, 2**16)),
                 decode_share=draw(st.floats(0.0, 0.99)), prefix_ratio=draw(st.floats(0.0, 0.95)),
                 prefill_len=draw(st.integers(1, 64)))


@settings(max_examples=150, deadline=None)
@given(points())
def test_every_batch_is_well_formed(p):
    batch = build_batch(p)
    assert sum(batch.query_lens) == p.num_tokens
    assert len(batch.query_lens) == len(batch.kv_lens) == len(batch.is_decode) > 0
    assert all(q >= 1 for q in batch.query_lens)
    assert all(kv >= q for q, kv in zip(batch.query_lens, batch.kv_lens))
    # decode-role sequences come first and share one query length
    assert list(batch.is_decode) == sorted(batch.is_decode, reverse=True)
    assert len({q for q, d in zip(batch.query_lens, batch.is_decode) if d}) <= 1


@settings(max_examples=60, deadline=None)
@given(points(kinds=("mixed",)))
def test_mixed_respects_the_decode_share(p):
    batch = build_batch(p)
    assert batch.num_decode_seqs == batch.num_tokens - batch.query_lens[-1]
    assert abs(batch.num_decode_seqs - p.decode_share * p.num_tokens) <= 1


@settings(max_examples=60, deadline=None)
@given(points(kinds=("decode", "specdec", "mixed")))
def test_context_lengths_come_from_the_distribution(p):
    dist = ContextDist.parse(p.context)
    batch = build_batch(p)
    for q, kv, decode in zip(batch.query_lens, batch.kv_lens, batch.is_decode):
        if p.kind == "specdec":  # kv = max(drawn, spec_k): a draft of k tokens needs k keys
            assert kv == q or dist.low <= kv <= dist.high
        else:  # decode sequences: kv is drawn; the mixed chunk: its cached prefix is drawn
            assert dist.low <= (kv if decode else kv - q) <= dist.high


@settings(max_examples=60, deadline=None)
@given(points(kinds=("prefill",)))
def test_prefill_sequences_are_at_most_prefill_len(p):
    batch = build_batch(p)
    assert len(batch.query_lens) == math.ceil(p.num_tokens / p.prefill_len)
    assert max(batch.query_lens) <= p.prefill_len
    assert max(batch.query_lens) - min(batch.query_lens) <= 1


@settings(max_examples=60, deadline=None)
@given(points(kinds=("prefix",)))
def test_prefix_hit_ratio_is_kept_to_within_a_token(p):
    batch = build_batch(p)
    for q, kv in zip(batch.query_lens, batch.kv_lens):
        assert abs((kv - q) / kv - p.prefix_ratio) <= 1 / kv
