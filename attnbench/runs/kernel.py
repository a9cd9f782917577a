"""A kernel sweep as a job: plan it, own its directory, run it, and write every output file.

The CLI's `kernel` command and kernel scenarios both end here (torchrun ranks too, through
runs/kernel_ranks.py, which reuses these steps). The run directory is claimed (new or empty,
`--force`, or `--resume`) and locked for the run (runs/rundir.py). A point's rows reach
results.csv when the point is complete, so a run stopped by Ctrl-C or SIGTERM keeps every finished point and abandons
the current one; parquet, summary.md, plots and the console table are then made from
results.csv, and `--resume DIR` measures only the points it lacks. `--shard I/N` measures one
share of the points (workers/shards.py) and `--devices` spreads them over local GPUs
(workers/devices.py); env.json records both. `plan_kernel` applies them to kernels.plan's sweep.

In process, a kernel fault (an illegal address, a device-side assert) kills the CUDA context, and
every later call fails with it: after each point the context is checked as an --isolate worker's
is (workers/pool.py). A dead one ends the run like an interrupt, with the point's failed rows
`crashed` and one error line that says how to measure the rest: --isolate --resume.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from rich.console import Console

from attnbench.console import default_out_dir, emit_json, print_fusion_table, print_seed_table, progress
from attnbench.device import device_name, select
from attnbench.errors import AttnbenchError, UsageError
from attnbench.interrupts import SignalReceived, interrupted, signals_raise
from attnbench.kernels.plan import KernelArgs, check_measured, plan_sweep, sized
from attnbench.kernels.sweep import SweepPlan, point_row, run_sweep
from attnbench.kernels.workload import SweepPoint
from attnbench.profiler import CSV_NAME, TRACE_DIR
from attnbench.results import files
from attnbench.results.env import collect
from attnbench.results.plots import plot_runs
from attnbench.results.profiling import write_report
from attnbench.runs.resume import check_foreign, check_resume, sweep_record
from attnbench.runs.rundir import ResumeKey, RunDir
from attnbench.workers import pool
from attnbench.workers.devices import (
    device_label,
    device_shares,
    parse_devices,
    resolve_devices,
    row_telemetry,
    run_sweep_devices,
)
from attnbench.workers.isolated import run_sweep_isolated
from attnbench.workers.shards import parse_shard, shard_points

# a point is its SweepPoint fields, as results.csv spells them; finished with every backend x strategy x mode
KEY = ResumeKey(tuple(files.SWEEP_POINT_COLUMNS), ("backend", "strategy", "mode"), files.ADDED_KEYS)


def point_key(values: dict) -> tuple[str, ...]:
    """A point's identity from a row or from SweepPoint.key(), compared as CSV text."""
    return KEY.of(values)


def plan_kernel(args: KernelArgs, machine: bool = True, adaptive: bool = True) -> SweepPlan:
    """kernels.plan.plan_sweep for this job: on the first of `--devices` (GPUs of one model that
    exist here), measuring `--shard I/N`'s points only. machine=False checks the values alone;
    adaptive: on a GPU, replicates stop when enough unless --replicates says how many."""
    shard = parse_shard(args.shard)
    device = None
    if args.devices:
        if args.device != "auto":
            raise UsageError(f"--device/--devices: give one of them (--device {args.device} runs on one device, "
                             f"--devices {args.devices} on each of several)")
        devices = resolve_devices(args.devices) if machine else parse_devices(args.devices)
        device = torch.device(devices[0]) if machine else None
    share = None if shard is None else (lambda points: points_of_shard(points, args.shard))
    return plan_sweep(args, machine, device, share, adaptive=adaptive)


def points_of_shard(points: list[SweepPoint], text: str) -> list[SweepPoint]:
    index, count = parse_shard(text)
    mine = list(shard_points(tuple(points), index, count))
    if not mine:
        raise UsageError(f"--shard {text}: the sweep has {len(points)} point(s), so shard {index} of "
                         f"{count} gets none; use at most {len(points)} shards")
    return mine


def resume_state(plan: SweepPlan, run: RunDir, env: dict, whole: SweepPlan | None = None,
                 rows_kind: str | None = None) -> tuple[set[tuple[str, ...]], list[dict]]:
    """(points finished, rows kept) of the run in its directory that this one resumes; refused, with
    nothing there changed, unless it is the same sweep on the same machine (runs/resume.py).
    whole: the plan of every point the directory's rows may hold (torchrun: every rank's);
    rows_kind: the kind of results.csv, when it is not the command's (a replay writes kernel rows)."""
    rows = resumable_rows(whole or plan, run, env, rows_kind)
    run.reopen()
    done = KEY.completed(rows, plan.combos())
    return done, [{**files.ADDED_KEYS, **r} for r in rows if point_key(r) in done]


