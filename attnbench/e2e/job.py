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

from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir, progress
from attnbench.device import device_name, point_timeout_s
from attnbench.e2e.engine import estimate_bytes
from attnbench.e2e.graphs import cudagraph_of, graph_mode
from attnbench.e2e.model import ModelArgs, fused
from attnbench.e2e.parallel import TensorParallel, agree, check_tp, describe, from_leader, rank_args, tensor_parallel
from attnbench.e2e.report import E2E_POINT, write_e2e_outputs
from attnbench.e2e.runner import (
    GiB,
    E2EArgs,
    ModelSpec,
    attention_point,
    check_fits,
    length_pairs,
    resolve_model,
    run_point,
    validate_args,
)
from attnbench.errors import UsageError
from attnbench.interrupts import SignalReceived, interrupted, signals_raise
from attnbench.kernels.backends.registry import get_backend, resolve_backends
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.plan import check_measured
from attnbench.kernels.workload import DTYPE_ALIASES
from attnbench.results import files, rundir
from attnbench.results.env import collect
from attnbench.results.profiling import write_report
from attnbench.workers.isolated_e2e import Measure, isolated_points

PER_RANK = ("num_heads", "num_kv_heads", "head_dim")  # the attention point's shape, one rank's share


def point_key(values: dict) -> tuple[str, ...]:
    return tuple(str(values.get(c)) for c in E2E_POINT)


def completed(rows: list[dict], backends: list[str], strategies: list[str]) -> set[tuple[str, ...]]:
    """Points an earlier run finished for every backend x strategy of this run."""
    needed = {(b, s) for b in backends for s in strategies}
    seen: dict[tuple[str, ...], set] = {}
    for row in rows:
        seen.setdefault(point_key(row), set()).add((row.get("backend"), row.get("strategy")))
    return {key for key, combos in seen.items() if needed <= combos}


def save_table(rows: list[dict], path: Path) -> None:
    rundir.replace_atomic(path, lambda tmp: pd.DataFrame(rows).to_csv(tmp, index=False))


def previous_agreements(out_dir: Path) -> list[dict]:
    path = out_dir / "agreement.csv"
    if not path.exists():
        return []
    return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")


def fused_status(rows: list[dict]) -> str:
    """How the small ops ran, as the last measured row says (with --isolate a worker knows, not this process)."""
    said = [r["fused_ops"] for r in rows if isinstance(r.get("fused_ops"), str) and r["fused_ops"]]
    return said[-1] if said else fused.status


@contextmanager
def in_process(spec: ModelSpec, args: E2EArgs, plans: dict, profile_out: Path | None) -> Iterator[Measure]:
    """Points measured in this process, on one model (this rank's shard of it) built here."""
    engines = agree(spec.tp, spec.build)
    yield lambda fields: run_point(engines, args, plans, fields, profile_out)


def measurer(spec: ModelSpec, args: E2EArgs, plans: dict, profile_out: Path | None,
             timeout: float | None) -> ContextManager[Measure]:
    """How each point is measured: here, or in a worker process under a watchdog (--isolate)."""
    if args.isolate:
        return isolated_points(spec, args, plans, profile_out, timeout)
    return in_process(spec, args, plans, profile_out)


def run_e2e(args: E2EArgs, console: Console, command: list[str]) -> Path:
    validate_args(args)
    pairs = length_pairs(args)
    margs, path = resolve_model(args.model)
    check_tp(args.tp, margs)
    with tensor_parallel(args.tp, args.device) as (tp, device):
        # every rank measures; rank 0 owns the directory, writes the rows and speaks
        return run_ranks(args, console if tp.leader else Console(quiet=True), command, margs, path, pairs, tp, device)


