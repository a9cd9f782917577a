"""Which shares of a split the inputs of `attnbench merge` are, and whether they make one whole sweep.

Why: merge used to join a shard of one sweep with a shard of another (other heads, other --shard
count) and write an env.json that claimed a complete split. A shard is `--shard I/N` (env.json's
`shard`) or a torchrun rank that finished (`distributed.ranks`, rank r of W is shard r/W). Shards
merge only when they come from one command line (less the flags that say where and how a run went:
RUN_ONLY_FLAGS), share one N and hold every I of N exactly once; `--partial` merges what is there,
and env.json's `merged.complete` then says whether the split is whole.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from attnbench.errors import AttnbenchError

# flags that say where or how a run went, not which rows it holds (a resume may change them too:
# runs/resume.py); a shard's --shard is its place in the split, which merge checks on its own
EXECUTION_FLAGS = ("--out", "--resume", "--force", "--devices", "--device", "--isolate", "--point-timeout", "--json",
                   "--profile")
RUN_ONLY_FLAGS = ("--shard", *EXECUTION_FLAGS)
RUN_ONLY_SWITCHES = ("--force", "--isolate", "--json", "--profile")  # they take no value
PARTIAL = "(--partial merges what is there and records that the split is not whole)"


@dataclass(frozen=True)
class Shares:
    """One input's place in a split: the shard indices it holds of `count` (none: a whole run)."""

    path: Path
    count: int | None
    held: tuple[int, ...]
    sweep: dict[str, str]

    def describe(self) -> str:
        return ", ".join(f"{i}/{self.count}" for i in self.held) if self.count else "a whole run"


def sweep_flags(command: object) -> dict[str, str]:
    """`attnbench kernel --heads 4 --shard 0/2 --out x` -> {"arguments": "kernel", "--heads": "4"}: the
    command and the flags that decide which rows a run holds, by name (so their order does not matter)."""
    text = command if isinstance(command, str) else ""
    try:
        words = shlex.split(text)[1:]
    except ValueError:  # an unbalanced quote: compare the words as they are
        words = text.split()[1:]
    flags, arguments, i = {}, [], 0
    while i < len(words):
        name, given, value = words[i].partition("=")
        i += 1
        if not name.startswith("--"):  # the command, a scenario file
            arguments.append(words[i - 1])
            continue
        if not given and name not in RUN_ONLY_SWITCHES and i < len(words) and not words[i].startswith("--"):
            value, i = words[i], i + 1
        if name not in RUN_ONLY_FLAGS:
            flags[name] = value
    return {"arguments": " ".join(arguments), **flags}


def shares_of(path: Path, env: dict) -> Shares:
    """The shards an input holds (its env.json already checked: results/schema.read_env)."""
    sweep = sweep_flags(env.get("command"))
    shard = env.get("shard")
    if shard:
        return Shares(path, shard["count"], (shard["index"],), sweep)
    ranks = (env.get("distributed") or {}).get("ranks") or []
    if ranks:
        return Shares(path, len(ranks), tuple(r["rank"] for r in ranks if r.get("status") == "ok"), sweep)
    return Shares(path, None, (), sweep)


def check_split(shares: list[Shares], partial: bool) -> dict:
    """env.json's account of the split (empty when no input is a shard); AttnbenchError when the
    inputs are not one whole split of one sweep, unless partial."""
    if not any(s.count for s in shares):
        return {}
    problem = split_problem(shares)
    if problem and not partial:
        raise AttnbenchError(f"{problem} {PARTIAL}")
    counts = sorted({s.count for s in shares if s.count})
    held = {n: sorted({i for s in shares if s.count == n for i in s.held}) for n in counts}
    missing = [f"{i}/{n}" for n in counts for i in range(n) if i not in held[n]]
    return {"shards": {f"/{n}": held[n] for n in counts}, "missing_shards": missing, "complete": not problem,
            **({"partial": problem} if problem else {})}


def split_problem(shares: list[Shares]) -> str:
    """Why the inputs are not every shard of one split of one sweep, exactly once ('' when they are)."""
    first = next(s for s in shares if s.count)
    for other in shares:
        if not other.count:
            return f"{other.path} is a whole run and {first.path} shard {first.describe()}: merge takes the shards " \
                   "of one split"
        if other.count != first.count:
            return f"{first.path} is shard {first.describe()} and {other.path} shard {other.describe()}: " \
                   "shards of different splits"
        difference = flag_difference(first.sweep, other.sweep)
        if difference:
            return f"{first.path} and {other.path} are shards of different sweeps ({difference})"
    owner: dict[int, Shares] = {}
    for share in shares:
        for index in share.held:
            if index in owner:
                return f"{owner[index].path} and {share.path} both hold shard {index}/{first.count}"
            owner[index] = share
    missing = [f"{i}/{first.count}" for i in range(first.count) if i not in owner]
    if missing:
        return f"shard(s) {', '.join(missing)} of the split are not among the inputs"
    return ""


def flag_difference(first: dict[str, str], other: dict[str, str]) -> str:
    """The first flag two command lines set differently, in words ('' when none)."""
    for name in dict.fromkeys([*first, *other]):
        if first.get(name) != other.get(name):
            return f"{name}: {shown(first.get(name))} against {shown(other.get(name))}"
    return ""


def shown(value: str | None) -> str:
    return "not given" if value is None else repr(value) if value else "given"
