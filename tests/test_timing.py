"""Timing on the CPU: samples, quantiles, the stopping rule, and what the Runner refuses."""

from __future__ import annotations

import pytest
import torch

from attnbench.kernels.timing import (
    TimedKernel,
    Timing,
    TimingConfig,
    choose_inner,
    relative_iqr,
    time_kernels,
)

CPU = torch.device("cpu")


class Counter:
    """A CPU callable that counts its calls, and logs its name to a shared list when given one."""

    def __init__(self, name: str = "", log: list[str] | None = None):
        self.calls, self.name, self.log = 0, name, log
        self.x = torch.randn(32, 32)

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        if self.log is not None:
            self.log.append(self.name)
        return self.x @ self.x


def quick(**overrides) -> TimingConfig:
    return TimingConfig(**{"warmup_ms": 0.0, "budget_ms": 10_000.0, "min_samples": 3, **overrides})


def test_samples_and_quantiles():
    timing = time_kernels([TimedKernel(Counter(), "eager", CPU)], quick(max_samples=20, rel_spread=-1.0))[0]
    assert timing.n == 20
    assert all(s > 0 for s in timing.samples_ms)
    assert timing.quantile(0.10) <= timing.median_ms <= timing.quantile(0.90)
    assert min(timing.samples_ms) <= timing.quantile(0.10) and timing.quantile(0.90) <= max(timing.samples_ms)
    assert not timing.converged


def test_each_sample_runs_inner_calls_and_reports_per_call_time():
    fn = Counter()
    timing = time_kernels([TimedKernel(fn, "eager", CPU, inner=4)], quick(max_samples=5, rel_spread=-1.0))[0]
    assert timing.calls_per_sample == 4
    assert fn.calls == 4 * (1 + timing.n)  # one warmup sample, then the timed ones


def test_stops_at_the_budget_after_a_few_samples():
    cfg = quick(budget_ms=0.0, min_samples=10, rel_spread=-1.0)
    (timing,) = time_kernels([TimedKernel(Counter(), "eager", CPU)], cfg)
    assert timing.n == 3 and not timing.converged


def test_stops_once_the_spread_is_small():
    timing = time_kernels([TimedKernel(Counter(), "eager", CPU)], quick(max_samples=500, rel_spread=1e9))[0]
    assert timing.n == 3 and timing.converged


def test_strategies_are_sampled_in_alternating_rounds():
    log: list[str] = []
    unified, split = Counter("unified", log), Counter("split", log)
    timings = time_kernels([TimedKernel(unified, "eager", CPU), TimedKernel(split, "eager", CPU)],
                           quick(max_samples=4, rel_spread=-1.0))
    assert [t.n for t in timings] == [4, 4]
    assert log == ["unified", "split"] + ["unified", "split"] * 4  # one warmup call each, then rounds


def test_quantiles_interpolate_linearly():
    timing = Timing([4.0, 1.0, 3.0, 2.0, 5.0], calls_per_sample=1, converged=True)
    assert (timing.median_ms, timing.quantile(0.25), timing.quantile(0.1)) == (3.0, 2.0, pytest.approx(1.4))


def test_relative_iqr():
    assert relative_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)
    assert relative_iqr([2.0, 2.0, 2.0]) == 0.0


def test_graph_mode_needs_a_cuda_device():
    with pytest.raises(ValueError, match="CUDA"):
        TimedKernel(Counter(), "graph", CPU)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown mode"):
        TimedKernel(Counter(), "jit", CPU)


def test_inner_calls_fill_a_sample():
    cfg = TimingConfig(sample_ms=0.5)
    assert choose_inner(0.01, cfg) == 50
    assert choose_inner(10.0, cfg) == 1
    assert choose_inner(1e-9, cfg) == 100
    assert choose_inner(0.01, TimingConfig(cold_l2=True)) == 1  # cold L2: one call per flushed sample
