"""Several run directories -> one (`attnbench merge`): the shards of a sweep, or any runs of one setup.

Why: `--shard I/N` jobs (a Slurm array, Kubernetes) and a torchrun rank measured again each write
their own directory; compare, export and plot read one. Rows are carried over as the text of
their results.csv (nothing is re-formatted), so a merged run reads like one that measured it all.

Refused with one line naming the directory: an input that is not a run directory (results.csv
and env.json), one given twice, a kernel sweep beside an e2e run, runs measured with another
GPU, attnbench, torch or kernel library (unless allow_mixed: the merged env.json then lists what
differed), shards that are not one whole split of one sweep (unless partial: results/shards.py),
replay shards whose env.json tells of another replay (another trace, step count or bucketing),
and two rows with one key but different results. A row that two inputs hold identically is kept
once. The merged env.json is the first input's, with `merged` listing every input (its shard or
ranks), the shards of the split it holds and lacks, and whether the split is complete.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.errors import AttnbenchError
from attnbench.results.env import RESUME_MUST_MATCH, env_value
from attnbench.results.files import read_agreement_table, read_table
from attnbench.results.read import TRACE, ResultKind, canonical, load_run, row_default
from attnbench.results.schema import may_be_absent, mismatch, read_env
from attnbench.results.shards import check_split, shares_of
from attnbench.results.telemetry import read_telemetry

MUST_MATCH = {"kernel": RESUME_MUST_MATCH, "e2e": (*RESUME_MUST_MATCH, "e2e.model_args")}
RUN_ONLY = ("shard", "distributed", "devices")  # env.json entries that describe one input, not the merge
# measured beside results.csv, merged the same way: their readers
EXTRA_TABLES = {"agreement.csv": read_agreement_table, "telemetry.csv": read_telemetry}


@dataclass
class MergeInput:
    """One input: its env.json, and its results.csv (and the tables beside it) as text rows."""

    path: Path
    kind: ResultKind
    env: dict
    header: list[str]
    rows: list[dict]
    tables: dict[str, tuple[list[str], list[dict]]]  # agreement.csv, telemetry.csv: header and rows


@dataclass
class Merged:
    kind: ResultKind
    env: dict
    header: list[str]
    rows: list[dict]
    tables: dict[str, tuple[list[str], list[dict]]] = field(default_factory=dict)  # agreement, telemetry
    notes: list[str] = field(default_factory=list)


def read_run_dir(path: Path) -> MergeInput:
    """A run directory, checked as compare and export check it; AttnbenchError naming it if it is not one."""
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.lexists(path) else "is a file"
        raise AttnbenchError(f"{path} is not a run directory: it {what}")
    for name in ("results.csv", "env.json"):
        if not os.path.isfile(path / name):
            raise AttnbenchError(f"{path} is not a run directory: it holds no {name}")
    run = load_run(path, str(path))  # every check of a results file: kind, columns, numbers, one row per key
    if run.kind is TRACE:
        raise AttnbenchError(f"{path} is {run.kind.describe()}: merge takes kernel sweeps and e2e grid runs")
    env = read_env(path / "env.json")
    header, rows = read_table(path / "results.csv", {})  # as text: the checks above have passed
    tables = {name: read(path / name) for name, read in EXTRA_TABLES.items()
              if os.path.lexists(path / name)}
    return MergeInput(path, run.kind, env, header, rows, tables)


@dataclass(frozen=True)
class ReplayEnv:
    """env.json's `replay` (runs/replay.py replay_env), as the merged replay's report reads it."""

    trace: str
    sha256: str
    steps: int
    kinds: dict[str, int]
    buckets: int
    bucket_ratio: float
    bucket_split: int
    exact_sample: int
    seed: int
    trace_steps: int = may_be_absent()


# a shard's own: the trace's path on its machine (the sha256 must match) and the numbers of its rows
REPLAY_MAY_DIFFER = ("trace", "results")


def check_one_replay(runs: list[MergeInput]) -> None:
    """Where any input is a replay shard, every input is one of the same replay: its env.json's
    `replay` an object of the right types, equal to the first's in all but REPLAY_MAY_DIFFER."""
    if not any("replay" in run.env for run in runs):
        return
    for run in runs:
        replay = run.env.get("replay")
        problem = "replay is missing" if replay is None else mismatch(replay, ReplayEnv, "replay")
        if problem:
            raise AttnbenchError(f"{run.path}/env.json: {problem}; merge joins the shards of one replay")
    first = {k: v for k, v in runs[0].env["replay"].items() if k not in REPLAY_MAY_DIFFER}
    for run in runs[1:]:
        other = {k: v for k, v in run.env["replay"].items() if k not in REPLAY_MAY_DIFFER}
        key = next((k for k in dict.fromkeys([*first, *other]) if first.get(k) != other.get(k)), None)
        if key is not None:
            raise AttnbenchError(f"{run.path}/env.json says replay.{key} = {str(other.get(key))[:60]}, "
                                 f"{runs[0].path}/env.json {str(first.get(key))[:60]}: merge joins the shards of "
                                 "one replay (one trace, one --steps, --bucket-ratio, --bucket-split, "
                                 "--exact-sample and --seed)")


