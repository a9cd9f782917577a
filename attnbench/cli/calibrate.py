"""`attnbench calibrate`: run a sweep twice in separate processes and print the compare threshold
that this A/A pair passes clean. A thin command; the work is in results/calibrate.py, imported
when the command runs (`--help` needs none of its pandas). What it cannot calibrate (an e2e
scenario, a bad flag) is refused here, before either run starts or --out is made."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli.common import user_errors
from attnbench.console import make_console
from attnbench.errors import UsageError


def calibrate(
    ctx: typer.Context,
    out: Annotated[Optional[Path], typer.Option(help="Directory for the two runs (a/, b/, their logs) and calibrate.json; new or empty (default results/<time>-calibrate). Example: --out runs/calibrate")] = None,
) -> None:
    """SCENARIO_OR_FLAGS: run a scenario file (with its overrides), or `attnbench kernel` with these
    flags, twice, each in its own process, then print the smallest `compare --threshold` at which
    the pair has no slower or faster row and that covers every change the pair showed (clean), the
    one at which every row is `same`, and each row's ratio, interval and replicate spread. Gate CI
    with a threshold at or above the clean one seen over a few calibrations on the same runner.

    Kernel sweeps only: an e2e scenario (or a bad flag) is refused before anything runs. On the
    CPU no threshold is printed (compare gives CPU timings no verdict; the output says why) and
    calibrate.json holds null thresholds. Exit status: 0 when both runs finished, with or
    without a threshold; 1 with one error line on bad input or a failed run.

    Example: attnbench calibrate scenarios/seed-kernel-table.toml

    Example: attnbench calibrate --heads 32 --dim 128 --kind decode --replicates 5
    """
    from attnbench.results.calibrate import calibrate_pair, run_pair
    from attnbench.runs.rundir import RunDir

    console = make_console()
    out = out or Path("results") / f"{dt.datetime.now():%Y%m%d-%H%M%S}-calibrate"
    with user_errors(console):
        refuse_early(list(ctx.args))
        run = RunDir.prepare(out)
        with run.recording():
            a, b = run_pair(list(ctx.args), out, lambda line: console.print(escape(line), highlight=False))
        result = calibrate_pair(a, b)
        run.write_text("calibrate.json", result.to_json())
    table = Table("row", "a ms", "b ms", "b / a", "interval", "method", "spread a", "spread b", "clean needs")
    for r in result.rows.itertuples(index=False):
        table.add_row(escape(r.label), f"{r.base_time:.4f}", f"{r.new_time:.4f}", f"{r.ratio:.3f}",
                      f"{r.ci_low:.3f}-{r.ci_high:.3f}", r.method, _pct(r.spread_a), _pct(r.spread_b),
                      _pct(r.clean_need) + (" (host-bound: not judged)" if r.host_bound else ""))
    console.print(table)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    console.print("spread: how far apart a row's replicate medians landed in one run (max / min - 1)", highlight=False)
    if result.clean is None:
        console.print(f"[bold yellow]{escape(result.no_threshold)}[/]; {len(result.rows)} rows -> "
                      f"{escape(str(out))}/calibrate.json", highlight=False, soft_wrap=True)
        return
    console.print(f"[bold]A/A-clean threshold: {result.clean:.1%}[/] (no row slower or faster, at least the largest "
                  f"change between the runs); every row `same` from {result.all_same:.1%}; {len(result.rows)} rows -> "
                  f"{escape(str(out))}/calibrate.json", highlight=False)


def refuse_early(args: list[str]) -> None:
    """What calibrate cannot calibrate, refused before anything runs: a scenario that is not a kernel
    sweep, or that (with its overrides) `attnbench run` would refuse; kernel flags `kernel` would refuse."""
    from attnbench.cli.flags import command_flags
    from attnbench.cli.scenario import check_kernel_values, load_scenario, parse_overrides
    from attnbench.results.calibrate import pair_commands

    pair_commands(args, Path("."))  # no arguments, --resume, --force, a missing scenario file
    if not args[0].startswith("-"):
        try:
            scenario = load_scenario(Path(args[0]), args[1:])
        except UsageError as exc:
            raise UsageError(f"{args[0]}: {exc}") from None
        if scenario.command != "kernel":
            raise UsageError(f"{args[0]}: command = {scenario.command!r}; calibrate takes kernel sweeps (command = "
                             "\"kernel\", or `attnbench kernel` flags): compare's threshold gates kernel rows")
        return
    flags = command_flags("kernel")
    values = {f.param: f.default for f in flags.values()}
    values.update({flags[key].param: value for key, value in parse_overrides(args, flags).items()})
    check_kernel_values(values)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"
