"""`attnbench run scenarios/NAME.toml`: a declarative sweep, run by the same code as its command.

A kernel scenario becomes KernelArgs and goes through kernels.job.run_kernel, once per context
length it lists; an e2e scenario becomes E2EArgs and runs as `attnbench e2e` runs it. What
ran is recorded beside the results in scenario.json: the file's text, the overrides, the values.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path
from typing import Annotated

import pandas as pd
import torch
import typer
from rich.console import Console

from attnbench.cli.common import command_line, user_errors
from attnbench.cli.e2e import start_e2e
from attnbench.cli.flags import e2e_args, kernel_args
from attnbench.cli.scenario import Scenario, context_dir, load_scenario
from attnbench.console import default_out_dir, make_console
from attnbench.device import device_name
from attnbench.errors import Interrupted, UsageError
from attnbench.kernels.job import run_kernel
from attnbench.kernels.plan import KernelArgs, plan_sweep
from attnbench.kernels.sweep import SweepPlan
from attnbench.results import files, rundir
from attnbench.results.export import plot_results, to_csv, to_markdown
from attnbench.results.notes import summary_notes


def run(
    ctx: typer.Context,
    scenario: Annotated[Path, typer.Argument(help="A scenario file. Example: scenarios/decode-gqa.toml")],
    check: Annotated[bool, typer.Option("--check", help="Check the file (and the device can run it) and print the values; run nothing.")] = False,
) -> None:
    """Run a sweep declared in a TOML scenario file; flags given here override the file.

    The file's keys are the flags of its `command` (kernel or e2e), with dashes or underscores.
    A kernel scenario may list context lengths: one sweep each, merged into one results directory.

    Example: attnbench run scenarios/decode-gqa.toml --backend vllm-fa2 --out results/gqa
    """
    console = make_console(True)
    with user_errors(console, prefix=f"{scenario}: "):
        sc = load_scenario(scenario, list(ctx.args))
        confine_paths_from_file(sc, list(ctx.args))
        console = make_console(bool(sc.values.get("json")))
        plan = preflight(sc) if sc.command == "kernel" else None
        if check:
            print_plan(console, sc, plan)
        elif plan is None:
            start_e2e(e2e_args(sc.values))
        else:
            run_kernel_scenario(sc, plan, console)


@dataclasses.dataclass
class ContextSweep:
    """One sweep of a scenario: the args it runs with and the plan they gave on this machine."""

    context: str
    args: KernelArgs
    plan: SweepPlan


@dataclasses.dataclass
class ScenarioPlan:
    gpu: str | None
    sweeps: list[ContextSweep]


def preflight(sc: Scenario) -> ScenarioPlan:
    """Every sweep of the scenario, planned on this machine (memory included) before any runs."""
    sweeps = []
    for context in sc.contexts:
        args = kernel_args({**sc.values, "context": context})
        plan = plan_sweep(args)
        sweeps.append(ContextSweep(plan.points[0].context, args, plan))
    device = torch.device(sweeps[0].plan.device)
    return ScenarioPlan(device_name(device), sweeps)


def confine_paths_from_file(sc: Scenario, argv: list[str]) -> None:
    """A scenario file's `out` / `resume` must stay under the working directory: a reviewed file
    should not write anywhere. Given on the command line, a path is the user's own choice."""
    for key in ("out", "resume"):
        value = sc.values.get(key)
        on_command_line = any(a == f"--{key}" or a.startswith(f"--{key}=") for a in argv)
        if value is None or on_command_line:
            continue
        cwd = Path.cwd().resolve()
        target = (cwd / Path(value)).resolve()
        if target != cwd and cwd not in target.parents:
            raise UsageError(f"{key}: {value} is outside the working directory; a scenario writes under it "
                             f"(give --{key} on the command line to write elsewhere)")


def run_kernel_scenario(sc: Scenario, plan: ScenarioPlan, console: Console) -> Path:
    first = plan.sweeps[0].args
    out = Path(first.resume or first.out or default_out_dir(plan.gpu or "cpu", sc.name))
    command = command_line()
    if len(plan.sweeps) == 1:
        run_kernel(dataclasses.replace(first, out=out if not first.resume else None), console, command)
        record(sc, out, command)
        return out
    # one sweep per context into out/context-*/, merged into out when all are done
    if first.resume:
        if not any(out.glob("context-*/results.csv")):
            raise UsageError(f"--resume: {out} holds no sweep of this scenario to resume")
        for entry in rundir.attnbench_outputs(out):
            if not entry.name.startswith("context-"):
                entry.unlink()
    else:
        rundir.prepare(out, force=first.force)
    with rundir.locked(out):
        parts = [out / context_dir(sweep.context) for sweep in plan.sweeps]
        for part, sweep in zip(parts, plan.sweeps):
            console.rule(f"{sc.name}: context {sweep.context}")
            resumable = first.resume and (part / "results.csv").is_file()
            part_args = dataclasses.replace(sweep.args, out=None if resumable else part,
                                            resume=part if resumable else None, force=False)
            try:
                run_kernel(part_args, console, command)
            except Interrupted as exc:
                number = exc.exit_code - 128
                raise Interrupted(f"interrupted by {signal.Signals(number).name} in context {sweep.context}; {out} "
                                  f"holds the finished sweeps (finish it with the same flags and --resume {out})",
                                  number) from None
        merge_runs(parts, out, console)
        record(sc, out, command)
    return out


def merge_runs(parts: list[Path], out: Path, console: Console) -> None:
    """One results directory from several sweeps: rows, parquet, env, summary and plots."""
    df = pd.concat([files.load_results(p / "results.csv") for p in parts], ignore_index=True)
    rundir.write_text_atomic(out / "results.csv", to_csv(df))
    files.write_parquet(df, out)
    rundir.write_text_atomic(out / "env.json", (parts[0] / "env.json").read_text())
    rundir.write_text_atomic(out / "summary.md", "# attnbench kernel summary\n\n" + to_markdown(df) + "\n"
                             + "\n".join(summary_notes(df)))
    telemetry = [p / "telemetry.csv" for p in parts if (p / "telemetry.csv").is_file()]
    if telemetry:  # one header, then every sweep's samples
        texts = [t.read_text().splitlines(keepends=True) for t in telemetry]
        rundir.write_text_atomic(out / "telemetry.csv", "".join([texts[0][0], *(line for t in texts for line in t[1:])]))
    plots = plot_results([("", df)], out)
    console.print(f"merged {len(df)} rows of {len(parts)} sweeps: {out}/results.csv, summary.md, env.json, "
                  f"{len(plots)} plot(s)")


def record(sc: Scenario, out: Path, command: list[str]) -> None:
    values = {k: str(v) if isinstance(v, Path) else v for k, v in sc.values.items()}
    out.mkdir(parents=True, exist_ok=True)
    rundir.write_text_atomic(out / "scenario.json", json.dumps(
        {"scenario": str(sc.path), "command": " ".join(command), "values": values, "contexts": sc.contexts,
         "text": sc.text}, indent=2) + "\n")


def print_plan(console: Console, sc: Scenario, plan: ScenarioPlan | None) -> None:
    shown = {k: str(v) if isinstance(v, Path) else v for k, v in sc.given.items()}
    console.print(f"{sc.path}: command = {sc.command!r}, " + ", ".join(f"{k} = {v!r}" for k, v in shown.items()),
                  soft_wrap=True, highlight=False)
    for sweep in plan.sweeps if plan else []:
        console.print(f"context {sweep.context}: {len(sweep.plan.points)} points on {plan.gpu or 'cpu'}", highlight=False)
