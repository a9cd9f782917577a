"""A kernel sweep over torchrun ranks: every rank measures its share, rank 0 writes the one run.

The ranks talk through a gloo process group (workers/distributed.py):

- rank r of W measures exactly `--shard r/W` (workers/shards.py) on cuda:LOCAL_RANK (the CPU when
  there is no GPU), so a rank that failed can be measured again as a shard and merged;
- rank 0 alone claims, locks and writes `--out`: its own rows a finished point at a time, as a
  one-process run does, then every other rank's rows, gathered once they are done;
- before anything is measured the ranks agree: a bad flag, an `--out` that cannot be claimed or
  GPUs of different models on any rank stop every rank with that one error;
- a rank that fails or is stopped still sends what it measured; one that cannot report (killed,
  unreachable) costs its own rows only: rank 0 writes the rest, env.json lists every rank with
  its status, and the run ends with an error naming the missing shards.
"""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from rich.console import Console

from attnbench.console import default_out_dir
from attnbench.device import device_name
from attnbench.errors import AttnbenchError, Interrupted, UsageError
from attnbench.interrupts import signal_of
from attnbench.kernels.plan import KernelArgs
from attnbench.kernels.sweep import SweepPlan
from attnbench.runs.kernel import (
    plan_kernel,
    point_key,
    resume_state,
    run_env,
    sweep_into,
    without,
    write_kernel_outputs,
)
from attnbench.runs.rundir import RunDir
from attnbench.workers.devices import device_label
from attnbench.workers.distributed import (
    all_gather,
    gather_reports,
    process_group,
    send,
    sigterm_deferred,
    torchrun_ranks,
)


@dataclass
class RankRun:
    """One rank's part of the run, as it goes."""

    rank: int
    world: int
    local_rank: int
    plan: SweepPlan | None = None
    gpu: str | None = None
    run_dir: RunDir | None = None  # rank 0 only
    env: dict = field(default_factory=dict)  # rank 0 only
    keep: list[dict] | None = None  # rank 0, resuming: the rows kept
    done: set = field(default_factory=set)  # resuming: points already measured

    @property
    def out_dir(self) -> Path | None:
        return self.run_dir.path if self.run_dir else None

    @property
    def shard(self) -> str:
        return f"{self.rank}/{self.world}"


def rank_args(args: KernelArgs, run: RankRun) -> KernelArgs:
    """The rank's own flags: its shard, and cuda:LOCAL_RANK (or the CPU)."""
    if args.shard:
        raise UsageError("--shard: under torchrun rank r of W measures shard r/W; leave --shard out")
    if args.devices:
        raise UsageError("--devices: under torchrun each rank uses one device, cuda:LOCAL_RANK; leave --devices out")
    if args.device not in ("auto", "cuda", "cpu"):
        raise UsageError(f"--device: under torchrun each rank uses cuda:LOCAL_RANK; give auto, cuda or cpu, "
                         f"got {args.device}")
    device = "cpu" if args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available()) \
        else f"cuda:{run.local_rank}"
    if device != "cpu" and torch.cuda.is_available() and run.local_rank < torch.cuda.device_count():
        torch.cuda.set_device(run.local_rank)
    return replace(args, shard=run.shard, device=device)


def run_kernel_ranks(args: KernelArgs, console: Console, command: list[str]) -> Path | None:
    """`attnbench kernel` on one rank; rank 0 returns the run directory, the others None."""
    run = RankRun(*torchrun_ranks())
    with process_group(run.rank, run.world):
        if run.rank != 0:
            console = Console(quiet=True)  # rank 0 speaks for the run
        with ExitStack() as stack:
            error = None
            try:
                args = rank_args(args, run)
                prepare(run, args, console, command, stack)
            except AttnbenchError as exc:
                error = str(exc)
            agree(run, error)
            return measure(run, args, console)


def prepare(run: RankRun, args: KernelArgs, console: Console, command: list[str], stack: ExitStack) -> None:
    """Plan this rank's shard; rank 0 also claims and locks --out and reads what a resumed run holds."""
    run.plan = plan_kernel(args)
    run.gpu = device_name(torch.device(run.plan.device))
    if run.rank != 0:
        return
    for notice in run.plan.notices:
        console.print(f"[yellow]{notice}[/]")
    run.run_dir = RunDir.claim(args.out, args.resume, args.force, default_out_dir(run.gpu or "cpu", "kernel"))
    stack.enter_context(run.run_dir.locked())
    run.env = run_env(command, replace(args, shard=None), run.plan)  # the sweep of every rank
    if args.resume:
        whole = plan_kernel(replace(args, shard=None))
        run.done, run.keep = resume_state(run.plan, run.run_dir, run.env, whole)


