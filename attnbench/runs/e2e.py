"""The e2e job: validate, build the model once, own the run directory, run every point, write outputs.

Like the kernel job: the directory is claimed (new or empty, `--force`, `--resume`) and locked;
a point's rows and agreements reach results.csv / agreement.csv (rewritten atomically) once the
point is complete; Ctrl-C or SIGTERM abandons the current point, writes the outputs of what was
measured and exits 130 / 143; `--resume DIR` measures only the points DIR lacks. With
`--isolate` each point runs in a worker process that builds its own model (attnbench.workers):
a point that hangs or crashes is recorded as such and the run goes on. With `--tp N` under
torchrun every rank runs this job on its shard of the model (attnbench.e2e.parallel): all of them
measure every point, rank 0 alone owns the directory and writes; a refusal on any rank before the
points (memory, --out, the model build) stops every rank with its message.
"""

from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir, progress
from attnbench.device import device_name, point_timeout_s, resolve_device
from attnbench.e2e.args import (E2EArgs, check_backends, check_counts, cpu_line, length_pairs, run_backends,
                                validate_args, with_device_defaults)
from attnbench.e2e.engine import estimate_bytes
from attnbench.e2e.modes import GraphChoice, GraphMode, choose_graphs, cudagraph_of
from attnbench.e2e.model import ModelArgs, fused
from attnbench.e2e.parallel import (TensorParallel, agree, check_tp, describe, from_leader, placement, rank_args,
                                   tensor_parallel)
from attnbench.e2e.runner import GiB, ModelSpec, attention_point, check_fits, resolve_model, run_point
from attnbench.errors import AttnbenchError, UsageError
from attnbench.interrupts import SignalReceived, interrupted, signals_raise
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.plan import check_measured
from attnbench.kernels.workload import DTYPE_ALIASES, SweepPoint
from attnbench.profiler import CSV_NAME, TRACE_DIR
from attnbench.e2e.rows import E2E_POINT, E2EPoint, E2ERun
from attnbench.kernels.rows import cells
from attnbench.results.e2e_report import write_e2e_outputs
from attnbench.results.env import collect, env_value
from attnbench.results.profiling import write_report
from attnbench.runs.e2e_plan import Eta, duration, plan_line
from attnbench.runs.resume import check_foreign, check_resume, sweep_record
from attnbench.results.tables import format_params
from attnbench.runs.kernel import dead_context
from attnbench.runs.e2e_files import KEY, model_env, point_key, previous_agreements, save_rows
from attnbench.runs.rundir import RunDir
from attnbench.workers import pool
from attnbench.workers.isolated_e2e import Measure, isolated_points

PER_RANK = ("num_heads", "num_kv_heads", "head_dim")  # the attention point's shape, one rank's share


def fused_status(rows: list[dict]) -> str:
    """How the small ops ran, as the last measured row says (with --isolate a worker knows, not this process)."""
    said = [r["fused_ops"] for r in rows if isinstance(r.get("fused_ops"), str) and r["fused_ops"]]
    return said[-1] if said else fused.status


@contextmanager
def in_process(spec: ModelSpec, args: E2EArgs, choices: dict[str, GraphChoice], profile_out: Path | None,
               on_probe: Callable[[float], None]) -> Iterator[Measure]:
    """Points measured in this process, on one model (this rank's shard of it) built here."""
    engines = agree(spec.tp, spec.build)
    yield lambda fields: run_point(engines, args, choices, fields, profile_out, on_probe=on_probe)


def measurer(spec: ModelSpec, args: E2EArgs, choices: dict[str, GraphChoice], profile_out: Path | None,
             timeout: float | None, on_probe: Callable[[float], None]) -> ContextManager[Measure]:
    """How each point is measured: here, or in a worker process under a watchdog (--isolate, whose
    worker times no probe: its ETA comes with the first point)."""
    if args.isolate:
        return isolated_points(spec, args, choices, profile_out, timeout)
    return in_process(spec, args, choices, profile_out, on_probe)


