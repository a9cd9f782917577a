"""The replay's bucketed estimate of a trace's total, against a fake timer whose exact total is known.

Oracle: a fake timer, time = a + b * kv tokens + c * query tokens (and one that is not affine),
summed over every step of the sample traces in scenarios/traces/ in plain Python; the old
estimator (each bucket timed on its median step by kv tokens, weighed by its step count) written
here by hand. The estimate under test is results/replay.py's totals over rows that carry the fake
timer's time for each representative (traces/buckets.py), as a replay's results.csv would.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.results.replay import sample_errors, totals
from attnbench.runs.replay import steps_table
from attnbench.traces.buckets import bucket_steps, sizes, weigh
from attnbench.traces.jsonl import read_trace

TRACES = Path(__file__).resolve().parent.parent / "scenarios" / "traces"
SAMPLES = ["chat-high", "chat-mid", "chat-low", "decode-heavy", "prefix-heavy"]


def affine(a: float, b: float, c: float):
    return lambda step: a + b * sizes(step)[2] + c * step.num_tokens


def rows_of(trace, buckets, timer, fail: tuple[int, int] | None = None, sample: bool = False) -> pd.DataFrame:
    """results.csv's rows for one choice: each representative timed by `timer` (and, with `sample`,
    every step timed one by one); `fail`: (bucket, step) whose row did not pass."""
    rows = []
    for b in buckets:
        for step, weight in zip(b.representatives, b.weights):
            t = timer(trace.steps[step])
            rows.append(dict(part="bucket", bucket=b.index, step=step, steps=weight, median_ms=t, p10_ms=t, p90_ms=t,
                             verdict="error" if (b.index, step) == fail else "pass"))
    if sample:
        of = {s: b.index for b in buckets for s in b.steps}
        rows += [dict(part="sample", bucket=of[i], step=i, steps=1, median_ms=timer(s), p10_ms=timer(s),
                      p90_ms=timer(s), verdict="pass") for i, s in enumerate(trace.steps)]
    return pd.DataFrame(rows).assign(backend="fake", strategy="unified", mode="graph", device="cuda", gpu="fake")


def median_estimate(trace, buckets, timer) -> float:
    """The old estimator: each bucket's median step by (kv tokens, query tokens, position) x its step count."""
    total = 0.0
    for b in buckets:
        ordered = sorted(b.steps, key=lambda i: (sizes(trace.steps[i])[2], trace.steps[i].num_tokens, i))
        total += len(ordered) * timer(trace.steps[ordered[(len(ordered) - 1) // 2]])
    return total


@pytest.fixture(scope="module")
def bucketed():
    found = {}
    for name in SAMPLES:
        trace = read_trace(next(TRACES.glob(f"{name}.jsonl*")))
        found[name] = trace, bucket_steps(trace, split=1)  # whole bins, as when the old median estimate was measured
    return found


def test_the_old_median_estimate_is_biased_and_the_weighed_one_is_exact(bucketed):
    trace, buckets = bucketed["chat-high"]
    timer = affine(0.005, 1e-6, 3e-5)  # ms: 5 us of launch, 1 ns a kv token, 30 ns a query token
    exact = sum(timer(s) for s in trace.steps)
    old = median_estimate(trace, buckets, timer)
    assert (old - exact) / exact < -0.015  # the bias measured on the H200, reproduced: low by ~2 %
    [found] = totals(rows_of(trace, buckets, timer), steps_table(trace, buckets), "graph")
    assert found.total_ms == pytest.approx(exact, rel=1e-9) and found.missing == 0
    assert sum(len(b.representatives) for b in buckets) <= 5 * len(buckets)


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("a, b, c", [(0.005, 1e-6, 0.0), (0.01, 0.0, 5e-5), (0.002, 2e-6, 1e-5)])
def test_any_affine_timer_is_summed_exactly_on_every_sample_trace(bucketed, name, a, b, c):
    trace, buckets = bucketed[name]
    timer = affine(a, b, c)
    exact = sum(timer(s) for s in trace.steps)
    [found] = totals(rows_of(trace, buckets, timer), steps_table(trace, buckets), "graph")
    assert found.total_ms == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("name", SAMPLES)
def test_a_timer_that_is_not_affine_is_within_half_a_percent(bucketed, name):
    """time = 5 us + 30 ns x sqrt(kv tokens) x query tokens**0.25: curved in both sizes; the bins are
    narrow (a ratio of 2), so the weighed sum stays within the stated 0.5 %."""
    trace, buckets = bucketed[name]
    timer = lambda s: 0.005 + 3e-5 * math.sqrt(sizes(s)[2]) * s.num_tokens ** 0.25  # noqa: E731
    exact = sum(timer(s) for s in trace.steps)
    [found] = totals(rows_of(trace, buckets, timer), steps_table(trace, buckets), "graph")
    assert abs(found.total_ms - exact) / exact < 0.005


def test_every_step_sampled_gives_no_bucketing_error_for_an_affine_timer(bucketed):
    trace, buckets = bucketed["decode-heavy"]
    timer = affine(0.005, 1e-6, 3e-5)
    [error] = sample_errors(rows_of(trace, buckets, timer, sample=True), steps_table(trace, buckets), "graph")
    assert error.steps == len(trace.steps) and abs(error.error_pct) < 1e-6
    # its standard error: each step against its bucket's mean time, spread over the sample
    times = np.array([timer(s) for s in trace.steps])
    means = {b.index: times[list(b.steps)].mean() for b in buckets}
    differences = [means[b.index] - times[i] for b in buckets for i in b.steps]
    expected = np.std(differences, ddof=1) * math.sqrt(len(differences)) / times.sum() * 100
    assert error.stderr_pct == pytest.approx(expected, rel=1e-6) and error.stderr_pct > 0


def test_a_representative_that_failed_leaves_its_bucket_without_a_time(bucketed):
    trace, buckets = bucketed["chat-mid"]
    big = next(b for b in buckets if len(b.representatives) > 1)
    rows = rows_of(trace, buckets, affine(0.005, 1e-6, 0.0), fail=(big.index, big.representatives[0]))
    [found] = totals(rows, steps_table(trace, buckets), "graph")
    assert found.missing == 1 and math.isnan(found.total_ms)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 5000)] * 4), min_size=1, max_size=40))
def test_weights_reproduce_the_count_and_every_sum_on_few_rows(table):
    sizes_of = np.array(table, dtype=float)
    kept, weights = weigh(sizes_of)
    assert len(set(kept)) == len(kept) and all(w > 0 for w in weights)
    assert len(kept) <= min(len(table), 5)
    assert sum(weights) == pytest.approx(len(table), rel=1e-9)
    assert np.allclose(np.array(weights) @ sizes_of[kept], sizes_of.sum(axis=0), rtol=1e-7, atol=1e-6)
