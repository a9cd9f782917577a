"""What `attnbench ab` writes: ab.csv (a row each), rounds.csv (every measurement), summary.md.

A row of ab.csv is a sweep row (the kernel key columns, as compare matches them) with its paired
verdict (results/paired.py): rounds measured, each side's median over rounds, the geometric-mean
and median ratio candidate / baseline, the interval, the verdict in compare's words, why it
stopped, and the per-round ratios. A CPU run's rows get no verdict (`unjudged`), as compare gives
CPU timings none: see CPU_NOTE.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import pandas as pd

from attnbench.results.compare import BROKEN, by_verdict, env_differences, labels, varying
from attnbench.results.paired import BASELINE, CANDIDATE, NEEDS_AT_MOST, RowRounds, rounds_needed
from attnbench.results.read import KERNEL
from attnbench.results.replicates import CONFIDENCE
from attnbench.results.verdicts import UNCOUNTED, VERDICTS

CPU_NOTE = ("CPU timings: no verdict (a CPU shares its cores, caches and clock with the rest of the machine, and "
            "interleaving does not make that noise a gate's; run ab on a GPU); ratios and intervals are for reading only")


@dataclass
class AbRow:
    label: str
    rounds: int
    baseline_ms: float
    candidate_ms: float
    ratio: float         # geometric mean of the per-round ratios candidate / baseline
    median_ratio: float
    ci_low: float
    ci_high: float
    verdict: str         # slower, faster, same, noisy; unjudged without an interval or on the CPU
    stopped: str         # decided, max-rounds, budget, not-timed
    rounds_needed: float  # a noisy row: the rounds its per-round spread would need (paired.rounds_needed); else NaN
    baseline_check: str  # each side's row verdict in its last round (pass, fail, skipped, error, ...)
    candidate_check: str
    ratios: str          # per round, space-separated
    reason: str


def ab_row(key: dict, label: str, rounds: RowRounds, sides: dict[str, dict], threshold: float, confidence: float,
           cpu: bool) -> dict:
    """One row of ab.csv: the key columns, then AbRow's (its interval at the confidence it stopped on)."""
    result = rounds.result(threshold, confidence)
    nan = float("nan")
    reason = " | ".join(f"{side}: {sides[side].get('reason')}" for side in (BASELINE, CANDIDATE)
                        if sides.get(side, {}).get("reason"))
    row = AbRow(label, len(rounds.ratios),
                statistics.median(rounds.baseline_ms) if rounds.ratios else nan,
                statistics.median(rounds.candidate_ms) if rounds.ratios else nan,
                result.ratio if result else nan, result.median_ratio if result else nan,
                result.low if result else nan, result.high if result else nan,
                result.verdict if result and not cpu else "unjudged", rounds.stopped,
                _needed(rounds.ratios, threshold, confidence) if result and result.verdict == "noisy" and not cpu else nan,
                sides.get(BASELINE, {}).get("verdict", ""), sides.get(CANDIDATE, {}).get("verdict", ""),
                " ".join(f"{r:.5f}" for r in rounds.ratios), reason)
    return {**key, **asdict(row)}


def _needed(ratios: list[float], threshold: float, confidence: float) -> float:
    """rounds_needed as ab.csv holds it: inf beyond NEEDS_AT_MOST, NaN at threshold 0."""
    needed = rounds_needed(ratios, threshold, confidence)
    if needed is not None:
        return float(needed)
    return float("inf") if threshold > 0 else float("nan")


def needs_line(frame: pd.DataFrame, threshold: float) -> str:
    """What the noisy rows would take at their per-round spread ("" when none is noisy)."""
    needed = frame["rounds_needed"].dropna()
    if needed.empty:
        return ""
    most = "more than " + str(NEEDS_AT_MOST) if needed.max() == float("inf") else f"{needed.max():.0f}"
    return (f"{len(needed)} noisy row(s) would need about {needed.median():.0f} rounds (median; up to {most}) at "
            f"their per-round spread so far for an interval within half of {threshold:.1%} either side: then an "
            f"unchanged row is `same` and a change of {1.5 * threshold:.1%} is caught; raise --max-rounds and "
            "--budget-s, or make a round quieter (a longer --budget-ms)")


def ab_frame(entries: list[tuple[dict, RowRounds, dict]], threshold: float, confidence: float,
             cpu: bool) -> pd.DataFrame:
    """ab.csv as a frame, from (key columns, rounds, each side's last row) per row; slowest first."""
    keys = pd.DataFrame([key for key, _, _ in entries], columns=list(KERNEL.key))
    names = labels(keys, varying(keys, list(KERNEL.key)))
    frame = pd.DataFrame([ab_row(key, name, rounds, sides, threshold, confidence, cpu)
                          for (key, rounds, sides), name in zip(entries, names)])
    return by_verdict(frame)


def broken(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that pass the accuracy check on the baseline and fail it, or error, on the candidate."""
    return frame[(frame["baseline_check"] == "pass") & frame["candidate_check"].isin(("fail", *BROKEN))]


def regressed(frame: pd.DataFrame) -> bool:
    """What fails a gate, as in compare: a row slower beyond threshold and noise, or a correctness regression."""
    return bool((frame["verdict"] == "slower").any()) or not broken(frame).empty


def counts_line(frame: pd.DataFrame, threshold: float, wall_s: float) -> str:
    """The verdicts, why rows stopped, and the run's wall time."""
    counts = ", ".join(f"{int((frame['verdict'] == v).sum())} {v}" for v in VERDICTS
                       if v not in UNCOUNTED or (frame["verdict"] == v).any())
    stops = frame["stopped"].value_counts().to_dict()
    return (f"{len(frame)} rows: {counts} (threshold {threshold:.1%}, paired intervals {CONFIDENCE:.0%} over all looks); stopped: "
            + ", ".join(f"{n} {why}" for why, n in stops.items()) + f"; {wall_s:.0f} s")


def summary(frame: pd.DataFrame, env: dict, threshold: float, wall_s: float, cpu: bool) -> str:
    """summary.md: the verdict line, how the sides differ, and the table."""
    ab = env["ab"]
    head = "**regression**" if regressed(frame) else "no regression shown (CPU: no verdict)" if cpu else "no regression"
    needs = needs_line(frame, threshold)
    lines = [f"### attnbench ab: {head}", "", counts_line(frame, threshold, wall_s), *([needs] if needs else []), ""]
    lines += [f"- {side}: python {ab[side]['python']}, src {ab[side]['src']}"
              + (f", {ab[side]['variables']}" if ab[side]["variables"] else "") for side in (BASELINE, CANDIDATE)]
    diff = env_differences(ab[BASELINE]["versions"], ab[CANDIDATE]["versions"])
    if diff:
        lines += ["", "| version | baseline | candidate |", "|---|---|---|", *[f"| {k} | {b} | {c} |" for k, b, c in diff]]
    lines += ["", "| row | rounds | baseline ms | candidate ms | ratio | interval | verdict | stopped |",
              "|---|---:|---:|---:|---:|---|---|---|"]
    for r in frame.itertuples(index=False):
        lines.append(f"| {r.label} | {r.rounds} | {r.baseline_ms:.4f} | {r.candidate_ms:.4f} | {r.ratio:.3f} | "
                     f"{r.ci_low:.3f}–{r.ci_high:.3f} | {r.verdict} | {r.stopped} |")
    if cpu:
        lines += ["", CPU_NOTE]
    lines += [f"\ncorrectness regression: {label}" for label in broken(frame)["label"]]
    return "\n".join(lines) + "\n"
