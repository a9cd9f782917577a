"""A replay's numbers (results/replay.py) against an independent computation on fabricated row tables.

Oracle: plain loops over the fabricated rows and steps, written from the definitions in the guide
(a choice's total: each step's time, its bucket's median, summed; the oracle: the fastest choice
per step, summed; the saving: 1 - oracle / best single; the exact-sample error: the sampled steps'
bucket times summed against their own timed medians). Nothing of the module is used to compute it.
"""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from attnbench.results.replay import oracle, per_step, replicate_ranges, sample_errors, summary_record, totals, wins
from attnbench.results.replay_report import summary_text

CHOICES = [("fa2", "unified"), ("fa2", "split"), ("fi", "unified")]


def fabricate(seed: int, num_steps: int = 60, num_buckets: int = 7, failed: tuple = ()):
    """(rows, steps, times): random bucket times per choice, a random step -> bucket map, sample rows."""
    rng = random.Random(seed)
    bucket = [rng.randrange(num_buckets) for _ in range(num_steps)]
    for b in range(num_buckets):  # every bucket holds a step
        bucket[b] = b
    kinds = {b: rng.choice(["decode", "prefill", "mixed"]) for b in range(num_buckets)}
    steps = pd.DataFrame({"step": range(num_steps), "kind": [kinds[b] for b in bucket],
                          "decode_rows": [rng.randint(0, 64) for _ in bucket],
                          "query_tokens": [rng.randint(1, 4096) for _ in bucket],
                          "kv_tokens": [rng.randint(1, 10 ** 6) for _ in bucket], "bucket": bucket})
    times = {(c, b): rng.uniform(0.01, 3.0) for c in CHOICES for b in range(num_buckets)}
    rows = []
    for (backend, strategy), b in times:
        verdict = "error" if ((backend, strategy), b) in failed else "pass"
        t = times[(backend, strategy), b]
        rows.append(dict(part="bucket", bucket=b, step=0, steps=bucket.count(b), backend=backend, strategy=strategy,
                         mode="graph", verdict=verdict, median_ms=t, p10_ms=0.9 * t, p90_ms=1.2 * t, device="cuda",
                         gpu="H200"))
    sampled = sorted(rng.sample(range(num_steps), 12))
    timed = {}
    for s in sampled:
        for backend, strategy in CHOICES:
            t = timed[(backend, strategy), s] = times[(backend, strategy), bucket[s]] * rng.uniform(0.8, 1.25)
            rows.append(dict(part="sample", bucket=bucket[s], step=s, steps=1, backend=backend, strategy=strategy,
                             mode="graph", verdict="pass", median_ms=t, p10_ms=t, p90_ms=t, device="cuda", gpu="H200"))
    return pd.DataFrame(rows), steps, times, timed, sampled


def name(choice) -> str:
    return f"{choice[0]} {choice[1]}"


@pytest.mark.parametrize("seed", range(5))
def test_totals_oracle_and_saving_against_loops(seed):
    rows, steps, times, _, _ = fabricate(seed)
    expected = {name(c): sum(times[c, b] for b in steps["bucket"]) for c in CHOICES}
    found = {t.choice: t for t in totals(rows, steps, "graph")}
    for c in CHOICES:
        assert found[name(c)].total_ms == pytest.approx(expected[name(c)])
        assert found[name(c)].low_ms == pytest.approx(0.9 * expected[name(c)])
        assert found[name(c)].high_ms == pytest.approx(1.2 * expected[name(c)])
    assert [t.choice for t in totals(rows, steps, "graph")] == sorted(expected, key=expected.get)
    best = min(expected, key=expected.get)
    per_step_best = sum(min(times[c, b] for c in CHOICES) for b in steps["bucket"])
    result = oracle(rows, steps, "graph")
    assert result.best == best and result.best_ms == pytest.approx(expected[best])
    assert result.total_ms == pytest.approx(per_step_best)
    assert result.saving == pytest.approx(1 - per_step_best / expected[best])
    table = per_step(rows, steps, "graph")
    assert table.loc[5, name(CHOICES[1])] == pytest.approx(times[CHOICES[1], steps["bucket"][5]])


def test_a_choice_without_a_pass_on_some_bucket_has_no_total_and_no_part_in_the_oracle():
    rows, steps, times, _, _ = fabricate(0, failed=((CHOICES[2], 3),))
    found = {t.choice: t for t in totals(rows, steps, "graph")}
    assert found[name(CHOICES[2])].missing == 1 and math.isnan(found[name(CHOICES[2])].total_ms)
    assert totals(rows, steps, "graph")[-1].choice == name(CHOICES[2])  # incomplete ones last
    two = CHOICES[:2]
    per_step_best = sum(min(times[c, b] for c in two) for b in steps["bucket"])
    assert oracle(rows, steps, "graph").total_ms == pytest.approx(per_step_best)
    assert name(CHOICES[2]) not in per_step(rows, steps, "graph").columns


