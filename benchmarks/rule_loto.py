"""Leave-one-trace-out: does a dispatch rule hold on a replayed trace it was not fitted on?

    python3 benchmarks/rule_loto.py ATLAS REPLAY REPLAY [REPLAY ...] [--depth 4] [--min-leaf 0] [--balance runs] [--draws 200] [--losses]

For each replay: fit `attnbench rule fit`'s tree (results/rule_fit.fit_tree, the same cells,
weights, balance and leaf choice) on the atlas and the other replays, choose every step of the held-out
trace with it, and print the regret over the held-out trace's per-step oracle beside the best
single choice, vLLM's default, FlashInfer's default and the per-step oracle itself. "rule, else
vLLM" serves the steps the fitted rule's rule.py would refuse (an attention shape, or decode rows
with more drafts, than the fit saw: rule_report.domain) on vLLM's default, as an engine catching
the refusal would. `--depth` takes several depths ("1,2,3,4,5"): one table each.

The noise-corrected oracle: each replay row's median is one measurement of `samples` samples, and
the per-step oracle takes the minimum of 7 such medians, so it is biased low (it picks the choice
that happened to be measured fast). `--draws` bootstrap draws resample every row's samples
(samples_ms) into a fresh median (or, with `--sigma`, draw it as the median x exp(sigma x a normal
draw)); the mean over pairs of draws of (the first draw's oracle picks, timed in the second) - (the
first draw's minimum) estimates that bias, and the oracle plus it is what a rule could reach if the
times were exact. Read, never written: the runs. Not a test.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnbench.results.read import load_run  # noqa: E402
from attnbench.results.rule_cells import read_cells  # noqa: E402
from attnbench.results.rule_fit import (BALANCE, BALANCES, DEPTH, MIN_LEAF, cell_times, fit_tree, fit_weights,  # noqa: E402
                                         predict, regret, vllm_default)
from attnbench.results.rule_report import FLASHINFER_DEFAULT, domain, outside  # noqa: E402


def sample_matrix(run: Path, number: int, cells: pd.Index, choices: pd.Index) -> np.ndarray:
    """cell x choice x sample (ms) of a replay's bucket rows, aligned to read_cells' cells; NaN pads."""
    rows = load_run(run, "RUN").rows
    rows = rows[(rows["part"] == "bucket") & (rows["verdict"] == "pass")]
    cell = f"{number}:" + rows["bucket"].astype(str) + "|" + rows["step"].astype(str) + "|" + rows["l2"].astype(str)
    samples = [np.array(str(s).split(), dtype=float) for s in rows["samples_ms"]]
    width = max(len(s) for s in samples)
    out = np.full((len(cells), len(choices), width), np.nan)
    where = {c: i for i, c in enumerate(cells)}
    for c, choice, s in zip(cell, rows["backend"] + " " + rows["strategy"], samples):
        out[where[c], choices.get_loc(choice), :len(s)] = s
    return out


def resampled(samples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One bootstrap draw: every row's median over its samples drawn with replacement."""
    counts = (~np.isnan(samples)).sum(axis=2)
    drawn = np.take_along_axis(samples, (rng.random(samples.shape) * counts[..., None]).astype(int), axis=2)
    drawn[np.isnan(samples)] = np.nan
    return np.nanmedian(drawn, axis=2)


def oracle_bias(noisy, times: pd.DataFrame, weights: pd.Series, draws: int, seed: int) -> float:
    """Mean over pairs of independent draws of what the first draw's oracle picks cost in the second
    minus the first draw's own minimum (ms, weighed): how much taking the minimum of noisy medians
    gains. `noisy(rng)` is one draw of cell x choice times; the two draws of a pair share whatever
    bias the draw itself has, so it cancels."""
    rng = np.random.default_rng(seed)
    lacking, w = np.isnan(times.to_numpy()), weights.to_numpy()
    gaps = []
    for _ in range(draws):
        first, second = noisy(rng), noisy(rng)
        first[lacking] = np.inf
        picks = first.argmin(axis=1)
        gaps.append(float(((second[np.arange(len(picks)), picks] - first.min(axis=1)) * w).sum()))
    return float(np.mean(gaps))


