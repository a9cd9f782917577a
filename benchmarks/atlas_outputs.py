"""How long a stopped atlas takes to write its tables and draw its pictures, on a synthetic atlas.

    python3 benchmarks/atlas_outputs.py [--cells 500] [--out DIR]

Why: after `timeout -s INT -k N`, an atlas has N seconds to write cells.csv, crossovers.csv,
summary.md and env.json (first) and its pictures (then) before the kill. The atlas is shaped like
the H200 run of 2026-12-01 (`--decode-share 0:1:5 --decode-context 512:16384:4 --tokens 16:512:4
--prefill-context 0:8192:3`, 32 heads, GQA 4, head dim 128): the coarse grid, then random cells
along the varying axes up to --cells, six choices (three backends x two strategies) with random
times and 20 samples each. Prints the seconds the tables and the pictures took. Not a timed test.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import pandas as pd

from attnbench.kernels.atlas_axes import AXES, NAMES, parse_range
from attnbench.results.atlas_cells import cell_table, crossover_table, outcomes
from attnbench.results.atlas_plots import plot_atlas
from attnbench.results.atlas_refine import coarse_grid
from attnbench.results.atlas_report import summary_text

AXIS_FLAGS = ("0:1:5", "512:16384:4", "512", "0:8192:3", "4", "128", "16:512:4")
HEADS = 32
CHOICES = [(b, s) for b in ("vllm-fa2", "vllm-fa3", "flashinfer") for s in ("unified", "split")]


def synthetic_rows(count: int, seed: int = 0) -> tuple[list, pd.DataFrame]:
    """The axes' ranges and a results.csv's rows for `count` cells (the coarse grid first)."""
    ranges = [parse_range(a, t) for a, t in zip(AXES, AXIS_FLAGS)]
    grid = coarse_grid(ranges, HEADS)
    rng = random.Random(seed)
    coords = list(grid)
    while len(dict.fromkeys(coords)) < count:
        coord = list(rng.choice(grid))
        a = rng.choice([i for i, r in enumerate(ranges) if r.varies])
        coord[a] = AXES[a].snap(rng.uniform(ranges[a].low, ranges[a].high), HEADS)
        coords.append(tuple(coord))
    rows = []
    for coord in dict.fromkeys(coords):
        for backend, strategy in CHOICES:
            median = 0.01 * (1 + rng.random()) * coord[NAMES.index("tokens")] / 16
            rows.append({"round": 0, **{f"cell_{n}": v for n, v in zip(NAMES, coord)}, "kind": "mixed",
                         "backend": backend, "strategy": strategy, "verdict": "pass", "median_ms": median,
                         "samples_ms": " ".join(f"{median * (1 + 0.02 * rng.random()):.6f}" for _ in range(20)),
                         "mode": "graph", "dtype": "bf16", "gpu": "NVIDIA H200", "device": "cuda:0"})
    return ranges, pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=500)
    parser.add_argument("--out", type=Path, default=None, help="where the pictures go (default: a temporary folder)")
    args = parser.parse_args()
    ranges, rows = synthetic_rows(args.cells)
    out = args.out or Path(tempfile.mkdtemp(prefix="atlas-outputs-"))
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    cells = cell_table(rows, HEADS, cpu=False)
    crossovers = crossover_table(ranges, outcomes(cells), HEADS)
    (out / "cells.csv").write_text(cells.to_csv(index=False))
    (out / "summary.md").write_text(summary_text(cells, crossovers, ranges, rows, "synthetic", cpu=False))
    tables = time.perf_counter() - start
    start = time.perf_counter()
    pictures = plot_atlas(cells, crossovers, ranges, rows, out)
    drawn = time.perf_counter() - start
    print(f"{len(cells)} cells, {len(crossovers)} crossover edges: tables {tables:.2f} s, "
          f"{len(pictures)} pictures {drawn:.2f} s -> {out}")


if __name__ == "__main__":
    main()