def agree(run: RankRun, error: str | None) -> None:
    """Every rank learns whether every rank can start; an error anywhere stops them all, rank 0 says it."""
    mine = {"rank": run.rank, "error": error, "host": socket.gethostname(), "gpu": run.gpu, "torch": torch.__version__,
            "device": device_label(run.plan.device) if run.plan else None, "done": run.done}
    states = all_gather(mine, run.world)
    problems = [f"rank {s['rank']}: {s['error']}" for s in states if s["error"]]
    for key, what in (("gpu", "GPU"), ("torch", "torch")):
        if not problems and len({s[key] for s in states}) > 1:
            seen = ", ".join(f"rank {s['rank']} {s[key] or 'cpu'}" for s in states)
            problems.append(f"torchrun: the ranks differ in {what} ({seen}); a run measures one {what} "
                            "(run one per kind and compare them)")
    if problems:
        if run.rank != 0:
            raise SystemExit(1)  # rank 0 prints the one error line
        raise UsageError(problems[0].removeprefix("rank 0: "))
    run.done = states[0]["done"]
    run.env["distributed"] = {"backend": "gloo", "world_size": run.world, "ranks": [
        {"rank": s["rank"], "shard": f"{s['rank']}/{run.world}", "host": s["host"], "device": s["device"],
         "gpu": s["gpu"] or "cpu", "status": "running"} for s in states]}


def measure(run: RankRun, args: KernelArgs, console: Console) -> Path | None:
    """Measure this rank's points, then send them to rank 0, which writes every rank's rows."""
    plan = without(run.plan, run.done)
    report = {"rank": run.rank, "points": len(plan.points), "rows": [], "row_count": 0, "stopped": None,
              "error": None}
    writer = run.run_dir.row_writer(run.keep) if run.rank == 0 else None
    if writer is not None:
        run.run_dir.write_env(run.env)
        resumed = f" ({len(run.done)} points of the run already measured)" if run.done else ""
        console.print(f"{run.world} ranks; rank 0: {len(plan.points)} points x {len(plan.backends)} backend(s) x "
                      f"{len(plan.strategies)} strategies x {len(plan.modes)} mode(s){resumed} -> {run.out_dir}")
    start, stopped = time.monotonic(), None
    try:
        stopped = sweep_into(writer.write_many if writer else report["rows"].extend, plan, run.gpu, console,
                             args.json, run.out_dir)
        report["stopped"] = signal_of(stopped)[0] if stopped else None
    except Exception as exc:  # noqa: BLE001  the rank's failure goes to rank 0 with its rows
        report["error"] = f"{type(exc).__name__}: {exc}"
    rows = writer.rows if writer else report["rows"]
    report.update(seconds=round(time.monotonic() - start, 1), row_count=len(rows),
                  finished=len({point_key(row) for row in rows}))
    if writer is None:
        send(report)
        if report["error"] or report["stopped"]:
            raise SystemExit(1)  # rank 0 says what happened
        return None
    with sigterm_deferred():
        try:
            reports = gather_reports(report, run.world)
            for other in reports[1:]:
                writer.write_many(other.get("rows", []))
        finally:
            writer.close()
        return finish(run, reports, stopped, console)


def finish(run: RankRun, reports: list, stopped, console: Console) -> Path:
    """env.json with every rank's status, the outputs, and an error when a shard is missing."""
    missing = []
    for entry, report in zip(run.env["distributed"]["ranks"], reports):
        if "lost" in report:
            entry["status"] = f"did not report: {report['lost']}"
        else:
            entry.update(points=report["points"], points_measured=report["finished"], rows=report["row_count"],
                         seconds=report["seconds"])
            entry["status"] = (f"error: {report['error']}" if report["error"] else
                               f"stopped by {report['stopped']}" if report["stopped"] else "ok")
        if entry["status"] != "ok":
            missing.append(entry)
    run.run_dir.write_env(run.env)
    if not missing:
        write_kernel_outputs(run.out_dir, run.env, console)
        return run.out_dir
    if run.run_dir.read_rows():
        try:
            write_kernel_outputs(run.out_dir, run.env, console)
        except AttnbenchError:
            pass  # e.g. nothing passed: the missing shards are the error to report
    shards = ", ".join(f"{e['shard']} ({e['status']})" for e in missing)
    message = (f"shard(s) {shards} missing or incomplete; {run.out_dir} holds every other row. Finish it with the "
               f"same command and --resume {run.out_dir}, or measure a missing shard with the same flags, "
               f"--shard I/N and --out DIR, then `attnbench merge {run.out_dir} DIR --out ALL`")
    if stopped is not None:
        raise Interrupted(message, signal_of(stopped)[1])
    raise AttnbenchError(message)
