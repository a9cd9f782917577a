"""How far a replay's two oracles are from the true per-step oracle: on fake timers, and on replay runs.

    python3 benchmarks/oracle_check.py [RUN ...]

Without runs: for every sample trace in scenarios/traces/, two fake choices affine in a step's
sizes that cross at the trace's median of one size (tests/test_replay_oracle.py's `crossing`), at
bucket ratios 2 and 8, prints how far above the exact per-step oracle (every step's minimum,
summed) the representatives' per-step estimate and the per-bucket oracle come, in percent.

With replay runs (results.csv and buckets.csv; read, never written): per mode, each oracle's
saving over the best single choice, and on the steps the run also timed one by one
(--exact-sample) the saving their own timings give against the two estimates of the same steps
(each step given its bucket's per-choice time for the per-bucket one, its bucket's per-step oracle
per step for the other). A 20-step sample is small: each step is estimated by its bucket's mean.
Not a test: a benchmark that prints numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from attnbench.results.replay import complete_times, modes_of, oracle, passed, step_counts  # noqa: E402
from attnbench.traces.jsonl import read_trace  # noqa: E402


def fake_timers() -> None:
    from test_replay_oracle import SAMPLES, SIZES, TRACES, crossing, estimates

    print("ratio  crossing in      trace          per-step estimate  per-bucket oracle  (% above exact)")
    traces = {name: read_trace(next(TRACES.glob(f"{name}.jsonl*"))) for name in SAMPLES}
    for ratio in (2.0, 8.0):
        for size in SIZES:
            for name, trace in traces.items():
                exact, per_step, per_bucket = estimates(trace, ratio, crossing(trace, size))
                print(f"{ratio:<6g} {size:16s} {name:14s} {(per_step / exact - 1) * 100:+17.4f}"
                      f"  {(per_bucket / exact - 1) * 100:+17.4f}")


def sample_savings(rows: pd.DataFrame, steps: pd.DataFrame, mode: str) -> tuple[int, float, float, float] | None:
    """(sampled steps, their own saving, the per-bucket estimate's, the per-step estimate's), in %."""
    times, counts = complete_times(rows, steps, mode), step_counts(steps)
    chosen = passed(rows, "bucket", mode)
    chosen = chosen[chosen["choice"].isin(times.columns)]
    fastest = chosen.groupby(["bucket", "step"]).agg(weight=("steps", "first"), ms=("median_ms", "min"))
    per_step = (fastest["weight"] * fastest["ms"]).groupby(level="bucket").sum() / counts
    sampled = passed(rows, "sample", mode).pivot_table(index=["bucket", "step"], columns="choice",
                                                       values="median_ms")
    sampled = sampled.reindex(columns=times.columns).dropna()
    if sampled.empty:
        return None
    buckets = sampled.index.get_level_values("bucket")
    estimate = times.loc[buckets]
    best = estimate.sum().min()
    return (len(sampled), (1 - sampled.min(axis=1).sum() / sampled.sum().min()) * 100,
            (1 - estimate.min(axis=1).sum() / best) * 100, (1 - per_step.loc[buckets].sum() / best) * 100)


def runs(paths: list[Path]) -> None:
    for path in paths:
        rows, steps = pd.read_csv(path / "results.csv"), pd.read_csv(path / "buckets.csv")
        for mode in modes_of(rows):
            found = oracle(rows, steps, mode)
            if found is None:
                print(f"{path} {mode}: no choice passed on every bucket")
                continue
            print(f"{path} {mode}: best single {found.best} {found.best_ms:.4f} ms; per-step oracle "
                  f"{found.total_ms:.4f} ms (saves {found.saving * 100:.2f} %, the best single choice's regret "
                  f"{(found.best_ms / found.total_ms - 1) * 100:.2f} %); per-bucket oracle {found.bucket_ms:.4f} ms "
                  f"(saves {found.bucket_saving * 100:.2f} %)")
            sample = sample_savings(rows, steps, mode)
            if sample:
                print(f"  {sample[0]} steps timed one by one: their own saving {sample[1]:.2f} %, the per-bucket "
                      f"estimate of them {sample[2]:.2f} %, the per-step estimate {sample[3]:.2f} %")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        runs([Path(p) for p in sys.argv[1:]])
    else:
        fake_timers()
