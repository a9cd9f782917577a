"""How often the dashboard's change-point detector finds a planted step, and how often it finds one
that is not there, on synthetic series; beside Apache Otava's detector where Otava can be imported.

Per case (noise sigma on the log, a throttled-run outlier or not) SERIES series of RUNS runs are
drawn, once flat and once with a STEP slowdown from run AT on; printed per detector: the share
of flat series with any change point (false alarms), the share of stepped series with the step
found at its run, within one run, and with any other change point. Nothing is asserted.

    python3 benchmarks/changepoint_rates.py
    pip install --no-deps --target /tmp/otava apache-otava && \\
        PYTHONPATH=/tmp/otava python3 benchmarks/changepoint_rates.py   # Otava too (its pins kept out)
"""

from __future__ import annotations

import argparse

import numpy as np

from attnbench.results.changepoints import change_points


def otava_detector():
    """Otava's compute_change_points with its defaults (p < 0.001), or None where it is not importable."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        return None
    return lambda values: [int(c.index) for c in compute_change_points(list(values), window_len=50)[0]]


def rates(detect, runs: int, at: int, step: float, sigma: float, outlier: bool, series: int) -> tuple:
    alarms = exact = near = other = 0
    for seed in range(series):
        rng = np.random.default_rng(seed)
        noise = rng.normal(0.0, sigma, runs)
        if outlier:
            noise[rng.integers(0, runs)] += 0.3
        flat = np.exp(noise)
        alarms += bool(detect(flat))
        found = detect(flat * np.where(np.arange(runs) >= at, 1 + step, 1.0))
        exact += at in found
        near += any(abs(i - at) <= 1 for i in found)
        other += any(abs(i - at) > 1 for i in found)
    return tuple(count / series for count in (alarms, exact, near, other))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--at", type=int, default=30)
    parser.add_argument("--step", type=float, default=0.05)
    args = parser.parse_args()
    detectors = {"attnbench (PELT, L1)": lambda v: [c.index for c in change_points(v)]}
    if (otava := otava_detector()) is not None:
        detectors["otava (defaults)"] = otava
    print(f"{args.series} series of {args.runs} runs, a {args.step:.0%} step at run {args.at}")
    print("detector | noise | outlier | flat: any change | step: exact | within 1 | other change")
    for sigma in (0.005, 0.01, 0.02):
        for outlier in (False, True):
            for name, detect in detectors.items():
                alarms, exact, near, other = rates(detect, args.runs, args.at, args.step, sigma, outlier, args.series)
                print(f"{name} | {sigma:.1%} | {'one +30 %' if outlier else 'none'} | {alarms:.0%} | {exact:.0%} | "
                      f"{near:.0%} | {other:.0%}")


if __name__ == "__main__":
    main()
