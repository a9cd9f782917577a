"""How many rounds, and which looks, `attnbench ab` needs: a simulation on a real run's measured noise.

    python3 benchmarks/ab_power.py RUNS [--runs 400] [--start-s 17]

RUNS is a folder of ab run directories (benchmarks/ab_check.py's ab-runs.tgz, unpacked: aa/,
planted-3/, planted-10/, each with its rounds.csv). From them it measures:

1. where a round's time goes: per point and side, the setup before its sampling window (inputs,
   reference, graph capture) and the sampling itself, split into rows that converged and rows
   that sampled until --budget-ms ended them (2 runners a point: unified and split);
2. each row's between-round noise: the standard deviation of its per-round log ratio
   candidate / baseline, pooled over the runs (each run's own mean taken out, so a planted
   shift is not noise);

then simulates each setting's rule (results/paired.py's own looks and intervals) on 18 rows whose
per-round log ratios are normal with that row's measured standard deviation (resampling its 6 to 9
residuals instead gives three equal draws, a zero-width interval, too often), plus a planted shift: the
false slower/faster rate with none, the share caught at 3 % and 10 %, the rounds a row used,
and the wall time a run would take (the start, then rounds at the measured cost). Every setting
keeps the runs' own --budget-ms: a row's per-round spread depends on its sampling window, so the
runs of one window say nothing of another's (runs of two windows in one folder are refused).

The last settings are a candidate, not ab's rule: each look's variance moderated across the run's
rows (Smyth 2004, limma's empirical Bayes: a prior spread and its degrees of freedom fitted to
every row's variance at that look), which gives t more degrees of freedom at few rounds when the
rows' noises are alike. They need scipy (scikit-learn's dependency, in the test extra).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attnbench.results.paired import RowRounds, enough, look_confidence, looks  # noqa: E402

POINT = ["kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim"]
ROW = POINT + ["strategy"]
# (label, --min-rounds, --max-rounds, --budget-s of rounds[, "moderated"]), all at the runs' own --budget-ms:
# a row's per-round spread depends on its sampling window (the H200 measurements page, "`attnbench ab`:
# interleaved A/B at 2 %"), so a window the runs did not sample at is not simulated
SETTINGS = [  # the first: the rule of the first issue 23 run (Bonferroni over every round from 3)
    ("issue 23 rule: every round 3..12 at 1-0.05/10; 45 s", 0, 12, 45),
    ("looks at 4, 8, 12; 45 s", 4, 12, 45),
    ("looks at 4, 8, 12; 100 s (ab_check.py)", 4, 12, 100),
    ("looks at 4, 8, 12; 300 s (ab's defaults)", 4, 12, 300),
    ("looks at 4, 8, 12, 16; 300 s", 4, 16, 300),
    ("looks at 6, 12, 18, 24; 300 s", 6, 24, 300),
    ("looks at 8, 16, 24, 32; 600 s", 8, 32, 600),
    ("candidate, moderated: looks at 4, 8, 12; 45 s", 4, 12, 45, "moderated"),
    ("candidate, moderated: looks at 4, 8, 12; 100 s", 4, 12, 100, "moderated"),
]


def stops(row: RowRounds, min_rounds: int, max_rounds: int) -> tuple[bool, float]:
    """(whether the row stops now, its looks' confidence): min_rounds 0 is the issue 23 rule."""
    if min_rounds:
        return bool(enough(row, 0.02, min_rounds, max_rounds)), look_confidence(min_rounds, max_rounds)
    confidence = 1 - 0.05 / (max_rounds - 3 + 1)
    done = len(row.ratios) >= 3 and row.result(0.02, confidence).verdict != "noisy"
    return done or len(row.ratios) >= max_rounds, confidence


def prior(variances: np.ndarray, df: int) -> tuple[float, float]:
    """(d0, s0^2) fitted to the rows' sample variances on df degrees of freedom (limma's fitFDist)."""
    from scipy.optimize import brentq
    from scipy.special import digamma, polygamma

    z = np.log(np.maximum(variances, 1e-300)) - digamma(df / 2) + math.log(df / 2)
    excess = z.var(ddof=1) - polygamma(1, df / 2)
    if excess <= polygamma(1, 500.0):
        return math.inf, float(np.exp(z.mean()))
    d0 = 2 * brentq(lambda h: polygamma(1, h) - excess, 1e-6, 500.0)
    return d0, float(np.exp(z.mean() + digamma(d0 / 2) - math.log(d0 / 2)))


def moderated(noise: list[float], shift: float, schedule: list[int], rounds_fit: float, runs: int,
              seed: int) -> tuple[float, float, float]:
    """(share slower, share faster, mean rounds) with variances moderated across the rows at each
    look, Bonferroni over the looks; every row gets floor(rounds_fit) rounds at most."""
    from attnbench.kernels.student_t import t_quantile
    from attnbench.results.verdicts import classify

    rng = np.random.default_rng(seed)
    last = min(max(schedule), math.floor(rounds_fit))
    taken = sorted({n for n in schedule if n <= last} | {last})
    counts = {"slower": 0, "faster": 0, "used": 0}
    for _ in range(runs):
        logs = shift + rng.normal(0, 1, (len(noise), last)) * np.array(noise)[:, None]
        open_rows = np.ones(len(noise), bool)
        for n in taken:
            d0, s0 = prior(logs[:, :n].var(axis=1, ddof=1), n - 1)
            var = logs[:, :n].var(axis=1, ddof=1)
            var = np.full(len(noise), s0) if math.isinf(d0) else (d0 * s0 + (n - 1) * var) / (d0 + n - 1)
            q = t_quantile(1 - 0.05 / len(schedule) / 2, min(d0 + n - 1, 1e4))
            for row in np.flatnonzero(open_rows):
                centre, half = logs[row, :n].mean(), q * math.sqrt(var[row] / n)
                verdict = classify(math.exp(centre), math.exp(centre - half), math.exp(centre + half), 0.02)
                if verdict != "noisy" or n == last:
                    open_rows[row] = False
                    counts["used"] += n
                    counts[verdict] = counts.get(verdict, 0) + 1
    total = runs * len(noise)
    return counts["slower"] / total, counts["faster"] / total, counts["used"] / total


def windows(run: Path) -> pd.DataFrame:
    """One line per point, side and round: its sampling window, setup gap and whether it converged."""
    rows = pd.read_csv(run / "rounds.csv")
    rows["w0"] = rows["_window"].map(lambda s: json.loads(s)[0])
    rows["w1"] = rows["_window"].map(lambda s: json.loads(s)[1])
    points = (rows.groupby(["round", "side", *POINT], as_index=False)
              .agg(w0=("w0", "min"), w1=("w1", "max"), converged=("converged", "all")).sort_values("w0"))
    points["sampling"] = points["w1"] - points["w0"]
    points["setup"] = points["w0"] - points["w1"].shift(1)
    return points.dropna(subset=["setup"])


def round_cost(points: pd.DataFrame, budget_ms: float) -> float:
    """Seconds a round takes when unconverged rows stop at budget_ms per runner (2 runners)."""
    rounds = points["round"].nunique()
    capped = np.where(points["converged"], points["sampling"], np.minimum(points["sampling"], 2 * budget_ms / 1e3))
    return float((points["setup"].sum() + capped.sum()) / rounds)


def window_ms(run: Path) -> float:
    """The --budget-ms the run's rows sampled for: its command's, else the kernel default under ab (1000)."""
    words = json.loads((run / "env.json").read_text())["command"].split()
    return float(words[words.index("--budget-ms") + 1]) if "--budget-ms" in words else 1000.0


def residuals(runs: list[Path]) -> list[np.ndarray]:
    """Each row's per-round log ratios minus its run's mean, pooled over the runs, scaled so their
    spread estimates the per-round standard deviation."""
    pooled = {}
    for run in runs:
        rows = pd.read_csv(run / "rounds.csv")
        wide = rows.pivot_table(index=[*ROW, "round"], columns="side", values="median_ms").dropna()
        logs = np.log(wide["candidate"] / wide["baseline"])
        for key, one in logs.groupby(level=list(range(len(ROW)))):
            if len(one) >= 2:
                scale = math.sqrt(len(one) / (len(one) - 1))
                pooled.setdefault(key, []).extend((one - one.mean()) * scale)
    return [np.array(v) for _, v in sorted(pooled.items())]


def simulate(noise: list[float], shift: float, setting: tuple, rounds_fit: float, runs: int,
             seed: int) -> tuple[float, float, float]:
    """(share slower, share faster, mean rounds) over runs x rows, each row stopped by `enough`; the
    budget ends inside a round, so the first rows in point order get one round more than the last."""
    _, min_rounds, max_rounds = setting[:3]
    rng = np.random.default_rng(seed)
    slower = faster = used = 0
    for _ in range(runs):
        for index, sd in enumerate(noise):
            row = RowRounds()
            reach = math.floor(rounds_fit) + (index / len(noise) < rounds_fit % 1)
            for _ in range(min(max_rounds, max(2, reach))):
                row.add(1.0, math.exp(shift + rng.normal(0, sd)))
                stop, confidence = stops(row, min_rounds, max_rounds)
                if stop:
                    break
            verdict = row.result(0.02, confidence).verdict if len(row.ratios) >= 2 else "noisy"
            slower += verdict == "slower"
            faster += verdict == "faster"
            used += len(row.ratios)
    total = runs * len(noise)
    return slower / total, faster / total, used / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="ab run directories (each with rounds.csv)")
    parser.add_argument("--runs", type=int, default=400, help="simulated runs of every row per case")
    parser.add_argument("--start-s", type=float, default=17.0,
                        help="seconds from the command's start to the first round (workers, env)")
    args = parser.parse_args()
    runs = sorted(p.parent for p in args.folder.glob("*/rounds.csv"))
    if not runs:
        raise SystemExit(f"no */rounds.csv under {args.folder}")
    budgets = {window_ms(run) for run in runs}
    if len(budgets) > 1:
        raise SystemExit(f"the runs sampled at different --budget-ms ({', '.join(f'{b:g}' for b in sorted(budgets))}): "
                         "a row's per-round spread depends on it; give one setting's runs")
    budget_ms = budgets.pop()
    per_run = [windows(run) for run in runs]
    points = pd.concat(per_run)
    cost = sum(round_cost(one, budget_ms) for one in per_run) / len(runs)  # s a round, the same for every setting
    per_round = len(runs) * points["round"].nunique()
    print(f"{len(runs)} runs; per round (mean over {per_round}): setup {points['setup'].sum() / per_round:.1f} s, "
          f"sampling {points['sampling'].sum() / per_round:.1f} s, of which rows that hit --budget-ms "
          f"{points.loc[~points['converged'], 'sampling'].sum() / per_round:.1f} s "
          f"({(~points['converged']).sum()} of {len(points)} point-sides)")
    pooled = residuals(runs)
    sds = np.array([r.std(ddof=0) for r in pooled])
    noise = list(sds)
    print(f"per-round log-ratio sd over {len(pooled)} rows: median {np.median(sds):.2%}, min {sds.min():.2%}, "
          f"max {sds.max():.2%}, pooled {math.sqrt(np.mean(np.concatenate(pooled) ** 2)):.2%}, "
          f"at --budget-ms {budget_ms:g} (every setting below samples as these runs did)")
    print(f"\n{'setting':62} {'s/round':>7} {'rounds':>6} {'wall s':>6} {'A/A false':>9} {'3% caught':>9} "
          f"{'10% caught':>10} {'rounds used 3%':>14}")
    for number, setting in enumerate(SETTINGS):
        fit = setting[3] / cost  # rounds that fit the budget; the last one partly
        wall = args.start_s + min(fit, setting[2]) * cost
        rule = (lambda shift, seed: moderated(noise, shift, looks(setting[1], setting[2]), fit, args.runs, seed)) \
            if setting[4:] else (lambda shift, seed: simulate(noise, shift, setting, fit, args.runs, seed))
        aa, three, ten = rule(0.0, number), rule(math.log(1.03), number + 100), rule(math.log(1.10), number + 200)
        print(f"{setting[0]:62} {cost:7.1f} {min(fit, setting[2]):6.1f} {wall:6.0f} {aa[0] + aa[1]:9.2%} "
              f"{three[0]:9.1%} {ten[0]:10.1%} {three[2]:14.1f}")


if __name__ == "__main__":
    main()
