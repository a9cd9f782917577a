"""Running a kernel sweep: for each point, every backend x strategy x mode, checked then timed.

The loop measures and nothing else: each finished (point, backend, strategy, mode) is one dict row
handed to `on_row`, `on_point_done` marks a point complete (a run stopped midway keeps every point
it finished), and a failure in one row becomes an error row while the sweep goes on.

Replicates: a point is measured in rounds. Each allocates the inputs afresh (while the last round's
are still held, when there is room, so they land elsewhere in device memory), re-plans every strategy
and re-captures its graphs, then checks and times every open backend x mode, strategies interleaved;
round r of every open row runs before round r + 1 of any. So the spread of a row's replicate medians
holds what differs between runs (placement, plan, graph, GPU state), which one timing loop's samples
cannot show. A backend x mode closes after `SweepPlan.replicates` rounds, or with a `rule` once its
rows have replicates enough (kernels/slots.py). A row fails if any replicate's output check does.

Where a batch has both a prefill and a decode part, split's two launches are then timed alone, after
the rows' own timing in their last replicate (kernels/parts.py): the split and fused rows' parts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

import torch

from attnbench.errors import error_reason
from attnbench.kernels.backends.base import Backend, Plan
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.check import check_twice
from attnbench.kernels.inputs import HEADROOM, Inputs, input_bytes, make_inputs
from attnbench.kernels.metadata import build_metadata, measure_host_us
from attnbench.kernels.parts import split_parts, time_parts
from attnbench.kernels.refcache import ReferenceCache, compute_reference
from attnbench.kernels.rows import BatchColumns, Measurement, RunColumns, cells
from attnbench.kernels.replicate_rule import ReplicateRule
from attnbench.kernels.slots import Slot, close_together, finished
from attnbench.kernels.timing import (
    TimedKernel,
    TimingConfig,
    estimate_call_ms,
    host_median_us,
    make_timed_kernel,
    threads_for,
    time_kernels,
)
from attnbench.kernels.workload import Batch, SweepPoint, build_batch
from attnbench.profiler import nvtx_range, profile_to_run


@dataclass(frozen=True)
class SweepPlan:
    points: tuple[SweepPoint, ...]
    backends: tuple[str, ...]
    strategies: tuple[str, ...]
    modes: tuple[str, ...]
    timing: TimingConfig
    device: str
    profile_out: Path | None = None  # --profile: the run directory (traces under profile/)
    notices: tuple[str, ...] = ()  # what the user should know before it runs (defaults chosen for them)
    isolate: bool = False  # run each point in a worker process (attnbench.workers.isolated)
    point_timeout_s: float = 600.0  # the worker's watchdog: longest silence before a point is a timeout
    replicates: int = 1  # each row measured this many times (the most, with a rule), on fresh inputs, plan and graph
    rule: ReplicateRule | None = None  # stop a row's replicates once they are enough (None: exactly `replicates`)
    unfit: tuple[tuple[SweepPoint, str], ...] = ()  # points left out (too big here) and why: `skipped` rows
    lacking: tuple[tuple[str, str], ...] = ()  # (backend, strategy) the backend does not have: no rows at all

    def combos(self) -> set[tuple[str, str, str]]:
        """(backend, strategy, mode) of every row a point of this plan writes."""
        return {(b, s, m) for b in self.backends for s in self.strategies for m in self.modes
                if (b, s) not in self.lacking}


OOM_MARKERS = ("OutOfMemoryError", "out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def failure_verdict(exc: BaseException) -> str:
    """`oom` for an allocation that failed (its own verdict: the point may fit elsewhere), else `error`."""
    text = f"{type(exc).__name__}: {exc}"
    return "oom" if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(m in text for m in OOM_MARKERS) \
        else "error"


def point_fields(p: SweepPoint, batch: Batch | None = None) -> dict:
    return cells(p, BatchColumns.of(batch or build_batch(p)))


def measure_plan_us(backend: Backend, strategy: str, point: SweepPoint, metadata, repeats: int = 21) -> float:
    """Median host time (µs) of `backend.plan(...)`: the library's share of the host cost."""
    return host_median_us(lambda: backend.plan(strategy, point, metadata), repeats)


@dataclass
class Prepared:
    """One strategy of one backend, planned: the timed callable, its output and its row so far."""

    fn: Callable[[], torch.Tensor]
    out: torch.Tensor
    est_ms: float
    row: dict
    parts: dict[str, Callable[[], torch.Tensor]] = field(default_factory=dict)  # split: each part alone


