"""What an e2e run will do and how long it should take: the plan before the first row, then an ETA
(ServeEta: the same for `e2e --trace`, whose unit is a serve of the whole trace).

A run's time is its runs (generate calls) times what one run of each point costs. The count is
known but for the measured runs, which the stopping rule decides row by row: the ETA is a range
from every row stopping at its minimum to every row running to its maximum, narrowed to what the
finished points measured. A run's cost is fitted to the points seen so far as
a x steps + b x tokens (decode-bound runs scale with steps, compute-bound ones with tokens); until
two differing points are in, the first run timed (the probe) calibrates steps alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attnbench.e2e.stopping import StoppingRule

Point = tuple[int, int, int]  # (input_len, output_len, batch_size)


def plan_line(n_points: int, backends: list[str], strategies: list[str], eager_checks: int, warmup: int,
              rule: StoppingRule) -> str:
    """The plan in one line: rows, and the runs each row makes."""
    rows = n_points * len(backends) * len(strategies)
    every = eager_checks == len(backends) * len(strategies)
    checks = "1 untimed check run" + ((" and 1 eager one (the graph-vs-eager check)" if every else
                                       f" (and an eager one, the graph-vs-eager check, on {eager_checks} of a "
                                       f"point's {len(backends) * len(strategies)} rows)") if eager_checks else "")
    turns = "; a backend's strategies measured in turns" if len(strategies) > 1 else ""
    return (f"plan: {n_points} points x {len(backends)} backend(s) x {len(strategies)} strategies = {rows} rows; "
            f"each: {checks}, {warmup} warm-up{'' if warmup == 1 else 's'}, {rule.describe()}{turns}")


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60:02d} s"


def shape(point: Point, chunk_size: int | None) -> tuple[float, float]:
    """(steps, tokens) of one run of a point: prefill chunks and decode steps; tokens processed."""
    input_len, output_len, batch = point
    prefill_steps = math.ceil(batch * input_len / chunk_size) if chunk_size else 1
    return float(prefill_steps + output_len - 1), float(batch * (input_len + output_len))


@dataclass
class Eta:
    """The remaining time of a run, refined as its points finish."""

    points: list[Point]  # still to measure, in order
    rows: int  # backend x strategy rows per point
    checks: int  # untimed check runs per point (one per row, and the eager ones under graphs)
    warmup: int
    rule: StoppingRule
    chunk_size: int | None
    seen: list[tuple[float, float, float]] = field(default_factory=list)  # (steps, tokens, seconds a run)
    measured: list[int] = field(default_factory=list)  # measured runs of every finished row

    def runs(self, measured_each: float) -> float:
        return self.checks + self.rows * (self.warmup + measured_each)

    def fit(self) -> tuple[float, float]:
        """(seconds a step, seconds a token) of one run, fitted to what was seen."""
        x = np.array([s[:2] for s in self.seen])
        y = np.array([s[2] for s in self.seen])
        a, b = (y / x[:, 0]).mean(), 0.0  # steps alone: the probe's reading
        if len(self.seen) >= 2 and np.linalg.matrix_rank(x) == 2:
            fit = np.linalg.lstsq(x, y, rcond=None)[0]
            if (fit >= 0).all():
                a, b = fit
        return float(a), float(b)

    def cost(self, point: Point, fit: tuple[float, float] | None = None) -> float:
        """Seconds of one run of `point` (`fit`: Eta.fit's, when the caller has it already)."""
        a, b = fit or self.fit()
        steps, tokens = shape(point, self.chunk_size)
        return a * steps + b * tokens

    def probe(self, seconds: float) -> None:
        """The first timed run of the first point: the calibration before any row is measured."""
        self.seen.append((*shape(self.points[0], self.chunk_size), seconds))

    def finished(self, point: Point, seconds: float, measured_runs: list[int]) -> None:
        """A point done in `seconds`, its rows having measured `measured_runs` each."""
        if not self.measured:
            self.seen.clear()  # the probe timed one run; a whole point, checks included, says more
        self.measured += measured_runs
        runs = self.checks + self.rows * self.warmup + sum(measured_runs)
        self.seen.append((*shape(point, self.chunk_size), seconds / max(runs, 1)))
        self.points = self.points[1:]

    def text(self) -> str:
        """"ETA 3 min 10 s (2 min 05 s if every row stops at 6 runs, 8 min at 30)"."""
        if not self.points:
            return "ETA 0 s"
        if not self.seen:
            return "ETA after the first timed run"
        low, high = self.rule.min_runs, self.rule.max_runs
        fit = self.fit()
        total = lambda each: sum(self.runs(each) * self.cost(p, fit) for p in self.points)  # noqa: E731
        probe = "" if self.measured else " (from one timed run; refined after each point)"
        if self.rule.fixed:
            return f"ETA {duration(total(high))}{probe}"
        if not self.measured:
            return f"ETA {duration(total(low))}-{duration(total(high))}, {low} to {high} measured runs a row{probe}"
        return (f"ETA {duration(total(float(np.mean(self.measured))))} (from {duration(total(low))} if every row "
                f"stops at {low} runs to {duration(total(high))} at {high})")


@dataclass
class ServeEta:
    """The remaining time of `e2e --trace`: each choice's serves left (check serves included) times
    what its serves took so far (every choice's mean until it has one of its own)."""

    left: dict[str, int]  # serves still to run, by choice
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def served(self, choice: str, seconds: float) -> None:
        self.left[choice] = max(0, self.left[choice] - 1)
        self.seconds.setdefault(choice, []).append(seconds)

    def stopped(self, choice: str) -> None:
        """The choice failed: it serves no more."""
        self.left[choice] = 0

    def text(self) -> str:
        """"ETA 1 min 05 s (from 1 serve; refined after each)"."""
        every = [s for times in self.seconds.values() for s in times]
        if not any(self.left.values()):
            return "ETA 0 s"
        if not every:
            return "ETA after the first serve"
        mean = lambda choice: float(np.mean(self.seconds.get(choice) or every))  # noqa: E731
        left = sum(n * mean(choice) for choice, n in self.left.items())
        return f"ETA {duration(left)}" + (" (from 1 serve; refined after each)" if len(every) == 1 else "")