def check_same_setup(runs: list[MergeInput], allow_mixed: bool) -> dict[str, dict[str, object]]:
    """What differs between the inputs' machines and software; refused unless allow_mixed."""
    mixed = {}
    for key in MUST_MATCH[runs[0].kind.name]:
        values = {str(run.path): env_value(run.env, key) for run in runs}
        first = runs[0]
        other = next((run for run in runs[1:] if env_value(run.env, key) != env_value(first.env, key)), None)
        if other is None:
            continue
        if not allow_mixed:
            raise AttnbenchError(f"{other.path} was measured with {key} = {env_value(other.env, key)!r}, "
                                 f"{first.path} with {env_value(first.env, key)!r}; merge takes runs of one setup "
                                 "(--allow-mixed merges them anyway and records the difference)")
        mixed[key] = values
    return mixed


def row_key(row: dict, kind: ResultKind) -> tuple[str, ...]:
    """The row's key as read.py compares keys (a key column older files lack: the value it meant)."""
    return tuple(canonical(row[c] if c in row else row_default(kind, c, row)) for c in kind.key)


def describe_key(row: dict, kind: ResultKind) -> str:
    return " ".join(f"{c}={row.get(c)}" for c in kind.key if row.get(c) not in ("", None))


def union_rows(sources: list[tuple[Path, list[str], list[dict]]], key, describe=str) -> tuple[list[str], list[dict], int]:
    """Every row once: (header, rows, identical rows dropped). key(row) identifies a measurement;
    two rows with one key must be equal in every column, else AttnbenchError."""
    header = list(dict.fromkeys(c for _, h, _ in sources for c in h))
    seen: dict[tuple, tuple[Path, dict]] = {}
    rows, dropped = [], 0
    for path, _, part in sources:
        for row in part:
            k = key(row)
            if k not in seen:
                seen[k] = (path, row)
                rows.append(row)
                continue
            first_path, first = seen[k]
            if any(canonical(first.get(c) or "") != canonical(row.get(c) or "") for c in header):
                raise AttnbenchError(f"{first_path} and {path} both hold {describe(row)} with different results; "
                                     "a merged run holds each measurement once (leave one of them out)")
            dropped += 1
    return header, rows, dropped


def merge_runs(runs: list[MergeInput], allow_mixed: bool, partial: bool, command: str) -> Merged:
    real = [os.path.realpath(run.path) for run in runs]
    for i, path in enumerate(real):
        if path in real[:i]:
            raise AttnbenchError(f"{runs[i].path} is given twice")
    kind = runs[0].kind
    for run in runs[1:]:
        if run.kind != kind:
            raise AttnbenchError(f"{runs[0].path} is {kind.describe()} and {run.path} {run.kind.describe()}: "
                                 "merge takes runs of one kind")
    mixed = check_same_setup(runs, allow_mixed)
    check_one_replay(runs)
    split = check_split([shares_of(run.path, run.env) for run in runs], partial)
    header, rows, dropped = union_rows([(r.path, r.header, r.rows) for r in runs], lambda row: row_key(row, kind),
                                       lambda row: describe_key(row, kind))
    merged = Merged(kind, merged_env(runs, command, mixed, split, dropped), header, rows)
    for name in EXTRA_TABLES:
        merged.tables[name] = extra_table(runs, name)
    merged.notes = notes(merged.env["merged"], dropped)
    return merged


def extra_table(runs: list[MergeInput], name: str) -> tuple[list[str], list[dict]]:
    """agreement.csv (e2e) or telemetry.csv: every input's rows, identical rows once."""
    sources = [(run.path, *run.tables[name]) for run in runs if name in run.tables]
    header, rows, _ = union_rows(sources, key=lambda row: tuple(row.values()))
    return header, rows


def merged_env(runs: list[MergeInput], command: str, mixed: dict, split: dict, dropped: int) -> dict:
    env = {k: v for k, v in copy.deepcopy(runs[0].env).items() if k not in RUN_ONLY}
    env["command"] = command
    inputs = []
    for run in runs:
        entry = {"dir": str(run.path), "rows": len(run.rows), "command": run.env.get("command"),
                 "timestamp": run.env.get("timestamp"), "git_sha": run.env.get("git_sha"),
                 "gpu": env_value(run.env, "gpu.name") or "cpu"}
        entry.update({k: run.env[k] for k in RUN_ONLY if k in run.env})
        inputs.append(entry)
    env["merged"] = {"inputs": inputs, "identical_rows_dropped": dropped, **({"mixed": mixed} if mixed else {}),
                     **split}
    return env


def notes(merged: dict, dropped: int) -> list[str]:
    lines = []
    if merged.get("partial"):
        missing = merged["missing_shards"]
        absent = f"; shard(s) {', '.join(missing)} are not among the inputs" if missing and \
            "not among" not in merged["partial"] else ""
        lines.append(f"--partial: {merged['partial']}{absent}; env.json records the split as not complete")
    if dropped:
        lines.append(f"{dropped} row(s) held identically by two inputs were kept once")
    if merged.get("mixed"):
        lines.append(f"--allow-mixed: the inputs differ in {', '.join(merged['mixed'])} (env.json: merged.mixed)")
    return lines
