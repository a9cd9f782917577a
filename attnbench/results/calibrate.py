"""`attnbench calibrate`: which compare threshold is A/A-clean on this runner, measured, not guessed.

Why: the threshold of `attnbench compare` is the change a CI gate calls real. Set it below what
two identical runs differ by and the gate cries wolf; far above it and it misses regressions.
Only two runs of the same code on the same machine, each in its own process (its own CUDA context,
allocations, graphs and plans), show what differs between runs. calibrate makes that pair and
reads off, from compare's own intervals and verdict rule:

- `clean`: the smallest threshold at which no row is `slower` or `faster`, and never below the
  largest change the pair showed (a row that moved 8 % between two identical runs is what the
  gate must absorb, whatever its interval says);
- `all same`: the smallest threshold at which every row is `same` (its whole interval inside);
- per row: its ratio, interval, method and the spread of its replicate medians in each run.

On the CPU there is no threshold: compare gives CPU timings no verdict (results/verdicts.py), so
no threshold gates them; calibrate shows the rows and says so.

Pure functions over two results plus one that runs the pair; the Typer command is cli/calibrate.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.errors import AttnbenchError, UsageError
from attnbench.results.compare import Comparison, compare_runs
from attnbench.results.read import KERNEL, canonical, load_run
from attnbench.results.replicates import parse_times, spread

CPU_NO_THRESHOLD = ("no A/A-clean threshold: the pair timed on the CPU, where compare gives no verdict, so no "
                    "threshold gates it; calibrate on the GPU runner that gates")


def clean_need(ratio: float, low: float, high: float) -> float:
    """The smallest threshold at which compare calls this row neither slower nor faster."""
    if low > 1:
        return ratio - 1
    if high < 1:
        return 1 / ratio - 1
    return 0.0


def change(ratio: float) -> float:
    """How far apart the two runs landed on a row, either way: 1.08 and 1 / 1.08 are both 8 %."""
    return max(ratio, 1 / ratio) - 1


def same_need(low: float, high: float) -> float:
    """The smallest threshold at which compare calls this row `same`."""
    return max(high - 1, 1 / low - 1, 0.0)


def round_up(fraction: float) -> float:
    """The next 0.1 % step strictly above (at exactly its need a row sits on the rule's edge)."""
    return 0.0 if fraction <= 0 else (math.floor(fraction * 1000 + 1e-9) + 1) / 1000


@dataclass
class Calibration:
    clean: float | None     # None: the pair supports no threshold (no_threshold says why)
    all_same: float | None
    rows: pd.DataFrame  # label, base_time, new_time, ratio, ci_low, ci_high, method, spreads, needs, host_bound
    notes: list[str]
    no_threshold: str = ""

    def to_json(self) -> str:
        return json.dumps({"clean_threshold": self.clean, "all_same_threshold": self.all_same,
                           "no_threshold": self.no_threshold or None, "notes": self.notes,
                           "rows": self.rows.to_dict(orient="records")}, indent=2, default=float) + "\n"


def _replicate_spreads(df: pd.DataFrame, key: list[str]) -> dict[str, float]:
    column = df["replicate_medians_ms"] if "replicate_medians_ms" in df else pd.Series([None] * len(df))
    keys = ["|".join(canonical(v) for v in row) for row in df[key].itertuples(index=False)]
    return {k: spread(parse_times(cell)) if len(parse_times(cell)) > 1 else math.nan for k, cell in zip(keys, column)}


def calibrate_pair(a: pd.DataFrame, b: pd.DataFrame) -> Calibration:
    """Thresholds from an A/A pair of kernel runs (a as BASE, b as NEW): none for CPU timings."""
    key = list(KERNEL.key)
    comparison: Comparison = compare_runs(a, b, 0.0, key, KERNEL)
    rows = comparison.rows.copy()
    if rows.empty:
        raise AttnbenchError("the two runs timed no row in common: nothing to calibrate")
    row_keys = ["|".join(canonical(v) for v in row) for row in rows[key].itertuples(index=False)]
    spread_a, spread_b = _replicate_spreads(a, key), _replicate_spreads(b, key)
    rows["spread_a"] = [spread_a.get(k, math.nan) for k in row_keys]
    rows["spread_b"] = [spread_b.get(k, math.nan) for k in row_keys]
    rows["clean_need"] = [max(clean_need(r, lo, hi), change(r))
                          for r, lo, hi in zip(rows["ratio"], rows["ci_low"], rows["ci_high"])]
    rows["same_need"] = [max(same_need(lo, hi), change(r))
                         for r, lo, hi in zip(rows["ratio"], rows["ci_low"], rows["ci_high"])]
    rows = rows.sort_values("clean_need", ascending=False, kind="stable").reset_index(drop=True)
    shown = ["label", "base_time", "new_time", "ratio", "ci_low", "ci_high", "method", "spread_a", "spread_b",
             "clean_need", "same_need", "host_bound"]
    notes = comparison.notes() + comparison.unmatched()
    if comparison.cpu:
        return Calibration(None, None, rows[shown], notes, CPU_NO_THRESHOLD)
    judged = rows[~rows["host_bound"]] if not rows["host_bound"].all() else rows  # compare does not judge these
    return Calibration(round_up(judged["clean_need"].max()), round_up(judged["same_need"].max()), rows[shown], notes)


# ---- running the pair ---------------------------------------------------------------------------

def pair_commands(args: list[str], out: Path) -> list[list[str]]:
    """The two runs: `attnbench run SCENARIO [overrides]` or `attnbench kernel FLAGS`, each --out its own."""
    if not args:
        raise UsageError("SCENARIO_OR_FLAGS: give a scenario file (scenarios/NAME.toml) or the flags of "
                         "`attnbench kernel` (e.g. --heads 32 --dim 128)")
    for flag in ("--resume", "--force"):
        if any(a == flag or a.startswith(flag + "=") for a in args):
            raise UsageError(f"{flag}: calibrate makes two fresh runs under --out; leave {flag} out")
    scenario = not args[0].startswith("-")
    if scenario and not Path(args[0]).is_file():
        raise UsageError(f"{args[0]}: no such scenario file")
    head = ["run", args[0], *args[1:]] if scenario else ["kernel", *args]
    return [[sys.executable, "-m", "attnbench", *head, "--out", str(out / name)] for name in ("a", "b")]


def run_pair(args: list[str], out: Path, say=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the pair one after the other, each in its own process; their rows."""
    runs = []
    for command in pair_commands(args, out):
        name = Path(command[-1]).name
        log = out / f"{name}.log"
        start = time.perf_counter()
        with log.open("w") as f:
            code = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT).returncode
        if code != 0:
            errors = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("error:")]
            raise AttnbenchError(f"run {name} failed (exit {code}): "
                                 f"{errors[-1][7:] if errors else 'see ' + str(log)}")
        say(f"run {name}: {time.perf_counter() - start:.1f} s -> {out / name}")
        runs.append(load_run(out / name, f"run {name}"))
    return runs[0].rows, runs[1].rows
