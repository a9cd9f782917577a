"""`attnbench run scenarios/NAME.toml`: a declarative sweep, run by the same code as its command.

A kernel scenario becomes KernelArgs, one per context length it lists, and runs as a job
(runs/scenario.py); an e2e scenario becomes E2EArgs and runs as `attnbench e2e` runs it. What
ran is recorded beside the results in scenario.json: the file's text, the overrides, the values.
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
    from attnbench.runs.scenario import ScenarioPlan


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
    from attnbench.cli.scenario import load_scenario
    from attnbench.runs.scenario import preflight, run_kernel_scenario

    console = make_console(True)
    with user_errors(console, prefix=f"{scenario}: "):
        sc = load_scenario(scenario, list(ctx.args))
        confine_paths_from_file(sc, list(ctx.args))
        console = make_console(bool(sc.values.get("json")))
        plan = preflight([kernel_args({**sc.values, "context": c}) for c in sc.contexts]) \
            if sc.command == "kernel" else None
        if check:
            print_plan(console, sc, plan)
        elif plan is None:
            start_e2e(e2e_args(sc.values))
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


def print_plan(console: Console, sc: Scenario, plan: ScenarioPlan | None) -> None:
    shown = {k: str(v) if isinstance(v, Path) else v for k, v in sc.given.items()}
    console.print(f"{sc.path}: command = {sc.command!r}, " + ", ".join(f"{k} = {v!r}" for k, v in shown.items()),
                  soft_wrap=True, highlight=False)
    for sweep in plan.sweeps if plan else []:
        console.print(f"context {sweep.context}: {len(sweep.plan.points)} points on {plan.gpu or 'cpu'}", highlight=False)
