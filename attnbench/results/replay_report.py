"""A replay's summary.md: the totals per choice, the per-step and per-bucket oracles, where each choice wins and
the bucketing error, per mode, as tables a reader can paste.

Why its own module: results/replay.py computes, this words it; the job (runs/replay.py) only hands
both tables in. A CPU run says first that its timings are a pipeline demo, and draws no verdict.
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.results.figures import CPU_MARK, is_cpu, where_it_ran
from attnbench.results.notes import decision_counts
from attnbench.results.replay import (GOAL_PCT, Total, modes_of, oracle, replicate_ranges, sample_errors, totals,
                                      wins)
from attnbench.results.tables import md_lines


def _ms(value: float) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def _vs_fastest(found: list[Total]) -> dict[str, str]:
    """Each choice's total over the fastest complete one (`1.042x`), or why it has no total."""
    complete = [t for t in found if not t.missing]
    fastest = complete[0].total_ms if complete else math.nan
    return {t.choice: f"{t.total_ms / fastest:.3f}x" if not t.missing and fastest else
            f"no total: {t.missing} bucket(s) without a passing row" for t in found}


def totals_section(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> list[str]:
    """The totals, with the p10 - p90 band of the samples and, with replicates, the range of the
    totals each replicate gives alone (what differs between runs)."""
    found, ranges = totals(rows, steps, mode), replicate_ranges(rows, steps, mode)
    ratios = _vs_fastest(found)
    lines = [[t.choice, _ms(t.total_ms), f"{_ms(t.low_ms)} – {_ms(t.high_ms)}",
              " – ".join(map(_ms, ranges[t.choice])) if t.choice in ranges else "—", ratios[t.choice]]
             for t in found]
    return ["### Attention time per layer over the trace", "",
            *md_lines(["choice", "total ms", "p10 – p90 ms", "replicates ms", "vs fastest"], lines), ""]


def oracle_section(rows: pd.DataFrame, steps: pd.DataFrame, mode: str, cpu: bool) -> list[str]:
    """The per-step oracle (each representative step's own fastest choice), and the per-bucket one
    (one choice per bucket) as a bound: the same name never stands for both."""
    best = oracle(rows, steps, mode)
    if best is None:
        return ["No choice passed on every bucket: no oracle.", ""]
    spreads = replicate_ranges(rows, steps, mode)

    def saves(saving: float, key: str) -> str:
        spread = spreads.get(key)
        within = f" ({spread[0] * 100:.2f} – {spread[1] * 100:.2f} % within each replicate)" if spread else ""
        return "" if cpu else f" It saves {saving * 100:.2f} %{within} over the best single choice."
    return [f"Per-step oracle (the fastest choice for each step, taken on each bucket's representative steps and "
            f"weighed by the steps each stands for): {_ms(best.total_ms)} ms against {_ms(best.best_ms)} ms for the "
            f"best single choice, {best.best}.{saves(best.saving, 'saving')}", "",
            f"Per-bucket oracle (one choice for all of a bucket's steps, the fastest over their sum): "
            f"{_ms(best.bucket_ms)} ms.{saves(best.bucket_saving, 'bucket_saving')} A bound above the per-step "
            "oracle: where choices cross inside a bucket, it gives up what the per-step oracle takes.", ""]


def wins_section(rows: pd.DataFrame, steps: pd.DataFrame, mode: str, ratio: float, cpu: bool) -> list[str]:
    """Where each choice wins; a CPU run names no winner (which choice its timings favour swings
    between identical runs)."""
    if cpu:
        return ["Where each choice wins: not shown for a CPU run (the reference backend's timings name no winner).", ""]
    table = wins(rows, steps, mode, ratio)
    if table.empty:
        return []
    lines = [[r["kind"], r["query tokens"], r["steps"], r["wins most"], f"{r['share'] * 100:.0f} %", r["all winners"]]
             for _, r in table.iterrows()]
    return ["### Where each choice wins (steps, by kind and query tokens)", "",
            "A bucket's steps are shared among its representatives' fastest choices by their weights, as the "
            "per-step oracle counts them.", "",
            *md_lines(["kind", "query tokens", "steps", "wins most", "of its steps", "winners"], lines), ""]


def sample_section(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> list[str]:
    errors = sample_errors(rows, steps, mode)
    if not errors:
        return ["Bucketing error: not measured (no --exact-sample step passed; `--exact-sample N` times N steps "
                "one by one and compares them with their buckets).", ""]
    lines = [[e.choice, e.steps, _ms(e.timed_ms), _ms(e.estimate_ms), f"{e.error_pct:+.2f} %",
              "—" if math.isnan(e.stderr_pct) else f"{e.stderr_pct:.2f} %", "yes" if e.within_goal else "no"]
             for e in errors]
    missed = [e.choice for e in errors if not e.within_goal]
    goal = f"The goal, |error| within {GOAL_PCT:g} % on the sample: " + \
        ("met by every choice." if not missed else f"not met by {', '.join(missed)}.")
    return ["### Bucketing error (sampled steps timed one by one)", "",
            *md_lines(["choice", "steps", "timed ms", "bucketed estimate ms", "error", "standard error",
                       f"within {GOAL_PCT:g} %"], lines), "", goal, "",
            "Each sampled step is estimated by its bucket's mean: the standard error is how far the error moves "
            "with which steps were drawn, even when the buckets sum the whole trace exactly.", ""]


def summary_text(rows: pd.DataFrame, steps: pd.DataFrame, trace: dict) -> str:
    """summary.md: what was replayed, then each mode's sections."""
    cpu = is_cpu(rows)
    out = ["# attnbench replay", ""]
    if cpu:
        out += [f"**{CPU_MARK}**: the reference backend on the CPU; no verdict is drawn from these timings.", ""]
    out += [f"- trace: `{trace['path']}` ({trace['steps']} steps: {trace['kinds']})",
            f"- buckets: {trace['buckets']} ({trace['rule']})",
            f"- exact sample: {trace['exact_sample']} step(s), seed {trace['seed']}",
            *([f"- shard {trace['shard']}: only its share of the points was measured here; the other shards' "
               "buckets have no rows, so no choice has a total"] if trace.get("shard") else []),
            f"- ran on: {where_it_ran(rows)}",
            "- times are one layer's attention per step, summed over the steps (each bucket's representatives' "
            "medians, each weighed by the steps it stands for)", ""]
    for mode in modes_of(rows):
        out += [f"## {mode}", "", *totals_section(rows, steps, mode), *oracle_section(rows, steps, mode, cpu),
                *wins_section(rows, steps, mode, trace["ratio"], cpu), *sample_section(rows, steps, mode)]
    out += decision_counts(rows)
    failed = rows[~rows["verdict"].isin(["pass"])]
    if not failed.empty:
        counts = failed["verdict"].value_counts()
        out += ["Rows that did not pass: " + ", ".join(f"{n} {v}" for v, n in counts.items())
                + " (results.csv's reason column says why).", ""]
    return "\n".join(out)


def headline(rows: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """What the console ends with, per mode: each choice's total, the per-step oracle beside them, and
    the best single choice with what the oracle saves over it; a CPU run's says it is a demo and
    leaves the saving out, as summary.md does (its timings name no winner)."""
    cpu, out = is_cpu(rows), []
    for mode in modes_of(rows):
        found, best = totals(rows, steps, mode), oracle(rows, steps, mode)
        ratios = _vs_fastest(found)
        lines = [[t.choice, _ms(t.total_ms), ratios[t.choice]] for t in found]
        if best is not None:
            lines.append(["per-step oracle", _ms(best.total_ms), f"{best.total_ms / best.best_ms:.3f}x"
                          if best.best_ms else "—"])
        out += [f"{mode}: one layer's attention summed over the trace ({CPU_MARK})" if cpu else
                f"{mode}: one layer's attention summed over the trace",
                *md_lines(["choice", "total ms", "vs fastest"], lines)]
        if best is None:
            out.append("no choice passed on every bucket: no best single choice, no oracle")
        else:
            saving = "" if cpu else f"; the per-step oracle saves {best.saving * 100:.2f} % over it"
            out.append(f"best single choice: {best.best}, {_ms(best.best_ms)} ms{saving}")
    return out
