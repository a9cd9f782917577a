"""What every command shares: its console, and the one place an input error becomes a message.

The convention, for every command: bad input prints exactly one line, `error: <message naming the
flag or file>`, on stderr, and exits 1 (EXIT_USAGE), with no traceback. Helpers raise
AttnbenchError (attnbench.errors); a command runs its body under `user_errors`, which prints that
line. Typer's own parse errors (an unknown option, a missing value, a non-integer for an integer
flag) take the same way out through main.py's `OneLineErrors` group, which calls `print_error`.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import typer
from rich.console import Console
from rich.markup import escape

from attnbench.errors import AttnbenchError

EXIT_USAGE = 1  # bad input, a run that cannot fit, a run that measured nothing
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


def print_error(message: str, console: Console | None = None) -> None:
    """One `error:` line on stderr. The message is printed as text (no rich markup, no emoji),
    on one line whatever the terminal's width."""
    err = console if console is not None and console.stderr else Console(stderr=True)
    line = " ".join(str(message).split())
    err.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True, emoji=False)


def fail(console: Console, message: str, code: int = EXIT_USAGE) -> None:
    """End the command with one `error:` line (on the stderr twin of the command's console)."""
    print_error(message, console)
    raise typer.Exit(code)


@contextmanager
def user_errors(console: Console, prefix: str = "") -> Iterator[None]:
    """Run a command's body; an AttnbenchError ends it with one `error:` line and its exit code
    (1; 128 + the signal for a run that Ctrl-C or SIGTERM stopped, attnbench.errors.Interrupted)."""
    try:
        yield
    except AttnbenchError as exc:
        fail(console, f"{prefix}{exc}", exc.exit_code)


def command_line() -> list[str]:
    """The command as the shell gave it, for env.json."""
    return ["attnbench", *sys.argv[1:]]