def run_e2e(args: E2EArgs, console: Console, command: list[str]) -> Path:
    args, scaled, margs, path, pairs = prepare_e2e(args)
    with tensor_parallel(args.tp, args.device) as (tp, device):
        # every rank measures; rank 0 owns the directory, writes the rows and speaks
        speaker = console if tp.leader else Console(quiet=True)
        if scaled:
            speaker.print(cpu_line(scaled), highlight=False, soft_wrap=True)
        return run_ranks(args, speaker, command, margs, path, pairs, tp, device)


def prepare_e2e(args: E2EArgs) -> tuple[E2EArgs, dict[str, str], ModelArgs, Path | None, list[tuple[int, int]]]:
    """What is checked before any rank starts: the flags (the device's defaults filled in, and the
    flags it filled), the length pairs, the model, --tp."""
    validate_args(args)
    args, scaled = with_device_defaults(args, resolve_device(args.device).type)
    check_counts(args)  # --min-iters against an --iters the device chose
    pairs = length_pairs(args)
    margs, path = resolve_model(args.model)
    check_tp(args.tp, margs)
    return args, scaled, margs, path, pairs


def check_e2e(args: E2EArgs) -> Setup:
    """Every check run_e2e makes before its first point, on this machine, running nothing
    (`attnbench run --check`): the same steps, the ranks' placement without a process group."""
    args, _, margs, path, pairs = prepare_e2e(args)
    tp, device = placement(args.tp, args.device)
    return check_setup(args, margs, path, pairs, tp, device)


@dataclass
class Setup:
    """What every rank decided before the run: the model, its shard, the backends and the memory."""

    args: E2EArgs
    margs: ModelArgs
    path: Path | None
    pairs: list[tuple[int, int]]
    tp: TensorParallel
    device: torch.device
    dtype_name: str
    max_model_len: int
    point: SweepPoint  # one rank's attention point
    backends: list[str]
    choices: dict[str, GraphChoice]  # backend -> what runs under the graph mode, and why
    parts: dict[str, int]  # memory estimate
    left_out: str = ""  # the default backends not run, and why (args.run_backends)

    @property
    def gpu_name(self) -> str | None:
        return device_name(self.device)

    @property
    def points(self) -> list[tuple[int, int, int]]:
        return [(i, o, b) for i, o in self.pairs for b in self.args.batch_size]


def check_setup(args: E2EArgs, margs: ModelArgs, path: Path | None, pairs: list[tuple[int, int]],
                tp: TensorParallel, device: torch.device) -> Setup:
    """Refuse, on every rank, what cannot run: too many positions, a backend x strategy that cannot
    run the model here, a model that does not fit."""
    dtype_name = DTYPE_ALIASES[args.dtype]
    max_model_len = max(i + o for i, o in pairs)
    if max_model_len > margs.max_positions:
        raise UsageError(f"--input-len/--output-len: {max_model_len} tokens exceed {margs.name}'s "
                         f"{margs.max_positions} positions")
    point = attention_point(rank_args(margs, tp.size), dtype_name, args.block_size)  # what one rank holds
    backends, left_out = run_backends(args, device)
    check_backends(args, margs, point, backends, device)
    max_bs = max(args.batch_size)
    none_by = "--eager" if args.eager else "--cudagraph none"
    choices = {b: choose_graphs(get_backend(b), cudagraph_of(args), device.type, max_bs, margs.n_layer,
                                args.graph_policy, none_by) for b in backends}
    runs_at_once = len(backends) * len(args.strategy) * (2 if any(c.cudagraph != GraphMode.NONE
                                                                     for c in choices.values()) else 1)
    elt = torch.empty((), dtype=torch_dtype(dtype_name)).element_size()
    parts = estimate_bytes(rank_args(margs, tp.size), elt, max_bs, max_model_len, args.block_size,
                           args.chunk_size or max(b * i for b in args.batch_size for i, _ in pairs),
                           max(b * o for b in args.batch_size for _, o in pairs) * runs_at_once)
    agree(tp, lambda: check_fits(parts, args.model, device))
    return Setup(args, margs, path, pairs, tp, device, dtype_name, max_model_len, point, backends, choices, parts,
                 left_out)


