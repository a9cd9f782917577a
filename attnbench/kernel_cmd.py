"""`attnbench kernel`: turn flags into a SweepPlan, run it, and write every output.

Kept apart from cli.py so the CLI stays a thin layer of typed flags, and so scenarios (which set
the same keys from a file) reuse exactly this path.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from rich.console import Console

from attnbench import report
from attnbench.backends import STRATEGIES, available_backends, get_backend
from attnbench.console import default_out_dir, emit_json, print_seed_table, progress
from attnbench.errors import UsageError
from attnbench.sweep import SweepPlan, check_memory, run_sweep
from attnbench.timing import MODES, TimingConfig
from attnbench.workload import KINDS, SweepPoint

# The seed's token counts on a GPU. The CPU reference runs a tenth of them on short contexts: a
# decode batch of 1000 x 1024 tokens at 32 x 128 is 17 GB of KV cache, minutes of CPU time.
GPU_DEFAULTS = {"tokens": [100, 500, 1000], "context": "1024"}
CPU_DEFAULTS = {"tokens": [10, 50, 100], "context": "256"}


@dataclass
class KernelArgs:
    shapes: list[tuple[int, int]]
    kv_heads: int | None = None
    tokens: list[int] | None = None  # None: GPU_DEFAULTS or CPU_DEFAULTS
    kinds: list[str] = ("all",)
    strategies: list[str] = STRATEGIES
    backends: list[str] | None = None
    modes: list[str] | None = None
    dtype: str = "bf16"
    block_size: int = 16
    context: str | None = None
    decode_share: float = 0.5
    prefix_ratios: list[float] = (0.5,)
    spec_k: int = 4
    prefill_len: int = 512
    causal: bool = True
    cold_l2: bool = False
    budget_ms: float | None = None
    rel_spread: float = 0.01
    seed: int = 0
    device: str = "auto"
    out: Path | None = None
    json_rows: bool = False
    profile: bool = False


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device: unknown device {name!r}; use auto, cuda, cuda:N or cpu") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device: CUDA was asked for but no GPU is visible")
    if device.type not in ("cuda", "cpu"):
        raise UsageError(f"--device: {name!r} is not supported; use cuda or cpu")
    return device


def resolve_backends(requested: list[str] | None, device: torch.device) -> list[str]:
    if requested:
        for name in requested:
            reason = get_backend(name).unavailable_reason()
            if reason:
                raise UsageError(f"--backend: {name} is unavailable here: {reason}")
        return requested
    if device.type == "cpu":
        return ["reference"]
    return [name for name in available_backends() if name != "reference"] or ["reference"]


def resolve_modes(requested: list[str] | None, device: torch.device) -> list[str]:
    if not requested:
        return ["eager", "graph"] if device.type == "cuda" else ["eager"]
    modes = list(MODES) if requested == ["both"] else requested
    for m in modes:
        if m not in MODES:
            raise UsageError(f"--mode: unknown mode {m!r}; choose eager, graph or both")
    if "graph" in modes and device.type != "cuda":
        raise UsageError("--mode: graph mode needs a CUDA GPU; use --mode eager on the CPU")
    return modes


def build_points(args: KernelArgs) -> list[SweepPoint]:
    kinds = list(KINDS) if args.kinds in (["all"], ("all",)) else list(args.kinds)
    for k in kinds:
        if k not in KINDS:
            raise UsageError(f"--kind: unknown kind {k!r}; choose from {', '.join(KINDS)} or all")
    points = []
    for (heads, dim), kind, n in itertools.product(args.shapes, kinds, args.tokens):
        ratios = args.prefix_ratios if kind == "prefix" else [args.prefix_ratios[0]]
        for ratio in ratios:
            points.append(SweepPoint(
                kind=kind, num_tokens=n, num_heads=heads, head_dim=dim, num_kv_heads=heads if args.kv_heads is None else args.kv_heads,
                dtype=args.dtype, block_size=args.block_size, causal=args.causal, context=args.context,
                decode_share=args.decode_share, prefix_ratio=ratio, spec_k=args.spec_k,
                prefill_len=args.prefill_len, seed=args.seed))
    return points


def run_kernel(args: KernelArgs, console: Console, command: list[str]) -> Path:
    from attnbench.env import collect

    for s in args.strategies:
        if s not in STRATEGIES:
            raise UsageError(f"--strategy: unknown strategy {s!r}; choose unified, split")
    device = resolve_device(args.device)
    defaults = GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS
    scaled = [f"--{k} {','.join(map(str, v)) if isinstance(v, list) else v}"
              for k, v in defaults.items() if getattr(args, k) is None]
    args.tokens = args.tokens or defaults["tokens"]
    args.context = args.context or defaults["context"]
    on_cpu = device.type == "cpu"
    budget = args.budget_ms if args.budget_ms is not None else (200.0 if on_cpu else 1000.0)
    if budget <= 0:
        raise UsageError(f"--budget-ms: must be positive, got {budget}")
    points = build_points(args)
    modes = resolve_modes(args.modes, device)
    backends = resolve_backends(args.backends, device)
    if args.backends:  # a backend the user named must be able to run something
        for name in backends:
            reasons = [get_backend(name).supports(p, "unified", device) for p in points]
            if all(reasons):
                raise UsageError(reasons[0] if reasons[0].startswith("--") else f"--backend: {name}: {reasons[0]}")
    check_memory(points, device)
    # every flag is valid from here on: notices only now, so an error is always the only line
    if on_cpu and scaled:
        console.print(f"[yellow]CPU defaults: {' '.join(scaled)} (pass them to choose).[/]")
    if on_cpu and args.backends is None:
        console.print("[yellow]No GPU: running the reference backend on the CPU (plain torch, perf_counter timing).[/]")
    elif backends == ["reference"] and args.backends is None:
        console.print("[yellow]No GPU kernel backend is available (see `attnbench backends`): "
                      "timing the reference backend on the GPU.[/]")
    if device.type == "cuda" and "reference" in backends and "graph" in modes:
        console.print("[yellow]reference backend rows are eager only (it cannot be graph-captured).[/]")

    timing = TimingConfig(cold_l2=args.cold_l2 and not on_cpu, budget_ms=budget, rel_spread=args.rel_spread,
                          warmup_ms=0.0 if on_cpu else 25.0, min_samples=3 if on_cpu else 10)
    plan = SweepPlan(tuple(points), tuple(backends), tuple(args.strategies), tuple(modes), timing, str(device))

    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    out_dir = args.out or default_out_dir(gpu_name or "cpu", "kernel")
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.profile:
        plan = replace(plan, profile_out=out_dir)
    env = collect(command)
    report.write_env(out_dir, env)
    writer = report.RowWriter(out_dir)
    console.print(f"{len(points)} points x {len(backends)} backend(s) x {len(args.strategies)} strategies x "
                  f"{len(modes)} mode(s) on {gpu_name or 'cpu'} -> {out_dir}")
    try:
        with progress(console) as bar:
            task = bar.add_task("kernel sweep", total=len(points))

            def on_row(row: dict) -> None:
                writer.write(row)
                if args.json_rows:
                    emit_json(row)

            def on_point_done(point: SweepPoint) -> None:
                bar.update(task, advance=1, description=f"{point.kind} N={point.num_tokens} "
                                                        f"{point.num_heads}x{point.head_dim}")

            run_sweep(plan, gpu_name, on_row, on_point_done)
    finally:
        writer.close()
    finish(out_dir, env, console)
    if args.profile:
        from attnbench.profiling import write_report

        write_report(out_dir, console)
    return out_dir


def finish(out_dir: Path, env: dict, console: Console) -> Path:
    """Parquet, summary.md, plots and the console table, all from the saved results.csv."""
    from attnbench.plots import plot_runs

    df = report.load_results(out_dir / "results.csv")
    if df.empty:
        raise UsageError("no rows were measured")
    report.write_parquet(df, out_dir)
    summary = report.write_summary(df, out_dir, env)
    plots = plot_runs([("", df)], out_dir)
    print_seed_table(console, df)
    verdicts = df["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    console.print(f"results: {out_dir}/results.csv, {summary.name}, env.json, {len(plots)} plot(s)")
    return out_dir
