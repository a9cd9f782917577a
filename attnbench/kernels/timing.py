"""Timing a kernel callable: warm up, then sample until the median is stable or the budget ends.

One function does all of it, as triton.testing.do_bench does, and returns samples, not opinions.
- eager: the callable launched back to back, `inner` calls per CUDA-event pair, so launch
  overhead and launch gaps are included, as in a serving loop without graphs.
- graph: `inner` calls captured in one CUDA graph, one replay per event pair (for split, both
  launches of each call are in the graph). Only kernel time and in-graph gaps remain. `inner` is
  chosen from a graph replay's device time, so a microsecond kernel gets ~100 calls per sample
  and the graph launch's share of each per-call time stays small and the same run to run.
- cold L2: one call per sample, a buffer twice the L2 size read before each sample (a zeroing
  leaves dirty lines whose write-back falls inside the sample), timed by its own events and kept
  apart (Timing.flush_ms), so every sample reads its K/V from HBM; runs/l2check.py proves it.
On the CPU the clock is time.perf_counter and the callable runs eagerly.

Several runners (a point's strategies) are timed in alternating rounds of samples, so drift in
clocks or power hits them alike and their ratio is measured in one run. Stopping rule: after at
least `min_samples`, stop once every runner's interquartile range is within `rel_spread` of its
median, or when `budget_ms` per runner has passed, or at `max_samples`.

A row is timed in several replicates (fresh inputs, plan and graph: kernels/sweep.py), each a
Timing; `Replicated` joins them. A CPU sweep runs on one intra-op thread unless OMP_NUM_THREADS
says otherwise: on a few busy cores, more threads made a CPU run several times slower
(docs/measurements/cpu.md).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from attnbench.kernels.choices import MODES


@dataclass(frozen=True)
class TimingConfig:
    mode: str = "eager"
    cold_l2: bool = False
    warmup_ms: float = 25.0
    budget_ms: float = 1000.0
    min_samples: int = 10
    max_samples: int = 500
    rel_spread: float = 0.01
    sample_ms: float = 0.5  # aim for samples this long, so event resolution (~0.5 µs) stays < 0.1 %


@dataclass
class Timing:
    samples_ms: list[float] = field(repr=False)
    calls_per_sample: int
    converged: bool
    flush_ms: list[float] = field(default_factory=list, repr=False)  # cold L2: each sample's flush, outside it

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def quantile(self, q: float) -> float:
        return _quantile(sorted(self.samples_ms), q)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)


@dataclass
class Replicated:
    """One row's timings over its replicates, in the order they ran."""

    timings: list[Timing]

    @property
    def medians_ms(self) -> list[float]:
        return [t.median_ms for t in self.timings]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.medians_ms)

    @property
    def samples_ms(self) -> list[float]:
        return [s for t in self.timings for s in t.samples_ms]

    def quantile(self, q: float) -> float:
        """Over all samples, widened to hold the median of medians (few samples can put it outside)."""
        value = _quantile(sorted(self.samples_ms), q)
        return min(value, self.median_ms) if q < 0.5 else max(value, self.median_ms)

    @property
    def converged(self) -> bool:
        return all(t.converged for t in self.timings)


