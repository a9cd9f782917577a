"""Ctrl-C and SIGTERM end a run cleanly: the current point is abandoned, what was measured stays.

SIGINT already arrives as KeyboardInterrupt; `signals_raise()` makes SIGTERM (what `timeout`,
`kill` and batch schedulers send) raise too, so both unwind through the same `finally` blocks
and the run can write its summary, parquet and plots for the points it finished.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from attnbench.errors import Interrupted


class SignalReceived(BaseException):
    """Raised in the main thread by the SIGTERM handler (a BaseException, like KeyboardInterrupt,
    so that `except Exception` around one sweep point does not swallow it)."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number


@contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGTERM raises SignalReceived (SIGINT raises KeyboardInterrupt as usual)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SignalReceived(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def signal_of(exc: BaseException) -> tuple[str, int]:
    """(name, number) of the signal behind a KeyboardInterrupt or SignalReceived."""
    if isinstance(exc, SignalReceived):
        return signal.Signals(exc.signal_number).name, exc.signal_number
    return "SIGINT", int(signal.SIGINT)


def interrupted(stopped: BaseException, finished: int, total: int, out_dir: Path) -> Interrupted:
    """What a run stopped by a signal tells the user: how far it got, where, and how to finish."""
    name, number = signal_of(stopped)
    return Interrupted(f"interrupted by {name} after {finished} of {total} point(s); {out_dir} holds what was "
                       f"measured (finish it with the same flags and --resume {out_dir})", number)


@contextmanager
def signals_deferred() -> Iterator[list[BaseException]]:
    """Within the block, SIGINT and SIGTERM are held: the block runs to its end, then the first one
    held is raised (as KeyboardInterrupt or SignalReceived). For the few seconds of writing a
    stopped run's tables, which a second Ctrl-C must not leave half written. A signal the process
    ignores (SIGINT under nohup or `cmd &`) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    held: list[BaseException] = []

    def hold(signum, frame):
        held.append(KeyboardInterrupt() if signum == signal.SIGINT else SignalReceived(signum))

    previous = {number: signal.signal(number, hold) for number in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        yield held
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if held:
        raise held[0]
