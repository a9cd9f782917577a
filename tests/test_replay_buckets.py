"""Bucketing a step trace for `attnbench replay` (traces/buckets.py), against small traces bucketed by hand.

Oracle: the rule as the guide states it (same kind, same log-spaced bins of decode rows, query
tokens and total KV tokens), applied here by hand, and a brute-force search for a value's bin. The
representatives' weights are checked against the sums they must reproduce (tests/test_replay_estimator.py
sums a fake timer over whole traces with them).
"""

from __future__ import annotations

import random

import pytest

from attnbench.errors import UsageError
from attnbench.traces.buckets import bin_of, bin_range, bucket_steps, sample_steps, sizes, step_buckets
from attnbench.traces.steps import Header, Request, Trace, TraceStep


def step(*rows: tuple[int, int]) -> TraceStep:
    return TraceStep(tuple(Request(q, kv) for q, kv in rows))


def trace(*steps: TraceStep) -> Trace:
    return Trace(Header(source="hand"), tuple(steps))


HAND = trace(
    step((1, 10), (1, 20), (1, 30)),  # 0: decode, 3 rows, 3 tokens, 60 kv -> bins 1, 1, 5
    step((1, 20), (1, 40)),  # 1: decode, 2 rows, 2 tokens, 60 kv -> bins 1, 1, 5: with step 0
    step((1, 10), (1, 10), (1, 10), (1, 10)),  # 2: decode, 4 rows, 40 kv -> bins 2, 2, 5: its own
    step((1, 50), (8, 8)),  # 3: mixed, 1 decode row, 9 tokens, 58 kv
    step((16, 16)),  # 4: prefill, no decode row, 16 tokens, 16 kv
    step((1, 5), (1, 5), (1, 40)),  # 5: decode, 3 rows, 50 kv -> bins 1, 1, 5: with steps 0 and 1
    step((1, 50), (8, 8)),  # 6: mixed, as step 3
)


def test_the_sizes_of_a_step():
    assert [sizes(s) for s in HAND.steps] == [(3, 3, 60), (2, 2, 60), (4, 4, 40), (1, 9, 58), (0, 16, 16), (3, 3, 50),
                                              (1, 9, 58)]


def test_hand_bucketed_trace():
    buckets = bucket_steps(HAND, 2.0)
    assert [(b.index, b.kind, b.steps) for b in buckets] == [
        (0, "decode", (0, 1, 5)), (1, "decode", (2,)), (2, "mixed", (3, 6)), (3, "prefill", (4,))]
    # bucket 0's three steps differ in rows and kv tokens independently: each is timed, weighing 1; steps 3
    # and 6 are the same step: one of them weighs 2
    assert [(b.representatives, b.weights) for b in buckets if b.index != 2] == [
        ((0, 1, 5), (1.0, 1.0, 1.0)), ((2,), (1.0,)), ((4,), (1.0,))]
    assert buckets[2].representatives in ((3,), (6,)) and buckets[2].weights == pytest.approx((2.0,))
    assert buckets[0].bins == (1, 1, 5) and buckets[3].bins == (-1, 4, 4)
    assert step_buckets(buckets, len(HAND.steps)) == [0, 0, 1, 2, 3, 0, 2]
    assert buckets[0].describe(2.0).startswith("bucket 0: decode, decode rows 2-3, query tokens 2-3, kv tokens 32-63; "
                                               "3 step(s), timed on step(s) 0 (x1), 1 (x1), 5 (x1)")
    assert "decode rows 0," in buckets[3].describe(2.0)


def test_a_ratio_close_to_one_splits_every_size_and_a_large_one_joins_kinds_sizes():
    fine = bucket_steps(HAND, 1.01)
    assert len(fine) == 6  # steps 3 and 6 are the same step; every other step differs in some size
    coarse = bucket_steps(HAND, 1000.0)
    assert [b.kind for b in coarse] == ["decode", "mixed", "prefill"]  # one bucket per kind is left


@pytest.mark.parametrize("ratio", [2.0, 1.5, 10.0, 1.1, 3.7])
def test_bins_against_a_brute_force_search(ratio):
    for value in [0, *range(1, 300), 999, 1000, 1001, 4095, 4096, 10 ** 6, 10 ** 9]:
        expected = -1 if value == 0 else max(b for b in range(0, 220) if ratio ** b <= value)
        assert bin_of(value, ratio) == expected, (value, ratio)
        low, high = bin_range(expected, ratio)
        assert low <= value <= high or value == 0


def test_bin_edges_exact():
    assert [bin_of(v, 2.0) for v in (1, 2, 3, 4, 7, 8)] == [0, 1, 1, 2, 2, 3]
    assert (bin_of(1000, 10.0), bin_of(999, 10.0)) == (3, 2)  # log(1000)/log(10) is 2.9999999999999996
    assert bin_range(3, 10.0) == (1000, 9999) and bin_range(0, 2.0) == (1, 1) and bin_range(-1, 2.0) == (0, 0)


def test_the_exact_sample_is_seeded_distinct_and_in_order():
    drawn = sample_steps(100, 10, 3)
    assert drawn == sample_steps(100, 10, 3) and drawn != sample_steps(100, 10, 4)
    assert list(drawn) == sorted(set(drawn)) and len(drawn) == 10
    assert drawn == tuple(sorted(random.Random(3).sample(range(100), 10)))
    assert sample_steps(5, 50, 0) == (0, 1, 2, 3, 4) and sample_steps(5, 0, 0) == ()


@pytest.mark.parametrize("ratio", [1.0, 0.5, -2, 1e9, float("nan"), True, "2"])
def test_a_bad_ratio_is_refused_naming_the_flag(ratio):
    with pytest.raises(UsageError, match="--bucket-ratio"):
        bucket_steps(HAND, ratio)


@pytest.mark.parametrize("count", [-1, True, 1.5])
def test_a_bad_sample_count_is_refused_naming_the_flag(count):
    with pytest.raises(UsageError, match="--exact-sample"):
        sample_steps(10, count, 0)
