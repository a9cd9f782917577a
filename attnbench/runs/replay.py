"""`attnbench replay TRACE` as a job: a step trace's buckets timed as a kernel sweep, then its report.

Why a sweep underneath: checking against the reference, eager and graph timing, interleaved
replicates, skip and error rows, --isolate workers, --shard and --resume already exist for a
kernel sweep (runs/kernel.py). A replay only changes the points: each bucket of steps
(traces/buckets.py) is timed on a few representative steps, each a GivenPoint whose batch is that
step, and each step of `--exact-sample` is one too. The point's `seed` numbers it (buckets first, then sampled steps), so
its resume key is its own; results.csv carries what it stands for in four columns of its own
(REPLAY_COLUMNS). The trace's header gives the attention shape; flags override it field by field.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir
from attnbench.device import device_name, resolve_device, select
from attnbench.errors import AttnbenchError, UsageError
from attnbench.interrupts import interrupted
from attnbench.kernels.notices import cpu_run_line
from attnbench.kernels.plan import KernelArgs, check_measured, plan_sweep
from attnbench.kernels.sweep import SweepPlan
from attnbench.kernels.workload import DEFAULT_STRATEGIES, GivenPoint
from attnbench.results import files
from attnbench.results.env import collect
from attnbench.results.replay import STEP_COLUMNS, summary_record
from attnbench.results.replay_plots import plot_replay
from attnbench.results.replay_report import headline, summary_text
from attnbench.runs.kernel import ContextDied, point_key, points_of_shard, resume_state, sweep_into, without
from attnbench.runs.resume import flag_text, sweep_record
from attnbench.runs.rundir import RunDir
from attnbench.workers.shards import parse_shard
from attnbench.traces.buckets import DEFAULT_RATIO, DEFAULT_SPLIT, bucket_steps, sample_steps, sizes, step_buckets
from attnbench.traces.jsonl import read_trace
from attnbench.traces.steps import Shape, Trace

REPLAY_COLUMNS = ["part", "bucket", "step", "steps"]  # what a row's point stands for: see Unit
COLUMNS = REPLAY_COLUMNS + files.COLUMNS


@dataclass
class ReplayArgs:
    """The replay command's flags, one field per flag under the flag's name."""

    trace: Path
    heads: int | None = None  # None: the trace header's shape
    kv_heads: int | None = None
    dim: int | None = None
    dtype: str | None = None
    block_size: int | None = None
    strategy: list[str] = DEFAULT_STRATEGIES
    backend: list[str] | None = None
    mode: list[str] | None = None
    bucket_ratio: float | None = None  # None: DEFAULT_RATIO, or CPU_DEFAULTS' on the CPU
    bucket_split: int = DEFAULT_SPLIT
    steps: int | None = None  # None: every step (CPU_DEFAULTS' on the CPU)
    exact_sample: int = 0
    budget_ms: float | None = None
    rel_spread: float = 0.01
    replicates: int | None = None
    seed: int = 0  # the exact sample's draw
    device: str = "auto"
    out: Path | None = None
    force: bool = False
    resume: Path | None = None
    isolate: bool = False
    point_timeout: float | None = None
    shard: str | None = None


# On the CPU the reference backend replays as a pipeline demo (no verdicts): the trace's first steps, in
# coarser buckets, timed briefly, and a small shape (when no shape flag is given and the header's is
# larger; a header without one still needs the flags) keep `attnbench replay scenarios/traces/chat-high.jsonl` under a minute on two cores.
CPU_DEFAULTS = {"steps": 32, "bucket_ratio": 4.0, "budget_ms": 5.0}
CPU_SHAPE = {"heads": 4, "kv_heads": 1, "dim": 32}
CPU_RUNS = "the reference backend (plain torch, perf_counter timing), a pipeline demo with no verdicts"


def with_device_defaults(args: ReplayArgs, header: Shape) -> tuple[ReplayArgs, str | None]:
    """(args with the device's defaults where not given, the CPU run's line; None on a GPU)."""
    if resolve_device(args.device).type != "cpu":
        return replace(args, bucket_ratio=DEFAULT_RATIO if args.bucket_ratio is None else args.bucket_ratio), None
    filled = {name: value for name, value in CPU_DEFAULTS.items() if getattr(args, name) is None}
    larger = None not in (header.num_heads, header.head_dim) and \
        (header.num_heads > CPU_SHAPE["heads"] or header.head_dim > CPU_SHAPE["dim"])
    if larger and all(getattr(args, name) is None for name in CPU_SHAPE):
        filled.update(CPU_SHAPE)
    scaled = {name.replace("_", "-"): flag_text(value) for name, value in filled.items()}
    return replace(args, **filled), cpu_run_line(CPU_RUNS, scaled)


def first_steps(trace: Trace, steps: int | None) -> Trace:
    """The trace's first `steps` steps (all of them when it has fewer, or for None)."""
    if steps is None:
        return trace
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UsageError(f"--steps: must be a whole number of steps, 1 or more, got {steps}")
    return replace(trace, steps=trace.steps[:steps])


