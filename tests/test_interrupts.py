"""attnbench/interrupts.py's deferred block: a signal that arrives while a stopped run writes its
tables is held until the block ends, then raised; a signal the process ignores stays ignored."""

from __future__ import annotations

import os
import signal

import pytest

from attnbench.interrupts import SignalReceived, signals_deferred


@pytest.fixture
def sigint_restored():
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("number, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SignalReceived)])
def test_a_signal_in_the_block_is_raised_after_it_ends(number, raised):
    before = signal.getsignal(number)
    finished = []
    with pytest.raises(raised):
        with signals_deferred() as held:
            os.kill(os.getpid(), number)
            finished.append(len(held))  # the block went on after the signal, which was held
    assert finished == [1] and signal.getsignal(number) is before


def test_an_ignored_sigint_stays_ignored(sigint_restored):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts `cmd &` or nohup
    with signals_deferred() as held:
        os.kill(os.getpid(), signal.SIGINT)
    assert held == [] and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
