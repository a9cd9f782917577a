"""Measured runs as cells: one batch in one mode, the time of every choice that passed on it.

Why: a dispatch rule is fitted on what was measured, and replay runs (a bucket of a trace's steps
is one batch), kernel sweeps (a sweep point is one batch) and atlases (a cell is one batch, its
results.csv a kernel sweep's with the cell's coordinates before it) already hold a timing of every
backend x strategy per batch. A cell is that batch; its choices are the backend x strategy rows
that passed their check (a failed, skipped or erroring row is not a choice for that cell), each
at its median time. Its features are what the rows carry about the batch and what a serving
engine knows before a step runs (FEATURES; `feature_values` computes them from the step's
lengths, the same way, so the exported function and the fit agree). A replay cell is one of a
bucket's representative steps and weighs the steps it stands for (its row's `steps`; a bucket's
weights add up to its count in buckets.csv), a sweep cell weighs 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.kernels.workload import SweepPoint
from attnbench.results.atlas_cells import CELL_COLUMNS
from attnbench.results.read import load_run
from attnbench.results.replay import read_steps

# name -> meaning; a decode row counts one query token, and a speculative row's drafts count with
# prefill_tokens (the rows carry the batch's totals, not each row's query length; rule.py's
# draft_tokens argument counts them the same way)
FEATURES = {
    "decode_rows": "decode rows (sequences sent to the decode kernel by split)",
    "prefill_tokens": "query tokens of the other rows (prefill chunks), plus speculative drafts",
    "decode_share": "decode rows over all query tokens",
    "num_seqs": "sequences in the step",
    "total_kv_tokens": "KV tokens of every sequence, summed",
    "max_kv_len": "the longest sequence's KV length",
    "mean_kv_len": "total KV tokens over sequences",
    "decode_kv_tokens": "KV tokens of the decode rows, summed (what split's decode kernel reads)",
    "mean_decode_kv_len": "decode_kv_tokens over decode rows",
    "prefill_kv_tokens": "KV tokens of the other rows, summed",
    "max_prefill_query_len": "the longest prefill chunk's query tokens",
    "decode_query_len": "the decode rows' query tokens each: 1, or 1 + the drafts with speculative decoding "
                        "(0 without decode rows)",
    "num_heads": "query heads",
    "gqa_group": "query heads per KV head",
    "head_dim": "head dim",
}
# the columns that tell a batch's two halves apart, five of FEATURES read off them; rows written before
# they existed lack them, and a fit over such rows goes without those features, and says so
# (decode_query_len is worked out for older rows where their other columns or the replay's trace
# tell it: _decode_query_lens)
CONTEXT_COLUMNS = ["decode_kv_tokens", "max_prefill_query_len", "decode_query_len"]
ABOUT = ("device", "gpu", "backend", "library", "library_version", "mode", "dtype")
POINT_COLUMNS = [name for name in SweepPoint.__dataclass_fields__]
BATCH_COLUMNS = ["batch_tokens", "num_decode_seqs", "num_seqs", "max_kv_len", "total_kv_tokens",
                 "num_heads", "num_kv_heads", "head_dim"]


def feature_values(decode_rows: int, query_tokens: int, num_seqs: int, total_kv: int, max_kv: int,
                   num_heads: int, num_kv_heads: int, head_dim: int, decode_kv: int | None = None,
                   max_prefill_query: int | None = None, decode_query: int | None = None) -> dict[str, float]:
    """FEATURES of one batch from its sizes (rule.py computes the same from the step's lengths);
    without decode_kv, max_prefill_query or decode_query (older rows), those read off them are NaN."""
    nan = float("nan")
    return {"decode_rows": decode_rows, "prefill_tokens": query_tokens - decode_rows,
            "decode_share": decode_rows / query_tokens if query_tokens else 0.0, "num_seqs": num_seqs,
            "total_kv_tokens": total_kv, "max_kv_len": max_kv, "mean_kv_len": total_kv / num_seqs if num_seqs else 0.0,
            "decode_kv_tokens": nan if decode_kv is None else decode_kv,
            "mean_decode_kv_len": nan if decode_kv is None else decode_kv / decode_rows if decode_rows else 0.0,
            "prefill_kv_tokens": nan if decode_kv is None else total_kv - decode_kv,
            "max_prefill_query_len": nan if max_prefill_query is None else max_prefill_query,
            "decode_query_len": nan if decode_query is None else decode_query,
            "num_heads": num_heads, "gqa_group": num_heads / num_kv_heads if num_kv_heads else 0.0,
            "head_dim": head_dim}


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
    if chosen["mode"].nunique() > 1:
        raise AttnbenchError(f"RUN: {path} holds rows of modes {', '.join(sorted(chosen['mode'].unique()))}; "
                             "give --mode to fit on one")
    buckets = replay and part == "bucket"  # cells weighed by the steps they stand for; else each weighs 1
    key = (["bucket", "step"] if buckets else ["step"] if replay else [c for c in POINT_COLUMNS if c in chosen.columns]) \
        + [c for c in ("l2",) if c in chosen.columns]  # a cold and a warm L2 are two cells
    cell = chosen[key].astype(str).agg("|".join, axis=1)
    long = chosen.assign(cell=f"{number}:" + cell, choice=chosen["backend"] + " " + chosen["strategy"],
                         decode_query_len=_decode_query_lens(path, chosen, replay))
    weights = _replay_weights(path, long) if buckets else pd.Series(1.0, index=long["cell"].unique())
    kind = "replay" if replay else "atlas" if {"round", *CELL_COLUMNS} <= set(rows.columns) else "kernel sweep"
    info = {"path": str(path), "kind": kind if part == "bucket" else "replay's sampled steps", "mode": str(long["mode"].iloc[0]),
            "gpu": "cpu" if (long["device"].astype(str) == "cpu").all() else ", ".join(sorted(long["gpu"].astype(str).unique())),
            "trace": _trace_of(path) if replay else None}
    return long.assign(weight=long["cell"].map(weights)), info


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


def _decode_query_lens(path: Path, rows: pd.DataFrame, replay: bool) -> pd.Series:
    """Each row's decode query length (FEATURES): its decode_query_len where it has one; for rows
    written before that column, what the rest of the row tells: 0 without decode rows; a sweep's or
    atlas's kind (specdec: spec_k, else 1); a replay's step in its trace, when the file env.json names
    is there with the same sha256; else the decode rows' share of the batch's tokens when at most one
    other row shares it. NaN where none of these tells (the fit then goes without the feature)."""
    given = pd.to_numeric(rows["decode_query_len"], errors="coerce") if "decode_query_len" in rows \
        else pd.Series(float("nan"), index=rows.index)
    missing = given.isna()
    if not missing.any():
        return given
    from_trace = _trace_decode_query(path) if replay else None
    derived = [_derived_decode_query(row, replay, from_trace) for row in rows[missing].to_dict("records")]
    return given.where(~missing, pd.Series(derived, index=rows.index[missing], dtype=float))


def _derived_decode_query(row: dict, replay: bool, from_trace: dict[int, int] | None) -> float:
    decode, tokens, seqs = (_count(row.get(c)) for c in ("num_decode_seqs", "batch_tokens", "num_seqs"))
    if decode == 0:
        return 0.0
    if not replay:
        if row.get("kind") != "specdec":
            return 1.0
        spec_k = _count(row.get("spec_k"))
        return float("nan") if spec_k is None or tokens is None else float(min(spec_k, tokens))
    step = _count(row.get("step"))
    if from_trace is not None and step in from_trace:
        return float(from_trace[step])
    longest = _count(row.get("max_prefill_query_len"))
    if None in (decode, tokens, seqs) or seqs - decode > 1 or (seqs > decode and longest is None):
        return float("nan")
    return (tokens - (longest if seqs > decode else 0)) / decode


def _trace_decode_query(path: Path) -> dict[int, int] | None:
    """step -> its decode rows' query length, read from the trace a replay's env.json names when that
    file's sha256 is the one recorded (a run older than the digest: when every step of its
    buckets.csv has the trace's sizes); else None. A relative path was relative to where the replay
    ran: it is looked for from here, then from each folder above the run (a run kept under the
    project that holds its trace)."""
    import hashlib
    import json

    from attnbench.traces.jsonl import read_trace

    try:
        about = json.loads((path / "env.json").read_text())["replay"]
        given, digest = Path(about["trace"]), about.get("sha256")
        places = [given] if given.is_absolute() else [given, *(folder / given for folder in path.resolve().parents)]
        for place in places:
            if not place.is_file() or (digest and hashlib.sha256(place.read_bytes()).hexdigest() != digest):
                continue
            batches = [step.batch() for step in read_trace(place).steps]
            if digest or _same_steps(batches, read_steps(path)):  # no digest (older runs): buckets.csv's sizes
                return {number: max((q for q, d in zip(b.query_lens, b.is_decode) if d), default=0)
                        for number, b in enumerate(batches)}
    except (OSError, ValueError, KeyError, TypeError, AttnbenchError):
        return None
    return None


def _same_steps(batches: list, steps: pd.DataFrame) -> bool:
    """Every step buckets.csv lists has the decode rows, query tokens and KV tokens of the trace's."""
    for step, decode, query, kv in steps[["step", "decode_rows", "query_tokens", "kv_tokens"]].itertuples(index=False):
        if not 0 <= step < len(batches):
            return False
        batch = batches[step]
        if (batch.num_decode_seqs, batch.num_tokens, sum(batch.kv_lens)) != (decode, query, kv):
            return False
    return True


def _trace_of(path: Path) -> str | None:
    import json

    try:
        return json.loads((path / "env.json").read_text())["replay"]["trace"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    times = long.pivot_table(index="cell", columns="choice", values="median_ms", aggfunc="median")
    first = long.drop_duplicates("cell").set_index("cell").reindex(times.index)
    features = pd.DataFrame([feature_values(*(int(r[c]) for c in ("num_decode_seqs", "batch_tokens", "num_seqs",
                                                                    "total_kv_tokens", "max_kv_len", "num_heads",
                                                                    "num_kv_heads", "head_dim")),
                                            *(_count(r.get(c)) for c in CONTEXT_COLUMNS))
                             for _, r in first.iterrows()], index=times.index)
    lacking = [name for name in features.columns if features[name].isna().any()]
    if times.shape[1] < 2:
        raise AttnbenchError(f"RUN: the runs hold one choice ({times.columns[0]}) that passed: nothing to choose "
                             "between")
    libraries = {str(b): str(v) for b, v in long.drop_duplicates("backend")[["backend", "library_version"]]
                 .itertuples(index=False)}
    run_of = pd.Series([int(cell.split(":")[0]) for cell in times.index], index=times.index)
    shapes = sorted({tuple(int(v) for v in shape) for shape in
                     first[["num_heads", "num_kv_heads", "head_dim"]].itertuples(index=False)})
    return Cells(features.drop(columns=lacking), times, first["weight"].astype(float), run_of, runs,
                 sorted(long["gpu"].dropna().astype(str).unique()), libraries,
                 long[[c for c in ABOUT if c in long.columns]].drop_duplicates(), lacking, shapes)


def _count(value) -> int | None:
    """A context column's value as an int; None where the row lacks it (a blank, or no such column)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number == number else None
