"""Buckets whose weights reproduce the sums of each work size's square and of the longest KV
length (traces/buckets.py `moments`), and the default --bucket-split that goes with them.

Oracle: sums taken here over every step of a bucket, from the requests themselves, and a timer
quadratic in each size summed over every step of the trace by hand; the sums-only weights (the
rule before) are shown to miss that timer, so the exactness is the squares' doing.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

from attnbench.cli import replay as replay_cli
from attnbench.traces.buckets import DEFAULT_SPLIT, WORK, bucket_steps, moments, weigh, work
from attnbench.traces.jsonl import read_trace
from attnbench.traces.steps import Request, TraceStep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import replay_scale  # noqa: E402

TRACE = Path(__file__).resolve().parents[1] / "scenarios" / "traces" / "chat-mid.jsonl"


@pytest.fixture(scope="module")
def chat_mid():
    trace = read_trace(TRACE)
    table = np.array([work(s) for s in trace.steps], dtype=float)
    return trace, table, bucket_steps(trace, 3.0, split=4)


def quadratic(table: np.ndarray) -> np.ndarray:
    """A convex time per step, ms: a launch cost, a cost per unit of each size, and a square term."""
    scale = table.mean(axis=0)
    return 0.01 + (table / scale).sum(axis=1) * 0.02 + ((table / scale) ** 2).sum(axis=1) * 0.03


def test_work_holds_the_longest_kv_length_last():
    step = TraceStep((Request(1, 300), Request(1, 900), Request(64, 500, chunked=True)))
    assert WORK[-1] == "longest kv" and len(work(step)) == len(WORK)
    assert work(step)[-1] == 900 and work(step)[2] == 1700
    assert moments(np.array([work(step)], dtype=float))[0, len(WORK):].tolist() == [v ** 2 for v in work(step)]


def test_each_bucket_reproduces_its_count_sizes_and_squares(chat_mid):
    trace, table, buckets = chat_mid
    assert any(len(b.representatives) > 5 for b in buckets)  # more than the five the sums alone allowed
    for bucket in buckets:
        members, reps = table[list(bucket.steps)], table[list(bucket.representatives)]
        weights = np.array(bucket.weights)
        assert (weights > 0).all() and weights.sum() == pytest.approx(len(bucket.steps))
        assert len(bucket.representatives) <= 2 * len(WORK) + 1
        assert np.allclose(weights @ moments(reps), moments(members).sum(axis=0), rtol=1e-6)


def test_a_timer_quadratic_in_each_size_is_summed_exactly_and_sums_alone_miss_it(chat_mid):
    trace, table, buckets = chat_mid
    times = quadratic(table)
    weighed = sum(np.dot(b.weights, times[list(b.representatives)]) for b in buckets)
    assert weighed == pytest.approx(times.sum(), rel=1e-6)
    sums_only = 0.0
    for bucket in buckets:
        kept, weights = weigh(table[list(bucket.steps)])
        sums_only += np.dot(weights, times[[bucket.steps[k] for k in kept]])
    assert abs(sums_only / times.sum() - 1) > 1e-4


def test_the_replay_and_the_scale_benchmark_default_to_the_same_split():
    assert inspect.signature(replay_cli.replay).parameters["bucket_split"].default == DEFAULT_SPLIT
    assert "DEFAULT_SPLIT" in inspect.getsource(replay_scale.main)
