"""Is a replay's per-step oracle real, or partly the luck of one measurement? Measured, not simulated.

    python3 benchmarks/oracle_repeat.py RUN                # a replay run with --replicates 2 or more
    python3 benchmarks/oracle_repeat.py RUN_A RUN_B        # two replays of one trace (another lease, another day)

The per-step oracle takes each cell's fastest of several medians, so where two choices are near a
tie it can take the one that happened to be measured fast, and no rule could match it. This takes
the oracle's picks from one measurement and times them in an independent one: the cost over that
measurement's own oracle, in % of its time, is how much of the oracle is noise. With one run, the
measurements are its replicates (each row's replicate_medians_ms: fresh inputs, plans and graphs),
every ordered pair of them; with two runs, each run's medians, both ways, on the cells both hold.
It also prints the spread of log(second / first) over every cell and choice, and each
measurement's best single choice over its own oracle. Read, never written:
the runs. Not a test.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnbench.errors import AttnbenchError  # noqa: E402
from attnbench.results.read import load_run  # noqa: E402
from attnbench.results.rule_cells import read_cells  # noqa: E402


def replicate_tables(run: Path) -> list[pd.DataFrame]:
    """cell x choice medians (ms), one table per replicate, on read_cells' cells of the run."""
    cells = read_cells([run], None)
    rows = load_run(run, "RUN").rows
    rows = rows[(rows["part"] == "bucket") & (rows["verdict"] == "pass")]
    if "replicate_medians_ms" not in rows or rows["replicate_medians_ms"].isna().all():
        raise AttnbenchError(f"{run}: no replicate_medians_ms (replay it with --replicates 2 or more)")
    cell = "0:" + rows["bucket"].astype(str) + "|" + rows["step"].astype(str) + "|" + rows["l2"].astype(str)
    medians = [[float(v) for v in str(text).split()] for text in rows["replicate_medians_ms"]]
    count = min(len(m) for m in medians)
    long = pd.DataFrame({"cell": cell.to_numpy(), "choice": (rows["backend"] + " " + rows["strategy"]).to_numpy()})
    return [long.assign(ms=[m[r] for m in medians]).pivot_table(index="cell", columns="choice", values="ms")
            .reindex(index=cells.times.index, columns=cells.times.columns) for r in range(count)]


def picked_elsewhere(pick_on: pd.DataFrame, score_on: pd.DataFrame, weights: pd.Series) -> float:
    """% over score_on's own oracle of the choices pick_on's oracle makes, timed in score_on."""
    picks = pick_on.fillna(np.inf).to_numpy().argmin(axis=1)
    got = score_on.to_numpy()[np.arange(len(picks)), picks]
    best = score_on.min(axis=1).to_numpy()
    w = weights.to_numpy()
    return float(((got * w).sum() / (best * w).sum() - 1) * 100)


def spread(first: pd.DataFrame, second: pd.DataFrame) -> tuple[float, float]:
    """(sd, interquartile range / 1.349) of log(second / first) over every cell and choice, %."""
    ratios = np.log(second.to_numpy() / first.to_numpy()).ravel()
    ratios = ratios[np.isfinite(ratios)]
    q1, q3 = np.percentile(ratios, [25, 75])
    return float(ratios.std() * 100), float((q3 - q1) / 1.349 * 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="one replay with replicates, or two replays of one trace")
    args = parser.parse_args()
    if len(args.runs) > 2:
        parser.error("give one replay run (its replicates) or two (each other)")
    try:
        if len(args.runs) == 1:
            tables = replicate_tables(args.runs[0])
            weights = read_cells([args.runs[0]], None).weights
            names = [f"replicate {i + 1}" for i in range(len(tables))]
        else:
            both = [read_cells([run], None) for run in args.runs]
            common = both[0].times.index.intersection(both[1].times.index)
            columns = both[0].times.columns.intersection(both[1].times.columns)
            tables = [c.times.loc[common, columns] for c in both]
            weights, names = both[1].weights.loc[common], [str(run) for run in args.runs]
            print(f"cells: {len(both[0].times)} and {len(both[1].times)}, {len(common)} in both; "
                  f"choices in both: {len(columns)}")
    except AttnbenchError as exc:
        sys.exit(f"error: {exc}")
    if len(tables) < 2:
        sys.exit("error: the run has one replicate per row: nothing to compare (replay it with --replicates 2)")
    print(f"cells: {len(tables[0])}, weighed by the steps each stands for\n")
    print("| picked on | timed on | cost over that measurement's oracle, % | sd of log ratio, % | IQR / 1.349, % |")
    print("|---|---|---:|---:|---:|")
    for a, b in itertools.permutations(range(len(tables)), 2):
        sd, iqr = spread(tables[a], tables[b])
        print(f"| {names[a]} | {names[b]} | {picked_elsewhere(tables[a], tables[b], weights):.2f} | {sd:.2f} | {iqr:.2f} |")
    print("\nEach measurement's best single choice over its own oracle (the gap a rule can close):")
    for name, times in zip(names, tables):
        totals = times.mul(weights, axis=0).sum(min_count=len(times))
        oracle = float((times.min(axis=1) * weights).sum())
        print(f"  {name}: {totals.idxmin()} {(totals.min() / oracle - 1) * 100:.2f} %")


if __name__ == "__main__":
    main()