@functools.lru_cache(maxsize=None)
def cells_of(runs: tuple[Path, ...]):
    """read_cells of these runs, read once per process (--select fits a few hundred trees on them)."""
    return read_cells(list(runs), None)


def held_out(atlas: Path, replays: list[Path], out: int, depth: int, min_leaf: float, draws: int, sigma: float,
             seed: int, balance: str = BALANCE) -> dict:
    """One held-out trace's totals (ms): rule, statics, oracle, noise-corrected oracle."""
    train = cells_of((atlas, *[r for i, r in enumerate(replays) if i != out]))
    test = cells_of((replays[out],))
    learn = fit_weights(train.times, train.weights, train.run_of, balance)
    tree, weighting = fit_tree(train.features, train.times, learn, depth, seed, min_leaf)
    times, weights = test.times, test.weights
    picks = predict(tree, test.features)
    rule_ms, oracle_ms, _ = regret(times, weights, picks)
    refused = outside({"domain": domain(train)}, test.features)  # what the rule's rule.py would refuse
    statics = times.mul(weights, axis=0).sum()
    served = regret(times, weights, picks.where(~refused, vllm_default(test.gpus)))[0]  # an engine's default there
    totals = {"rule": rule_ms, "rule, else vLLM": served, "best single": float(statics.min()),
              "vLLM default": float(statics.get(vllm_default(test.gpus), np.nan)),  # NaN: not among the choices
              "FlashInfer default": float(statics.get(FLASHINFER_DEFAULT, np.nan)), "oracle": oracle_ms}
    if draws:
        samples = sample_matrix(replays[out], 0, times.index, times.columns)
        noisy = (lambda rng: resampled(samples, rng)) if not sigma else \
            (lambda rng: times.to_numpy() * np.exp(sigma * rng.standard_normal(times.shape)))
        totals["oracle, noise-corrected"] = oracle_ms + oracle_bias(noisy, times, weights, draws, seed)
    return {"trace": test.runs[0]["trace"] or str(replays[out]), "weighting": weighting, "totals": totals,
            "picks": picks, "cells": test, "refused": float(weights[refused].sum() / weights.sum() * 100)}


GRID = [(depth, leaf, balance) for depth in (2, 3, 4, 6) for leaf in (0.0, 0.02, 0.05) for balance in BALANCES]


def selected(atlas: Path, replays: list[Path], out: int, seed: int) -> tuple[tuple, float]:
    """The (depth, min leaf, balance) of GRID whose mean regret ("rule, else vLLM"), each of the other
    replays held out in turn (fitted on the atlas and the rest), is lowest; the held-out trace is
    never looked at."""
    inner = [r for i, r in enumerate(replays) if i != out]
    scores = {}
    for depth, leaf, balance in GRID:
        totals = [held_out(atlas, inner, i, depth, leaf, 0, 0.0, seed, balance)["totals"] for i in range(len(inner))]
        # what an engine would get: the steps the rule refuses served on vLLM's default, so that one
        # trace outside the others' domain (drafts where they had none) does not choose the settings
        scores[(depth, leaf, balance)] = float(np.mean([(t["rule, else vLLM"] / t["oracle"] - 1) * 100 for t in totals]))
    best = min(scores, key=scores.get)
    return best, scores[best]


def table(results: list[dict]) -> str:
    """Per held-out trace: each chooser's regret (%) over the per-step oracle (and the corrected one)."""
    names = list(results[0]["totals"])
    text = "| held-out trace | " + " | ".join(names[:-1] if names[-1].endswith("corrected") else names) + \
        (" | rule over corrected oracle" if names[-1].endswith("corrected") else "") + " |\n"
    text += "|---" * (text.count("|") - 1) + "|\n"
    for result in results:
        t = result["totals"]
        cells = [f"{(t[n] / t['oracle'] - 1) * 100:.2f}" for n in names if not n.endswith("corrected")]
        if "oracle, noise-corrected" in t:
            corrected = t["oracle, noise-corrected"]
            cells[-1] = f"0 ({(t['oracle'] / corrected - 1) * 100:+.2f} vs corrected)"
            cells.append(f"{(t['rule'] / corrected - 1) * 100:.2f}")
        text += f"| {result['trace'].split('/')[-1]} | " + " | ".join(cells) + " |\n"
    refused = [f"{r['trace'].split('/')[-1]} {r['refused']:.1f} %" for r in results if r["refused"]]
    return text + ("\n\"rule, else vLLM\": the steps its rule.py refuses (outside the shapes or decode query "
                   f"lengths it was fitted on: {', '.join(refused)} of the weight) served on vLLM's default.\n"
                   if refused else "")


