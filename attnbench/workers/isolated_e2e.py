"""e2e points in worker processes (`attnbench e2e --isolate`): one (input_len, output_len,
batch_size) point is one task of the worker pool (attnbench.workers.pool), so a point that hangs,
crashes its process or kills the CUDA context costs that point only, and the run goes on.

The unit is the point, not the row, because a point's rows are compared with each other (the
agreement of unified vs split, graph vs eager) and share one KV cache. A worker builds the model
and its engines once, from the run's ModelSpec, while it starts (its own clock under the
watchdog), and keeps them for every point it is sent; a fresh worker, after a lost one, builds
them again. Each measured row is a sign of life; the point's rows and agreements come back at
its end. A point lost as a whole is one `timeout` / `crashed` row per backend x strategy.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from attnbench.device import select
from attnbench.e2e.runner import E2EArgs, ModelSpec, failed_rows, run_point
from attnbench.workers.pool import WorkerPool, after_dead_context

Measure = Callable[[dict], tuple[list[dict], list[dict]]]  # a point's fields -> (rows, agreements)


def point_handler(spec: ModelSpec, args: E2EArgs, choices: dict, profile_out: Path | None) -> Callable:
    """Worker side: build the model once, then measure each point it is sent."""
    select(spec.device)  # a spawned worker starts on cuda:0 whatever the run's device
    engines = spec.build()

    def handle(fields: dict, send: Callable) -> None:
        send(run_point(engines, args, choices, fields, profile_out, on_row=lambda row: send()))
    return handle


@contextmanager
def isolated_points(spec: ModelSpec, args: E2EArgs, choices: dict, profile_out: Path | None,
                    point_timeout: float) -> Iterator[Measure]:
    """run_point's contract, each point measured in a worker process."""
    with WorkerPool(point_handler, (spec, args, choices, profile_out), point_timeout) as pool:
        def measure(fields: dict) -> tuple[list[dict], list[dict]]:
            outcome = pool.run(fields)
            rows, agreements = outcome.items[0] if outcome.items else ([], [])
            if outcome.failure is not None:
                rows, agreements = failed_rows(args, choices, fields, *outcome.failure), []
            return (after_dead_context(rows) if outcome.context_died else rows), agreements
        yield measure
