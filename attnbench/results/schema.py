"""The types of what results files hold, checked where they are read: one error naming file and field.

Why: env.json, agreement.csv and telemetry.csv were read as they came, so a string where env.json
has a number, a list where it has an object, or a binary telemetry.csv ended in a traceback far
from the file (merge, e2e --resume), or was carried into a merged run as it was. Here the shape of
each file is written once, as dataclasses (env.json) or read off the row dataclasses (the columns
of agreement.csv and telemetry.csv), and one walker checks a value against it. Entries the schema
does not name are left alone: an env.json from an older or newer attnbench still reads.
"""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Union

from attnbench.errors import AttnbenchError


def may_be_absent():
    """A field that may be absent but is not null when there (its type says so: its readers use it as
    an object); the None default is never read, only the schema walker looks at these classes."""
    return field(default=None)


@dataclass(frozen=True)
class ShardEnv:
    """`--shard I/N`: which share of the sweep's points the run measured."""

    index: int
    count: int
    points: int = 0


@dataclass(frozen=True)
class RankEnv:
    """One torchrun rank of a kernel sweep (runs/kernel_ranks.py)."""

    rank: int
    status: str
    shard: str = ""


@dataclass(frozen=True)
class DistributedEnv:
    ranks: list[RankEnv]
    world_size: int = 0


@dataclass(frozen=True)
class GpuEnv:
    name: str | None = None


@dataclass(frozen=True)
class TensorParallelEnv:
    size: int = 1


@dataclass(frozen=True)
class E2EEnv:
    """What e2e --resume and merge compare: the model and the tensor-parallel group."""

    model_args: dict
    model: str | None = None
    tp: TensorParallelEnv = may_be_absent()


@dataclass(frozen=True)
class RunEnv:
    """env.json (results/env.py collect, and what the jobs add); every entry may be absent."""

    command: str | None = None
    timestamp: str | None = None
    git_sha: str | None = None
    attnbench_version: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    gpu: GpuEnv | None = None
    libraries: dict[str, str | None] | None = None
    backend_libraries: dict[str, str] | None = None
    shard: ShardEnv | None = None
    distributed: DistributedEnv | None = None
    devices: list[dict] | None = None
    e2e: E2EEnv = may_be_absent()
    merged: dict | None = None


def mismatch(value: object, hint: object, where: str) -> str:
    """`<where> is <what value is>, not <what hint wants>` at the first value that does not fit ('' when
    all do); `where` is the dotted field (`shard.index`, `distributed.ranks[1].rank`)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return ""
    hint = next((o for o in options if o is not type(None)), hint)
    if is_dataclass(hint):
        return dataclass_mismatch(value, hint, where)
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if not fits(value, origin):
        return f"{where} is {described(value)}, not {WANTED.get(origin, origin.__name__)}"
    if origin is list and args:
        return next((p for i, v in enumerate(value) if (p := mismatch(v, args[0], f"{where}[{i}]"))), "")
    if origin is dict and args:
        return next((p for k, v in value.items() if (p := mismatch(v, args[1], f"{where}.{k}"))), "")
    return ""


def dataclass_mismatch(value: object, hint: type, where: str) -> str:
    if not isinstance(value, dict):
        return f"{where} is {described(value)}, not an object"
    hints = type_hints(hint)
    for f in fields(hint):
        inside = f"{where}.{f.name}" if where else f.name
        if f.name not in value:
            if f.default is MISSING:
                return f"{inside} is missing"
            continue
        problem = mismatch(value[f.name], hints[f.name], inside)
        if problem:
            return problem
    return ""


@cache
def type_hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def fits(value: object, origin: type) -> bool:
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin)


WANTED = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
          list: "a list"}


def described(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (not a finite number)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, (int, float)):
        return f"the {WANTED[type(value)].split()[-1]} {value}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def read_env(path: Path, where: str = "") -> dict:
    """An env.json, checked against its schema (results/schema.py RunEnv): AttnbenchError starting
    with `where` (the path unless given) naming the file and the field that is wrong."""
    where = where or str(path)
    try:
        env = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AttnbenchError(f"{where} is not a readable JSON file ({str(exc) or type(exc).__name__})") from None
    if not isinstance(env, dict):
        raise AttnbenchError(f"{where} holds JSON {type(env).__name__}, not an object of environment entries")
    problem = mismatch(env, RunEnv, "") or split_problem(env)
    if problem:
        raise AttnbenchError(f"{where}: {problem}")
    return env


def split_problem(env: dict) -> str:
    """What the types allow but a split cannot be: shard I/N past N, torchrun ranks not 0..W-1."""
    shard, ranks = env.get("shard"), [r["rank"] for r in (env.get("distributed") or {}).get("ranks") or []]
    if shard and not 0 <= shard["index"] < shard["count"]:
        return f"shard is {shard['index']}/{shard['count']}, not I/N with 0 <= I < N"
    if sorted(ranks) != list(range(len(ranks))):
        return f"distributed.ranks are ranks {sorted(ranks)}, not 0..{len(ranks) - 1} once each"
    return ""


# ---- tables: one type per column --------------------------------------------------------------------

class HexInt(int):
    """A column of integers written in hexadecimal (telemetry.csv's throttle reasons, `0x4`)."""


def column_types(*parts: type, **more: type) -> dict[str, type]:
    """{column: int | float | str} from row dataclasses (a `X | None` field: X), and `more`."""
    columns = {}
    for part in parts:
        hints = type_hints(part)
        for f in fields(part):
            options = typing.get_args(hints[f.name]) or (hints[f.name],)
            columns[f.name] = next(o for o in options if o is not type(None))
    return {**columns, **more}


def cell_problem(text: str, kind: type) -> str:
    """Why a CSV cell is not a `kind` ('' when it is, or when it is empty: a column a row leaves blank)."""
    if kind is str or not text.strip():
        return ""
    try:
        number = int(text, 0) if kind is HexInt else float(text)
    except ValueError:
        return f"is {text[:40]!r}, not {WANTED.get(kind, 'a hexadecimal integer')}"
    if kind is int and not (math.isfinite(number) and number == int(number)):
        return f"is {text[:40]!r}, not an integer"
    return ""