def run_env(setup: Setup, command: list[str]) -> dict:
    """env.json: the machine and software, and the model and settings of this run."""
    args, margs = setup.args, setup.margs
    env = collect(command)
    env["e2e"] = {**model_env(margs, setup.path, args, setup.dtype_name, setup.max_model_len),
                  "warmup": args.warmup, "iters": args.iters,
                  "min_iters": args.stopping.min_runs, "precision": args.precision,
                  "tp": describe(setup.tp), "attention_per_rank": {k: getattr(setup.point, k) for k in PER_RANK},
                  "memory_estimate_gib": {k: round(v / GiB, 3) for k, v in setup.parts.items()},
                  "graphs": {b: c.note for b, c in setup.choices.items()}, "cudagraph": cudagraph_of(args).value,
                  "graph_policy": args.graph_policy,
                  "point_timeout_s": float(point_timeout_s(args.point_timeout, setup.device)) if args.isolate else None}
    env["sweep"] = sweep_record("e2e", args, {"model": margs.name, "backend": setup.backends,
                                              "cudagraph": cudagraph_of(args).value}, leave_out=("eager",))
    return env


def open_run(setup: Setup, command: list[str], console: Console, stack: ExitStack) -> tuple:
    """Rank 0: claim and lock the directory, env.json, what an earlier run (--resume) measured.
    (run directory, env, rows, agreements, points to measure)."""
    args = setup.args
    run = RunDir.claim(args.out, args.resume, args.force, default_out_dir(setup.gpu_name or "cpu", "e2e"),
                       inputs=(setup.path,) if setup.path else ())
    stack.enter_context(run.locked())
    if args.profile:  # the profiler writes profile/ and appends to profile_kernels.csv: fresh, no link
        run.check_fresh(CSV_NAME)
        run.subdir(TRACE_DIR)
    env = run_env(setup, command)
    rows, agreements, points = [], [], setup.points
    if args.resume:
        old_env, earlier = check_resume(run, env)
        if env_value(old_env, "e2e.model_args") != env["e2e"]["model_args"]:  # a checkpoint's name says too little
            raise UsageError(f"--resume {run.path}: it was measured on another model ({env_value(old_env, 'e2e.model')})")
        if (env_value(old_env, "e2e.tp.size") or 1) != setup.tp.size:
            raise UsageError(f"--resume {run.path}: it was measured at --tp {env_value(old_env, 'e2e.tp.size')}")
        check_foreign(run.path, earlier, KEY, {point_key(dict(zip(E2E_POINT, p))) for p in points},
                      {"backend": set(setup.backends), "strategy": set(args.strategy)})
        done = KEY.completed(earlier, {(b, s) for b in setup.backends for s in args.strategy})
        agreements = [a for a in previous_agreements(run.path) if point_key(a) in done]
        run.reopen()
        rows = [r for r in earlier if point_key(r) in done]
        console.print(f"resuming {run.path}: {len(done & {point_key(dict(zip(E2E_POINT, p))) for p in points})} "
                      f"of {len(points)} points already measured")
        points = [p for p in points if point_key(dict(zip(E2E_POINT, p))) not in done]
    run.write_env(env)
    return run, env, rows, agreements, points


def run_ranks(args: E2EArgs, console: Console, command: list[str], margs: ModelArgs, path: Path | None,
              pairs: list[tuple[int, int]], tp: TensorParallel, device: torch.device) -> Path:
    setup = check_setup(args, margs, path, pairs, tp, device)
    with ExitStack() as stack:
        run, env, rows, agreements, points = from_leader(tp, lambda: open_run(setup, command, console, stack))
        on = f"{tp.size} x {setup.gpu_name or 'cpu'} (TP {tp.size})" if tp.size > 1 else setup.gpu_name or "cpu"
        console.print(f"{margs.name} ({format_params(margs.num_params / 1e9)}, {setup.dtype_name}) on {on} "
                      f"-> {run.path}", highlight=False)
        if setup.left_out:
            console.print(setup.left_out, highlight=False, soft_wrap=True)
        stopped, finished = measure_points(setup, run, env, rows, agreements, points, console)
        if tp.leader:
            env["e2e"]["fused_ops"] = fused_status(rows)
            run.write_env(env)
            if rows:
                write_e2e_outputs(run.path, env, console)
                if args.profile:
                    write_report(run.path, console)
    if isinstance(stopped, AttnbenchError):  # measure_points: the CUDA context died
        raise AttnbenchError(f"{stopped}; the {finished} point(s) measured before it are in {run.path}; run again "
                             f"with --isolate --resume {run.path} to measure the rest (each point in its own process)")
    if stopped is not None:
        raise interrupted(stopped, finished, len(points), run.path)
    verdicts = pd.Series([r.get("verdict") for r in rows], dtype=object).value_counts().to_dict()
    check_measured(verdicts, run.path)
    return run.path


