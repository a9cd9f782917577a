"""`attnbench ab` as a job: two sides measured in turns, each row until it is decided or the budget ends.

A kernel sweep is planned here, once, with this checkout's planner (results/paired.py says why the
turns and the statistics); each side's worker (workers/ab_pool.py) measures a point as its own
attnbench measures it, one replicate per call. Per round and point: the side round_order names
first, then the other, so a row's two medians of a round are minutes closer than two runs ever are.
A row stops when its paired interval decides against --threshold (after --min-rounds), at
--max-rounds, or when --budget-s of wall time (from both workers ready) has passed; a point is measured while any of its
rows is still open. A row that fails on one side (error, timeout, crash) stops there and says so.

Outputs (a RunDir): ab.csv (a row each, results/ab_files.py), rounds.csv (every measured row of
both sides, with its side and round), env.json (this machine, both sides' versions as their
workers reported them, the ab settings), summary.md.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir, progress
from attnbench.device import device_name, select
from attnbench.errors import AttnbenchError, Interrupted, UsageError
from attnbench.interrupts import SignalReceived, signal_of, signals_raise
from attnbench.kernels.plan import KernelArgs
from attnbench.kernels.sweep import SweepPlan
from attnbench.results.ab_files import ab_frame, regressed, summary
from attnbench.results.env import collect
from attnbench.results.paired import (
    BASELINE,
    BUDGET,
    CANDIDATE,
    INTERRUPTED,
    MIN_ROUNDS,
    NOT_TIMED,
    RowRounds,
    enough,
    look_confidence,
    round_order,
)
from attnbench.results.read import KERNEL, MEASURED
from attnbench.runs.kernel import plan_kernel
from attnbench.runs.rundir import RunDir
from attnbench.workers.ab_pool import SideWorker
from attnbench.workers.envs import Side

MAX_ROUNDS = 12
ALL = "*"  # a point's failure as a whole: every row of it


@dataclass(frozen=True)
class AbSettings:
    """ab's own flags: the sides, the threshold and when to stop."""

    baseline: Side
    candidate: Side
    threshold: float
    max_rounds: int = MAX_ROUNDS
    budget_s: float = 300.0
    min_rounds: int = MIN_ROUNDS
    out: Path | None = None
    force: bool = False

    def check(self) -> None:
        if not 2 <= self.max_rounds <= 1000:
            raise UsageError(f"--max-rounds: between 2 and 1000 (an interval needs two rounds), got {self.max_rounds}")
        if not 2 <= self.min_rounds <= self.max_rounds:
            raise UsageError(f"--min-rounds: between 2 and --max-rounds ({self.max_rounds}), got {self.min_rounds}")
        if not 0 < self.budget_s < float("inf"):
            raise UsageError(f"--budget-s: a positive number of seconds, got {self.budget_s}")


REFUSED = {"devices": "--devices", "shard": "--shard", "resume": "--resume", "profile": "--profile",
           "json": "--json (rounds.csv holds every row)", "out": "the kernel flags' --out (give ab's own --out)"}


def ab_plan(sweeps: list[KernelArgs]) -> SweepPlan:
    """One plan over every sweep (a scenario lists one per context), measured one replicate per round."""
    for args in sweeps:
        for field_name, flag in REFUSED.items():
            if getattr(args, field_name):
                raise UsageError(f"{flag}: not with ab (rounds measure each point on both sides, here)")
        if args.replicates not in (None, 1) or args.min_replicates is not None or args.max_replicates is not None:
            raise UsageError("--replicates/--min-replicates/--max-replicates: not with ab; each round is a "
                             "replicate of both sides, and --max-rounds bounds them")
    plans = [plan_kernel(args, adaptive=False) for args in sweeps]
    first = plans[0]
    for plan in plans[1:]:
        if worker_spec(plan) != worker_spec(first):
            raise UsageError("the scenario's sweeps differ in more than their points; ab measures one sweep")
    points = tuple(p for plan in plans for p in plan.points)
    return replace(first, points=points, replicates=1, unfit=tuple(u for plan in plans for u in plan.unfit))


