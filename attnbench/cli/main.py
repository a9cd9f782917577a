"""The attnbench command line: the Typer app and its commands, each from its own module.

Why a module of its own: the commands import what they run, and nothing imports this module
back, so the app can list every command explicitly. It also holds the one place where click's
parse errors join attnbench's error convention (common.py): one `error:` line on stderr, exit 1.
"""

from __future__ import annotations

import difflib
import sys
from typing import Any, Sequence

import typer
from typer.core import TyperGroup

from attnbench.cli import history  # history add/list and dashboard
from attnbench.cli import calibrate, doctor, e2e, kernel, merge, replay, results, run, trace, verify
from attnbench.cli import rule
from attnbench.cli import ab
from attnbench.cli import atlas
from attnbench.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, print_error
from attnbench.errors import AttnbenchError

try:  # a recent Typer parses with its own copy of click; an older one with click itself
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors
NO_ARGS_IS_HELP = getattr(click_errors, "NoArgsIsHelpError", ())  # click >= 8.2
SUGGEST_CUTOFF = 0.75  # a typo (--tokenz: --tokens, 0.88 alike) is suggested; an unrelated word is not


def click_message(exc: click_errors.ClickException) -> str:
    """A click error as attnbench words it: the flag first, then what is wrong, then where to look."""
    param = getattr(exc, "param", None)
    if isinstance(exc, click_errors.NoSuchOption):  # click's hint is any option 60 % alike ("--bogus": --out)
        close = difflib.get_close_matches(exc.option_name, exc.possibilities or [], n=1, cutoff=SUGGEST_CUTOFF)
        text = f"{exc.option_name}: no such option{f'; did you mean {close[0]}?' if close else ''}"
    elif isinstance(exc, click_errors.BadParameter) and not isinstance(exc, click_errors.MissingParameter) and param is not None:
        name = param.opts[0] if param.param_type_name == "option" else param.human_readable_name
        text = f"{name}: {exc.message}"
    else:
        text = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click_errors.UsageError) and ctx is not None:
        text = f"{text.rstrip('.')} (see `{ctx.command_path} --help`)"
    return text


class OneLineErrors(TyperGroup):
    """The app's group: runs click without its standalone error handling, so that a parse error
    (click's box, exit 2) becomes the same one `error:` line and exit 1 as any other bad input.
    `--help` still prints the help and exits 0; bare `attnbench` prints it too and exits 0.
    Ctrl-C: a KeyboardInterrupt ends with exit 130 (Typer's own mapping, unchanged); click.Abort
    with one `interrupted` line and exit 130."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) and not isinstance(result, bool) else 0
        except NO_ARGS_IS_HELP as exc:
            if exc.format_message().strip():  # Typer's rich help has printed itself already
                typer.echo(exc.format_message())
            code = 0
        except click_errors.ClickException as exc:  # UsageError, BadParameter, NoSuchOption, MissingParameter...
            print_error(click_message(exc))
            code = EXIT_USAGE
        except AttnbenchError as exc:  # a command that forgot `user_errors`: the same line all the same
            print_error(str(exc))
            code = exc.exit_code
        except typer.Abort:
            typer.echo("interrupted", err=True)
            code = EXIT_INTERRUPTED
        if standalone_mode:
            sys.exit(code)
        return code

    def get_help_option(self, ctx: Any) -> Any:
        """The app's `--help`, off when not given. Typer >= 0.2x leaves a flag that was not given as
        None, and coerces None through a pydantic adapter: importing pydantic for that costs
        `attnbench COMMAND --help` about 0.1 s. A False default is a bool, so nothing is coerced."""
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark LLM attention kernels: one paged varlen call (unified) vs kvcache + varlen (split).")

def first_sentence(command) -> str:
    """A command's line in the bare `attnbench` list: its docstring's first sentence on one line
    (the whole first paragraph, with its own line breaks, made the list hard to read)."""
    paragraph = " ".join((command.__doc__ or "").strip().split("\n\n")[0].split())
    return paragraph.split(". ")[0].rstrip(".") + "."


PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}  # run and calibrate take kernel's flags
for name, command, settings in [("kernel", kernel.kernel, None), ("backends", kernel.backends, None),
                                ("e2e", e2e.e2e, None), ("run", run.run, PASS_THROUGH),
                                ("compare", results.compare, None), ("export", results.export, None),
                                ("plot", results.plot, None), ("merge", merge.merge, None),
                                ("verify", verify.verify, None), ("doctor", doctor.doctor, None),
                                ("calibrate", calibrate.calibrate, PASS_THROUGH), ("replay", replay.replay, None),
                                ("ab", ab.ab, PASS_THROUGH),
                                ("atlas", atlas.atlas, None)]:
    app.command(name, short_help=first_sentence(command), context_settings=settings)(command)
TRACE_COMMANDS = ", ".join(info.name for info in trace.app.registered_commands)  # the list cannot drift from them
app.add_typer(trace.app, name="trace", short_help=f"Step traces: {TRACE_COMMANDS}.")
app.add_typer(rule.app, name="rule", short_help="Dispatch rules fitted on measured rows, judged by regret.")
app.add_typer(history.app, name="history", short_help="A history of runs over commits: file a run, list them.")
app.command("dashboard", short_help=first_sentence(history.dashboard))(history.dashboard)


def main() -> None:
    app()
