"""What a replay's rows say about its trace: totals per choice, the per-step oracle, where each choice
wins, and how far the buckets are from timing every step.

Why apart from the sweep's tables: a replay's rows are buckets of steps, each weighed by its step
count (traces/buckets.py), and its questions are about the whole trace. Everything here reads two
tables: results.csv's rows (`part` bucket or sample, `bucket`, `step`, `steps`) and buckets.csv
(each step's kind, sizes and bucket). A choice is a backend with a strategy, within one mode; its
time for a step is its bucket's mean: the weighted mean of the medians of the bucket's
representatives (each row's `steps` is its weight; traces/buckets.py says why they sum the bucket
exactly when time is affine in the step's sizes), one layer's attention. Only passing rows count,
and a bucket counts for a choice only when all its representatives passed (their weights add up to
its step count). The per-step oracle takes each representative's own fastest choice, not its
bucket's: choices cross inside a bucket, and the bucket's fastest in sum is the per-bucket oracle,
a bound above it (docs/guides/replay.md, "The oracle", says why and how far each is from timing every step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.results.replicates import parse_times
from attnbench.traces.buckets import bin_of, bin_range

STEP_COLUMNS = ("step", "kind", "decode_rows", "query_tokens", "kv_tokens", "bucket")
GOAL_PCT = 2.0  # the bucketing error a replay aims at, against the steps timed one by one (docs/guides/replay.md)


def choice_of(rows: pd.DataFrame) -> pd.Series:
    return rows["backend"].astype(str) + " " + rows["strategy"].astype(str)


def passed(rows: pd.DataFrame, part: str, mode: str) -> pd.DataFrame:
    """The passing rows of `part` in `mode`, with their choice, and `bucket`, `step` (whole numbers)
    and `steps` (a weight above 0) as numbers; AttnbenchError naming the column when one is not."""
    chosen = rows[(rows["part"] == part) & (rows["mode"] == mode) & (rows["verdict"] == "pass")]
    numbers = {c: pd.to_numeric(chosen[c], errors="coerce") for c in ("bucket", "step", "steps")}
    for column, values in numbers.items():
        wrong = values.isna() | (values <= 0 if column == "steps" else (values < 0) | (values % 1 != 0))
        if wrong.any():
            raise AttnbenchError(f"results.csv: a {part} row's {column} is '{chosen[column][wrong].iloc[0]}', not "
                                 + ("a weight above 0" if column == "steps" else "a whole number 0 or more"))
    return chosen.assign(choice=choice_of(chosen), bucket=numbers["bucket"].astype(int),
                         step=numbers["step"].astype(int), steps=numbers["steps"].astype(float))


def check_rows(rows: pd.DataFrame) -> None:
    """Every passing row's `bucket`, `step` and `steps` are numbers (what `passed` checks), in every
    part and mode: a merge checks before it writes anything."""
    for part in ("bucket", "sample"):
        for mode in modes_of(rows):
            passed(rows, part, mode)


def step_counts(steps: pd.DataFrame) -> pd.Series:
    return steps.groupby("bucket").size()


def weighted_times(chosen: pd.DataFrame, value: pd.Series, counts: pd.Series) -> pd.DataFrame:
    """Bucket x choice: the representatives' `value` (ms, one per row of `chosen`) weighed by their
    `steps` and divided by the bucket's step count; NaN where their weights do not add up to it
    (a representative that did not pass, or a shard that did not time it)."""
    weights = chosen["steps"].astype(float)
    frame = chosen[["bucket", "choice"]].assign(weighted=value.to_numpy() * weights.to_numpy(), weight=weights)
    summed = frame.groupby(["bucket", "choice"])[["weighted", "weight"]].sum()
    count = summed.index.get_level_values("bucket").map(counts).to_numpy(dtype=float)
    whole = abs(summed["weight"].to_numpy() - count) <= 1e-6 * count
    mean = (summed["weighted"] / count).where(whole)
    return mean.unstack("choice").reindex(counts.index)


def bucket_times(rows: pd.DataFrame, steps: pd.DataFrame, mode: str, value: str = "median_ms") -> pd.DataFrame:
    """Bucket x choice: each bucket's mean per-step `value` (ms) for each choice whose representatives passed."""
    chosen = passed(rows, "bucket", mode)
    if chosen.empty:
        return pd.DataFrame(index=step_counts(steps).index)
    return weighted_times(chosen, chosen[value].astype(float), step_counts(steps))


@dataclass(frozen=True)
class Total:
    """A choice's attention time per layer over the whole trace (ms), with the p10-p90 band of its
    samples summed the same way; `missing` buckets had no passing row (the total is then NaN)."""

    choice: str
    total_ms: float
    low_ms: float
    high_ms: float
    missing: int


