"""`attnbench run scenarios/NAME.toml`: a declarative sweep, run by the same code as its command.

A kernel scenario becomes KernelArgs, one per context length it lists, and runs as a job
(runs/scenario.py); an e2e scenario becomes E2EArgs and runs as `attnbench e2e` runs it. What
ran is recorded beside the results in scenario.json: the file's text, the overrides, the values.
`--check` plans it on this machine with the run's own planners (kernel: plan_kernel; e2e: the
steps run_e2e takes before its first point) and prints the plan: what it refuses, the run refuses.
Reading a scenario brings the planners (torch): they are imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from attnbench.cli.common import command_line, user_errors
from attnbench.cli.e2e import start_e2e
from attnbench.cli.flags import e2e_args, kernel_args
from attnbench.console import make_console
from attnbench.errors import UsageError

if TYPE_CHECKING:
    from attnbench.cli.scenario import Scenario
    from attnbench.runs.e2e import Setup
    from attnbench.runs.scenario import ScenarioPlan

SHOWN_LEFT_OUT = 3  # --check names this many of a sweep's left-out points, then counts the rest


def run(
    ctx: typer.Context,
    scenario: Annotated[Path, typer.Argument(help="A scenario file. Example: scenarios/decode-gqa.toml")],
    check: Annotated[bool, typer.Option("--check", help="Plan it on this machine as the run would (backends, devices, memory, every point) and print the plan, naming each point left out and why; run nothing.")] = False,
) -> None:
    """Run a sweep declared in a TOML scenario file; flags given here override the file.

    The file's keys are the flags of its `command` (kernel or e2e), with dashes or underscores,
    and `cpu` (true, or why it needs a GPU). A kernel scenario may list context lengths: one
    sweep each, merged into one results directory.

    Example: attnbench run scenarios/decode-gqa.toml --backend vllm-fa2 --out results/gqa
    """
    from attnbench.cli.scenario import load_scenario
    from attnbench.runs.e2e import check_e2e
    from attnbench.runs.scenario import preflight, refuse_gpu_only, run_kernel_scenario

    console = make_console(True)
    if str(scenario).startswith("--"):  # `run --bogus`: an option where the file goes
        with user_errors(console):
            raise UsageError(f"{scenario}: not an option of run; the scenario file comes first: "
                             "attnbench run FILE [--check] [flags of its command]")
    with user_errors(console, prefix=f"{scenario}: "):
        sc = load_scenario(scenario, list(ctx.args))
        confine_paths_from_file(sc, list(ctx.args))
        console = make_console(bool(sc.values.get("json")))
        refuse_gpu_only(sc.cpu, sc.values["device"], sc.values.get("devices"))
        if sc.command == "e2e":
            if check:
                print_e2e_plan(console, sc, check_e2e(e2e_args(sc.values)))
            else:
                start_e2e(e2e_args(sc.values))
            return
        plan = preflight([kernel_args({**sc.values, "context": c}) for c in sc.contexts])
        if check:
            print_kernel_plan(console, sc, plan)
        else:
            command = command_line()
            run_kernel_scenario(sc.name, plan, console, command, scenario_record(sc, command))


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


def scenario_record(sc: Scenario, command: list[str]) -> dict:
    """scenario.json: the file, the command line, the values it ran with."""
    values = {k: str(v) if isinstance(v, Path) else v for k, v in sc.values.items()}
    return {"scenario": str(sc.path), "command": " ".join(command), "values": values, "contexts": sc.contexts,
            "text": sc.text}


def print_values(console: Console, sc: Scenario) -> None:
    """The file's values and overrides, and what it says of the CPU."""
    shown = {k: str(v) if isinstance(v, Path) else v for k, v in sc.given.items()}
    console.print(f"{sc.path}: command = {sc.command!r}, " + ", ".join(f"{k} = {v!r}" for k, v in shown.items()),
                  soft_wrap=True, highlight=False)
    cpu = {None: "not said (cpu = true, or why it needs a GPU)", True: "runs on the CPU"}.get(sc.cpu, f"GPU only: {sc.cpu}")
    console.print(f"cpu: {cpu}", highlight=False)


def print_kernel_plan(console: Console, sc: Scenario, plan: ScenarioPlan) -> None:
    """Each sweep's points on this machine, every point left out named (up to SHOWN_LEFT_OUT) with why."""
    print_values(console, sc)
    for notice in dict.fromkeys(n for sweep in plan.sweeps for n in sweep.plan.notices):  # once, in order
        console.print(f"[yellow]{notice}[/]")
    for sweep in plan.sweeps:
        unfit = sweep.plan.unfit
        left = f" ({len(unfit)} left out: a `skipped` row each)" if unfit else ""
        console.print(f"context {sweep.context}: {len(sweep.plan.points)} points on {plan.gpu or 'cpu'}{left}",
                      highlight=False)
        for point, why in unfit[:SHOWN_LEFT_OUT]:
            console.print(f"  left out: {point.kind}, {point.num_tokens} tokens, {point.num_heads}x{point.head_dim}: "
                          f"{why}", highlight=False)
        if len(unfit) > SHOWN_LEFT_OUT:
            console.print(f"  and {len(unfit) - SHOWN_LEFT_OUT} more left out", highlight=False)


def print_e2e_plan(console: Console, sc: Scenario, setup: Setup) -> None:
    """The model, the points, the backends and each one's graphs, and the memory estimate."""
    print_values(console, sc)
    from attnbench.results.tables import format_params

    margs = setup.margs
    console.print(f"{margs.name} ({format_params(margs.num_params / 1e9)}, {setup.dtype_name}) on "
                  f"{setup.gpu_name or 'cpu'}: {len(setup.points)} points x {len(setup.backends)} backend(s) x "
                  f"{len(setup.args.strategy)} strategies, ~{sum(setup.parts.values()) / 2**30:.2f} GiB",
                  highlight=False)
    for backend, choice in setup.choices.items():
        console.print(f"  {backend}: {choice.note or choice.cudagraph.value}", highlight=False)