def worker_spec(plan: SweepPlan) -> dict:
    """What a side's worker needs to measure a point as this plan would: plain JSON."""
    return {"device": plan.device, "backends": list(plan.backends), "strategies": list(plan.strategies),
            "modes": list(plan.modes), "timing": asdict(plan.timing), "lacking": [list(p) for p in plan.lacking]}


@dataclass
class Tracked:
    """A row of the sweep across rounds: its latest rows from both sides and its paired medians."""

    rows: dict  # side -> that side's latest row dict
    rounds: RowRounds


def measure_round(index: int, plan: SweepPlan, workers: dict[str, SideWorker], rows: dict, open_points,
                  over: Callable[[], bool], record: Callable[[str, int, dict], None]) -> None:
    """One round over the points with open rows, each side in round_order(index)."""
    for p, point in enumerate(plan.points):
        if p not in open_points() or over():
            continue
        got = {}
        for side in round_order(index):
            outcome = workers[side].run(asdict(point))
            got[side] = {(r["backend"], r["strategy"], r["mode"]): r for r in outcome.items}
            if outcome.failure is not None:  # the rows it did not send share the point's failure
                got[side][ALL] = {"verdict": outcome.failure[0], "reason": outcome.failure[1]}
            for row in outcome.items:
                record(side, index, row)
        add_round(rows.setdefault(p, {}), got)


def add_round(point_rows: dict, got: dict) -> None:
    """A point's rows after one round on both sides; a row not timed on either side stops."""
    keys = {k for side_rows in got.values() for k in side_rows if k != ALL} or {ALL}
    for key in keys:
        tracked = point_rows.setdefault(key, Tracked({}, RowRounds()))
        if tracked.rounds.stopped:
            continue
        for side, side_rows in got.items():
            tracked.rows[side] = side_rows.get(key) or side_rows.get(ALL) or {"verdict": "missing", "reason": ""}
        sides = [tracked.rows[side] for side in (BASELINE, CANDIDATE)]
        if all(r.get("verdict") in MEASURED for r in sides):
            tracked.rounds.add(float(sides[0]["median_ms"]), float(sides[1]["median_ms"]))
        else:
            tracked.rounds.stopped = NOT_TIMED


def run_ab(sweeps: list[KernelArgs], settings: AbSettings, console: Console, command: list[str]) -> AbOutcome:
    settings.check()
    plan = ab_plan(sweeps)
    for notice in plan.notices:
        console.print(f"[yellow]{notice}[/]")
    gpu_name = device_name(select(torch.device(plan.device)))
    run = RunDir.claim(settings.out, None, settings.force, default_out_dir(gpu_name or "cpu", "ab"),
                       inputs=(settings.baseline.src, settings.candidate.src))
    spec = worker_spec(plan)
    with run.locked(), SideWorker(settings.baseline, spec, plan.point_timeout_s) as base, \
            SideWorker(settings.candidate, spec, plan.point_timeout_s) as cand:
        workers = {"baseline": base, "candidate": cand}
        for worker in workers.values():
            worker.launch()
        env = collect(command)
        env["ab"] = {"threshold": settings.threshold, "max_rounds": settings.max_rounds,
                     "min_rounds": settings.min_rounds, "budget_s": settings.budget_s,
                     **{name: {**w.side.describe(), "versions": w.start()} for name, w in workers.items()}}
        console.print(f"{len(plan.points)} point(s) on {gpu_name or 'cpu'}, baseline and candidate in turns "
                      f"(ABBA), up to {settings.max_rounds} rounds or {settings.budget_s:g} s -> {run.path}")
        run.write_env(env)
        rows, raw = {}, []
        start = time.monotonic()  # --budget-s counts rounds: a worker's start (a first-use JIT compile) is not in it
        stopped = measure_rounds(plan, workers, settings, rows, console,
                                 lambda side, i, row: raw.append({"side": side, "round": i, **row}))
        if stopped is not None:
            for worker in workers.values():
                worker.close(kill=True)  # each in its own session: the signal did not reach it
            if not any(rows.values()):
                raise interrupted_run(stopped, run.path)
        outcome = AbOutcome(run.path, table(plan, rows, settings, INTERRUPTED if stopped else BUDGET),
                            time.monotonic() - start, plan.device == "cpu")
        run.write_text("ab.csv", outcome.frame.to_csv(index=False))
        run.write_text("rounds.csv", pd.DataFrame(raw).to_csv(index=False))
        run.write_text("summary.md", summary(outcome.frame, env, settings.threshold, outcome.wall_s, outcome.cpu))
    if stopped is not None:
        raise interrupted_run(stopped, run.path)
    if not (outcome.frame["rounds"] > 0).any():
        raise AttnbenchError(f"nothing was timed on both sides: the reason column of {run.path / 'ab.csv'} says why")
    return outcome


