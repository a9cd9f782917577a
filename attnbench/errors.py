"""One domain exception, so that only the CLI decides how an error looks to a user."""

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