@pytest.mark.parametrize("seed", range(3))
def test_the_exact_sample_error_against_loops(seed):
    rows, steps, times, timed, sampled = fabricate(seed)
    found = {e.choice: e for e in sample_errors(rows, steps, "graph")}
    for c in CHOICES:
        measured = sum(timed[c, s] for s in sampled)
        estimate = sum(times[c, steps["bucket"][s]] for s in sampled)
        e = found[name(c)]
        assert (e.steps, e.timed_ms, e.estimate_ms) == (12, pytest.approx(measured), pytest.approx(estimate))
        assert e.error_pct == pytest.approx((estimate - measured) / measured * 100)


def test_wins_by_kind_and_size_against_loops():
    rows, steps, times, _, _ = fabricate(1)
    table = wins(rows, steps, "graph", 8.0)
    assert table["steps"].sum() == len(steps)
    for _, line in table.iterrows():
        low, high = (int(v) for v in (line["query tokens"].split("-") * 2)[:2])
        chosen = steps[(steps["kind"] == line["kind"]) & steps["query_tokens"].between(low, high)]
        winners = [name(min(CHOICES, key=lambda c: times[c, b])) for b in chosen["bucket"]]
        most = max(winners.count(c) for c in winners)
        assert line["steps"] == len(chosen) and winners.count(line["wins most"]) == most
        assert line["share"] == pytest.approx(most / len(chosen))


def test_the_summary_and_env_record_say_the_same_numbers():
    rows, steps, times, _, _ = fabricate(2)
    record = summary_record(rows, steps)["graph"]
    text = summary_text(rows, steps, {"path": "t.jsonl", "steps": len(steps), "kinds": "", "buckets": 7,
                                      "rule": "r", "exact_sample": 12, "seed": 0, "ratio": 2.0})
    best = oracle(rows, steps, "graph")
    assert record["oracle"]["best_single"] == best.best and f"{best.saving * 100:.2f} %" in text
    assert record["oracle"]["saving_pct"] == pytest.approx(best.saving * 100, abs=1e-3)
    for choice, total in record["totals_ms"].items():
        assert f"| {choice} | {total:.4g} |" in text
    assert set(record["exact_sample"]) == {name(c) for c in CHOICES} and "Bucketing error" in text


def test_a_cpu_run_draws_no_verdict():
    rows, steps, _, _, _ = fabricate(3)
    rows = rows.assign(device="cpu")
    text = summary_text(rows, steps, {"path": "t.jsonl", "steps": len(steps), "kinds": "", "buckets": 7,
                                      "rule": "r", "exact_sample": 12, "seed": 0, "ratio": 2.0})
    assert "no verdict" in text and "It saves" not in text
    assert "wins most" not in text and "not shown for a CPU run" in text
    gpu = summary_text(rows.assign(device="cuda"), steps, {"path": "t.jsonl", "steps": len(steps), "kinds": "",
                                                            "buckets": 7, "rule": "r", "exact_sample": 12, "seed": 0,
                                                            "ratio": 2.0})
    assert "wins most" in gpu


def test_replicate_ranges_against_loops():
    """Each replicate's totals and saving computed alone; the range is their lowest and highest."""
    rows, steps, times, _, _ = fabricate(4)
    rng = random.Random(9)
    factors = {i: [rng.uniform(0.9, 1.1) for _ in range(3)] for i in rows.index}
    rows["replicate_medians_ms"] = [" ".join(f"{rows.at[i, 'median_ms'] * f:.9g}" for f in factors[i])
                                    for i in rows.index]
    bucket_index = {(r.backend, r.strategy, r.bucket): i for i, r in rows[rows["part"] == "bucket"].iterrows()}
    per_replicate = []
    for r in range(3):
        t = {(c, b): times[c, b] * factors[bucket_index[(*c, b)]][r] for c in CHOICES for b in range(7)}
        single = {name(c): sum(t[c, b] for b in steps["bucket"]) for c in CHOICES}
        best = min(single.values())
        per_replicate.append({**single, "saving": 1 - sum(min(t[c, b] for c in CHOICES) for b in steps["bucket"]) / best})
    found = replicate_ranges(rows, steps, "graph")
    for key in [*map(name, CHOICES), "saving"]:
        values = [p[key] for p in per_replicate]
        assert found[key] == (pytest.approx(min(values), rel=1e-6), pytest.approx(max(values), rel=1e-6))
    assert replicate_ranges(rows.assign(replicate_medians_ms=""), steps, "graph") == {}
    text = summary_text(rows, steps, {"path": "t", "steps": len(steps), "kinds": "", "buckets": 7, "rule": "r",
                                      "exact_sample": 12, "seed": 0, "ratio": 2.0})
    assert "within each replicate" in text and "replicates ms" in text
