"""Sweep points in a worker process with a watchdog: a hang, a crash or a dead CUDA context costs
one point, not the sweep.

The parent sends plain data (the SweepPlan less its points, one SweepPoint) to a worker started
with `spawn` (a forked CUDA context is unusable), and the worker sends back the point's rows, then
"done". The parent waits at most `point_timeout` seconds between two messages. A point whose
worker goes silent that long is a `timeout` row (the worker is killed); a worker that dies (a
segfault, an abort, an illegal memory access that kills the context) leaves a `crashed` row with
its exit code or signal; an out-of-memory error is an `oom` row (as in-process). A worker whose
CUDA context a kernel fault has poisoned reports it after the point and is replaced. The next point gets a fresh
worker; a healthy worker is reused, so the start-up cost (imports, CUDA context) is paid once.

FA2's first use of a kernel module on Hopper blocks 1-2 minutes while the driver compiles PTX
(KERNELS.md): the default timeout (600 s on a GPU) is well above that.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from dataclasses import replace
from typing import Callable

import torch

from attnbench.errors import error_reason
from attnbench.kernels.sweep import PointRunner, SweepPlan, failure_verdict, point_row
from attnbench.kernels.workload import SweepPoint

def cuda_healthy() -> bool:
    """False once a kernel fault (illegal address, device-side assert) has poisoned this process's
    CUDA context: every later call would fail too, so the worker must be replaced."""
    if not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001  the sticky error itself
        return False


def worker_main(conn, plan: SweepPlan, gpu_name: str | None) -> None:
    """The worker's loop: a point in, its rows out, until the parent sends None or CUDA breaks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        point = conn.recv()
        if point is None:
            return
        try:
            for row in PointRunner(plan, point, gpu_name).rows():
                conn.send(("row", row))
        except Exception as exc:  # inputs or reference failed: the point's one error row
            conn.send(("failed", (failure_verdict(exc), error_reason(exc))))
        healthy = cuda_healthy()
        conn.send(("done", healthy))
        if not healthy:
            return


class Worker:
    def __init__(self, plan: SweepPlan, gpu_name: str | None):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, replace(plan, points=()), gpu_name), daemon=True)
        self.process.start()
        child.close()

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


def run_sweep_isolated(plan: SweepPlan, gpu_name: str | None, on_row: Callable[[dict], None],
                       on_point_done: Callable[[SweepPoint], None], point_timeout: float) -> None:
    """run_sweep's contract (rows to on_row, then on_point_done), each point in a worker process."""
    worker: Worker | None = None
    try:
        for point in plan.points:
            worker = worker if worker is not None and worker.process.is_alive() else Worker(plan, gpu_name)
            worker.conn.send(point)
            while True:
                start = time.monotonic()
                alive = worker.conn.poll(point_timeout)
                if not alive:
                    worker.kill()
                    on_row(point_row(plan, point, gpu_name, "timeout",
                                      f"no result within --point-timeout {point_timeout:g} s; the worker was killed"))
                    worker = None
                    break
                try:
                    kind, payload = worker.conn.recv()
                except (EOFError, OSError):
                    worker.process.join(timeout=5)
                    on_row(point_row(plan, point, gpu_name, "crashed",
                                      f"{worker.death()} after {time.monotonic() - start:.1f} s"))
                    worker.kill()
                    worker = None
                    break
                if kind == "row":
                    on_row(payload)
                elif kind == "failed":
                    on_row(point_row(plan, point, gpu_name, *payload))
                else:
                    if not payload:  # its CUDA context is broken: the next point gets a fresh worker
                        worker.stop()
                        worker = None
                    break
            on_point_done(point)
    finally:
        if worker is not None:
            worker.stop()
