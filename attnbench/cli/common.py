"""What every command shares: its console, and the one place an AttnbenchError becomes a message.

Helpers raise AttnbenchError (attnbench.errors); a command runs its body under `user_errors`,
which prints one red `error:` line and exits 1, so a user never sees a traceback for bad input.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import typer
from rich.console import Console

from attnbench.errors import AttnbenchError


def fail(console: Console, message: str, code: int = 1) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors(console: Console, prefix: str = "") -> Iterator[None]:
    """Run a command's body; an AttnbenchError ends it with one `error:` line and exit 1."""
    try:
        yield
    except AttnbenchError as exc:
        fail(console, f"{prefix}{exc}")


def command_line() -> list[str]:
    """The command as the shell gave it, for env.json."""
    return ["attnbench", *sys.argv[1:]]
