"""Kernel sweep points in worker processes (`attnbench kernel --isolate`): one point is one task of
the worker pool (attnbench.workers.pool), so a point that hangs, crashes its process, runs out of
memory or kills the CUDA context costs that point only, and the sweep goes on.

The worker gets plain data (the SweepPlan less its points), measures each point it is sent with
the in-process PointRunner and streams the rows back; each row is also the watchdog's sign of
life. A point's rows are handed on once the point is over, because whether a failed row is
`error` or `crashed` is known only then: after a fault that killed the CUDA context they are
`crashed`. A point lost as a whole (timeout, crash, its inputs failing) is one point_row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from attnbench.device import select
from attnbench.kernels.sweep import PointRunner, SweepPlan, point_row
from attnbench.kernels.workload import SweepPoint
from attnbench.workers.pool import WorkerPool, after_dead_context


def point_handler(plan: SweepPlan, gpu_name: str | None) -> Callable:
    """Worker side: measure a point, sending each row as it is made."""
    select(torch.device(plan.device))  # a spawned worker starts on cuda:0 whatever the plan's device

    def handle(point: SweepPoint, send: Callable) -> None:
        for row in PointRunner(plan, point, gpu_name).rows():
            send(row)
    return handle


def run_sweep_isolated(plan: SweepPlan, gpu_name: str | None, on_row: Callable[[dict], None],
                       on_point_done: Callable[[SweepPoint], None], point_timeout: float) -> None:
    """run_sweep's contract (a point's rows to on_row, then on_point_done), each point in a worker."""
    with WorkerPool(point_handler, (replace(plan, points=()), gpu_name), point_timeout) as pool:
        for point in plan.points:
            outcome = pool.run(point)
            rows = outcome.items
            if outcome.failure is not None:
                rows.append(point_row(plan, point, gpu_name, *outcome.failure))
            for row in after_dead_context(rows) if outcome.context_died else rows:
                on_row(row)
            on_point_done(point)