class PointRunner:
    """Everything measured for one point, over its replicates, sharing its reference output."""

    def __init__(self, plan: SweepPlan, point: SweepPoint, gpu_name: str | None,
                 references: ReferenceCache | None = None):
        """`references`: a process's cache of reference outputs (ab's workers: kernels/refcache.py)."""
        self.plan, self.point, self.gpu_name, self.references = plan, point, gpu_name, references
        self.device = torch.device(plan.device)
        self.batch = build_batch(point)
        self.base = point_fields(point, self.batch)

    def rows(self) -> Iterable[dict]:
        """The point's rows; a backend's rows come as soon as none of them is open."""
        with threads_for(self.device):
            backends = [get_backend(name) for name in self.plan.backends]
            slots = self._slots(backends)
            inputs, reference = None, None
            for _ in range(self.plan.replicates):
                if not backends:
                    break
                if inputs is not None and not self._room_for_two():
                    inputs = None  # free the last replicate's inputs first
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                inputs = make_inputs(self.point, self.device)  # the last one's still held: placed elsewhere
                if reference is None:  # the same every replicate: the inputs are drawn from the point's seed
                    reference = self.references.reference(inputs) if self.references else compute_reference(inputs)
                for backend in list(backends):
                    self._replicate(backend, inputs, reference, slots)
                    done = finished(backends, slots, [backend])
                    yield from (slot.result(self.point, self.batch, self.gpu_name) for slot in done)

    def _slots(self, backends: list[Backend]) -> dict[tuple[str, str, str], Slot]:
        """Every row of the point in output order, skip rows decided up front."""
        slots = {}
        l2 = "cold" if self.plan.timing.cold_l2 else "warm"
        for backend in backends:
            package, version = backend.library()
            for mode in self.plan.modes:
                for strategy in self.plan.strategies:
                    if (backend.name, strategy) in self.plan.lacking:
                        continue
                    row = {**self.base, **cells(RunColumns(self.device.type, self.gpu_name or "cpu", backend.name,
                                                           package, version, strategy, mode, l2))}
                    slot = slots[(backend.name, strategy, mode)] = Slot(row)
                    reason = backend.supports(self.point, strategy, self.device)
                    if not reason and mode == "graph":
                        reason = backend.graph_refusal(strategy)
                    if reason:
                        slot.final = self._skip(row, mode, reason)
        return slots

    def _room_for_two(self) -> bool:
        """Whether a second copy of the inputs fits in free GPU memory (host placement is not what varies)."""
        return self.device.type == "cuda" and \
            torch.cuda.mem_get_info(self.device)[0] > HEADROOM * input_bytes(self.point, self.batch)

    def _replicate(self, backend: Backend, inputs: Inputs, reference, slots: dict) -> None:
        """One replicate of one backend: plan every open strategy afresh, then check and time each mode."""
        prepared: dict[str, Prepared] = {}
        for strategy in self.plan.strategies:
            live = [slots.get((backend.name, strategy, m)) for m in self.plan.modes]
            live = [slot for slot in live if slot is not None and slot.open]
            if not live:
                continue
            try:
                prepared[strategy] = self._prepare(backend, strategy, inputs, host_costs=not live[0].timings)
            except Exception as exc:
                for slot in live:
                    slot.final = self._error(slot.row, slot.row["mode"], exc)
        for mode in self.plan.modes:
            self._measure_mode(backend, mode, prepared, reference, slots)

    def _prepare(self, backend: Backend, strategy: str, inputs: Inputs, host_costs: bool) -> Prepared:
        metadata = build_metadata(strategy, inputs.batch, inputs.block_table).to(self.device)
        plan: Plan = backend.plan(strategy, self.point, metadata)
        if plan.static_kv is not None:  # these caches never change between timed calls: work on them is done once
            plan.static_kv(inputs.k_cache, inputs.v_cache)
        measured = Measurement(kernel_launches=len(plan.launches))
        if host_costs:  # host costs are measured once, in the first replicate
            measured = replace(measured,
                               host_metadata_us=measure_host_us(strategy, inputs.batch, inputs.block_table, self.device),
                               host_plan_us=measure_plan_us(backend, strategy, self.point, metadata))
        row = {**cells(measured), **plan.details}
        out = torch.empty_like(inputs.q)
        q, k_cache, v_cache = inputs.q, inputs.k_cache, inputs.v_cache

        def fn() -> torch.Tensor:
            return plan.run(q, k_cache, v_cache, out)

        parts = {name: (lambda part=part: part.run(q, k_cache, v_cache, out))
                 for name, part in split_parts(plan, metadata).items()}
        est_ms = estimate_call_ms(fn, self.device)  # the first call (maybe a JIT compile) is never timed
        row.update(plan.decisions())  # read back now, before any capture or timed call
        return Prepared(fn, out, est_ms, row, parts)

    def _measure_mode(self, backend: Backend, mode: str, prepared: dict[str, Prepared], reference,
                      slots: dict) -> None:
        """Check each strategy, then time all of them interleaved (one run, one ratio)."""
        cfg = replace(self.plan.timing, mode=mode)
        checked: list[tuple[Slot, TimedKernel]] = []
        for strategy, prep in prepared.items():
            slot = slots[(backend.name, strategy, mode)]
            if not slot.open:
                continue
            slot.row.update(prep.row)
            try:
                runner = make_timed_kernel(prep.fn, mode, self.device, cfg, prep.est_ms)
                with nvtx_range(f"check {backend.name} {strategy} {mode}"):  # poisoned, run, checked: twice
                    slot.checks.append(check_twice(runner, prep.out, reference, self.point.dtype))
                checked.append((slot, runner))
            except Exception as exc:
                slot.final = self._error(slot.row, mode, exc)
        if not checked:
            return
        start = time.time()
        try:  # strategies are timed interleaved, so one range holds them all
            with nvtx_range(f"time {backend.name} {mode}: {','.join(slot.row['strategy'] for slot, _ in checked)}"):
                timings = time_kernels([runner for _, runner in checked], cfg)
        except Exception as exc:
            for slot, _ in checked:
                slot.final = self._error(slot.row, mode, exc)
            return
        for (slot, _), timing in zip(checked, timings):
            slot.timings.append(timing)
            slot.window = [slot.window[0] if slot.window else start, time.time()]
        if not close_together([slot for slot, _ in checked], self.plan.rule, self.plan.replicates):
            return
        self._time_parts(backend, mode, prepared, slots, cfg)
        if self.plan.profile_out is not None:
            for slot, runner in checked:
                self._profile(runner, slot.row)

    def _time_parts(self, backend: Backend, mode: str, prepared: dict[str, Prepared], slots: dict,
                    cfg: TimingConfig) -> None:
        """After the rows' timing: split's two launches, each alone (kernels/parts.py), onto the
        split and fused rows; a failure is said in their details, the rows stand."""
        split, slot = prepared.get("split"), slots.get((backend.name, "split", mode))
        if split is None or not split.parts or slot is None or slot.final is not None:
            return
        try:
            with nvtx_range(f"parts {backend.name} {mode}"):
                values = time_parts(split.parts, mode, self.device, cfg)
        except Exception as exc:
            values = {"part_timing_error": error_reason(exc)}
        for strategy in ("split", "fused"):
            target = slots.get((backend.name, strategy, mode))
            if target is not None and target.final is None:
                target.row.update(values)

    def _profile(self, runner: TimedKernel, row: dict) -> None:
        """After timing: one torch.profiler window over a few more calls of the timed runner."""
        p = self.point
        hit = f"-hit{round(p.prefix_ratio * 100)}" if p.kind == "prefix" else ""
        label = f"{p.kind}-{p.num_tokens}-{p.num_heads}x{p.head_dim}{hit}-{row['backend']}-{row['strategy']}-{row['mode']}"
        context = {k: row.get(k) for k in ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim",
                                           "prefix_ratio", "backend", "strategy", "mode")}
        context["calls_per_sample"] = runner.inner  # a profiler step is one sample: inner calls or one replay
        with nvtx_range(f"profile {label}"):
            profile_to_run(runner, self.plan.profile_out, label, context)

    def _skip(self, common: dict, mode: str, reason: str) -> dict:
        return {**common, "mode": mode, **cells(Measurement(verdict="skipped", reason=reason))}

    def _error(self, common: dict, mode: str, exc: Exception) -> dict:
        return {**common, "mode": mode, **cells(Measurement(verdict=failure_verdict(exc), reason=error_reason(exc)))}


