"""What a run's numbers can and cannot carry, said next to them (summary.md and the console).

A table of medians looks equally sure of every cell. These notes say how each median was made
(replicates), where it is shaky (rows whose samples never converged; CPU runs, whose split /
unified ratios swing between identical runs), the interval of each strategy's ratio to unified
over paired replicates, how the GPU ran while it was measured (telemetry columns), and, where a
run has a fused strategy, fused against the best of the others (results/fusion.py). Each
function returns lines; the writers call them in one line, so the tables stay theirs.
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.results.fusion import fusion_lines
from attnbench.results.replicates import CONFIDENCE, MIN_REPLICATES, mean_interval, parse_times, spread
from attnbench.results.tables import md_lines

TIMED = ("pass", "fail")
POINT = ["kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "context", "prefix_ratio"]
CPU_NOTE = ("CPU run: the reference backend timed with perf_counter, a demonstration of the pipeline, not a "
            "kernel comparison; the ratios to unified are not stable here (they swing between identical runs)")


def run_notes(df: pd.DataFrame) -> list[str]:
    """Plain sentences: replicates, unconverged rows, the CPU caveat, throttling."""
    timed = df[df["verdict"].isin(TIMED)]
    if timed.empty:
        return []
    notes = []
    if "replicates" in timed and timed["replicates"].notna().any():
        counts = sorted({int(n) for n in timed["replicates"].dropna()})
        shown = "/".join(map(str, counts))
        if counts == [1]:
            notes.append("one replicate per row: its interval knows within-run noise only "
                         "(--replicates 3 re-allocates, re-plans and re-captures each row 3 times)")
        else:
            spreads = [spread(parse_times(c)) for c in timed["replicate_medians_ms"] if len(parse_times(c)) > 1]
            worst = max(spreads) if spreads else math.nan
            notes.append(f"median_ms is the median of {shown} replicate medians (each replicate: fresh inputs, a "
                         f"new plan and new graphs); replicate medians of a row lie within {_pct(worst)} of each "
                         f"other at most, {_pct(_median(spreads))} typically")
    notes += stopping_notes(timed)
    if "converged" in timed:
        unconverged = int((timed["converged"].astype(str).str.lower() == "false").sum())
        if unconverged:
            notes.append(f"{unconverged} of {len(timed)} timed rows did not converge (their samples' IQR stayed "
                         "above --rel-spread until the budget ended): their medians are less certain")
    if "device" in timed and (timed["device"] == "cpu").all():
        notes.append(CPU_NOTE)
    notes += telemetry_notes(timed)
    return notes


def stopping_notes(timed: pd.DataFrame) -> list[str]:
    """How many rows' replicates stopped converged and how many at the budget, and the threshold that
    compare can resolve for the converged ones (kernels/replicate_rule.py)."""
    if "stopped" not in timed or timed["stopped"].isna().all():
        return []
    stopped = timed["stopped"].fillna("").astype(str)
    converged, budget = int((stopped == "converged").sum()), int((stopped == "budget").sum())
    thresholds = sorted(set(pd.to_numeric(timed["stop_threshold"], errors="coerce").dropna()))
    shown = "/".join(f"{t:.1%}" for t in thresholds)
    counts = sorted({int(n) for n in pd.to_numeric(timed["replicates"], errors="coerce").dropna()})
    span = f"{counts[0]}-{counts[-1]}" if len(counts) > 1 else str(counts[0]) if counts else "none"
    return [f"replicates stopped when enough ({span} per row): {converged} of "
            f"{len(timed)} timed rows converged (compare's interval for an A/A pair within ±half of {shown}, so "
            f"`attnbench compare --threshold {shown}` resolves them), {budget} stopped at the budget (compare may "
            "call them noisy at that threshold)"]


def telemetry_notes(timed: pd.DataFrame) -> list[str]:
    if "sm_clock_median_mhz" not in timed or timed["sm_clock_median_mhz"].isna().all():
        return []
    clocks = pd.to_numeric(timed["sm_clock_min_mhz"], errors="coerce")
    medians = pd.to_numeric(timed["sm_clock_median_mhz"], errors="coerce")
    flags = timed["clock_flag"].fillna("").astype(str) if "clock_flag" in timed else pd.Series(dtype=str)
    reasons = sorted({r for cell in timed.get("throttle_reasons", pd.Series(dtype=str)).fillna("").astype(str)
                      for r in cell.split("+") if r})
    line = (f"GPU telemetry (telemetry.csv): SM clock {clocks.min():.0f} MHz at lowest, median {medians.median():.0f} "
            f"MHz over the timed rows; {int(flags.str.contains('throttled').sum())} row(s) throttled"
            f"{' (' + ', '.join(reasons) + ')' if reasons else ''}, "
            f"{int(flags.str.contains('below max').sum())} row(s) below the maximum SM clock (clock_flag column)")
    return [line]


def ratio_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """Per point, backend and mode: each strategy's time over unified's, the median of the paired
    replicates' ratios (timed interleaved, on the same inputs) and its interval over them."""
    timed = df[df["verdict"].isin(TIMED)]
    if "replicate_medians_ms" not in timed or "unified" not in set(timed["strategy"]):
        return pd.DataFrame()
    records = []
    group = [c for c in POINT if c in timed] + ["backend", "mode"]
    for key, rows in timed.groupby(group, sort=False, dropna=False):
        by_strategy = {s: parse_times(c) for s, c in zip(rows["strategy"], rows["replicate_medians_ms"])}
        unified = by_strategy.get("unified", [])
        for strategy, medians in by_strategy.items():
            if strategy == "unified" or len(medians) != len(unified) or len(unified) < MIN_REPLICATES:
                continue
            ratios = [m / u for m, u in zip(medians, unified)]
            low, high = mean_interval(ratios)
            records.append({**dict(zip(group, key)), "ratio": f"{strategy} / unified",
                            "median": _median(ratios), "low": low, "high": high})
    return pd.DataFrame(records)


