"""Measured runs as cells: one batch in one mode, the time of every choice that passed on it.

Why: a dispatch rule is fitted on what was measured, and replay runs (a bucket of a trace's steps
is one batch), kernel sweeps (a sweep point is one batch) and atlases (a cell is one batch, its
results.csv a kernel sweep's with the cell's coordinates before it) already hold a timing of every
backend x strategy per batch. A cell is that batch; its choices are the backend x strategy rows
that passed their check (a failed, skipped or erroring row is not a choice for that cell), each
at its median time. Its features are what the rows carry about the batch and what a serving
engine knows before a step runs (rule_features.py: FEATURES, computed from the rows' totals by the
code rule.py embeds, so the exported function and the fit agree; older rows' context columns come
from rule_context.py). The rows are checked for what rule.json will hold (check_rows: known modes,
backends and strategies, one GPU, one version of each library). A replay cell is one of a
bucket's representative steps and weighs the steps it stands for (its row's `steps`; a bucket's
weights add up to its count in buckets.csv), a sweep cell weighs 1.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.kernels.workload import SweepPoint
from attnbench.results.atlas_cells import CELL_COLUMNS
from attnbench.results.read import load_run
from attnbench.results.replay import read_steps
from attnbench.results.rule_context import CONTEXT_COLUMNS, context_columns, count
from attnbench.results.rule_features import FEATURES, feature_values  # noqa: F401 (the fit's names for them)
from attnbench.results.rule_schema import BACKENDS, MODES, STRATEGIES, known_backend
from attnbench.results.schema import read_env

ABOUT = ("device", "gpu", "backend", "library", "library_version", "mode", "dtype")
POINT_COLUMNS = [name for name in SweepPoint.__dataclass_fields__]
BATCH_COLUMNS = ["batch_tokens", "num_decode_seqs", "num_seqs", "max_kv_len", "total_kv_tokens",
                 "num_heads", "num_kv_heads", "head_dim"]


@dataclass
class Cells:
    """Cell x feature, cell x choice (ms; NaN where the choice did not pass), each cell's weight,
    the run each cell came from, and what the runs say about themselves (GPU, libraries, paths)."""

    features: pd.DataFrame
    times: pd.DataFrame
    weights: pd.Series
    run_of: pd.Series
    runs: list[dict]
    gpus: list[str]
    libraries: dict[str, str]
    about: pd.DataFrame  # the distinct device, GPU, library and mode columns of the rows (for titles)
    lacking: list[str]  # FEATURES left out of `features`: some cells' rows predate their columns
    shapes: list[tuple[int, int, int]]  # the (heads, KV heads, head dim) the cells were measured on


PARTS = ("bucket", "sample")  # a replay's bucket representatives (weighed by the steps they stand
# for), or its --exact-sample steps, each timed one by one and standing for itself


def run_cells(path: Path, mode: str | None, number: int, part: str = "bucket") -> tuple[pd.DataFrame, dict]:
    """One run's passing rows of `mode` as long form (cell, choice, median_ms, sizes, weight); of a
    replay, the rows of `part` (PARTS)."""
    if not os.path.isdir(path):
        raise AttnbenchError(f"RUN: {path} is not a run directory (replay or kernel sweep)")
    rows = load_run(path, "RUN").rows
    if "kind" not in rows.columns:
        raise AttnbenchError(f"RUN: {path} holds an e2e run; a rule is fitted on replay or kernel sweep rows")
    lacking = [c for c in ("median_ms", *BATCH_COLUMNS) if c not in rows.columns]
    if lacking:
        raise AttnbenchError(f"RUN: {path}'s results.csv lacks {', '.join(lacking)} (written by an older attnbench?)")
    replay = "part" in rows.columns
    if part != "bucket" and not replay:
        raise AttnbenchError(f"RUN: {path} is not a replay run: only a replay has sampled steps (--exact-sample)")
    if replay:
        rows = rows[rows["part"] == part]
        if rows.empty:
            raise AttnbenchError(f"RUN: {path} holds no {'sampled step' if part == 'sample' else 'bucket'} rows"
                                 + (" (replay it with --exact-sample N)" if part == "sample" else ""))
    chosen = rows[(rows["verdict"] == "pass") & (rows["mode"] == mode if mode else True)]
    chosen = chosen.dropna(subset=["median_ms", *BATCH_COLUMNS])
    if chosen.empty:
        raise AttnbenchError(f"RUN: {path} holds no passing timed rows{f' in mode {mode}' if mode else ''}")
    chosen = check_rows(path, chosen)
    about = _run_env(path, replay)
    buckets = replay and part == "bucket"  # cells weighed by the steps they stand for; else each weighs 1
    key = (["bucket", "step"] if buckets else ["step"] if replay else [c for c in POINT_COLUMNS if c in chosen.columns]) \
        + [c for c in ("l2",) if c in chosen.columns]  # a cold and a warm L2 are two cells
    cell = chosen[key].astype(str).agg("|".join, axis=1)
    long = chosen.assign(cell=f"{number}:" + cell, choice=chosen["backend"] + " " + chosen["strategy"],
                         **context_columns(path, chosen, replay, about))
    weights = _replay_weights(path, long) if buckets else pd.Series(1.0, index=long["cell"].unique())
    kind = "replay" if replay else "atlas" if {"round", *CELL_COLUMNS} <= set(rows.columns) else "kernel sweep"
    info = {"path": str(path), "kind": kind if part == "bucket" else "replay's sampled steps", "mode": str(long["mode"].iloc[0]),
            "gpu": str(long["gpu"].iloc[0]), "trace": about["trace"] if about else None}
    return long.assign(weight=long["cell"].map(weights)), info


def check_rows(path: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a rule is fitted on name what rule.json will hold: a timing mode, a backend and a
    strategy attnbench knows, one GPU (a CPU row's is "cpu") and one version of each backend's library.
    A run that mixes GPUs or versions, or names what no attnbench writes, is refused in one line."""
    modes = sorted(set(rows["mode"].astype(str)))
    if len(modes) > 1 and set(modes) <= set(MODES):
        raise AttnbenchError(f"RUN: {path} holds rows of modes {', '.join(modes)}; give --mode to fit on one")
    for column, known in (("mode", MODES), ("strategy", STRATEGIES), ("backend", None)):
        strange = sorted(v for v in set(rows[column].astype(str)) if not (v in known if known else known_backend(v)))
        if strange:
            listed = ", ".join(known or BACKENDS)
            raise AttnbenchError(f"RUN: {path}'s results.csv has {column} {strange[0][:80]!r}, not one of {listed}")
    rows = rows.assign(gpu=rows["gpu"].where(rows["device"].astype(str) != "cpu", "cpu"))
    if rows["gpu"].isna().any() or (rows["gpu"].astype(str).str.strip() == "").any():
        raise AttnbenchError(f"RUN: {path}'s results.csv has rows without a GPU name (gpu): a rule holds for one GPU")
    mixed(path, rows)
    return rows