def start_eta(setup: Setup, points: list[tuple[int, int, int]], console: Console) -> Eta:
    """The plan, said before the first row; the ETA that follows it through the run."""
    args = setup.args
    rows = len(setup.backends) * len(args.strategy)
    eager_checks = sum(len(args.strategy) for c in setup.choices.values() if c.cudagraph != GraphMode.NONE)
    later = "; ETA after the first point (--isolate: workers time no probe)" if args.isolate else ""
    console.print(plan_line(len(points), setup.backends, args.strategy, eager_checks, args.warmup, args.stopping)
                  + later, highlight=False, soft_wrap=True)
    return Eta(points, rows, rows + eager_checks, args.warmup, args.stopping, args.chunk_size)


def measure_points(setup: Setup, run: RunDir, env: dict, rows: list[dict], agreements: list[dict],
                   points: list[tuple[int, int, int]], console: Console) -> tuple[BaseException | None, int]:
    """Measure each point, adding to `rows` and `agreements` (rank 0 saves them after each point);
    (the interrupt that stopped the run or None, points finished)."""
    args, tp, margs = setup.args, setup.tp, setup.margs
    spec = ModelSpec(margs, setup.path, setup.dtype_name, setup.device, args.seed, max(args.batch_size),
                     setup.max_model_len, args.block_size, args.chunk_size, tp)
    base = cells(E2ERun(margs.name, round(margs.num_params / 1e9, 6), setup.dtype_name, args.block_size,
                        args.chunk_size or 0, setup.device.type, setup.gpu_name or "cpu", tp.size, args.warmup,
                        args.iters, args.stopping.min_runs, args.precision))
    eta, finished = start_eta(setup, points, console), 0

    def probed(seconds: float) -> None:
        if not eta.seen:  # the first point's first timed run, before its first measured one
            eta.probe(seconds)
            console.print(f"first timed run: {seconds:.3g} s; {eta.text()}", highlight=False, soft_wrap=True)

    with progress(console) as bar:
        task = bar.add_task("e2e", total=len(points))
        try:
            # the model is built only now: a refused --out or --resume costs no weights
            with signals_raise(), measurer(spec, args, setup.choices, run.path if args.profile else None,
                                           env["e2e"]["point_timeout_s"], probed) as measure:
                for point in points:
                    bar.update(task, description="in {} / out {} / batch {}".format(*point))
                    started = time.perf_counter()
                    new_rows, new_agreements = measure({**base, **cells(E2EPoint(*point))})
                    cause = dead_context() if not args.isolate else None
                    rows += pool.after_dead_context(new_rows) if cause is not None else new_rows
                    agreements += new_agreements
                    if tp.leader:
                        save_rows(run, rows, agreements)
                    if cause is not None:  # a kernel fault: every later call here would fail with it
                        died = "in {} / out {} / batch {}".format(*point)
                        return AttnbenchError(f"the CUDA context died at point {died} ({cause or 'a kernel fault'})"), \
                            finished
                    finished, elapsed = finished + 1, time.perf_counter() - started
                    eta.finished(point, elapsed, [r["measured_runs"] for r in new_rows if r.get("measured_runs")])
                    console.print(f"point {finished}/{len(points)} done in {duration(elapsed)}; {eta.text()}",
                                  highlight=False, soft_wrap=True)
                    bar.update(task, advance=1)
        except (KeyboardInterrupt, SignalReceived) as exc:
            return exc, finished
    return None, finished