def resumable_rows(plan: SweepPlan, run: RunDir, env: dict, rows_kind: str | None = None) -> list[dict]:
    """The rows of `run`, once every check a resume makes has passed; nothing is changed."""
    _, rows = check_resume(run, env, rows_kind)
    allowed = {point_key(p.key()) for p in (*plan.points, *(u[0] for u in plan.unfit))}
    check_foreign(run.path, rows, KEY, allowed, {"backend": set(plan.backends), "strategy": set(plan.strategies),
                                                 "mode": set(plan.modes)})
    return rows


def check_kernel_resume(args: KernelArgs, plan: SweepPlan, path: Path, command: list[str]) -> None:
    """Refuse, changing nothing, what `run_kernel` would refuse to resume in `path` (a scenario
    checks every sweep's directory before it resumes any)."""
    resumable_rows(plan, RunDir.prepare(path, resume=True), run_env(command, args, plan))


def without(plan: SweepPlan, done: set[tuple[str, ...]]) -> SweepPlan:
    return replace(plan, points=tuple(p for p in plan.points if point_key(p.key()) not in done),
                   unfit=tuple(u for u in plan.unfit if point_key(u[0].key()) not in done))


def run_env(command: list[str], args: KernelArgs, plan: SweepPlan) -> dict:
    """env.json: the machine and software, the sweep's flags (what --resume must match) and this
    run's share of the points."""
    env = collect(command)
    full = sized(args, torch.device(plan.device))  # --tokens and --context as the device filled them
    env["sweep"] = sweep_record("kernel", args, {
        "tokens": full.tokens, "context": full.context, "budget_ms": plan.timing.budget_ms,
        "backend": plan.backends, "mode": plan.modes, **replicate_flags(plan)})
    shard = parse_shard(args.shard)
    if shard is not None:
        env["shard"] = {"index": shard[0], "count": shard[1], "points": len(plan.points)}
    return env


def replicate_flags(plan: SweepPlan) -> dict:
    """The replicate flags as the run resolved them: exactly N, or a rule's bounds and threshold."""
    rule = plan.rule
    if rule is None:
        return {"replicates": plan.replicates}
    return {"min_replicates": rule.min_replicates, "max_replicates": rule.max_replicates,
            "threshold": f"{rule.threshold:.4g}"}


def run_kernel(args: KernelArgs, console: Console, command: list[str]) -> Path:
    plan = plan_kernel(args)
    for notice in plan.notices:  # every flag is valid by now: an error is always the only line
        console.print(f"[yellow]{notice}[/]")
    devices = resolve_devices(args.devices) if args.devices else None
    gpu_name = device_name(select(torch.device(plan.device)))
    run = RunDir.claim(args.out, args.resume, args.force, default_out_dir(gpu_name or "cpu", "kernel"))
    out_dir = run.path
    with run.locked():
        env = run_env(command, args, plan)
        keep = None
        if args.resume:
            done, keep = resume_state(plan, run, env)
            todo = without(plan, done)
            console.print(f"resuming {out_dir}: {len(plan.points) - len(todo.points)} of {len(plan.points)} points "
                          "already measured")
            plan = todo
        if args.profile:  # the profiler writes profile/ and appends to profile_kernels.csv: fresh, no link
            run.check_fresh(CSV_NAME)
            run.subdir(TRACE_DIR)
            plan = replace(plan, profile_out=out_dir)
        if devices:
            env["devices"] = device_shares(devices)
        run.write_env(env)
        writer = run.row_writer(keep)
        where = ", ".join(devices) if devices else gpu_name or "cpu"
        console.print(f"{len(plan.points)} points x {len(plan.backends)} backend(s) x {len(plan.strategies)} "
                      f"strategies x {len(plan.modes)} mode(s) on {where} -> {out_dir}")
        stopped: BaseException | None = None
        try:
            stopped = sweep_into(writer.write_many, plan, gpu_name, console, args.json, out_dir,
                                 env.get("devices"))
        except ContextDied as died:
            stopped = died
        finally:
            writer.close()
            if devices:
                run.write_env(env)  # with each device's share
        if writer.rows or keep:
            try:
                write_kernel_outputs(out_dir, env, console)
                if args.profile:
                    write_report(out_dir, console)
            except AttnbenchError:
                if stopped is None:
                    raise  # else the stop is the error to report (e.g. nothing passed before it)
    if isinstance(stopped, ContextDied):
        before = [r for r in [*(keep or []), *writer.rows] if point_key(r) != point_key(stopped.point.key())]
        rows = f"{len(before)} row{'s' if len(before) != 1 else ''}"
        raise AttnbenchError(f"{stopped}; the {rows} measured before it are in {out_dir}; run again with --isolate "
                             f"--resume {out_dir} to measure the rest (each point in its own process)")
    if stopped is not None:
        raise interrupted(stopped, len({point_key(r) for r in writer.rows}), len(plan.points), out_dir)
    return out_dir


