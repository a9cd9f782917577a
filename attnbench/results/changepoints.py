"""Change points in a performance series: the commits at which a row's time moved and stayed moved.

Why a detector and not a threshold between neighbours: one run's time is noisy, so comparing each
run with the one before flags noise and misses a small step that a few runs make plain. This is
PELT (ruptures, Killick et al. 2012) searching for the segmentation of the series that minimises
its cost plus a penalty per change, made to suit benchmark series:

- on log times, so a 5 % step weighs the same on a 5 us row as on a 5 ms row;
- in units of the series' own noise, estimated robustly from successive differences (their median
  absolute deviation / (0.6745 * sqrt 2)), so a step is found by how many noise widths it is, and
  a step itself barely moves the estimate;
- with the L1 cost (deviations from each segment's median): one run slowed by a throttled GPU is
  an outlier, not two change points, as it is under the L2 cost;
- penalty PENALTY * ln(n) per change (BIC-like), segments of at least MIN_SIZE runs, and a change
  is kept only when the medians either side differ by at least MIN_CHANGE (a gate ignores smaller).

docs/guides/dashboard.md says why not Apache Otava (Hunter's successor), which was the first choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PENALTY = 3.0       # times ln(n), in noise units of the L1 cost: what a change must save to count
MIN_SIZE = 3        # runs per segment at least: a change needs runs on both sides to stand on
MIN_CHANGE = 0.02   # the medians either side differ by at least 2 %
MIN_POINTS = 2 * MIN_SIZE
NOISE_FLOOR = 1e-3  # in log units (0.1 %): a series of identical times is not infinitely precise


@dataclass(frozen=True)
class ChangePoint:
    index: int      # the first run after the change
    before: float   # median of the segment before
    after: float    # median of the segment after

    @property
    def change(self) -> float:
        """after / before - 1 (+0.05: 5 % slower when the series is a time)."""
        return self.after / self.before - 1.0


def noise(logs) -> float:
    """The series' noise in log units: MAD of successive differences, scaled to a normal sigma."""
    import numpy as np

    steps = np.diff(logs)
    mad = float(np.median(np.abs(steps - np.median(steps)))) if len(steps) else 0.0
    return max(mad / (0.6745 * math.sqrt(2.0)), NOISE_FLOOR)


def change_points(values, penalty: float = PENALTY, min_change: float = MIN_CHANGE,
                  min_size: int = MIN_SIZE) -> list[ChangePoint]:
    """Where a positive series (times, oldest first) changes level; [] when it is too short to tell.
    numpy and ruptures are imported here: the CLI reads this module's defaults at startup."""
    import numpy as np
    import ruptures

    series = np.asarray(values, dtype=float)
    if len(series) < 2 * min_size or not np.all(np.isfinite(series) & (series > 0)):
        return []
    logs = np.log(series)
    scaled = ((logs - np.median(logs)) / noise(logs)).reshape(-1, 1)
    ends = ruptures.Pelt(model="l1", min_size=min_size, jump=1).fit(scaled).predict(pen=penalty * math.log(len(series)))
    bounds = [0, *ends]
    found = []
    for start, cut, stop in zip(bounds, bounds[1:], bounds[2:]):
        before, after = float(np.median(series[start:cut])), float(np.median(series[cut:stop]))
        if abs(after / before - 1.0) >= min_change:
            found.append(ChangePoint(cut, before, after))
    return found