def cpu_threads() -> int:
    """Intra-op threads of a CPU sweep: OMP_NUM_THREADS when set, else one."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, int(value)) if value.isdigit() else 1


@contextmanager
def threads_for(device: torch.device) -> Iterator[None]:
    """On the CPU, run on cpu_threads() intra-op threads, and put the count back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(cpu_threads() if device.type == "cpu" else before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def relative_iqr(samples: list[float]) -> float:
    s = sorted(samples)
    med = statistics.median(s)
    return (_quantile(s, 0.75) - _quantile(s, 0.25)) / med if med > 0 else math.inf


class TimedKernel:
    """Runs a kernel callable the way it will be timed: eagerly, or as a captured CUDA graph."""

    def __init__(self, fn: Callable[[], torch.Tensor], mode: str, device: torch.device, inner: int = 1):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        if mode == "graph" and device.type != "cuda":
            raise ValueError("graph mode needs a CUDA device")
        self.fn, self.mode, self.device, self.inner = fn, mode, device, inner
        self.graph: torch.cuda.CUDAGraph | None = None
        if mode == "graph":
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream(device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                for _ in range(inner):
                    fn()
            torch.cuda.synchronize(device)

    def __call__(self) -> None:
        """One sample's worth of work: `inner` calls (or one replay of them)."""
        if self.graph is not None:
            self.graph.replay()
        else:
            for _ in range(self.inner):
                self.fn()


def host_median_us(fn: Callable[[], object], repeats: int = 21) -> float:
    """Median host time (µs) of fn(): the host-side steps of a strategy (metadata, planning)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_flush_buffers: dict[int, torch.Tensor] = {}


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _flush_buffers:
        l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 64 * 2**20
        _flush_buffers[index] = torch.zeros(2 * l2, dtype=torch.uint8, device=device)
    return _flush_buffers[index]


def estimate_call_ms(fn: Callable[[], torch.Tensor], device: torch.device) -> float:
    """A quick eager estimate, after one untimed call (first calls may compile or load modules)."""
    fn()
    _sync(device)
    calls, elapsed = 0, 0.0
    start = time.perf_counter()
    while calls < 5 and elapsed < 0.01:  # slow callables (the CPU reference) get one timed call
        fn()
        _sync(device)
        calls += 1
        elapsed = time.perf_counter() - start
    return elapsed * 1e3 / calls


def choose_inner(est_ms: float, cfg: TimingConfig) -> int:
    if cfg.cold_l2:
        return 1
    return max(1, min(100, math.ceil(cfg.sample_ms / max(est_ms, 1e-4))))


def estimate_replay_ms(fn: Callable[[], torch.Tensor], device: torch.device, replays: int = 20) -> float:
    """Device time of one call replayed from a CUDA graph: what a graph-mode sample is made of.

    The eager estimate of a microsecond kernel is its launch overhead, many times its run time; a
    graph's `inner` chosen from it would be small and vary from run to run, and with it the share
    of the graph launch in each per-call time.
    """
    runner = TimedKernel(fn, "graph", device, inner=1)
    for _ in range(3):
        runner()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        runner()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / replays


def make_timed_kernel(fn: Callable[[], torch.Tensor], mode: str, device: torch.device, cfg: TimingConfig,
                eager_est_ms: float) -> TimedKernel:
    """A TimedKernel whose `inner` calls make a sample of about cfg.sample_ms of device time."""
    est_ms = estimate_replay_ms(fn, device) if mode == "graph" else eager_est_ms
    return TimedKernel(fn, mode, device, inner=choose_inner(est_ms, cfg))


def _events(count: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]


def sample_round(runner: TimedKernel, count: int, flush: torch.Tensor | None) -> tuple[list[float], list[float]]:
    """`count` samples of one runner, in ms per call, and (with `flush`) each sample's flush in ms:
    the flush runs just before its sample, between its own events, outside the sample's."""
    if runner.device.type != "cuda":
        samples = []
        for _ in range(count):
            t0 = time.perf_counter()
            runner()
            samples.append((time.perf_counter() - t0) * 1e3 / runner.inner)
        return samples, []
    events, flushes = _events(count), _events(count if flush is not None else 0)
    for i, (start_ev, end_ev) in enumerate(events):
        if flush is not None:
            flushes[i][0].record()
            flush.sum()  # read through: evicts what the last sample read, leaves clean lines
            flushes[i][1].record()
        start_ev.record()
        runner()
        end_ev.record()
    torch.cuda.synchronize(runner.device)
    return [s.elapsed_time(e) / runner.inner for s, e in events], [s.elapsed_time(e) for s, e in flushes]


def time_kernels(runners: list[TimedKernel], cfg: TimingConfig) -> list[Timing]:
    """Time several runners in alternating rounds, so drift (clocks, power) hits all alike.

    A ratio between two of them (split / unified) is then measured in one run, round by round.
    Sampling stops when every runner's spread is within rel_spread, or the budget (per runner)
    is spent, or max_samples is reached.
    """
    if not runners:
        return []
    device = runners[0].device
    cuda = device.type == "cuda"
    flush = l2_flush_buffer(device) if (cuda and cfg.cold_l2) else None
    for runner in runners:
        # synchronize every call: launches are asynchronous, and an unsynchronized loop would
        # queue seconds of GPU work in a few host milliseconds
        deadline = time.perf_counter() + cfg.warmup_ms / 1e3
        runner()
        _sync(device)
        while time.perf_counter() < deadline:
            runner()
            _sync(device)

    samples: list[list[float]] = [[] for _ in runners]
    flushed: list[list[float]] = [[] for _ in runners]
    started = time.perf_counter()
    budget_s = cfg.budget_ms / 1e3 * len(runners)
    per_round = 10 if cuda else 1
    while len(samples[0]) < cfg.max_samples:
        count = min(per_round, cfg.max_samples - len(samples[0]))
        for runner, own, own_flushes in zip(runners, samples, flushed):
            times, flush_times = sample_round(runner, count, flush)
            own += times
            own_flushes += flush_times
        n = len(samples[0])
        done = [n >= cfg.min_samples and relative_iqr(own) <= cfg.rel_spread for own in samples]
        if all(done):
            break
        if time.perf_counter() - started > budget_s and n >= min(cfg.min_samples, 3):
            break
    return [Timing(own, runner.inner, n >= cfg.min_samples and relative_iqr(own) <= cfg.rel_spread, flushes)
            for runner, own, flushes in zip(runners, samples, flushed)]