def losses(result: dict, top: int = 4) -> str:
    """Where a held-out rule loses, % of the oracle's time: decode steps (no prefill tokens) and the
    others, then the largest (decode or not, rule's pick, the oracle's) pairs."""
    cells = result["cells"]
    times, picks = cells.times, result["picks"]
    chosen, fastest = cell_times(times, picks)
    weights = cells.weights.loc[picks.index].to_numpy()
    pct = (chosen - fastest) * weights / float((fastest * weights).sum()) * 100
    decode = (cells.features.loc[picks.index, "prefill_tokens"] == 0).to_numpy()
    frame = pd.DataFrame({"steps": np.where(decode, "decode", "other"), "pick": picks.to_numpy(),
                          "oracle": times.loc[picks.index].idxmin(axis=1).to_numpy(), "pct": pct})
    pairs = frame[frame["pct"] > 0].groupby(["steps", "pick", "oracle"])["pct"].sum().nlargest(top)
    text = (f"{result['trace'].split('/')[-1]}: {pct.sum():.2f} % = decode steps {pct[decode].sum():.2f} "
            f"+ other steps {pct[~decode].sum():.2f}\n")
    return text + "".join(f"  {s} steps: {p} where {o} wins: {v:.2f}\n" for (s, p, o), v in pairs.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("atlas", type=Path)
    parser.add_argument("replays", type=Path, nargs="+")
    parser.add_argument("--depth", default=str(DEPTH), help="comma-separated depths, e.g. 1,2,3,4,5")
    parser.add_argument("--min-leaf", type=float, default=MIN_LEAF, help="rule fit's --min-leaf")
    parser.add_argument("--draws", type=int, default=0, help="bootstrap draws for the noise-corrected oracle")
    parser.add_argument("--sigma", type=float, default=0.0,
                        help="draw each row as its median x exp(sigma x normal) in place of resampling its samples")
    parser.add_argument("--balance", choices=list(BALANCES), default=BALANCE, help="rule fit's --balance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--losses", action="store_true",
                        help="under each table: where each held-out rule loses (decode steps or not, its pick "
                             "and the oracle's), %% of the oracle's time")
    parser.add_argument("--select", action="store_true",
                        help="choose depth, min leaf and balance per held-out trace on the other replays alone "
                             "(leave one out among them, GRID), then judge that choice on the held-out trace")
    args = parser.parse_args()
    if args.select:
        if len(args.replays) < 3:
            parser.error("--select needs at least 3 replays: one held out, two to choose the settings on")
        results = []
        for i in range(len(args.replays)):
            (depth, leaf, balance), inner = selected(args.atlas, args.replays, i, args.seed)
            results.append(held_out(args.atlas, args.replays, i, depth, leaf, args.draws, args.sigma, args.seed, balance))
            print(f"{args.replays[i]}: chose depth {depth}, min leaf {leaf:g}, balance {balance} "
                  f"(mean regret {inner:.2f} % on the other replays, each held out)")
        print("\n## settings chosen without the held-out trace\n")
        print(table(results))
        if args.losses:
            print("\n".join(losses(r) for r in results))
        return
    for depth in (int(d) for d in args.depth.split(",")):
        results = [held_out(args.atlas, args.replays, i, depth, args.min_leaf, args.draws, args.sigma,
                            args.seed, args.balance) for i in range(len(args.replays))]
        print(f"\n## depth {depth}, min leaf {args.min_leaf:g}, balance {args.balance} (weightings kept: {', '.join(r['weighting'] for r in results)})\n")
        print(table(results))
        if args.losses:
            print("\n".join(losses(r) for r in results))


if __name__ == "__main__":
    main()
