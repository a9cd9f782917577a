"""A served trace's metrics over its serves: the results.csv that compare, export and plot read, and split vs unified.

Why: trace.csv holds one row per measured serve (vllm bench serve's numbers for that serve); a
reader wants each metric once per choice, with how far the serves spread, and the results tools
want one row per (choice, metric) and one measure, as a kernel sweep gives them one row per point.
Each latency metric (TTFT, TPOT, ITL, E2EL: mean, p50, p90, p99; and the serve's duration) becomes
a row: the median over the serves, their min and max, and every serve's value (`serves_ms`, in
serve order), from which `compare` makes a Welch interval between two runs, as it does from a kernel
row's replicate medians. Split against unified within a run: the serves of one round are paired
(rounds rotate the order), and results.paired gives the interval of their ratio and the verdict it
supports; a run on the CPU gets none (verdicts.CPU_NO_VERDICT). Throughputs are the duration's
inverse and stay in trace.csv.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import fields

import pandas as pd

from attnbench.e2e.serve_metrics import TRACE_METRICS, TraceMetric
from attnbench.results.paired import paired
from attnbench.results.read import MEASURED
from attnbench.results.replicates import MIN_REPLICATES

HEADLINE = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p50", "e2el_p50", "duration")
THRESHOLD = 0.05  # the smallest split / unified change a verdict names (compare's default --threshold)


def metric_value(row: pd.Series, metric: str) -> float:
    return row["duration_s"] * 1e3 if metric == "duration" else row[f"{metric}_ms"]


def metric_rows(serves: pd.DataFrame) -> pd.DataFrame:
    """trace.csv's rows (one per measured serve) -> one TraceMetric row per choice and metric."""
    out = []
    for _, rows in serves.groupby(["backend", "strategy", "mode"], sort=False):
        timed, first = rows[rows["verdict"].isin(MEASURED)], rows.iloc[-1]
        verdict = first["verdict"] if timed.empty or len(timed) < len(rows) else (
            "fail" if (timed["verdict"] == "fail").any() else "pass")
        reason = "; ".join(sorted({str(r) for r in rows["reason"].dropna() if str(r)}))
        captured = int(timed["graphs_captured_while_serving"].sum()) if not timed.empty else 0
        for metric in TRACE_METRICS:
            values = [float(metric_value(r, metric)) for _, r in timed.iterrows()] if not timed.empty else []
            values = [v for v in values if not math.isnan(v)]
            out.append(TraceMetric(
                first["model"], first["dtype"], int(first["block_size"]), int(first["chunk_size"]),
                int(first["max_num_seqs"]), first["arrivals"], first["trace"], first["backend"], first["strategy"],
                first["mode"], metric, statistics.median(values) if values else None, min(values, default=None),
                max(values, default=None), len(values), " ".join(f"{v:.6g}" for v in values), captured,
                first["cudagraph"], first["library"], first["library_version"], first["device"], first["gpu"],
                str(first.get("agreement") or ""), verdict if values or verdict not in MEASURED else "error",
                reason if values or verdict not in MEASURED else "no serve measured this metric"))
    return pd.DataFrame([vars(m) for m in out], columns=[f.name for f in fields(TraceMetric)])


def strategy_verdicts(serves: pd.DataFrame, cpu: bool) -> pd.DataFrame:
    """Per backend, mode and headline metric: split / unified over the serves paired by round, its
    interval and verdict (blank on the CPU, or with fewer than two paired serves)."""
    timed = serves[serves["verdict"].isin(MEASURED)]
    out = []
    for (backend, mode), rows in timed.groupby(["backend", "mode"], sort=False):
        by = {s: g.set_index("serve") for s, g in rows.groupby("strategy")}
        if "unified" not in by or "split" not in by:
            continue
        rounds = sorted(set(by["unified"].index) & set(by["split"].index))
        for metric in HEADLINE:
            ratios = [metric_value(by["split"].loc[r], metric) / metric_value(by["unified"].loc[r], metric)
                      for r in rounds]
            ratios = [x for x in ratios if x > 0 and math.isfinite(x)]
            row = {"backend": backend, "mode": mode, "metric": metric, "paired serves": len(ratios)}
            if len(ratios) < MIN_REPLICATES:
                out.append({**row, "split / unified": math.nan, "interval": "", "verdict": "-"})
                continue
            p = paired(ratios, THRESHOLD)
            out.append({**row, "split / unified": p.ratio, "interval": ratio_interval(p.low, p.high),
                        "verdict": "-" if cpu else {"slower": "split slower", "faster": "split faster"}.get(
                            p.verdict, p.verdict)})
    return pd.DataFrame(out)


def ratio_interval(low: float, high: float) -> str:
    """`0.842x – 1.13x`; an end past 1000x or under 0.001x said so (two paired serves bound little)."""
    end = lambda v: "< 0.001x" if v < 1e-3 else "> 1000x" if v > 1e3 else f"{v:.3g}x"  # noqa: E731
    return f"{end(low)} – {end(high)}"


def readable_ms(value: float) -> str:
    """A time in ms for a reader: whole ms with thousands separated from 100 on, else 3 significant digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def trace_gab_entries(metrics: pd.DataFrame) -> list[dict]:
    """customSmallerIsBetter entries for the timed metric rows: value = the median over the serves, ms."""
    entries = []
    for _, r in metrics[metrics["verdict"].isin(MEASURED)].iterrows():
        extra = {"serves": r["serves"], "min ms": r["serve_min_ms"], "max ms": r["serve_max_ms"],
                 "check": r["verdict"], "gpu": r["gpu"], "library": f"{r['library']} {r['library_version']}"}
        entries.append({"name": f"e2e trace {r['trace']} {r['model']} {r['arrivals']} | {r['backend']} {r['strategy']} "
                                f"{r['mode']} | {r['metric']}", "unit": "ms", "value": float(r["serve_median_ms"]),
                        "range": f"{r['serve_min_ms']:.4g}-{r['serve_max_ms']:.4g}",
                        "extra": "\n".join(f"{k}: {v}" for k, v in extra.items())})
    return entries


def metrics_table(metrics: pd.DataFrame, shown: tuple[str, ...] = HEADLINE) -> pd.DataFrame:
    """One line per choice: each shown metric's median over the serves and its min-max."""
    timed = metrics[metrics["verdict"].isin(MEASURED) & metrics["metric"].isin(shown)]
    lines = []
    for (backend, strategy, mode), g in timed.groupby(["backend", "strategy", "mode"], sort=False):
        line = {"backend": backend, "strategy": strategy, "mode": mode, "serves": int(g["serves"].max()),
                "graphs captured while timed": int(g["graphs_captured_while_serving"].max())}
        for r in g.itertuples():
            line[f"{r.metric} ms"] = (f"{readable_ms(r.serve_median_ms)} ({readable_ms(r.serve_min_ms)} – "
                                      f"{readable_ms(r.serve_max_ms)})")
        lines.append(line)
    return pd.DataFrame(lines)
