"""Which verdicts the data can support: compare and calibrate call a row slower or faster only here.

An interval from one run's samples knows that run's sampling noise only; two identical runs differ
by more (issue 9: fresh allocations, plans and graphs; issue 20: on the CPU, the machine's other
work). So a row's interval stands as computed only where it comes from replicates (between-run
noise, results/replicates.py). Elsewhere the interval is widened to the two runs' own p10..p90
spread: a change is called only when it moves one run's typical time outside the other's central
samples. A row that stores no spread at all gets no verdict. Neither do CPU timings: a CPU shares
its cores, caches and clock with everything else on the machine, so identical runs land further
apart than most changes a gate looks for, and no interval from the runs themselves can tell.
For the same reason an eager kernel row that took much longer than its graph row in both runs
(host_bound), or that moved where its graph row (the same kernel, replayed from the device) did not
move the same way, is not called slower or faster but `host-bound`: the part of an eager row's time
that its graph row lacks is the host's, and it moves between separate runs of the same code with
the CPU's state. A host-side change is therefore judged in one run, in turns (`attnbench ab`).
And a row whose two runs ran at different SM clocks (the telemetry's median over the row) is called
slower or faster only if the change stands both as measured and at equal clocks (its time scaled
by the clocks' ratio, as a compute-bound kernel's time scales): a power-capped GPU moves its clock
between runs, and a change the clock could have made alone is `clock-shifted`, shown, not judged.
"""

from __future__ import annotations

import math

import pandas as pd

VERDICTS = ("slower", "faster", "host-bound", "clock-shifted", "noisy", "same", "unjudged")
UNCOUNTED = ("unjudged", "host-bound", "clock-shifted")  # a summary names these only where a row has one
CLOCK = "sm_clock_median_mhz"  # the telemetry's median SM clock over a row's timing
HOST_BOUND = 1.25  # an eager kernel row at this many times its graph row or more: partly the host's time
HOST_BOUND_NOTE = ("eager row(s) took {factor}x or more their graph row in both runs: their time is partly the "
                   "host launching the call, which moves between separate runs with the CPU's state, so their change "
                   "is shown, not judged ({verdict}); their graph rows judge the kernel, and `attnbench ab` "
                   "interleaves two versions in one run")
GRAPH_TWIN_NOTE = ("eager row(s) would have been slower or faster where their graph row, the same kernel replayed "
                   "from the device, was not: the change lies in the host's part of their time, which moves between "
                   "separate runs with the CPU's state, so it is shown, not judged; `attnbench ab` judges a host-side "
                   "change in one run")
CLOCK_NOTE = ("row(s) would have been slower or faster as measured and not at equal SM clocks (their time "
              "scaled by the two runs' clock ratio on the row): the GPU's clock, not the code, may have moved them, "
              "so their change is shown, not judged; `attnbench ab` interleaves two versions in one run, where "
              "both sides see the same clocks")
CPU_NO_VERDICT = ("CPU timings: no verdict (a CPU shares its cores, caches and clock with the rest of the machine, "
                  "so two runs of the same command differ by more than a gate can tell from a change; compare "
                  "GPU runs for a verdict); ratios are shown for reading only")


def classify(ratio: float, low: float, high: float, threshold: float) -> str:
    """slower: the interval lies above 1 and the ratio above 1 + threshold; faster: below 1 and
    below 1 / (1 + threshold); same: the interval inside [1 / (1 + threshold), 1 + threshold];
    noisy: none of these, the runs cannot tell a change of that size from noise."""
    top, bottom = 1 + threshold, 1 / (1 + threshold)
    if low > 1 and ratio > top:
        return "slower"
    if high < 1 and ratio < bottom:
        return "faster"
    if bottom <= low and high <= top:
        return "same"
    return "noisy"


def host_bound(rows: pd.DataFrame, point: list[str], measure: str, canonical) -> set[str]:
    """The index labels of rows' eager rows timed at HOST_BOUND or more times the graph row of the
    same point (the other `point` columns equal) in the same run. A graph replay issues the whole
    call from the device; an eager call that takes this much longer waited on its host."""
    if rows.empty or "mode" not in rows:
        return set()
    ids = ["|".join(canonical(v) for v in row) for row in rows[point].itertuples(index=False)]
    graph = {i: t for i, mode, t in zip(ids, rows["mode"], rows[measure]) if mode == "graph"}
    return {label for label, i, mode, t in zip(rows.index, ids, rows["mode"], rows[measure])
            if mode == "eager" and graph.get(i, math.inf) * HOST_BOUND <= t}