def point_row(plan: SweepPlan, point: SweepPoint, gpu_name: str | None, verdict: str, reason: str) -> dict:
    """The one row of a point that failed as a whole (its inputs, its reference, its worker)."""
    return cells(point, BatchColumns.of(build_batch(point)),
                 RunColumns(plan.device, gpu_name or "cpu", ",".join(plan.backends)),
                 Measurement(verdict=verdict, reason=reason))


def release_cache(point: SweepPoint) -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_sweep(plan: SweepPlan, gpu_name: str | None, on_row: Callable[[dict], None],
              on_point_done: Callable[[SweepPoint], None] = lambda p: None,
              after_point: Callable[[SweepPoint], None] = release_cache) -> None:
    """Every point of the plan; a point's rows go to on_row, then after_point(point) (frees its
    cached memory), then on_point_done(point) says it is complete. An interrupt (KeyboardInterrupt,
    SIGTERM) propagates before on_point_done: the caller can tell a finished point from an
    abandoned one. So may what after_point raises: a kernel job's checks there that the point left
    the CUDA context alive (runs/kernel.py), since after a kernel fault every later call fails."""
    for point in plan.points:
        try:
            with nvtx_range(f"point {point.kind} N={point.num_tokens} {point.num_heads}x{point.head_dim}"):
                for row in PointRunner(plan, point, gpu_name).rows():
                    on_row(row)
        except Exception as exc:  # inputs or reference failed: record it, keep going
            on_row(point_row(plan, point, gpu_name, failure_verdict(exc), error_reason(exc)))
        after_point(point)
        on_point_done(point)