@dataclass(frozen=True)
class Unit:
    """What one point of a replay stands for: a representative `step` of a bucket, weighing `steps`
    steps (a bucket's weights add up to its step count), or one sampled step (`steps` 1) of bucket `bucket`."""

    part: str
    bucket: int
    step: int
    steps: float


def replay_shape(args: ReplayArgs, header: Shape) -> Shape:
    """The flags over the trace header's shape; heads and head dim must come from one of them."""
    shape = Shape(args.heads, args.kv_heads, args.dim, args.dtype, args.block_size).over(header)
    for name, flag in (("num_heads", "--heads"), ("head_dim", "--dim")):
        if getattr(shape, name) is None:
            raise UsageError(f"{flag}: the trace's header has no shape.{name}; give {flag} (e.g. --heads 32 --dim 128)")
    return replace(shape, num_kv_heads=shape.num_kv_heads or shape.num_heads, dtype=shape.dtype or "bfloat16",
                   block_size=shape.block_size or 16)


def replay_points(trace: Trace, shape: Shape, args: ReplayArgs) -> tuple[list[GivenPoint], list[Unit], list]:
    """(points, what each stands for, buckets): every bucket's representatives, then each sampled step."""
    buckets = bucket_steps(trace, args.bucket_ratio, args.bucket_split)
    of = step_buckets(buckets, len(trace.steps))
    units = [Unit("bucket", b.index, step, weight) for b in buckets for step, weight in zip(b.representatives, b.weights)]
    units += [Unit("sample", of[s], s, 1) for s in sample_steps(len(trace.steps), args.exact_sample, args.seed)]
    rules = {b.index: b.describe(args.bucket_ratio) for b in buckets}
    points = []
    for number, unit in enumerate(units):
        step = trace.steps[unit.step]
        rule = f"{rules[unit.bucket]}: this row times step {unit.step}" if unit.part == "bucket" else \
            f"step {unit.step} (of bucket {unit.bucket})"
        points.append(GivenPoint(
            kind=step.kind, num_tokens=step.num_tokens, num_heads=shape.num_heads, head_dim=shape.head_dim,
            num_kv_heads=shape.num_kv_heads, dtype=shape.dtype, block_size=shape.block_size,
            context=str(max(r.kv_len for r in step.requests)), seed=number, given=step.batch(f"replay {rule}")))
    return points, units, buckets


def plan_replay(args: ReplayArgs, points: list[GivenPoint], shape: Shape) -> SweepPlan:
    """kernels.plan's sweep plan over the replay's points (only its shard's with --shard)."""
    kernel_args = KernelArgs(
        heads=[shape.num_heads], dim=[shape.head_dim], kv_heads=shape.num_kv_heads, tokens=[1], kind=["decode"],
        context="1", strategy=args.strategy, backend=args.backend, mode=args.mode, dtype=shape.dtype,
        block_size=shape.block_size, budget_ms=args.budget_ms, rel_spread=args.rel_spread, device=args.device,
        isolate=args.isolate, point_timeout=args.point_timeout, replicates=args.replicates)
    share = (lambda found: points_of_shard(found, args.shard)) if args.shard else None
    return plan_sweep(kernel_args, share=share, given=points)


def steps_table(trace: Trace, buckets: list) -> pd.DataFrame:
    """buckets.csv: each step's kind, sizes and bucket."""
    of = step_buckets(buckets, len(trace.steps))
    return pd.DataFrame([(i, step.kind, *sizes(step), of[i]) for i, step in enumerate(trace.steps)],
                        columns=list(STEP_COLUMNS))


def replay_env(command: list[str], args: ReplayArgs, plan: SweepPlan, trace: Trace, shape: Shape,
               buckets: list, digest: str) -> dict:
    """env.json: the machine, the flags a resume must match (the trace by its content), and the replay."""
    env = collect(command)
    env["sweep"] = sweep_record("replay", args, {
        "trace": f"sha256:{digest}", "heads": shape.num_heads, "kv_heads": shape.num_kv_heads, "dim": shape.head_dim,
        "dtype": shape.dtype, "block_size": shape.block_size,
        "budget_ms": plan.timing.budget_ms, "backend": plan.backends, "mode": plan.modes,
        "replicates": plan.replicates})
    env["replay"] = {"trace": str(args.trace), "sha256": digest, "source": trace.header.source,
                     "synthesized": trace.header.synthesized, "steps": len(trace.steps),
                     "kinds": dict(trace.kinds()), "buckets": len(buckets), "bucket_ratio": args.bucket_ratio,
                     "bucket_split": args.bucket_split, "rule": RULE, "exact_sample": args.exact_sample, "seed": args.seed,
                     "shape": shape.as_dict()}
    if args.shard:  # as a kernel sweep's shard records it (attnbench merge reads it)
        index, count = parse_shard(args.shard)
        env["shard"] = {"index": index, "count": count, "points": len(plan.points)}
    return env