def clock_ratio(base: pd.Series, new: pd.Series) -> float:
    """new / base of a row's median SM clock; NaN where either run lacks it (no telemetry, a CPU)."""
    try:
        ratio = float(new.get(CLOCK, math.nan)) / float(base.get(CLOCK, math.nan))
    except (TypeError, ValueError, ZeroDivisionError):
        return math.nan
    return ratio if math.isfinite(ratio) and ratio > 0 else math.nan


def clock_shifted(judged: dict, clock: float, threshold: float) -> bool:
    """Whether a slower or faster verdict falls at equal clocks: the ratio and its interval times the
    clock ratio (new / base) -- a compute-bound kernel's change with the clock taken out -- classify
    otherwise. A memory-bound kernel does not scale with the SM clock; the verdict stands only where
    it holds under both readings."""
    if judged["verdict"] not in ("slower", "faster") or not math.isfinite(clock) or clock == 1.0:
        return False
    return classify(judged["ratio"] * clock, judged["ci_low"] * clock, judged["ci_high"] * clock,
                    threshold) != judged["verdict"]


def on_cpu(rows: pd.DataFrame, env: dict) -> bool:
    """Whether a run timed on the CPU: its rows' device column, else (older files) an env.json
    that names no GPU but a CPU."""
    devices = rows["device"].dropna().astype(str).str.strip() if "device" in rows else pd.Series(dtype=str)
    devices = devices[devices != ""]
    if not devices.empty:
        return bool(devices.str.startswith("cpu").any())
    return env.get("gpu", "") is None and "cpu" in env


def _spread(row: pd.Series, measure: str, columns: tuple[str, str]) -> tuple[float, float] | None:
    """A row's (low, high) spread around its measure; an e2e row stores its upper end only, so the
    lower end mirrors it on a log scale. None when the row stores no spread."""
    low_column, high_column = columns
    high = row.get(high_column, math.nan) if high_column else math.nan
    if pd.isna(high):
        return None
    low = row.get(low_column, math.nan) if low_column else row[measure] ** 2 / high
    if pd.isna(low):
        return None
    return float(low), float(high)


def spread_interval(base: pd.Series, new: pd.Series, measure: str,
                    columns: tuple[str, str]) -> tuple[float, float] | None:
    """new / base as far as the two runs' own spreads reach: (new low / base high, new high / base low)."""
    b, n = _spread(base, measure, columns), _spread(new, measure, columns)
    if b is None or n is None:
        return None
    return n[0] / b[1], n[1] / b[0]


def supported(judged: dict, base: pd.Series, new: pd.Series, threshold: float, measure: str,
              columns: tuple[str, str], cpu: bool, host: bool = False, kernel: str | None = None) -> dict:
    """judge's result (compare.judge) with only the verdict the data supports (the module docstring),
    and the row's clock_ratio. host: the row is host-bound in both runs (host_bound); kernel: an eager
    row's graph row verdict, where the comparison holds one."""
    judged = {**judged, "clock_ratio": clock_ratio(base, new)}
    if cpu:
        return {**judged, "verdict": "unjudged"}
    if judged["method"] != "replicates":
        floor = spread_interval(base, new, measure, columns)
        if floor is None:
            return {**judged, "verdict": "unjudged"}
        low, high = min(judged["ci_low"], floor[0]), max(judged["ci_high"], floor[1])
        judged = {**judged, "ci_low": low, "ci_high": high, "method": "p10-p90",
                  "verdict": classify(judged["ratio"], low, high, threshold)}
    if judged["verdict"] in ("slower", "faster") and (host or kernel not in (None, judged["verdict"])):
        return {**judged, "verdict": "host-bound"}
    if clock_shifted(judged, judged["clock_ratio"], threshold):
        return {**judged, "verdict": "clock-shifted"}
    return judged
