"""A sweep over several local devices (`attnbench kernel --devices all`): one worker per device.

Why workers and not threads: a CUDA context, a JIT compile or a hung kernel belongs to one GPU's
process, and the watchdog pool (workers/pool.py) already keeps a point's failure to that point.
Each device gets its own WorkerPool, fed by a thread: whichever device is free takes the next
point (costliest first, workers/shards.py, so no large point is left to run alone at the end).
A point is the unit, so both strategies of a point, and so every ratio, come from one GPU; every
row records its device (`cuda:1`). The main thread alone hands rows on, so results.csv is still
written a finished point at a time, and Ctrl-C still abandons only the points in flight.

The listed GPUs must be of one model: the run is one GPU's measurement spread out, not a
comparison. `cpu` may be listed more than once (CPU workers: the pipeline, for tests).
"""

from __future__ import annotations

import queue
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import torch

from attnbench.errors import UsageError, error_reason
from attnbench.kernels.sweep import SweepPlan, point_row
from attnbench.kernels.workload import SweepPoint
from attnbench.results.telemetry import gpu_telemetry
from attnbench.workers.isolated import point_handler
from attnbench.workers.pool import START_S, WorkerPool, after_dead_context
from attnbench.workers.shards import by_cost

POLL_S = 0.5  # how often the main thread wakes while it waits for a point (signals are seen then)
START = "start"  # the task every worker runs first: no point is dealt before every device has started


def parse_devices(text: str) -> list[str]:
    """`all`, or a list of `cuda:N` / `cpu` (syntax only: no GPU is looked at)."""
    names = [part.strip() for part in str(text).split(",") if part.strip()]
    if names == ["all"]:
        return names
    if not names:
        raise UsageError("--devices: empty list; give all, or e.g. cuda:0,cuda:1")
    for name in names:
        if name != "cpu" and not (name.startswith("cuda:") and name[5:].isdigit()):
            raise UsageError(f"--devices: {name!r} is not a device; give all, or a list such as cuda:0,cuda:1 "
                             "(cpu may be repeated: CPU workers)")
        if name != "cpu" and names.count(name) > 1:
            raise UsageError(f"--devices: {name} is listed twice; one worker per GPU (two would time each other)")
    return names


def resolve_devices(text: str) -> list[str]:
    """The devices of `--devices` on this machine: present, and every GPU of one model."""
    names = parse_devices(text)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if names == ["all"]:
        if not count:
            raise UsageError("--devices all: no GPU is visible (CPU workers for a test: --devices cpu,cpu)")
        names = [f"cuda:{i}" for i in range(count)]
    for name in names:
        if name.startswith("cuda:") and int(name[5:]) >= count:
            raise UsageError(f"--devices: {name} does not exist; this machine has {count} GPU(s)")
    models = {name: torch.cuda.get_device_name(torch.device(name)) for name in names if name != "cpu"}
    if len(set(models.values())) > 1 or (models and "cpu" in names):
        listed = ", ".join(f"{name} {models.get(name, 'cpu')}" for name in names)
        raise UsageError(f"--devices: the devices differ ({listed}); a run measures one GPU model "
                         "(run one per model and compare them)")
    return names


def device_label(device: str | torch.device) -> str:
    """A row's device: `cpu`, or `cuda:N` (a bare `cuda` is the current GPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    return f"cuda:{torch.cuda.current_device() if device.index is None else device.index}"


@contextmanager
def row_telemetry(devices: list[str], out_dir: Path | None) -> Iterator[Callable[[dict], dict]]:
    """annotate(row): the clocks of the row's own GPU while it was timed (one sampler per device;
    telemetry.csv holds every device's samples, its `source` naming the device when there are several)."""
    with ExitStack() as stack:
        samplers = {}
        for device in dict.fromkeys(devices):
            sampler = samplers[device] = stack.enter_context(gpu_telemetry(device, out_dir))
            if len(set(devices)) > 1 and sampler.name:
                sampler.name = f"{sampler.name} {device}"
        first = next(iter(samplers.values()))
        yield lambda row: samplers.get(row.get("device"), first).annotate(row)


