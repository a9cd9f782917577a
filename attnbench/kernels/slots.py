"""A row of a kernel sweep while it is measured: its fields so far, and one timing and one output
check per replicate, joined into the row's final cells when the last replicate is done.

Split from sweep.py, which runs the measurements; this holds and joins them, and says when the rows
timed together (a backend's strategies in one mode, interleaved) have replicates enough: all of them
stop together, so every replicate of one is paired with one of each of the others.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from attnbench.kernels import roofline
from attnbench.kernels.check import worst_check
from attnbench.kernels.replicate_rule import ReplicateRule, aa_half_width
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
    closed: bool = False  # replicates enough: measured no more
    stopped: str | None = None  # converged or budget, when a ReplicateRule closed it
    threshold: float | None = None  # the rule's

    @property
    def open(self) -> bool:
        return self.final is None and not self.closed

    @property
    def medians_ms(self) -> list[float]:
        return [t.median_ms for t in self.timings]

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
            replicate_samples=_cell([t.n for t in self.timings], "{}"), stopped=self.stopped,
            ratio_half_width=aa_half_width(rep.medians_ms), stop_threshold=self.threshold)
        row = {**self.row, **cells(measured, RawCells(samples_ms=" ".join(f"{s:.6g}" for s in rep.samples_ms))),
               "_window": (self.window[0], self.window[1])}
        why = roofline.implausible(rates, rep.median_ms, gpu_name)
        if why and row["verdict"] == "pass":  # right output, but not from the timed calls
            row.update(verdict="fail", reason=why)
        return row


def finished(backends: list, slots: dict, these: list) -> list[Slot]:
    """The slots of each of `these` backends none of whose rows is open, in output order; such a
    backend is taken out of `backends` (those still measured)."""
    done = []
    for backend in these:
        mine = [slot for (name, _, _), slot in slots.items() if name == backend.name]
        if not any(slot.open for slot in mine):
            backends.remove(backend)
            done += mine
    return done


def close_together(group: list[Slot], rule: ReplicateRule | None, most: int) -> bool:
    """Close the rows timed together once each has replicates enough (rule None: `most`, exactly),
    each with why it stopped; whether they closed."""
    if not all(len(slot.timings) >= most or (rule is not None and rule.enough(slot.medians_ms)) for slot in group):
        return False
    for slot in group:
        slot.closed = True
        if rule is not None:
            slot.stopped, slot.threshold = rule.stopped(slot.medians_ms), rule.threshold
    return True


def _cell(values: list, fmt: str) -> str:
    return " ".join(fmt.format(v) for v in values) if len(values) > 1 else ""
