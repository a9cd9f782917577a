"""Where a replay's bucketing error comes from, re-analysed on the CPU from a finished replay's rows.

    python3 benchmarks/bucket_error.py RUN_DIR TRACE [--draws 300] [--piece-steps 50,25]

RUN_DIR is an `attnbench replay ... --exact-sample N` run (results.csv, buckets.csv, env.json);
TRACE the trace it replayed. Prints, per choice:

1. the error against the sampled steps and its standard error, and the share of it each bucket carries;
2. in the bucket with the most sampled steps, each representative's time against a linear fit of
   the time on the work sizes over that bucket's sampled steps (what the Carathéodory weights assume);
3. the SM clock of the bucket rows against the sampled rows (drift between the two parts), and
   how far the representatives sit from their bucket's mean against the sampled steps (in each
   work size's standard deviations within the bucket: extremes read high on a convex time);
4. a simulation without new GPU data: the sampled steps, timed one by one, are a random miniature of
   the trace; random subsets of them are bucketed as the replay does (same kind and bins), each
   bucket cut into pieces of about `--piece-steps` steps (or not cut), weighed, and the weighted
   representatives' total is compared with the subset's timed total. The mean of that error over
   draws is the bucketing's bias, its root mean square what one replay's error typically is.

5. the same at full scale: a model of each choice's time fitted on the sampled steps gives every
   step of the trace a time (times a sampled step's residual, drawn), and the trace is bucketed as
   a replay does at each `--splits` value, with the weights reproducing sums and squares (the
   replay's rule), the sums only, and the four sums of the rule before (no longest KV length; on
   the same pieces): the representatives are picked from thousands of steps, as in the replay,
   which the simulation on the sample cannot show.

A piece of 25 steps timed on 5 of them is estimated a little better than a piece of 600 steps on 5
(the weights are a larger share of the piece): the simulation flatters small pieces somewhat.
Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.results.replay import choice_of
from attnbench.traces.buckets import WORK, bucket_steps, moments, split_steps, weigh, work
from attnbench.traces.jsonl import read_trace
from attnbench.traces.steps import Trace


def load(run: Path, trace_path: Path) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, Trace]:
    """(passing rows with their choice, buckets.csv, each step's work sizes, the trace as replayed)."""
    rows = pd.read_csv(run / "results.csv", low_memory=False)
    rows = rows[rows["verdict"] == "pass"].assign(choice=lambda r: choice_of(r))
    steps = pd.read_csv(run / "buckets.csv")
    trace = read_trace(trace_path)
    trace = Trace(trace.header, trace.steps[:len(steps)])
    measured = np.array([work(s) for s in trace.steps], dtype=float)
    return rows, steps, measured, trace


def bucket_means(rows: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Bucket x choice: the weighted mean of the representatives' medians (results/replay.py's estimate)."""
    chosen = rows[rows["part"] == "bucket"]
    summed = (chosen["median_ms"] * chosen["steps"]).groupby([chosen["bucket"], chosen["choice"]]).sum()
    return summed.unstack("choice").div(steps.groupby("bucket").size(), axis=0)


def decompose(rows: pd.DataFrame, steps: pd.DataFrame) -> None:
    means, sampled = bucket_means(rows, steps), rows[rows["part"] == "sample"]
    print("1. error on the sample, and the buckets that carry it (estimate - timed, ms; share of the timed total)")
    for choice, group in sampled.groupby("choice"):
        estimate = means[choice].reindex(group["bucket"]).to_numpy()
        timed = group["median_ms"].to_numpy()
        error = (estimate.sum() - timed.sum()) / timed.sum() * 100
        stderr = np.std(estimate - timed, ddof=1) * math.sqrt(len(timed)) / timed.sum() * 100
        by_bucket = pd.Series(estimate - timed).groupby(group["bucket"].to_numpy()).agg(["sum", "size"])
        top = by_bucket["sum"].abs().sort_values(ascending=False).index[:2]
        carried = ", ".join(f"bucket {b} ({int(by_bucket.loc[b, 'size'])} steps) "
                            f"{by_bucket.loc[b, 'sum'] / timed.sum() * 100:+.2f} %" for b in top)
        print(f"  {choice:24s} {error:+.2f} % (SE {stderr:.2f}) over {len(timed)} steps; {carried}")


def residuals(rows: pd.DataFrame, steps: pd.DataFrame, measured: np.ndarray) -> None:
    sampled = rows[rows["part"] == "sample"]
    bucket = int(sampled.groupby("bucket")["step"].nunique().idxmax())
    members = steps.loc[steps["bucket"] == bucket, "step"].to_numpy()
    mean = measured[members].mean(axis=0)
    design = lambda chosen: np.column_stack([np.ones(len(chosen)), (measured[chosen] - mean) / mean])  # noqa: E731
    print(f"\n2. bucket {bucket} ({len(members)} steps): each representative's time against a linear fit on the "
          "bucket's sampled steps (% above it), and the sampled steps' own spread around the fit")
    for choice, group in rows[rows["bucket"] == bucket].groupby("choice"):
        timed, reps = group[group["part"] == "sample"], group[group["part"] == "bucket"]
        fit = np.linalg.lstsq(design(timed["step"].to_numpy()), timed["median_ms"].to_numpy(), rcond=None)[0]
        above = reps["median_ms"].to_numpy() / (design(reps["step"].to_numpy()) @ fit) - 1
        spread = np.std(timed["median_ms"].to_numpy() / (design(timed["step"].to_numpy()) @ fit) - 1)
        weights = reps["steps"].to_numpy() / len(members)
        print(f"  {choice:24s} representatives {' '.join(f'{a * 100:+5.1f}' for a in above)} % (weights "
              f"{' '.join(f'{w:.2f}' for w in weights)}): weighted {np.dot(weights, above) * 100:+.2f} %; "
              f"sampled steps' spread {spread * 100:.1f} %")


def clocks(rows: pd.DataFrame) -> None:
    print("\n3. median SM clock (MHz) of the rows, buckets' against sampled steps' (lower clock: slower)")
    table = rows.groupby(["choice", "part"])["sm_clock_median_mhz"].mean().unstack("part")
    for choice, row in table.iterrows():
        print(f"  {choice:24s} buckets {row.get('bucket', math.nan):7.1f}  sample {row.get('sample', math.nan):7.1f}")


def extremes(rows: pd.DataFrame, steps: pd.DataFrame, measured: np.ndarray) -> None:
    """Each part's steps: their mean |z| per work size within their own bucket (z: distance from the
    bucket's mean in its standard deviations), over buckets of 100 steps or more."""
    frame = pd.DataFrame(measured, columns=list(WORK)).assign(bucket=steps["bucket"].to_numpy())
    large = frame.groupby("bucket")["bucket"].transform("size") >= 100
    z = frame.groupby("bucket")[list(WORK)].transform(lambda c: (c - c.mean()) / (c.std() + 1e-9)).abs()
    print("\n   mean |z| within the bucket (buckets of >= 100 steps): " + ", ".join(WORK))
    for part, group in rows.groupby("part"):
        chosen = [s for s in group["step"].unique() if large[s]]
        print(f"  {part:8s} {len(chosen):4d} steps  " + "  ".join(f"{v:.2f}" for v in z.loc[chosen].mean()))


def estimate(times: pd.DataFrame, chosen: list[int], members_of: dict, measured: np.ndarray, piece: float) -> pd.Series:
    """Each choice's bucketed total over the `chosen` sampled steps, pieces of about `piece` steps."""
    total = pd.Series(0.0, index=times.columns)
    for bucket, members in members_of.items():
        inside = [s for s in chosen if s in members]
        if not inside:
            continue
        pieces = 1 if math.isinf(piece) else max(1, round(len(inside) / piece))
        for part in split_steps(inside, measured, pieces):
            kept, weights = weigh(moments(measured[part]))
            total += (times.loc[[part[k] for k in kept]].mul(weights, axis=0)).sum()
    return total


def simulate(rows: pd.DataFrame, steps: pd.DataFrame, measured: np.ndarray, draws: int, pieces: list[float]) -> None:
    sampled = rows[rows["part"] == "sample"]
    times = sampled.pivot_table(index="step", columns="choice", values="median_ms").dropna()
    members_of = {b: set(g) & set(times.index) for b, g in steps.groupby("bucket")["step"]}
    rng = np.random.default_rng(0)
    print(f"\n4. simulation on the {len(times)} sampled steps: {draws} random subsets of 80 %, bucketed as the replay "
          "did, pieces of about N steps; error of the weighted representatives against the subset's timed total")
    for piece in pieces:
        errors = []
        for _ in range(draws):
            chosen = sorted(rng.choice(times.index.to_numpy(), size=int(0.8 * len(times)), replace=False).tolist())
            truth = times.loc[chosen].sum()
            errors.append((estimate(times, chosen, members_of, measured, piece) - truth) / truth * 100)
        frame = pd.DataFrame(errors)
        said = "not cut" if math.isinf(piece) else f"pieces of ~{piece:g} steps"
        print(f"  {said}: mean error (bias) | root mean square error, %")
        for choice in frame.columns:
            print(f"    {choice:24s} {frame[choice].mean():+6.2f} | {math.sqrt((frame[choice] ** 2).mean()):5.2f}")


def features(trace: Trace, measured: np.ndarray) -> np.ndarray:
    """The log of each step's work sizes and of four more a kernel's time may follow: its rows, its
    prefill rows, their KV tokens and their longest query (the model below is given more than the
    weights reproduce, so that it can be curved in ways they do not hold)."""
    more = []
    for step in trace.steps:
        decode = set(step.decode_rows())
        prefill = [r for i, r in enumerate(step.requests) if i not in decode]
        more.append((len(step.requests), len(prefill), sum(r.kv_len for r in prefill),
                     max((r.query_len for r in prefill), default=0)))
    return np.log1p(np.hstack([measured, np.array(more, dtype=float)]))


def sums_only(buckets: list, table: np.ndarray) -> list[tuple[list[int], np.ndarray]]:
    """Each bucket's representatives and weights reproducing only the sums of `table`'s columns."""
    return [([b.steps[k] for k in kept], np.array(w)) for b in buckets for kept, w in [weigh(table[list(b.steps)])]]


def at_scale(rows: pd.DataFrame, trace: Trace, measured: np.ndarray, ratio: float, splits: list[int],
             draws: int) -> None:
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    times = rows[rows["part"] == "sample"].pivot_table(index="step", columns="choice", values="median_ms").dropna()
    x, sampled = features(trace, measured), times.index.to_numpy()
    model, ratios = np.empty((len(x), times.shape[1])), np.empty((len(sampled), times.shape[1]))
    for j, choice in enumerate(times.columns):
        fit = make_pipeline(StandardScaler(), PolynomialFeatures(2), RidgeCV(alphas=np.logspace(-3, 3, 13)))
        fit.fit(x[sampled], np.log(times[choice].to_numpy()))
        model[:, j] = np.exp(fit.predict(x))
        ratios[:, j] = times[choice].to_numpy() / model[sampled, j]
    print(f"\n5. at full scale: every step's time drawn as a model fitted on the {len(sampled)} sampled steps (a "
          "quadratic in the log of 9 step sizes) times a sampled step's own residual; the whole trace bucketed "
          f"as a replay does; {draws} draws; mean error | root mean square error, %, by choice:")
    print("   " + ", ".join(times.columns))
    rng = np.random.default_rng(0)
    for split in splits:
        buckets = bucket_steps(trace, ratio, split)
        rules = {"sums and squares": [(list(b.representatives), np.array(b.weights)) for b in buckets],
                 "sums only": sums_only(buckets, measured), "four sums": sums_only(buckets, measured[:, :4])}
        drawn = [model * ratios[rng.integers(0, len(sampled), len(model))] for _ in range(draws)]
        for rule, plan in rules.items():
            errors = np.array([(sum(w @ t[r] for r, w in plan) / t.sum(axis=0) - 1) * 100 for t in drawn])
            print(f"  --bucket-split {split:3d}, {rule:16s} {sum(len(r) for r, _ in plan):4d} points: " +
                  "  ".join(f"{m:+.2f}|{math.sqrt(s):.2f}" for m, s in zip(errors.mean(0), (errors ** 2).mean(0))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a replay run directory with an exact sample")
    parser.add_argument("trace", type=Path, help="the trace it replayed")
    parser.add_argument("--draws", type=int, default=300, help="random subsets in the simulation")
    parser.add_argument("--piece-steps", default="50,25", help="piece sizes to simulate, besides not cutting")
    parser.add_argument("--splits", default="8,12,16", help="--bucket-split values to simulate at full scale")
    parser.add_argument("--model-draws", type=int, default=200, help="draws of the full-scale simulation")
    args = parser.parse_args()
    rows, steps, measured, trace = load(args.run, args.trace)
    env = json.loads((args.run / "env.json").read_text())
    print(f"{args.run}: {env['replay']['steps']} steps, {env['replay']['buckets']} buckets, "
          f"--bucket-ratio {env['replay']['bucket_ratio']}, {rows['part'].eq('sample').sum()} sampled rows\n")
    decompose(rows, steps)
    residuals(rows, steps, measured)
    clocks(rows)
    extremes(rows, steps, measured)
    simulate(rows, steps, measured, args.draws, [math.inf, *(float(p) for p in args.piece_steps.split(","))])
    at_scale(rows, trace, measured, float(env["replay"]["bucket_ratio"]), [int(s) for s in args.splits.split(",")],
             args.model_draws)


if __name__ == "__main__":
    main()