def mixed(where: object, rows: pd.DataFrame) -> None:
    """AttnbenchError when the rows ran on several GPUs, or a backend at several library versions."""
    gpus = sorted(set(rows["gpu"].astype(str)))
    if len(gpus) > 1:
        raise AttnbenchError(f"RUN: {where} holds rows of GPUs {', '.join(repr(g[:80]) for g in gpus)}; a rule holds "
                             "for one: fit one rule per GPU")
    versions = rows.assign(v=rows["library_version"].astype(str)).groupby("backend")["v"].unique()
    for backend, found in versions.items():
        if len(found) > 1:
            raise AttnbenchError(f"RUN: {where} holds rows of {backend} at library versions "
                                 f"{', '.join(repr(v[:80]) for v in sorted(found))}; a rule holds for one version of "
                                 "each: fit one rule per version")


def _run_env(path: Path, replay: bool) -> dict | None:
    """A run's env.json checked against its schema (a sweep may have none); of a replay, its replay
    entry, checked too: the trace it ran (its path, and its sha256 where recorded)."""
    where = path / "env.json"
    if not os.path.lexists(where):
        if replay:
            raise AttnbenchError(f"RUN: {path} is a replay run without env.json (the replay writes it: the trace it ran)")
        return None
    if not where.is_file():
        raise AttnbenchError(f"RUN: {where} is not a file")
    env = read_env(where, f"RUN: {where}")
    if not replay:
        return None
    about = env.get("replay")
    if not isinstance(about, dict) or not isinstance(about.get("trace"), str) or not about["trace"].strip():
        raise AttnbenchError(f"RUN: {where} has no replay.trace (the path of the trace the replay ran)")
    if about.get("sha256") is not None and not re.fullmatch(r"[0-9a-f]{64}", str(about["sha256"])):
        raise AttnbenchError(f"RUN: {where}: replay.sha256 is not a sha256 digest: {str(about['sha256'])[:80]!r}")
    return about