def device_handler(plan: SweepPlan, gpu_name: str | None) -> Callable:
    """Worker side: make the worker's GPU the current one (streams, graphs, library workspaces);
    answer a START task with nothing (it only proves the worker is up), measure any other."""
    device = torch.device(plan.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    measure = point_handler(plan, gpu_name)

    def handle(task, send: Callable) -> None:
        if task != START:
            measure(task, send)
    return handle


def device_shares(devices: list[str]) -> list[dict]:
    """What each device of a run did, as env.json records it (filled in by run_sweep_devices)."""
    return [{"device": d, "start_s": None, "points": 0, "busy_s": 0.0} for d in devices]


def run_sweep_devices(plan: SweepPlan, shares: list[dict], gpu_name: str | None, on_row: Callable[[dict], None],
                      on_point_done: Callable[[SweepPoint], None], point_timeout: float) -> None:
    """run_sweep's contract over one worker per device of `shares` (device_shares), each share's
    start-up, points and busy seconds recorded as it works."""
    DeviceSweep(plan, shares, gpu_name, point_timeout).run(on_row, on_point_done)


class DeviceSweep:
    """Threads that feed one WorkerPool each from one queue of points; the main thread hands rows on."""

    def __init__(self, plan: SweepPlan, shares: list[dict], gpu_name: str | None, point_timeout: float):
        self.plan, self.shares, self.gpu_name, self.point_timeout = plan, shares, gpu_name, point_timeout
        self.devices = [share["device"] for share in shares]
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        for point in by_cost(list(plan.points)):
            self.todo.put(point)
        self.finished: queue.SimpleQueue = queue.SimpleQueue()
        self.stop = threading.Event()
        self.started = threading.Barrier(len(self.devices))
        self.pools = [WorkerPool(device_handler, (replace(plan, points=(), device=d), gpu_name), point_timeout)
                      for d in self.devices]

    def run(self, on_row: Callable[[dict], None], on_point_done: Callable[[SweepPoint], None]) -> None:
        threads = [threading.Thread(target=self.serve, args=(i,), name=f"attnbench-{d}", daemon=True)
                   for i, d in enumerate(self.devices)]
        for thread in threads:
            thread.start()
        try:
            self.hand_on(len(threads), on_row, on_point_done)
        finally:
            self.stop.set()
            self.started.abort()
            for pool in self.pools:  # an interrupted run: end the points in flight now
                worker = pool.worker
                if worker is not None and worker.process.is_alive():
                    worker.process.kill()
            for thread in threads:
                thread.join(timeout=10)

    def serve(self, slot: int) -> None:
        """A device's thread: start its worker, then take points until none is left."""
        try:
            self.start_worker(slot)
            while not self.stop.is_set():
                try:
                    point = self.todo.get_nowait()
                except queue.Empty:
                    break
                start = time.monotonic()
                rows = [{**row, "device": self.devices[slot]} for row in self.measure(slot, point)]
                self.finished.put((slot, point, rows, time.monotonic() - start))
        except Exception as exc:  # noqa: BLE001  a bug here must not hang the run: hand_on says what is left
            self.shares[slot]["error"] = error_reason(exc)
        finally:
            self.pools[slot].close(kill=self.stop.is_set())
            self.finished.put((slot, None, None, 0.0))

    def start_worker(self, slot: int) -> None:
        """Start this device's worker, then wait for the others: the first points go to every
        device at once, not all to the one that happened to start first."""
        began = time.monotonic()
        try:
            outcome = self.pools[slot].run(START)
            self.shares[slot]["start_s"] = round(time.monotonic() - began, 3)
            if outcome.failure is not None:  # its points will say so too, one row each
                self.shares[slot]["start_failure"] = outcome.failure[1]
        finally:
            try:
                self.started.wait(timeout=max(self.point_timeout, START_S) + 60)
            except threading.BrokenBarrierError:
                pass

    def measure(self, slot: int, point: SweepPoint) -> list[dict]:
        outcome = self.pools[slot].run(point)
        rows = outcome.items
        if outcome.failure is not None:
            rows.append(point_row(self.plan, point, self.gpu_name, *outcome.failure))
        return after_dead_context(rows) if outcome.context_died else rows

    def hand_on(self, serving: int, on_row: Callable[[dict], None],
                on_point_done: Callable[[SweepPoint], None]) -> None:
        """Main thread: each finished point's rows to on_row, then on_point_done, until every device
        is done; a point no device took (every thread failed) becomes one error row."""
        while serving:
            try:
                slot, point, rows, seconds = self.finished.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if point is None:
                serving -= 1
                continue
            for row in rows:
                on_row(row)
            on_point_done(point)
            self.shares[slot]["points"] += 1
            self.shares[slot]["busy_s"] = round(self.shares[slot]["busy_s"] + seconds, 3)
        errors = "; ".join(f"{s['device']}: {s['error']}" for s in self.shares if "error" in s)
        while not self.todo.empty():
            point = self.todo.get_nowait()
            on_row(point_row(self.plan, point, self.gpu_name, "error", f"no device measured it ({errors})"))
            on_point_done(point)
