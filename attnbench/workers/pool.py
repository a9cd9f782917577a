"""Work in a worker process under a watchdog, so that a hang, a crash or a dead CUDA context costs
one task (a kernel sweep point, an e2e point), not the run.

One worker at a time, started with `spawn` (a forked CUDA context is unusable). It runs
`setup(*setup_args)` once (imports, a CUDA context, an e2e model) and answers "ready"; then, per
task, the handler that setup returned sends items back (None is only a sign of life), and the
worker ends the task with "done" and whether its CUDA context still works. The parent waits at
most `timeout` seconds between two messages of a task (and at least START_S for a worker to
start: spawning, imports and a model on a busy machine are not a hung point):

- silence that long: the task's outcome is a `timeout` failure and the worker is killed;
- a worker that dies (segfault, abort, SIGKILL): a `crashed` failure with its exit code or signal;
- an exception in the handler: a failure with its verdict (`oom` for an allocation, else `error`);
- a CUDA context poisoned by a kernel fault (an illegal address, a device-side assert): every
  later call would fail too, so the worker is replaced, and the task's failed rows become
  `crashed` (`after_dead_context`), their reason the CUDA error that was seen.

A healthy worker is reused, so its start-up (and an e2e model) is paid once. FA2's first use of a
kernel module on Hopper blocks while the driver compiles the library's PTX, for minutes rather
than seconds (the FA2 page under docs/kernels/ says more): the default timeouts (600 s on a GPU)
sit well above that.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from attnbench.errors import error_reason
from attnbench.kernels.sweep import failure_verdict

FAILED = ("error", "oom")  # the verdicts of rows whose call raised
START_S = 120.0  # the least time a worker is given to start, whatever the task timeout


def cuda_healthy() -> bool:
    """False once a kernel fault (illegal address, device-side assert) has poisoned this process's
    CUDA context: the error is sticky, so a synchronize raises it again."""
    if not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001  the sticky error itself
        return False


def serve(conn, setup: Callable, setup_args: tuple) -> None:
    """The worker's life: set up, then a task in, its items out, until told to stop or CUDA breaks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        handle = setup(*setup_args)
    except Exception as exc:  # e.g. a model that cannot be built here
        conn.send(("failed", (failure_verdict(exc), f"the worker could not start: {error_reason(exc)}")))
        return
    conn.send(("ready", None))
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            handle(task, lambda item=None: conn.send(("item", item)))
        except Exception as exc:  # the task failed as a whole
            conn.send(("failed", (failure_verdict(exc), error_reason(exc))))
        healthy = cuda_healthy()  # looked up at call time: a test-only backend may replace it
        conn.send(("done", healthy))
        if not healthy:
            return


@dataclass
class Outcome:
    """What one task produced: its items, and how it failed when it did."""

    items: list = field(default_factory=list)
    failure: tuple[str, str] | None = None  # (verdict, reason) for the task as a whole
    context_died: bool = False  # its worker's CUDA context was dead after it


class Lost(Exception):
    """The worker went silent past the timeout, died, or could not start."""

    def __init__(self, verdict: str, reason: str):
        super().__init__(reason)
        self.verdict, self.reason = verdict, reason


class Worker:
    def __init__(self, setup: Callable, setup_args: tuple):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, setup, setup_args), daemon=True)
        self.process.start()
        child.close()

    def receive(self, timeout: float, since: float, limit: str) -> tuple[str, object]:
        """The next message, or Lost (the worker killed) after `timeout` s of silence or its death."""
        if not self.conn.poll(timeout):
            self.kill()
            raise Lost("timeout", f"no result within {limit}; the worker was killed")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(timeout=5)
            died = self.death()
            self.kill()
            raise Lost("crashed", f"{died} after {time.monotonic() - since:.1f} s") from None

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=5)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()

    def death(self) -> str:
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"the worker was killed by {signal.Signals(-code).name}"
        return f"the worker exited with code {code}"


class WorkerPool:
    """Tasks run one after another in a worker; a worker lost or broken is replaced for the next."""

    def __init__(self, setup: Callable, setup_args: tuple, timeout: float):
        self.setup, self.setup_args, self.timeout = setup, setup_args, timeout
        self.worker: Worker | None = None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None)  # e.g. Ctrl-C: the task in flight is abandoned

    def close(self, kill: bool = False) -> None:
        if self.worker is not None:
            if kill:
                self.worker.kill()
            else:
                self.worker.stop()
            self.worker = None

    def run(self, task) -> Outcome:
        outcome = Outcome()
        try:
            worker = self._ready_worker()
            start = time.monotonic()
            try:
                worker.conn.send(task)
            except OSError:  # it has just died: receive() says how
                pass
            while True:
                kind, payload = worker.receive(self.timeout, start, f"--point-timeout {self.timeout:g} s")
                if kind == "item" and payload is not None:
                    outcome.items.append(payload)
                elif kind == "failed":
                    outcome.failure = payload
                elif kind == "done":
                    if not payload:  # its CUDA context is broken: the next task gets a fresh worker
                        outcome.context_died = True
                        self.close()
                    return outcome
        except Lost as lost:
            self.worker = None
            outcome.failure = (lost.verdict, lost.reason)
            return outcome

    def _ready_worker(self) -> Worker:
        """The live worker, or a new one once it says it is ready (its start-up has its own clock)."""
        if self.worker is not None and self.worker.process.is_alive():
            return self.worker
        self.close(kill=True)  # one that died between tasks
        self.worker = Worker(self.setup, self.setup_args)
        limit = max(self.timeout, START_S)
        try:
            kind, payload = self.worker.receive(limit, time.monotonic(), f"{limit:g} s")
        except Lost as lost:
            raise Lost(lost.verdict, f"the worker did not start: {lost.reason}") from None
        if kind != "ready":
            self.worker.kill()
            raise Lost(*payload)
        return self.worker


def after_dead_context(rows: list[dict]) -> list[dict]:
    """A task after which its worker's CUDA context was dead: its failed rows are `crashed` (the
    fault killed the context, and every call after it failed for that reason), each keeping the
    error it saw."""
    return [{**row, "verdict": "crashed", "reason": f"the CUDA context died: {row.get('reason', '')}"}
            if row.get("verdict") in FAILED else row for row in rows]
