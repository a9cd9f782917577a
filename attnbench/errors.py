"""One domain exception, so that only the CLI decides how an error looks to a user; and the two
checks that every command's list flags share (a value among the choices, no value twice)."""

import traceback


class AttnbenchError(Exception):
    """A problem the user can fix: bad input, a missing library, a run that cannot fit."""

    exit_code = 1


class UsageError(AttnbenchError):
    """A flag has a bad value; the message names the flag."""


class Interrupted(AttnbenchError):
    """Ctrl-C or SIGTERM ended a run; what it had measured was kept. Exit 128 + the signal."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number


def error_reason(exc: BaseException, limit: int = 300) -> str:
    """One line for a result row: the exception, its first message line, and where it was raised."""
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})" if last else ""
    message = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {message}{where}"[:limit]


def check_choices(values, allowed, flag: str, noun: str = "value") -> None:
    """Every value is one of `allowed` (--strategy of every command, verify's --policy)."""
    for value in values:
        if value not in allowed:
            raise UsageError(f"{flag}: unknown {noun} {value!r}; choose {', '.join(allowed)}")


def check_unique(values, flag: str, show=str) -> None:
    """A list flag names each value once: a repeated value would be measured twice, and two rows
    with one key make `compare` refuse the directory."""
    seen = set()  # a set, not a list: a scenario may list tens of thousands of values (linear, not quadratic)
    for value in values:
        if value in seen:
            raise UsageError(f"{flag}: {show(value)} is listed twice")
        seen.add(value)
