"""A kernel sweep as a job: plan it, run it with a progress bar, and write every output file.

The CLI's `kernel` command and kernel scenarios both end here. Rows reach results.csv as each
one is measured; parquet, summary.md, plots and the console table are made from that file at the
end, so they can always be rebuilt from it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from attnbench.console import default_out_dir, emit_json, print_seed_table, progress
from attnbench.errors import UsageError
from attnbench.kernels.plan import KernelArgs, plan_sweep
from attnbench.kernels.sweep import run_sweep
from attnbench.kernels.workload import SweepPoint
from attnbench.results import files
from attnbench.results.env import collect
from attnbench.results.plots import plot_runs
from attnbench.results.profiling import write_report


def run_kernel(args: KernelArgs, console: Console, command: list[str]) -> Path:
    plan = plan_sweep(args)
    for notice in plan.notices:  # every flag is valid by now: an error is always the only line
        console.print(f"[yellow]{notice}[/]")
    device = torch.device(plan.device)
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    out_dir = args.out or default_out_dir(gpu_name or "cpu", "kernel")
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.profile:
        plan = replace(plan, profile_out=out_dir)
    env = collect(command)
    files.write_env(out_dir, env)
    writer = files.RowWriter(out_dir)
    console.print(f"{len(plan.points)} points x {len(plan.backends)} backend(s) x {len(plan.strategies)} strategies x "
                  f"{len(plan.modes)} mode(s) on {gpu_name or 'cpu'} -> {out_dir}")
    try:
        with progress(console) as bar:
            task = bar.add_task("kernel sweep", total=len(plan.points))

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
    write_kernel_outputs(out_dir, env, console)
    if args.profile:
        write_report(out_dir, console)
    return out_dir


def write_kernel_outputs(out_dir: Path, env: dict, console: Console) -> Path:
    """Parquet, summary.md, plots and the console table, all from the saved results.csv."""
    df = files.load_results(out_dir / "results.csv")
    if df.empty:
        raise UsageError("no rows were measured")
    files.write_parquet(df, out_dir)
    summary = files.write_summary(df, out_dir, env)
    plots = plot_runs([("", df)], out_dir)
    print_seed_table(console, df)
    verdicts = df["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    console.print(f"results: {out_dir}/results.csv, {summary.name}, env.json, {len(plots)} plot(s)")
    return out_dir