def summary_notes(df: pd.DataFrame) -> list[str]:
    """summary.md lines: the notes as a list, then the ratio intervals as a table."""
    lines = [f"- {note}" for note in run_notes(df)]
    table = ratio_intervals(df)
    if not table.empty:
        lines += ["", f"## Ratios over paired replicates ({CONFIDENCE:.0%} intervals)\n",
                  "| kind | tokens | heads | kv heads | dim | context | backend | mode | ratio | median | interval |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r.kind} | {r.num_tokens} | {r.num_heads} | {r.num_kv_heads} | {r.head_dim} | {r.context} | "
                  f"{r.backend} | "
                  f"{r.mode} | {r.ratio} | {r.median:.3f} | {r.low:.3f}-{r.high:.3f} |"
                  for r in table.itertuples(index=False)]
    lines += fusion_lines(df) + decision_lines(df)
    return [*lines, ""] if lines else []


def _median(values: list[float]) -> float:
    return float(pd.Series(values, dtype=float).median()) if values else math.nan


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


def decision_lines(df: pd.DataFrame) -> list[str]:
    """What each library decided (the decision_* columns), once per point, backend and strategy
    (a plan's decisions do not depend on the mode); nothing when no backend of the run decides."""
    columns = [c for c in df.columns if c.startswith("decision_") and df[c].notna().any()]
    if not columns:
        return []
    keys = ["kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "backend", "strategy"]
    decided = df[df[columns].notna().any(axis=1)][keys + columns].drop_duplicates(keys)
    cells = decided.astype(object).where(decided.notna(), "")
    return ["", "## What each library decided (decision_* columns, docs/guides/kernel.md)\n",
            *md_lines(["kind", "tokens", "heads", "kv heads", "dim", "backend", "strategy", *columns],
                      cells.itertuples(index=False)), ""]


def decision_counts(df: pd.DataFrame) -> list[str]:
    """summary.md lines for runs of many points (replay, atlas): per backend and strategy, each
    decision's values with how many rows had each; nothing when no backend of the run decides."""
    columns = [c for c in df.columns if c.startswith("decision_") and df[c].notna().any()]
    lines = []
    for (backend, strategy), rows in (df.groupby(["backend", "strategy"], sort=True) if columns else ()):
        said = []
        for column in columns:
            counts = rows[column].dropna().value_counts()
            if not counts.empty:
                said.append(column.removeprefix("decision_") + " " + ", ".join(f"{v} ({n})" for v, n in counts.items()))
        if said:
            lines.append(f"- {backend} {strategy}: " + "; ".join(said))
    return ["## What each library decided (values, with their rows; the decision_* columns)", "", *lines, ""] \
        if lines else []