def _replay_weights(path: Path, long: pd.DataFrame) -> pd.Series:
    """Each representative cell's weight (the steps it stands for), of a bucket buckets.csv holds."""
    try:
        steps = read_steps(path)
    except AttnbenchError as exc:
        raise AttnbenchError(f"RUN: {exc}") from None
    counts = steps.groupby("bucket").size()
    steps_file = path / "buckets.csv"
    buckets = long.drop_duplicates("cell").set_index("cell")["bucket"].astype(int)
    lacking = sorted(set(buckets) - set(counts.index))
    if lacking:
        raise AttnbenchError(f"RUN: {steps_file} has no step in bucket {lacking[0]} that results.csv timed")
    return long.drop_duplicates("cell").set_index("cell")["steps"].astype(float)


def read_cells(paths: list[Path], mode: str | None, part: str = "bucket") -> Cells:
    """Every run's cells, side by side; the choices are every backend x strategy any cell has.
    part: of each replay, its bucket representatives or its sampled steps (run_cells)."""
    parts, runs = [], []
    for number, path in enumerate(paths):
        long, info = run_cells(Path(path), mode, number, part)
        parts.append(long)
        runs.append({**info, "cells": int(long["cell"].nunique())})
    for what, values in (("modes", [r["mode"] for r in runs]), ("GPUs", [r["gpu"] for r in runs])):
        if len(set(values)) > 1:
            listed = ", ".join(f"{v} in {r['path']}" for v, r in zip(values, runs))
            raise AttnbenchError(f"RUN: the runs hold rows of different {what} ({listed}); a rule holds for one: "
                                 + ("give --mode" if what == "modes" else "fit one rule per GPU"))
    long = pd.concat(parts, ignore_index=True)
    mixed("the runs", long)
    times = long.pivot_table(index="cell", columns="choice", values="median_ms", aggfunc="median")
    first = long.drop_duplicates("cell").set_index("cell").reindex(times.index)
    features = pd.DataFrame([feature_values(*(int(r[c]) for c in ("num_decode_seqs", "batch_tokens", "num_seqs",
                                                                    "total_kv_tokens", "max_kv_len", "num_heads",
                                                                    "num_kv_heads", "head_dim")),
                                            *(count(r.get(c)) for c in CONTEXT_COLUMNS))
                             for _, r in first.iterrows()], index=times.index)
    lacking = [name for name in features.columns if features[name].isna().any()]
    if times.shape[1] < 2:
        raise AttnbenchError(f"RUN: the runs hold one choice ({times.columns[0]}) that passed: nothing to choose "
                             "between")
    if not (times.notna().sum(axis=1) > 1).any():
        raise AttnbenchError(f"RUN: no cell has two choices that passed ({', '.join(times.columns)} each passed on "
                             "other cells): nothing to choose between")
    libraries = {str(b): str(v) for b, v in long.drop_duplicates("backend")[["backend", "library_version"]]
                 .itertuples(index=False)}
    run_of = pd.Series([int(cell.split(":")[0]) for cell in times.index], index=times.index)
    shapes = sorted({tuple(int(v) for v in shape) for shape in
                     first[["num_heads", "num_kv_heads", "head_dim"]].itertuples(index=False)})
    return Cells(features.drop(columns=lacking), times, first["weight"].astype(float), run_of, runs,
                 sorted(long["gpu"].dropna().astype(str).unique()), libraries,
                 long[[c for c in ABOUT if c in long.columns]].drop_duplicates(), lacking, shapes)

