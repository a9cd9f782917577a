"""One domain exception, so that only the CLI decides how an error looks to a user."""


class AttnbenchError(Exception):
    """A problem the user can fix: bad input, a missing library, a run that cannot fit."""


class UsageError(AttnbenchError):
    """A flag has a bad value; the message names the flag."""


class UnsupportedError(AttnbenchError):
    """A backend cannot run a sweep point; the message says why."""