RULE = ("kind, and log-spaced bins (--bucket-ratio) of decode rows, query tokens and total kv tokens; "
        "a bucket of more than 1/--bucket-split of the steps cut into near-equal pieces along its most spread size; "
        "each bucket timed on a few of its steps, weighed so that they add up to its step count and to its sums of "
        "decode rows, query tokens, kv tokens, attended pairs and longest kv length, and of their squares")


def run_replay(args: ReplayArgs, console: Console, command: list[str]) -> Path:
    """Read, bucket, plan, claim, measure, report: a bad trace or flag is refused before the directory."""
    whole = read_trace(args.trace)
    args, cpu_line = with_device_defaults(args, whole.header.shape)
    trace = first_steps(whole, args.steps)
    shape = replay_shape(args, trace.header.shape)
    points, units, buckets = replay_points(trace, shape, args)
    plan = plan_replay(args, points, shape)
    gpu_name = device_name(select(torch.device(plan.device)))
    run = RunDir.claim(args.out, args.resume, args.force, default_out_dir(gpu_name or "cpu", "replay"),
                       inputs=(Path(args.trace),))
    digest = hashlib.sha256(Path(args.trace).read_bytes()).hexdigest()
    unit_of = {point_key(p.key()): u for p, u in zip(points, units)}
    with run.locked():
        env = replay_env(command, args, plan, trace, shape, buckets, digest)
        env["replay"]["trace_steps"] = len(whole.steps)
        keep = None
        if args.resume:
            done, keep = resume_state(plan, run, env, rows_kind="kernel")
            plan = without(plan, done)
            console.print(f"resuming {run.path}: {len(done)} point(s) already measured")
        notices = [n for n in plan.notices if not n.startswith("CPU run:")] + ([cpu_line] if cpu_line else [])
        for notice in notices:  # once the directory is claimed and resumable: a refusal is the only line
            console.print(f"[yellow]{notice}[/]")
        run.write_env(env)
        writer = run.row_writer(keep, COLUMNS)
        console.print(f"{len(trace.steps)} steps in {len(buckets)} buckets (+{args.exact_sample} sampled steps): "
                      f"{len(plan.points)} points x {len(plan.backends)} backend(s) x {len(plan.strategies)} "
                      f"strategies x {len(plan.modes)} mode(s) on {gpu_name or 'cpu'} -> {run.path}")
        tag = lambda rows: writer.write_many([{**vars(unit_of[point_key(r)]), **r} for r in rows])  # noqa: E731
        stopped: BaseException | None = None
        try:
            stopped = sweep_into(tag, plan, gpu_name, console, False, run.path)
        except ContextDied as died:
            stopped = died
        finally:
            writer.close()
        if writer.rows or keep:
            try:
                write_replay_outputs(run, env, steps_table(trace, buckets), console)
            except AttnbenchError:
                if stopped is None:
                    raise
    if isinstance(stopped, ContextDied):
        raise AttnbenchError(f"{stopped}; run again with --isolate --resume {run.path} to measure the rest")
    if stopped is not None:
        raise interrupted(stopped, len({point_key(r) for r in writer.rows}), len(plan.points), run.path)
    return run.path


def write_replay_outputs(run: RunDir, env: dict, steps: pd.DataFrame, console: Console) -> None:
    """buckets.csv, summary.md, the plots and env.json's numbers, from the saved results.csv."""
    rows = pd.read_csv(run.path / "results.csv", dtype=files.TEXT_COLUMNS)
    if rows.empty:
        raise UsageError("no rows were measured")
    run.write_text("buckets.csv", steps.to_csv(index=False))
    replay = env["replay"]
    steps_said = replay["steps"] if replay.get("trace_steps", replay["steps"]) == replay["steps"] else \
        f"the first {replay['steps']} of its {replay['trace_steps']}"
    trace = {"path": replay["trace"], "steps": steps_said, "buckets": replay["buckets"], "rule": RULE,
             "ratio": replay["bucket_ratio"], "exact_sample": replay["exact_sample"], "seed": replay["seed"],
             "shard": "{index}/{count}".format(**env["shard"]) if "shard" in env else None,
             "kinds": ", ".join(f"{n} {k}" for k, n in replay["kinds"].items())}
    summary = run.write_text("summary.md", summary_text(rows, steps, trace))
    env["replay"]["results"] = summary_record(rows, steps)
    run.write_env(env)
    plots = plot_replay(rows, steps, run.path, replay["trace"])
    run.record(*plots)
    verdicts = rows["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    for line in headline(rows, steps):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    console.print(f"results: {run.path}/results.csv, buckets.csv, {summary.name}, env.json, {len(plots)} plot(s)")
    check_measured(verdicts, run.path)
