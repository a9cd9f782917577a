"""A row of a kernel sweep while it is measured: its fields so far, and one timing and one output
check per replicate, joined into the row's final cells when the last replicate is done.

Split from sweep.py, which runs the measurements; this only holds and joins them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from attnbench.kernels import roofline
from attnbench.kernels.check import worst_check
from attnbench.kernels.rows import Measurement, RawCells, cells
from attnbench.kernels.timing import Replicated, Timing
from attnbench.kernels.workload import Batch, SweepPoint


@dataclass
class Slot:
    """One (backend, strategy, mode) row, filled replicate by replicate."""

    row: dict
    timings: list[Timing] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    final: dict | None = None  # a skip or error row: nothing more is measured for it
    window: list[float] = field(default_factory=list)  # wall-clock start and end of its timing

    def result(self, point: SweepPoint, batch: Batch, gpu_name: str | None) -> dict:
        if self.final is not None:
            return self.final
        rep = Replicated(self.timings)
        flushes = [f for t in self.timings for f in t.flush_ms]
        rates = roofline.rates(point, batch, rep.median_ms, gpu_name)
        measured = Measurement(
            **worst_check(self.checks), **rates,
            median_ms=rep.median_ms, p10_ms=rep.quantile(0.10), p90_ms=rep.quantile(0.90),
            samples=len(rep.samples_ms), converged=rep.converged,
            calls_per_sample=round(statistics.median(t.calls_per_sample for t in self.timings)),
            l2_flush_ms=statistics.median(flushes) if flushes else None,
            # per-replicate cells only when there are several: one replicate's median is median_ms
            replicates=len(self.timings), replicate_medians_ms=_cell(rep.medians_ms, "{:.6g}"),
            replicate_samples=_cell([t.n for t in self.timings], "{}"))
        row = {**self.row, **cells(measured, RawCells(samples_ms=" ".join(f"{s:.6g}" for s in rep.samples_ms))),
               "_window": (self.window[0], self.window[1])}
        why = roofline.implausible(rates, rep.median_ms, gpu_name)
        if why and row["verdict"] == "pass":  # right output, but not from the timed calls
            row.update(verdict="fail", reason=why)
        return row


def _cell(values: list, fmt: str) -> str:
    return " ".join(fmt.format(v) for v in values) if len(values) > 1 else ""