def run_ranks(args: E2EArgs, console: Console, command: list[str], margs: ModelArgs, path: Path | None,
              pairs: list[tuple[int, int]], tp: TensorParallel, device: torch.device) -> Path:
    dtype_name = DTYPE_ALIASES[args.dtype]
    max_model_len = max(i + o for i, o in pairs)
    if max_model_len > margs.max_positions:
        raise UsageError(f"--input-len/--output-len: {max_model_len} tokens exceed {margs.name}'s "
                         f"{margs.max_positions} positions")
    shard = rank_args(margs, tp.size)  # what one rank holds and its attention kernel sees
    point = attention_point(shard, dtype_name, args.block_size)
    backends = resolve_backends(args.backend, device)
    for b in backends:
        for strategy in args.strategy:  # every backend runs every strategy: e2e rows are compared pairwise
            reason = get_backend(b).supports(point, strategy, device)
            if reason:
                raise UsageError(reason if reason.startswith("--") else f"--backend: {b} cannot run {margs.name} here: {reason}")
    max_bs = max(args.batch_size)
    plans = {b: graph_mode(b, device, args.eager, max_bs, cudagraph_of(args), args.graph_policy, margs.n_layer)
             for b in backends}
    runs_at_once = len(backends) * len(args.strategy) * (2 if any(g != "none" for g, _ in plans.values()) else 1)
    elt = torch.empty((), dtype=torch_dtype(dtype_name)).element_size()
    parts = estimate_bytes(shard, elt, max_bs, max_model_len, args.block_size,
                           args.chunk_size or max(b * i for b in args.batch_size for i, _ in pairs),
                           max(b * o for b in args.batch_size for _, o in pairs) * runs_at_once)
    agree(tp, lambda: check_fits(parts, args.model, device))
    gpu_name = device_name(device)
    all_points = [(i, o, b) for i, o in pairs for b in args.batch_size]

    def open_run() -> tuple[Path, dict, list[dict], list[dict], list[tuple[int, int, int]]]:
        """Rank 0: claim and lock the directory, env.json, what an earlier run (--resume) measured."""
        out_dir = rundir.claim(args.out, args.resume, args.force, default_out_dir(gpu_name or "cpu", "e2e"))
        stack.enter_context(rundir.locked(out_dir))
        env = collect(command)
        env["e2e"] = {"model": margs.name, "model_args": dict(vars(margs)), "params_b": margs.num_params / 1e9,
                      "weights": f"checkpoint {path}" if path else f"random (seed {args.seed})",
                      "dtype": dtype_name, "block_size": args.block_size, "chunk_size": args.chunk_size,
                      "max_model_len": max_model_len, "warmup": args.warmup, "iters": args.iters,
                      "tp": describe(tp), "attention_per_rank": {k: getattr(point, k) for k in PER_RANK},
                      "memory_estimate_gib": {k: round(v / GiB, 3) for k, v in parts.items()},
                      "graphs": {b: note for b, (_, note) in plans.items()}, "cudagraph": cudagraph_of(args),
                      "graph_policy": args.graph_policy,
                      "point_timeout_s": float(point_timeout_s(args.point_timeout, device)) if args.isolate else None}
        rows, agreements, points = [], [], all_points
        if args.resume:
            old_env = rundir.read_env(out_dir)
            rundir.check_resumable(old_env, env, out_dir)
            if old_env.get("e2e", {}).get("model_args") != env["e2e"]["model_args"]:
                raise UsageError(f"--resume: {out_dir} was measured on another model ({old_env['e2e'].get('model')})")
            if old_env["e2e"].get("tp", {}).get("size", 1) != tp.size:
                raise UsageError(f"--resume: {out_dir} was measured at --tp {old_env['e2e']['tp']['size']}")
            earlier = rundir.read_rows(out_dir)
            done = completed(earlier, backends, args.strategy)
            rows = [r for r in earlier if point_key(r) in done]
            agreements = [a for a in previous_agreements(out_dir) if point_key(a) in done]
            console.print(f"resuming {out_dir}: {len(done & {point_key(dict(zip(E2E_POINT, p))) for p in points})} "
                          f"of {len(points)} points already measured")
            points = [p for p in points if point_key(dict(zip(E2E_POINT, p))) not in done]
        files.write_env(out_dir, env)
        return out_dir, env, rows, agreements, points

    with ExitStack() as stack:
        out_dir, env, rows, agreements, points = from_leader(tp, open_run)
        spec = ModelSpec(margs, path, dtype_name, device, args.seed, max_bs, max_model_len, args.block_size,
                         args.chunk_size, tp)
        base = {"model": margs.name, "params_b": round(margs.num_params / 1e9, 3), "dtype": dtype_name,
                "block_size": args.block_size, "chunk_size": args.chunk_size or 0, "device": device.type,
                "gpu": gpu_name or "cpu", "tp": tp.size, "warmup": args.warmup, "iters": args.iters}
        on = f"{tp.size} x {gpu_name or 'cpu'} (TP {tp.size})" if tp.size > 1 else gpu_name or "cpu"
        console.print(f"{margs.name} ({margs.num_params / 1e9:.2f} B params, {dtype_name}) on {on}: "
                      f"{len(points)} points x {len(backends)} backend(s) x {len(args.strategy)} strategies -> {out_dir}")
        stopped = None
        finished = 0
        with progress(console) as bar:
            task = bar.add_task("e2e", total=len(points))
            try:
                # the model is built only now: a refused --out or --resume costs no weights
                with signals_raise(), measurer(spec, args, plans, out_dir if args.profile else None,
                                               env["e2e"]["point_timeout_s"]) as measure:
                    for input_len, output_len, batch_size in points:
                        bar.update(task, description=f"in {input_len} / out {output_len} / batch {batch_size}")
                        fields = {**base, "input_len": input_len, "output_len": output_len, "batch_size": batch_size}
                        new_rows, new_agreements = measure(fields)
                        rows += new_rows
                        agreements += new_agreements
                        if tp.leader:
                            save_table(rows, out_dir / "results.csv")
                            if agreements:
                                save_table(agreements, out_dir / "agreement.csv")
                        finished += 1
                        bar.update(task, advance=1)
            except (KeyboardInterrupt, SignalReceived) as exc:
                stopped = exc
        if tp.leader:
            env["e2e"]["fused_ops"] = fused_status(rows)
            files.write_env(out_dir, env)
            if rows:
                write_e2e_outputs(out_dir, env, console)
                if args.profile:
                    write_report(out_dir, console)
    if stopped is not None:
        raise interrupted(stopped, finished, len(points), out_dir)
    verdicts = pd.Series([r.get("verdict") for r in rows], dtype=object).value_counts().to_dict()
    check_measured(verdicts, out_dir)
    return out_dir
