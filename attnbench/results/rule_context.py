"""The columns that tell a batch's two halves apart, for rows written before they existed.

Why: five of a rule's features (rule_features.FEATURES) are read off three columns of the rows
(CONTEXT_COLUMNS); rows of an older attnbench lack them, and a fit without them cannot tell a long
decode context from a long prefix, nor a speculative step from a plain one. Most of what they
would say is still there: a replay's env.json names the trace it replayed, and the trace holds each
step's lengths, from which the columns are computed by the code that writes them for new rows
(kernels/rows.py BatchColumns.of); the trace is read only if it is the one the replay read (its
sha256, or for runs older than the digest, buckets.csv's step sizes), and a row takes its step's
values only where the step's sizes are the row's. What is left (a sweep's row, a replay without its
trace) is worked out for the decode query length from the row's other columns, else left NaN and
the fit goes without the feature, and says so.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.kernels.rows import BatchColumns
from attnbench.results.replay import read_steps

CONTEXT_COLUMNS = ["decode_kv_tokens", "max_prefill_query_len", "decode_query_len"]
SIZES = ("num_decode_seqs", "batch_tokens", "total_kv_tokens")  # a row's step is the trace's when these agree


def context_columns(path: Path, rows: pd.DataFrame, replay: bool, about: dict | None) -> dict[str, pd.Series]:
    """CONTEXT_COLUMNS for each row: its own value where it has one; else, in a replay, its step's in
    the trace `about` (env.json's replay entry) names; else, for the decode query length, what the
    rest of the row tells (_derived_decode_query); NaN where nothing tells."""
    given = {c: pd.to_numeric(rows[c], errors="coerce") if c in rows else pd.Series(float("nan"), index=rows.index)
             for c in CONTEXT_COLUMNS}
    missing = pd.concat(given.values(), axis=1).isna().any(axis=1)
    if not missing.any():
        return given
    steps = _trace_context(path, about) if replay and about else None
    filled = {c: given[c].copy() for c in CONTEXT_COLUMNS}
    for index, row in rows[missing].iterrows():
        known = steps.get(count(row.get("step"))) if steps else None
        if known and known[0] == tuple(count(row.get(c)) for c in SIZES):
            for column in CONTEXT_COLUMNS:
                if filled[column].isna()[index]:
                    filled[column].at[index] = known[1][column]
    rest = filled["decode_query_len"].isna()
    if rest.any():
        records = rows[rest].assign(max_prefill_query_len=filled["max_prefill_query_len"][rest]).to_dict("records")
        filled["decode_query_len"] = filled["decode_query_len"].where(
            ~rest, pd.Series([_derived_decode_query(r, replay) for r in records], index=rows.index[rest], dtype=float))
    return filled


def _derived_decode_query(row: dict, replay: bool) -> float:
    """A row's decode query length from its other columns: 0 without decode rows; a sweep's or
    atlas's kind (specdec: spec_k, else 1); a replay's decode rows' share of the batch's tokens when
    at most one other row shares it; NaN where they do not tell."""
    decode, tokens, seqs = (count(row.get(c)) for c in ("num_decode_seqs", "batch_tokens", "num_seqs"))
    if decode == 0:
        return 0.0
    if not replay:
        if row.get("kind") != "specdec":
            return 1.0
        spec_k = count(row.get("spec_k"))
        return float("nan") if spec_k is None or tokens is None else float(min(spec_k, tokens))
    longest = count(row.get("max_prefill_query_len"))
    if None in (decode, tokens, seqs) or seqs - decode > 1 or (seqs > decode and longest is None):
        return float("nan")
    return (tokens - (longest if seqs > decode else 0)) / decode


def _trace_context(path: Path, about: dict) -> dict[int, tuple[tuple, dict[str, int]]] | None:
    """step -> (its SIZES, its CONTEXT_COLUMNS), from the trace a replay's env.json names when that
    file's sha256 is the one recorded (a run older than the digest: when every step of its
    buckets.csv has the trace's sizes); else None. A relative path was relative to where the replay
    ran: it is looked for from here, then from each folder above the run (a run kept under the
    project that holds its trace)."""
    from attnbench.traces.jsonl import read_trace

    given, digest = Path(about["trace"]), about.get("sha256")
    places = [given] if given.is_absolute() else [given, *(folder / given for folder in path.resolve().parents)]
    try:
        for place in places:
            if not place.is_file() or (digest and hashlib.sha256(place.read_bytes()).hexdigest() != digest):
                continue
            batches = [step.batch() for step in read_trace(place).steps]
            if digest or _same_steps(batches, read_steps(path)):  # no digest (older runs): buckets.csv's sizes
                columns = [BatchColumns.of(batch) for batch in batches]
                return {number: ((c.num_decode_seqs, c.batch_tokens, c.total_kv_tokens),
                                 {name: getattr(c, name) for name in CONTEXT_COLUMNS})
                        for number, c in enumerate(columns)}
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


def count(value) -> int | None:
    """A column's value as an int; None where the row lacks it (a blank, or no such column)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number == number and abs(number) != float("inf") else None