class ContextDied(AttnbenchError):
    """A kernel fault killed this process's CUDA context at `point`; no later point can run here."""

    def __init__(self, point: SweepPoint, cause: str):
        super().__init__(f"the CUDA context died at point {point.kind} N={point.num_tokens} "
                         f"{point.num_heads}x{point.head_dim} ({cause})")
        self.point = point


def dead_context() -> str | None:
    """After an in-process point: None once its cached memory is released. Else the context is
    dead, and this is its error ("" if only the health check said so): a kernel fault is sticky,
    so a synchronize, empty_cache and every later call raise it, however long after the kernel."""
    try:
        if pool.cuda_healthy():  # looked up at call time: a test-only backend may replace it
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return None
        if torch.cuda.is_initialized():  # the check swallows the sticky error: raise it again for its text
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001  the sticky error itself
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ""


def sweep_into(write: Callable[[list[dict]], None], plan: SweepPlan, gpu_name: str | None, console: Console,
               json_rows: bool, out_dir: Path | None, devices: list[dict] | None = None) -> BaseException | None:
    """Run the sweep, handing each point's rows to `write` once the point is complete; on Ctrl-C or
    SIGTERM abandon the points in flight and return the interrupt instead of raising it. In process,
    a point that leaves the CUDA context dead raises ContextDied once its rows are written.

    devices: one worker per device (each entry's `points` and `busy_s` are filled in as it works);
    else this process's device, in process or (plan.isolate) in one worker. GPU telemetry goes to
    out_dir/telemetry.csv (None: rows are annotated, no file is written)."""
    pending: list[dict] = []
    names = [d["device"] for d in devices] if devices else [device_label(plan.device)]
    if plan.unfit:  # points too big for this device: a skipped row each, before anything runs
        write([{**point_row(plan, point, gpu_name, "skipped", why), "device": names[0]} for point, why in plan.unfit])

    with progress(console) as bar:
        task = bar.add_task("kernel sweep", total=len(plan.points))

        def on_point_done(point) -> None:
            write(list(pending))
            pending.clear()
            bar.update(task, advance=1, description=f"{point.kind} N={point.num_tokens} "
                                                    f"{point.num_heads}x{point.head_dim}")

        def after_point(point: SweepPoint) -> None:
            cause = dead_context()
            if cause is not None:  # the last failure of the point is the sticky error, if none was seen
                failed = [row["reason"] for row in pending if row.get("verdict") in pool.FAILED]
                raise ContextDied(point, cause or (failed or ["torch.cuda.synchronize() failed"])[-1])

        try:
            with signals_raise(), row_telemetry(names, out_dir) as annotate:
                def on_row(row: dict) -> None:
                    # the row's own device (a worker of a pool says which), and its GPU's clocks while timed
                    row = annotate(row if devices else {**row, "device": names[0]})
                    pending.append(row)
                    if json_rows:
                        emit_json(row)

                if devices:
                    run_sweep_devices(plan, devices, gpu_name, on_row, on_point_done, plan.point_timeout_s)
                elif plan.isolate:
                    run_sweep_isolated(plan, gpu_name, on_row, on_point_done, plan.point_timeout_s)
                else:
                    run_sweep(plan, gpu_name, on_row, on_point_done, after_point)
        except (KeyboardInterrupt, SignalReceived) as exc:
            return exc
        except ContextDied:
            write(pool.after_dead_context(pending))  # as an --isolate worker's point: failed rows `crashed`
            raise
    return None


def write_kernel_outputs(out_dir: Path, env: dict, console: Console) -> Path:
    """Parquet, summary.md, plots and the console table, all from the saved results.csv."""
    df = files.load_results(out_dir / "results.csv")
    if df.empty:
        raise UsageError("no rows were measured")
    files.write_parquet(df, out_dir)
    summary = files.write_summary(df, out_dir, env)
    plots = plot_runs([("", df)], out_dir)
    print_seed_table(console, df)
    print_fusion_table(console, df)
    verdicts = df["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    console.print(f"results: {out_dir}/results.csv, {summary.name}, env.json, {len(plots)} plot(s)")
    check_measured(verdicts, out_dir)
    return out_dir