def totals(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> list[Total]:
    """Each choice's total, fastest first (incomplete choices last)."""
    counts = step_counts(steps)
    tables = [bucket_times(rows, steps, mode, v) for v in ("median_ms", "p10_ms", "p90_ms")]
    found = []
    for choice in tables[0].columns:
        median, low, high = (t[choice] for t in tables)
        missing = int(median.isna().sum())
        weigh = lambda s: float((s * counts).sum()) if not missing else math.nan  # noqa: E731
        found.append(Total(choice, weigh(median), weigh(low), weigh(high), missing))
    return sorted(found, key=lambda t: (t.missing > 0, t.total_ms if not t.missing else 0, t.choice))


def complete_times(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Bucket x choice, only the choices that passed on every bucket (the ones a total compares)."""
    times = bucket_times(rows, steps, mode)
    return times[[c for c in times.columns if times[c].notna().all()]]


@dataclass(frozen=True)
class Oracle:
    """The per-step oracle: each representative step's fastest choice, weighed by the steps it
    stands for, summed (`total_ms`), and what it saves over the best single choice (a fraction);
    beside it the per-bucket oracle: one choice for all of a bucket's steps, its fastest in sum
    (`bucket_ms`, `bucket_saving`), never below the per-step one."""

    total_ms: float
    best: str
    best_ms: float
    saving: float
    bucket_ms: float
    bucket_saving: float


def per_step_ms(chosen: pd.DataFrame, value: pd.Series, choices: list[str]) -> float:
    """Sum over representatives of weight x the lowest `value` (one per row of `chosen`) among `choices`."""
    table = chosen[["bucket", "step", "steps", "choice"]].assign(value=value.to_numpy())
    table = table[table["choice"].isin(choices)]
    fastest = table.groupby(["bucket", "step"]).agg(weight=("steps", "first"), value=("value", "min"))
    return float((fastest["weight"] * fastest["value"]).sum())


def _oracle_of(times: pd.DataFrame, counts: pd.Series, per_step_total: float) -> Oracle:
    single = (times.mul(counts, axis=0)).sum()
    best, per_bucket = str(single.idxmin()), float((times.min(axis=1) * counts).sum())
    saving = (lambda total: 1.0 - total / float(single[best]) if single[best] else 0.0)  # noqa: E731
    return Oracle(per_step_total, best, float(single[best]), saving(per_step_total), per_bucket, saving(per_bucket))


def oracle(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> Oracle | None:
    """Over the choices with a total (complete on every bucket): see Oracle."""
    times = complete_times(rows, steps, mode)
    if times.empty:
        return None
    chosen = passed(rows, "bucket", mode)
    return _oracle_of(times, step_counts(steps), per_step_ms(chosen, chosen["median_ms"], list(times.columns)))


def replicate_times(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> list[tuple[pd.DataFrame, float]]:
    """Within each replicate (its medians, `replicate_medians_ms`): bucket x choice for the choices
    complete in it, and the per-step oracle's total over them; [] unless every passing bucket row
    has the same number (2 or more) of them."""
    chosen = passed(rows, "bucket", mode)
    if chosen.empty or "replicate_medians_ms" not in chosen:
        return []
    medians = [parse_times(cell) for cell in chosen["replicate_medians_ms"]]
    if len({len(m) for m in medians}) != 1 or len(medians[0]) < 2:
        return []
    found = []
    for r in range(len(medians[0])):
        value = pd.Series([m[r] for m in medians])
        table = weighted_times(chosen, value, step_counts(steps))
        table = table[[c for c in table.columns if table[c].notna().all()]]
        found.append((table, per_step_ms(chosen, value, list(table.columns))))
    return found


def replicate_ranges(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> dict[str, tuple[float, float]]:
    """(lowest, highest) over replicates, each computed within one replicate: every complete
    choice's total (by its name) and the per-step and per-bucket oracles' savings over the best
    single choice (`saving`, `bucket_saving`)."""
    counts, found = step_counts(steps), {}
    for times, per_step_total in replicate_times(rows, steps, mode):
        if times.empty:
            continue
        best = _oracle_of(times, counts, per_step_total)
        values = {**(times.mul(counts, axis=0)).sum().to_dict(), "saving": best.saving,
                  "bucket_saving": best.bucket_saving}
        for name, value in values.items():
            low, high = found.get(name, (value, value))
            found[name] = (min(low, value), max(high, value))
    return found


def wins(rows: pd.DataFrame, steps: pd.DataFrame, mode: str, ratio: float) -> pd.DataFrame:
    """By step kind and query-token bin: steps, the choice that is fastest on most of them and on
    what share, and every choice that wins any (choice: steps). As the per-step oracle counts them:
    each step counts for each choice by the share of its bucket's weight whose representatives that
    choice is fastest on (a bucket won whole by one choice gives it all its steps)."""
    times = complete_times(rows, steps, mode)
    if times.empty:
        return pd.DataFrame()
    chosen = passed(rows, "bucket", mode)
    chosen = chosen[chosen["choice"].isin(times.columns)]
    fastest = chosen.loc[chosen.groupby(["bucket", "step"])["median_ms"].idxmin()]
    won = fastest.groupby(["bucket", "choice"])["steps"].sum().unstack(fill_value=0.0)
    share = won.div(won.sum(axis=1), axis=0).reindex(steps["bucket"]).set_axis(steps.index)
    size = pd.Series([bin_of(q, ratio) for q in steps["query_tokens"]], index=steps.index)
    found = []
    for (kind, bin_), group in share.groupby([steps["kind"], size], sort=True):
        counted = group.sum()
        counted = counted[counted > 1e-9].sort_values(ascending=False, kind="stable")
        low, high = bin_range(int(bin_), ratio)
        found.append({"kind": kind, "query tokens": f"{low}-{high}" if high > low else str(low),
                      "steps": len(group), "wins most": counted.index[0], "share": counted.iloc[0] / len(group),
                      "all winners": ", ".join(f"{c}: {round(n, 1):g}" for c, n in counted.items())})
    return pd.DataFrame(found)


@dataclass(frozen=True)
class SampleError:
    """Over the sampled steps timed one by one: their timed total against the bucketed estimate of
    the same steps (each its bucket's time); error_pct = (estimate - timed) / timed x 100. Each step
    is estimated by its bucket's mean, so a step differs from its estimate even when the buckets sum
    the trace exactly: stderr_pct is the standard error of error_pct that this alone gives over the
    sample (the per-step differences' spread x sqrt(steps) / timed x 100; NaN under 2 steps)."""

    choice: str
    steps: int
    timed_ms: float
    estimate_ms: float
    error_pct: float
    stderr_pct: float

    @property
    def within_goal(self) -> bool:  # on this sample; stderr_pct says how sure that is
        return abs(self.error_pct) <= GOAL_PCT


def sample_errors(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> list[SampleError]:
    times = bucket_times(rows, steps, mode)
    sampled = passed(rows, "sample", mode)
    bucket_of = steps.set_index("step")["bucket"]
    found = []
    for choice, group in sampled.groupby("choice", sort=True):
        if choice not in times.columns:
            continue
        estimates = times[choice].reindex(bucket_of.reindex(group["step"].astype(int)).values).values
        keep = ~pd.isna(estimates)
        timed_steps = group["median_ms"].to_numpy(dtype=float)[keep]
        timed, estimate = float(timed_steps.sum()), float(estimates[keep].sum())
        differences = estimates[keep].astype(float) - timed_steps
        spread = float(differences.std(ddof=1)) * math.sqrt(len(differences)) if len(differences) > 1 else math.nan
        if keep.any() and timed > 0:
            found.append(SampleError(choice, int(keep.sum()), timed, estimate, (estimate - timed) / timed * 100,
                                     spread / timed * 100))
    return found


def per_step(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Step x choice: each step's time (its bucket's), for the choices complete on the trace."""
    times = complete_times(rows, steps, mode)
    return pd.DataFrame(times.reindex(steps["bucket"]).values, index=steps["step"], columns=times.columns)


def modes_of(rows: pd.DataFrame) -> list[str]:
    return [m for m in ("graph", "eager") if (rows.get("mode", pd.Series(dtype=str)) == m).any()]


def summary_record(rows: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """The numbers env.json keeps, per mode: totals, the oracle and the exact-sample errors."""
    record = {}
    for mode in modes_of(rows):
        best, ranges = oracle(rows, steps, mode), replicate_ranges(rows, steps, mode)
        record[mode] = {
            "replicate_ranges": {name: [round(low, 6), round(high, 6)] for name, (low, high) in ranges.items()},
            "totals_ms": {t.choice: None if t.missing else round(t.total_ms, 6) for t in totals(rows, steps, mode)},
            "oracle": None if best is None else {"total_ms": round(best.total_ms, 6), "best_single": best.best,
                                                 "best_single_ms": round(best.best_ms, 6),
                                                 "saving_pct": round(best.saving * 100, 3), "per": "step",
                                                 "bucket_total_ms": round(best.bucket_ms, 6),
                                                 "bucket_saving_pct": round(best.bucket_saving * 100, 3)},
            "exact_sample": {e.choice: {"steps": e.steps, "timed_ms": round(e.timed_ms, 6),
                                        "estimate_ms": round(e.estimate_ms, 6), "error_pct": round(e.error_pct, 3),
                                        "stderr_pct": None if math.isnan(e.stderr_pct) else round(e.stderr_pct, 3),
                                        "within_goal": e.within_goal}
                             for e in sample_errors(rows, steps, mode)},
        }
    return record


def read_steps(run_dir: Path) -> pd.DataFrame:
    """A replay run's buckets.csv (each step's kind, sizes and bucket); one line naming the file
    when it is missing or not one."""
    path = run_dir / "buckets.csv"
    if not path.is_file():
        raise AttnbenchError(f"{run_dir} is a replay run without buckets.csv (each step's bucket)")
    try:
        steps = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise AttnbenchError(f"{path} is not a buckets.csv ({str(exc).splitlines()[0]})") from None
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    if missing or not pd.api.types.is_integer_dtype(steps["bucket"]) or steps.empty:
        why = f"lacks {', '.join(missing)}" if missing else ("holds no step" if steps.empty else "has a bucket that is not a whole number")
        raise AttnbenchError(f"{path} is not a buckets.csv: it {why}")
    return steps

