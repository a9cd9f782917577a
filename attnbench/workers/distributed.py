"""torchrun's ranks: who this process is among them, the gloo group over them, and sending rows to rank 0.

Why torch.distributed and not a scheduler of our own: torchrun already starts one process per
GPU, on one machine or many, and gives each its RANK, WORLD_SIZE and LOCAL_RANK. Results are a
few thousand small rows, so a gloo process group (CPU, no NCCL) is enough to carry them. This is
the plumbing only; the kernel sweep over ranks is runs/kernel_ranks.py.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

import torch.distributed as dist

from attnbench.errors import AttnbenchError, UsageError

# gathering waits for the slowest rank's whole shard: hours on a long sweep
GATHER_TIMEOUT = timedelta(hours=48)


def launched() -> bool:
    """Whether this process is one rank of several started by torchrun (or any env:// launcher)."""
    return "RANK" in os.environ and _env_int("WORLD_SIZE", 1) > 1


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        raise UsageError(f"torchrun: {name}={os.environ[name]!r} is not a number") from None


def torchrun_ranks() -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) as torchrun set them."""
    return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)


@contextmanager
def process_group(rank: int, world: int) -> Iterator[None]:
    """The gloo group over torchrun's ranks (MASTER_ADDR/MASTER_PORT from the environment)."""
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=GATHER_TIMEOUT)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(f"torchrun: cannot start the gloo process group: {str(exc).splitlines()[0]}") from None
    try:
        yield
    finally:
        dist.destroy_process_group()


def all_gather(mine: object, world: int) -> list:
    """Every rank's `mine`, on every rank."""
    states: list = [None] * world
    dist.all_gather_object(states, mine)
    return states


@contextmanager
def sigterm_deferred() -> Iterator[None]:
    """While rank 0 gathers and writes, SIGTERM waits: torchrun sends it to every rank once one has
    failed (and SIGKILL 30 s later), and the rows in hand are written first. The run still ends
    with an error naming the shards that did not report."""
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def send(report: dict) -> None:
    try:
        dist.gather_object(report, None, dst=0)
    except Exception as exc:  # noqa: BLE001  rank 0 is gone: nothing more this rank can do
        raise AttnbenchError(f"rank {report['rank']}: cannot send its rows to rank 0 ({str(exc).splitlines()[0]})")


def gather_reports(mine: dict, world: int) -> list:
    """Every rank's report on rank 0; None for ranks whose report never came."""
    reports: list = [None] * world
    try:
        dist.gather_object(mine, reports, dst=0)
    except Exception as exc:  # noqa: BLE001  a rank died or the group broke: keep what rank 0 has
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = text.split("] ", 1)[-1].split(". ")[0]  # gloo: "[pair.cc:561] Connection closed by peer ..."
        return [mine] + [{"lost": reason}] * (world - 1)
    return reports
