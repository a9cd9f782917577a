"""Running a kernel sweep: for each point, every backend x strategy x mode, checked then timed.

The loop measures and nothing else: each finished (point, backend, strategy, mode) becomes one
plain dict row handed to `on_row`, and `on_point_done` marks a point complete, so a run stopped
midway keeps every point it finished; a failure in one row becomes an error row while the sweep
goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

import torch

from attnbench.errors import error_reason
from attnbench.kernels import roofline
from attnbench.kernels.backends.base import Backend, Plan
from attnbench.kernels.backends.reference import reference_attention
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.check import check_output
from attnbench.kernels.inputs import Inputs, make_inputs
from attnbench.kernels.metadata import build_metadata, measure_host_us
from attnbench.kernels.timing import (
    TimedKernel,
    TimingConfig,
    estimate_call_ms,
    host_median_us,
    make_timed_kernel,
    time_kernels,
)
from attnbench.kernels.workload import Batch, SweepPoint, build_batch
from attnbench.results.profiling import nvtx_range, profile_to_run


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


OOM_MARKERS = ("OutOfMemoryError", "out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def failure_verdict(exc: BaseException) -> str:
    """`oom` for an allocation that failed (its own verdict: the point may fit elsewhere), else `error`."""
    text = f"{type(exc).__name__}: {exc}"
    return "oom" if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(m in text for m in OOM_MARKERS) \
        else "error"


def point_fields(p: SweepPoint, batch: Batch | None = None) -> dict:
    batch = batch or build_batch(p)
    return {**p.key(), "batch_tokens": batch.num_tokens, "num_seqs": batch.num_seqs, "num_decode_seqs": batch.num_decode_seqs,
            "max_kv_len": max(batch.kv_lens), "total_kv_tokens": sum(batch.kv_lens),
            "lengths_rule": batch.rule}


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


class PointRunner:
    """Everything measured for one point, sharing its inputs and reference output."""

    def __init__(self, plan: SweepPlan, point: SweepPoint, gpu_name: str | None):
        self.plan, self.point, self.gpu_name = plan, point, gpu_name
        self.device = torch.device(plan.device)
        self.batch = build_batch(point)
        self.base = {**point_fields(point, self.batch), "device": self.device.type, "gpu": gpu_name or "cpu"}

    def rows(self) -> Iterable[dict]:
        inputs = make_inputs(self.point, self.device)
        unified = build_metadata("unified", inputs.batch, inputs.block_table).to(self.device)
        reference = reference_attention(
            inputs.q, inputs.k_cache, inputs.v_cache, list(inputs.batch.query_lens),
            list(inputs.batch.kv_lens), unified.block_table, self.point.causal, self.point.softmax_scale)
        for backend_name in self.plan.backends:
            backend = get_backend(backend_name)
            package, version = backend.library()
            prepared: dict[str, Prepared] = {}
            for strategy in self.plan.strategies:
                common = {**self.base, "backend": backend_name, "library": package,
                          "library_version": version, "strategy": strategy}
                reason = backend.supports(self.point, strategy, self.device)
                if reason:
                    yield from (self._skip(common, mode, reason) for mode in self.plan.modes)
                    continue
                try:
                    prepared[strategy] = self._prepare(backend, strategy, inputs, common)
                except Exception as exc:
                    yield from (self._error(common, mode, exc) for mode in self.plan.modes)
            for mode in self.plan.modes:
                yield from self._measure_mode(backend, mode, prepared, reference)

    def _prepare(self, backend: Backend, strategy: str, inputs: Inputs, common: dict) -> Prepared:
        metadata = build_metadata(strategy, inputs.batch, inputs.block_table).to(self.device)
        host_us = measure_host_us(strategy, inputs.batch, inputs.block_table, self.device)
        plan: Plan = backend.plan(strategy, self.point, metadata)
        plan_us = measure_plan_us(backend, strategy, self.point, metadata)
        out = torch.empty_like(inputs.q)
        q, k_cache, v_cache = inputs.q, inputs.k_cache, inputs.v_cache

        def fn() -> torch.Tensor:
            return plan.run(q, k_cache, v_cache, out)

        est_ms = estimate_call_ms(fn, self.device)  # the first call (maybe a JIT compile) is never timed
        row = {**common, "host_metadata_us": host_us, "host_plan_us": plan_us,
               "kernel_launches": len(plan.launches), **plan.details}
        return Prepared(fn, out, est_ms, row)

    def _measure_mode(self, backend: Backend, mode: str, prepared: dict[str, Prepared], reference) -> Iterable[dict]:
        """Check each strategy once, then time all of them interleaved (one run, one ratio)."""
        cfg = replace(self.plan.timing, mode=mode)
        l2 = "cold" if cfg.cold_l2 else "warm"
        checked: list[tuple[dict, TimedKernel]] = []
        for strategy, prep in prepared.items():
            row = {**prep.row, "mode": mode, "l2": l2}
            if mode == "graph" and not backend.graph_safe:
                yield self._skip(row, mode, f"{backend.name} cannot be captured in a CUDA graph")
                continue
            try:
                runner = make_timed_kernel(prep.fn, mode, self.device, cfg, prep.est_ms)
                prep.out.fill_(float("nan"))  # poison: a row passes only if every element was written
                with nvtx_range(f"check {backend.name} {strategy} {mode}"):
                    runner()
                checked.append(({**row, **check_output(prep.out, reference, self.point.dtype)}, runner))
            except Exception as exc:
                yield self._error(row, mode, exc)
        if not checked:
            return
        try:
            # strategies are timed interleaved, so one range holds them all
            with nvtx_range(f"time {backend.name} {mode}: {','.join(row['strategy'] for row, _ in checked)}"):
                timings = time_kernels([runner for _, runner in checked], cfg)
        except Exception as exc:
            yield from (self._error(row, mode, exc) for row, _ in checked)
            return
        for (row, _), timing in zip(checked, timings):
            yield {
                **row,
                "median_ms": timing.median_ms, "p10_ms": timing.p10_ms, "p90_ms": timing.p90_ms,
                "samples": timing.n, "calls_per_sample": timing.calls_per_sample,
                "converged": timing.converged,
                "samples_ms": " ".join(f"{s:.6g}" for s in timing.samples_ms),
                **roofline.rates(self.point, self.batch, timing.median_ms, self.gpu_name),
            }
        if self.plan.profile_out is not None:
            for row, runner in checked:
                self._profile(runner, row)

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
        return {**common, "mode": mode, "verdict": "skipped", "reason": reason}

    def _error(self, common: dict, mode: str, exc: Exception) -> dict:
        return {**common, "mode": mode, "verdict": failure_verdict(exc), "reason": error_reason(exc)}


def point_row(plan: SweepPlan, point: SweepPoint, gpu_name: str | None, verdict: str, reason: str) -> dict:
    """The one row of a point that failed as a whole (its inputs, its reference, its worker)."""
    return {**point_fields(point), "device": plan.device, "gpu": gpu_name or "cpu", "backend": ",".join(plan.backends),
            "strategy": "", "mode": "", "verdict": verdict, "reason": reason}


def run_sweep(plan: SweepPlan, gpu_name: str | None, on_row: Callable[[dict], None],
              on_point_done: Callable[[SweepPoint], None] = lambda p: None) -> None:
    """Every point of the plan; a point's rows go to on_row, then on_point_done(point) says it is
    complete. An interrupt (KeyboardInterrupt, SIGTERM) propagates before on_point_done: the
    caller can tell a finished point from an abandoned one."""
    for point in plan.points:
        try:
            with nvtx_range(f"point {point.kind} N={point.num_tokens} {point.num_heads}x{point.head_dim}"):
                for row in PointRunner(plan, point, gpu_name).rows():
                    on_row(row)
        except Exception as exc:  # inputs or reference failed: record it, keep going
            on_row(point_row(plan, point, gpu_name, failure_verdict(exc), error_reason(exc)))
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        on_point_done(point)
