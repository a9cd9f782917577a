"""`attnbench atlas` as a job: a map of the winning backend x strategy over the axes of a step.

Why a kernel sweep per round: checking every cell against the reference, graph and eager
timing, replicates, --isolate workers and the run directory already exist for a sweep
(runs/kernel.py), as they do for a replay. An atlas only chooses the points: each round's cells
(results/atlas_refine.py: the coarse grid, then the midpoints of the open crossovers) are
GivenPoints (kernels/atlas_axes.py) run as one sweep, appended to one results.csv with the
cell's round and coordinates before the sweep's columns. `--resume DIR` reads the cells DIR has
finished and asks the same pure function what comes next, so no cell is measured twice; cells
that are the same step share one measurement (runs/atlas_shared.py). A signal ends the rounds,
then the tables and the pictures are written (runs/atlas_outputs.py) and the error line says how
far the round got.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir
from attnbench.device import device_name, resolve_device, select
from attnbench.errors import AttnbenchError, Interrupted, UsageError
from attnbench.interrupts import SignalReceived, signal_of, signals_raise
from attnbench.kernels.atlas_axes import AXES, CPU_DEFAULTS, GPU_DEFAULTS, CellShape, cell_point, parse_range
from attnbench.kernels.notices import cpu_run_line
from attnbench.kernels.plan import KernelArgs, plan_sweep
from attnbench.kernels.workload import DEFAULT_STRATEGIES, MAX_HEADS
from attnbench.results import files
from attnbench.results.atlas_cells import ATLAS_COLUMNS, CELL_COLUMNS, MEASURED_AS, cell_table, coord_of, outcomes
from attnbench.results.atlas_refine import coarse_grid, explore
from attnbench.results.atlas_report import CPU_NOTE
from attnbench.results.env import collect
from attnbench.runs.atlas_outputs import write_atlas_outputs
from attnbench.runs.atlas_shared import copy_row, measured_rows, plan_round
from attnbench.runs.kernel import KEY, ContextDied, point_key, sweep_into
from attnbench.runs.resume import check_foreign, check_resume, sweep_record
from attnbench.runs.rundir import RunDir

COLUMNS = ATLAS_COLUMNS + files.COLUMNS
MAX_CELLS = 100_000


@dataclass
class AtlasArgs:
    """The atlas command's flags, one field per flag under the flag's name (an axis: None is the
    device's default, GPU_DEFAULTS or CPU_DEFAULTS)."""

    decode_share: str | None = None
    decode_context: str | None = None
    chunk: str | None = None
    prefill_context: str | None = None
    gqa_group: str | None = None
    head_dim: str | None = None
    tokens: str | None = None
    heads: int = 32
    dtype: str = "bf16"
    block_size: int = 16
    strategy: list[str] = DEFAULT_STRATEGIES
    backend: list[str] | None = None
    mode: str | None = None  # graph on a GPU, eager on the CPU
    budget_ms: float | None = None
    rel_spread: float = 0.01
    replicates: int | None = None
    device: str = "auto"
    out: Path | None = None
    force: bool = False
    max_cells: int = 500
    resume: Path | None = None
    isolate: bool = False
    point_timeout: float | None = None


class Stopped(Exception):
    """A round ended early (Ctrl-C, SIGTERM, a dead CUDA context): what stopped it, and how far the
    round got (its number, the cells it measured, the cells it had)."""

    def __init__(self, cause: BaseException, round_number: int, done: int, cells: int):
        super().__init__(str(cause))
        self.cause, self.where = cause, (round_number, done, cells)


def atlas_ranges(args: AtlasArgs, cpu: bool) -> list:
    """Each axis's Range, from its flag or the device's default; ends a cell cannot hold are refused."""
    if isinstance(args.heads, bool) or not isinstance(args.heads, int) or not 1 <= args.heads <= MAX_HEADS:
        raise UsageError(f"--heads: must be between 1 and {MAX_HEADS}, got {args.heads}")
    defaults = CPU_DEFAULTS if cpu else GPU_DEFAULTS
    ranges = []
    for axis in AXES:
        given = getattr(args, axis.name)
        r = parse_range(axis, given if given is not None else defaults[axis.name])
        for end in (r.low, r.high):
            if axis.snap(end, args.heads) != end:
                hint = f"divide --heads {args.heads}" if axis.divides_heads else f"be a multiple of {axis.step:g}"
                raise UsageError(f"{axis.flag}: {end:g} is not a value a cell holds (it must {hint})")
        ranges.append(r)
    if not any(r.varies for r in ranges):
        raise UsageError("--decode-share ... --tokens: every axis is fixed; give one a LOW:HIGH range to map")
    return ranges


def kernel_args(args: AtlasArgs) -> KernelArgs:
    return KernelArgs(heads=[args.heads], dim=[128], tokens=[1], kind=["decode"], context="1",
                      strategy=args.strategy, backend=args.backend, mode=[args.mode] if args.mode else None,
                      dtype=args.dtype, block_size=args.block_size, budget_ms=args.budget_ms,
                      rel_spread=args.rel_spread, device=args.device, isolate=args.isolate,
                      point_timeout=args.point_timeout, replicates=args.replicates)


def check_args(args: AtlasArgs) -> tuple[list, CellShape, torch.device]:
    if isinstance(args.max_cells, bool) or not isinstance(args.max_cells, int) or not 1 <= args.max_cells <= MAX_CELLS:
        raise UsageError(f"--max-cells: must be a whole number from 1 to {MAX_CELLS}, got {args.max_cells}")
    device = resolve_device(args.device)
    if args.mode not in (None, "eager", "graph"):
        raise UsageError(f"--mode: an atlas maps one mode: eager or graph, got {args.mode!r}")
    ranges = atlas_ranges(args, device.type == "cpu")
    grid = len(coarse_grid(ranges, args.heads))
    if grid > args.max_cells:
        raise UsageError(f"--max-cells: the coarse grid has {grid} cells, more than --max-cells {args.max_cells}; "
                         "raise it or give fewer values (LOW:HIGH:COUNT)")
    return ranges, CellShape(args.heads, args.dtype, args.block_size), device


def atlas_env(command: list[str], args: AtlasArgs, ranges: list, plan) -> dict:
    env = collect(command)
    resolved = {a.name: f"{r.low:g}:{r.high:g}:{r.count}" for a, r in zip(AXES, ranges)}
    env["sweep"] = sweep_record("atlas", args, {**resolved, "budget_ms": plan.timing.budget_ms,
                                                "backend": plan.backends, "mode": plan.modes[0],
                                                "replicates": plan.replicates}, leave_out=("max_cells",))
    env["atlas"] = {"axes": {a.name: {"range": resolved[a.name], "scale": a.scale, "meaning": a.meaning}
                             for a in AXES}, "heads": args.heads, "max_cells": args.max_cells}
    return env


def resumed_rows(run: RunDir, env: dict, plan, shape: CellShape, ranges: list) -> list[dict]:
    """The rows of the cells `run` finished, once every check a resume makes has passed: each row
    is the point of the cell its coordinates name, and those lie within this atlas's axes."""
    _, rows = check_resume(run, env, "kernel")
    allowed = set()
    for number, row in enumerate(rows, 1):
        where = f"--resume {run.path}: results.csv row {number}"
        try:
            coord = coord_of(row, shape.heads, where)
        except AttnbenchError as exc:
            raise UsageError(str(exc)) from None
        key = point_key(cell_point(coord, shape).key())
        outside = [a.name for a, r, v in zip(AXES, ranges, coord) if not r.low <= v <= r.high]
        if outside or point_key(row) != key:
            raise UsageError(f"{where} is not a cell of this atlas ({'its ' + outside[0] if outside else 'its point'}"
                             " differs); resume with the flags it was made with or start a new directory")
        allowed.add(key)
    check_foreign(run.path, rows, KEY, allowed, {"backend": set(plan.backends), "strategy": set(plan.strategies),
                                                 "mode": set(plan.modes)})
    run.reopen()
    done = KEY.completed(rows, plan.combos())
    return [{**files.ADDED_KEYS, **r} for r in rows if point_key(r) in done]


def run_atlas(args: AtlasArgs, console: Console, command: list[str]) -> Path:
    """Check, claim, explore round by round, write the outputs (also after an interrupt)."""
    ranges, shape, device = check_args(args)
    kargs = kernel_args(replace(args, mode=args.mode or ("eager" if device.type == "cpu" else "graph")))
    plan = plan_sweep(kargs, given=[cell_point(c, shape) for c in coarse_grid(ranges, args.heads)])
    gpu_name = device_name(select(torch.device(plan.device)))
    run = RunDir.claim(args.out, args.resume, args.force, default_out_dir(gpu_name or "cpu", "atlas"))
    cpu = device.type == "cpu"
    with run.locked():
        env = atlas_env(command, args, ranges, plan)
        keep = resumed_rows(run, env, plan, shape, ranges) if args.resume else None
        for notice in plan.notices:  # the atlas says its own CPU line: what runs there, and no winner
            if not notice.startswith("CPU run:"):
                console.print(f"[yellow]{notice}[/]")
        if cpu:
            console.print(f"[yellow]{cpu_run_line(CPU_NOTE, _scaled(args))}[/]")
        run.write_env(env)
        writer = run.row_writer(keep, COLUMNS)
        measured = _read_outcomes(run, shape, cpu) if keep else {}
        if args.resume:
            console.print(f"resuming {run.path}: {len(measured)} cell(s) already measured")
        console.print(f"atlas of {', '.join(a.name for a, r in zip(AXES, ranges) if r.varies)}: "
                      f"{len(plan.backends)} backend(s) x {len(plan.strategies)} strategies, {plan.modes[0]} mode, "
                      f"at most {args.max_cells} cells on {gpu_name or 'cpu'} -> {run.path}")
        rounds = [max((int(r["round"]) for r in keep or []), default=-1)]

        def measure(coords: list) -> dict:
            rounds[0] += 1
            _measure_round(coords, rounds[0], kargs, shape, writer, gpu_name, console, run.path)
            found = _read_outcomes(run, shape, cpu, rounds[0])  # explore keeps the earlier rounds' outcomes
            return {c: found[c] for c in coords if c in found}

        stopped, where, exploration = None, None, None
        try:
            with signals_raise():  # between rounds too: a signal ends the exploration, not the outputs
                exploration = explore(ranges, args.heads, measured, measure, args.max_cells)
        except Stopped as stop:
            stopped, where = stop.cause, stop.where
        except (KeyboardInterrupt, SignalReceived) as exc:
            stopped = exc
        finally:
            writer.close()
        if writer.rows or keep:
            late = write_atlas_outputs(run, env, ranges, shape, cpu, exploration, console)
            stopped = stopped or late
    if isinstance(stopped, ContextDied):
        raise AttnbenchError(f"{stopped}; run again with --isolate --resume {run.path} to measure the rest")
    if stopped is not None:
        raise _interrupted(stopped, where, exploration, run)
    return run.path


def _interrupted(stopped: BaseException, where: tuple | None, exploration, run: RunDir) -> Interrupted:
    """How far the atlas got when a signal stopped it: within a round (its cells measured of its
    cells), between rounds, or (every round done) while drawing the pictures."""
    name, number = signal_of(stopped)
    cells = len({tuple(r[c] for c in CELL_COLUMNS) for r in _saved_rows(run.path)})
    if where is not None:
        at = f"in round {where[0]} after {where[1]} of its {where[2]} cell(s) ({cells} cell(s) measured in all)"
    elif exploration is None:
        at = f"between rounds ({cells} cell(s) measured)"
    else:
        at = f"while drawing the pictures (every round done: {cells} cell(s))"
    return Interrupted(f"interrupted by {name} {at}; {run.path} holds what was measured and its tables (finish it "
                       f"with the same flags and --resume {run.path})", number)


def _measure_round(coords: list, number: int, kargs: KernelArgs, shape: CellShape, writer, gpu_name, console,
                   out: Path) -> None:
    """One round's cells as one kernel sweep of a cell per step (runs/atlas_shared.py); each row
    tagged with its cell's round and coordinates, and copied to the round's other cells of its step."""
    saved = measured_rows(_saved_rows(out), shape.heads)
    plan = plan_round(coords, saved)
    sharers: dict = {}
    for cell, source in plan.copies.items():
        sharers.setdefault(source, []).append(cell)
    done: set = set()

    def write(rows: list[dict]) -> None:
        lines = []
        for row in rows:
            cell = by_key[point_key(row)]
            lines += [{**row, "round": number, **dict(zip(CELL_COLUMNS, cell)), MEASURED_AS: ""},
                      *(copy_row(row, other, cell, shape, number) for other in sharers.get(cell, ()))]
            done.update([cell, *sharers.get(cell, ())])
        writer.write_many(lines)

    console.print(f"round {number}: {len(coords)} cell(s), {len(plan.measure)} measured "
                  f"({len(plan.copies)} the same step as another cell: its measurement is shared)")
    for source in [s for s in sharers if s in saved]:  # steps an earlier round measured
        writer.write_many([copy_row(r, cell, source, shape, number) for cell in sharers[source] for r in saved[source]])
        done.update(sharers[source])
    points = [cell_point(c, shape) for c in plan.measure]
    by_key = {point_key(p.key()): c for p, c in zip(points, plan.measure)}
    stopped = None
    if points:
        try:
            stopped = sweep_into(write, replace(plan_sweep(kargs, given=points), notices=()), gpu_name, console,
                                 False, out)
        except ContextDied as died:
            stopped = died
    if stopped is not None:
        raise Stopped(stopped, number, len(done), len(coords))


def _saved_rows(out: Path) -> list[dict]:
    return pd.read_csv(out / "results.csv", dtype=str, keep_default_na=False).to_dict("records")


def _scaled(args: AtlasArgs) -> dict[str, str]:
    """The axes the CPU's defaults chose (flag name -> value), for the CPU line."""
    return {a.flag[2:]: CPU_DEFAULTS[a.name] for a in AXES
            if getattr(args, a.name) is None and CPU_DEFAULTS[a.name] != GPU_DEFAULTS[a.name]}


def _read_outcomes(run: RunDir, shape: CellShape, cpu: bool, round_number: int | None = None) -> dict:
    """The cells' outcomes judged from results.csv: every cell's (a resume), or one round's only
    (a round judges its own cells, once: judging them all again each round grew with rounds x cells)."""
    rows = pd.read_csv(run.path / "results.csv", dtype=files.TEXT_COLUMNS)
    if round_number is not None:
        rows = rows[pd.to_numeric(rows["round"]) == round_number]
    return outcomes(cell_table(rows, shape.heads, cpu)) if len(rows) else {}