def interrupted_run(stopped: BaseException, path: Path) -> Interrupted:
    name, number = signal_of(stopped)
    return Interrupted(f"interrupted by {name}; {path} holds what was measured before it (open rows stopped as "
                       f"`{INTERRUPTED}`)", number)


def measure_rounds(plan: SweepPlan, workers: dict[str, SideWorker], settings: AbSettings, rows: dict,
                   console: Console, record: Callable[[str, int, dict], None]) -> BaseException | None:
    """Rounds until no row is open, --max-rounds or --budget-s; a Ctrl-C or SIGTERM is returned, not raised."""
    start = time.monotonic()

    def over() -> bool:
        return time.monotonic() - start > settings.budget_s

    try:
        with signals_raise(), progress(console) as bar:
            task = bar.add_task("ab rounds", total=settings.max_rounds)
            for index in range(settings.max_rounds):
                measure_round(index, plan, workers, rows, lambda: open_points(rows, plan, settings), over, record)
                left = len(open_points(rows, plan, settings))
                bar.update(task, advance=1, description=f"round {index + 1}: {left} point(s) open")
                if not left or over():
                    break
    except (KeyboardInterrupt, SignalReceived) as exc:
        return exc
    return None


@dataclass
class AbOutcome:
    path: Path
    frame: pd.DataFrame  # ab.csv
    wall_s: float
    cpu: bool

    @property
    def regressed(self) -> bool:
        return regressed(self.frame)


def table(plan: SweepPlan, rows: dict, settings: AbSettings, open_stop: str) -> pd.DataFrame:
    """ab.csv from every tracked row; a row still open when the rounds ended stopped with open_stop."""
    entries = []
    for p, point_rows in sorted(rows.items()):
        for (backend, strategy, mode), tracked in ((k if k != ALL else (",".join(plan.backends), "", ""), t)
                                                   for k, t in point_rows.items()):
            tracked.rounds.stopped = tracked.rounds.stopped or open_stop
            key = {**asdict(plan.points[p]), "backend": backend, "strategy": strategy, "mode": mode,
                   "l2": tracked.rows.get(BASELINE, {}).get("l2", "")}
            entries.append(({c: key.get(c) for c in KERNEL.key}, tracked.rounds, tracked.rows))
    if not entries:
        raise AttnbenchError("nothing was measured: the rounds ended before the first point")
    return ab_frame(entries, settings.threshold, look_confidence(settings.min_rounds, settings.max_rounds),
                    plan.device == "cpu")


def open_points(rows: dict, plan: SweepPlan, settings: AbSettings) -> set[int]:
    """Points with a row that needs more rounds (every point before its first round)."""
    todo = set()
    for p in range(len(plan.points)):
        for tracked in rows.get(p, {}).values():
            if not tracked.rounds.stopped:
                tracked.rounds.stopped = enough(tracked.rounds, settings.threshold, settings.min_rounds,
                                                settings.max_rounds)
        if p not in rows or any(not t.rounds.stopped for t in rows[p].values()):
            todo.add(p)
    return todo
