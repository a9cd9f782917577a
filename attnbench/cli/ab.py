"""`attnbench ab`: two versions measured in turns on one device, a paired verdict per row.

Thin: the sides are parsed in workers/envs.py, the job is runs/ab.py, the statistics
results/paired.py; each is imported when the command runs (`--help` needs no torch). The sweep is
`attnbench kernel`'s flags or a kernel scenario, read by the same declarations (cli/flags.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.console import make_console
from attnbench.errors import UsageError

SIDE_HELP = ("python=PATH (an interpreter, e.g. another venv), src=DIR (an attnbench checkout, first on the "
             "worker's PYTHONPATH) and NAME=VALUE environment variables for this side's worker, comma-separated; "
             "left out, python is this interpreter and src this checkout.")


def ab(
    ctx: typer.Context,
    baseline: Annotated[str, typer.Option(help=f"Side A. {SIDE_HELP} Example: --baseline src=../attnbench-main")],
    candidate: Annotated[str, typer.Option(help=f"Side B, as --baseline. Example: --candidate python=/venvB/bin/python")],
    scenario: Annotated[Optional[Path], typer.Option(help="A kernel scenario file instead of kernel flags (kernel flags given too override it). Example: --scenario scenarios/seed-kernel-table.toml")] = None,
    threshold: Annotated[str, typer.Option(help="Smallest change that counts, as compare's. Example: --threshold 3%")] = "2%",
    max_rounds: Annotated[int, typer.Option(help="Most rounds (a replicate of both sides) per row; a row is judged at every --min-rounds-th round and at this one. Example: --max-rounds 20")] = 12,
    min_rounds: Annotated[int, typer.Option(help="Rounds before a row's first look, and between looks (each look's interval is Bonferroni-corrected over the looks). Example: --min-rounds 5")] = 4,
    budget_s: Annotated[float, typer.Option(help="Wall-time budget in seconds: rows still open then stop as `budget`. Example: --budget-s 60")] = 300.0,
    out: Annotated[Optional[Path], options.run_out("ab", "runs/ab")] = None,
    force: options.Force = False,
) -> None:
    """KERNEL_FLAGS: measure a baseline and a candidate version in turns, in two worker processes on
    one device, and give each row a verdict from paired per-round ratios.

    Each round measures a point on both sides one right after the other, in ABBA order over rounds (baseline first, then candidate first, ...), so clock drift and power capping reach both. A row keeps measuring until its interval for candidate / baseline decides against --threshold (slower, faster, same; judged after every --min-rounds rounds), or --max-rounds or --budget-s ends it (noisy). Writes ab.csv, rounds.csv, env.json (both sides' versions) and summary.md. On the CPU no row gets a verdict (the output says why).

    Exit status as compare's: 0 when no regression is shown; 1 when a row is slower, a row passing on the baseline fails or errors on the candidate, or on bad input (one error line); 128 + the signal after Ctrl-C or SIGTERM (what was measured is written).

    Example: attnbench ab --baseline src=../main --candidate src=. --scenario scenarios/seed-kernel-table.toml

    Example: attnbench ab --baseline python=/venvA/bin/python --candidate python=/venvB/bin/python --heads 32 --dim 128 --kind decode
    """
    from attnbench.results.compare import parse_threshold
    from attnbench.runs.ab import AbSettings, run_ab
    from attnbench.workers.envs import check_sides, parse_side

    console = make_console()
    with user_errors(console):
        sides = parse_side(baseline, "baseline"), parse_side(candidate, "candidate")
        check_sides(*sides)
        settings = AbSettings(*sides, parse_threshold(threshold), max_rounds, budget_s, min_rounds, out, force)
        outcome = run_ab(sweeps_of(scenario, list(ctx.args)), settings, console, command_line())
    print_outcome(console, outcome, settings.threshold)
    if outcome.regressed:
        raise typer.Exit(1)


def sweeps_of(scenario: Path | None, args: list[str]) -> list:
    """KernelArgs from a kernel scenario (one per context it lists) with its overrides, or from kernel flags."""
    from attnbench.cli.flags import command_flags, kernel_args
    from attnbench.cli.scenario import load_scenario, parse_overrides
    from attnbench.runs.scenario import refuse_gpu_only

    if args and not args[0].startswith("-"):
        raise UsageError(f"{args[0]}: ab takes kernel flags; give a scenario file as --scenario {args[0]}")
    if scenario is not None:
        try:
            sc = load_scenario(scenario, args)
        except UsageError as exc:
            raise UsageError(f"--scenario {scenario}: {exc}") from None
        if sc.command != "kernel":
            raise UsageError(f"--scenario {scenario}: command = {sc.command!r}; ab measures kernel sweeps")
        refuse_gpu_only(sc.cpu, sc.values["device"], sc.values.get("devices"))
        return [kernel_args({**sc.values, "context": c}) for c in sc.contexts]
    flags = command_flags("kernel")
    values = {f.param: f.default for f in flags.values()}
    values.update({flags[key].param: value for key, value in parse_overrides(args, flags).items()})
    return [kernel_args(values)]


def print_outcome(console, outcome, threshold: float) -> None:
    from attnbench.cli.results import VERDICT_STYLE
    from attnbench.results.ab_files import CPU_NOTE, broken, counts_line, needs_line

    table = Table("row", "rounds", "baseline ms", "candidate ms", "cand / base", "interval", "verdict", "stopped")
    for r in outcome.frame.itertuples(index=False):
        verdict = "-" if r.verdict == "unjudged" else r.verdict
        table.add_row(escape(r.label), str(r.rounds), f"{r.baseline_ms:.4f}", f"{r.candidate_ms:.4f}",
                      f"{r.ratio:.3f}", f"{r.ci_low:.3f}-{r.ci_high:.3f}", f"[{VERDICT_STYLE[r.verdict]}]{verdict}[/]",
                      escape(r.stopped))
    console.print(table)
    if outcome.cpu:
        console.print(f"[yellow]{escape(CPU_NOTE)}[/]", soft_wrap=True, highlight=False)
    for label in broken(outcome.frame)["label"]:
        console.print(f"[bold red]correctness regression:[/] {escape(label)} passed on the baseline, not on the "
                      "candidate")
    needs = needs_line(outcome.frame, threshold)
    if needs:
        console.print(f"[yellow]{escape(needs)}[/]", soft_wrap=True, highlight=False)
    style = "bold red" if outcome.regressed else "green"
    console.print(f"[{style}]{escape(counts_line(outcome.frame, threshold, outcome.wall_s))}[/]")
    console.print(f"results: {escape(str(outcome.path))}/ab.csv, summary.md, rounds.csv, env.json", highlight=False)
