"""Is NEW slower than BASE? Row by row, with the noise of each row taken into account.

A bare threshold on the ratio of medians flags noise as regressions and hides real ones in noisy
rows. Each row gets an interval for its ratio new / base; the threshold is the smallest effect
that counts (results/verdicts.py: slower, faster, same, noisy, and which rows get no verdict).

The interval (`method`): `replicates` when both rows hold >= 2 replicate medians: Welch's t on
their logs (results/replicates.py says why not a bootstrap); replicates re-allocate, re-plan and
re-capture, so it includes what differs between runs. Else (older runs, --replicates 1) a
`bootstrap` over one run's samples (within-run noise only), `p10-p90` with fewer than 5 samples,
`median only` without any spread; compare_runs then keeps what the data supports (verdicts.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.e2e.rows import E2E_ROW_PARTS
from attnbench.errors import AttnbenchError, UsageError
from attnbench.kernels.replicate_rule import parse_threshold  # noqa: F401  re-exported: compare, ab and history parse --threshold with it
from attnbench.kernels.rows import RunColumns
from attnbench.kernels.workload import LABEL, SweepPoint
from attnbench.results.files import results_file
from attnbench.results.read import KERNEL, MEASURED, ResultKind, canonical
from attnbench.results.replicates import CONFIDENCE, MIN_REPLICATES, parse_times, welch_log_ratio
from attnbench.results.verdicts import (CLOCK_NOTE, CPU_NO_VERDICT, GRAPH_TWIN_NOTE, HOST_BOUND, HOST_BOUND_NOTE,
                                        UNCOUNTED, VERDICTS, classify, host_bound, on_cpu, supported)
from attnbench.results.schema import read_env

RESAMPLES = 1000
MIN_SAMPLES = 5  # below this a bootstrap median takes a handful of values: use the p10..p90 spread


def parse_samples(cell) -> np.ndarray:
    """A samples_ms cell (read.py has checked it) -> its times; none when it is empty."""
    return np.array(parse_times(cell) if isinstance(cell, str) else [], dtype=float)


def ratio_interval(base: np.ndarray, new: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval (CONFIDENCE) of median(new) / median(base)."""
    rng = np.random.default_rng(seed)
    base_medians = np.median(base[rng.integers(0, len(base), (RESAMPLES, len(base)))], axis=1)
    new_medians = np.median(new[rng.integers(0, len(new), (RESAMPLES, len(new)))], axis=1)
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(new_medians / base_medians, [tail, 1 - tail])
    return float(low), float(high)


def judge(base: pd.Series, new: pd.Series, threshold: float, measure: str = "median_ms",
          replicates: str = "replicate_medians_ms") -> dict:
    """One matched row pair -> ratio, interval, how the interval was made (the docstring's method), and
    the verdict that interval gives (before compare_runs asks what the data supports). replicates:
    the column of each replicate's value (a served trace's: each serve's)."""
    ratio = new[measure] / base[measure]
    base_reps, new_reps = parse_times(base.get(replicates)), parse_times(new.get(replicates))
    base_samples, new_samples = parse_samples(base.get("samples_ms")), parse_samples(new.get("samples_ms"))
    if min(len(base_reps), len(new_reps)) >= MIN_REPLICATES:
        low, high = welch_log_ratio(base_reps, new_reps)
        method = "replicates"
    elif min(len(base_samples), len(new_samples)) >= MIN_SAMPLES:
        low, high = ratio_interval(base_samples, new_samples)
        method = "bootstrap"
    elif pd.notna(base.get("p10_ms")) and pd.notna(new.get("p90_ms")):
        low, high = new["p10_ms"] / base["p90_ms"], new["p90_ms"] / base["p10_ms"]
        method = "p10-p90"
    else:  # nothing says how noisy the row is: the threshold alone decides
        low = high = ratio
        method = "median only"
    return {"ratio": ratio, "ci_low": low, "ci_high": high, "method": method,
            "verdict": classify(ratio, low, high, threshold)}


def match_columns(ignore: list[str] | None = None, kind: ResultKind = KERNEL) -> list[str]:
    """The kind's key less the columns to ignore (to compare an eager run with a graph run: ignore mode)."""
    unknown = [c for c in ignore or [] if c not in kind.key]
    if unknown:
        raise UsageError(f"--ignore: {unknown[0]!r} is not a key column of {kind.name} results; "
                         f"choose from {', '.join(kind.key)}")
    return [c for c in kind.key if c not in (ignore or [])]


def _keyed(df: pd.DataFrame, name: str, key: list[str]) -> pd.DataFrame:
    df = df.assign(_key=["|".join(canonical(v) for v in row) for row in df[key].itertuples(index=False)])
    duplicated = df[df["_key"].duplicated()]
    if not duplicated.empty:
        raise UsageError(f"{name}: {len(duplicated)} row(s) share a configuration key with another row "
                         f"(first: {row_label(duplicated.iloc[0], key)}); compare needs one row per key")
    return df.set_index("_key")


BROKEN = ("error", "timeout", "crashed", "oom")  # NEW verdicts that fail a gate where BASE passed


@dataclass
class Comparison:
    rows: pd.DataFrame       # key columns, base_time, new_time, ratio, ci_low, ci_high, method, verdict, label
    only_base: pd.DataFrame  # rows of BASE with no match in NEW
    only_new: pd.DataFrame
    untimed: pd.DataFrame    # matched, but skipped or errored in one of the runs
    threshold: float
    label_columns: list[str]  # the key columns that tell the rows of both runs apart
    unit: str = "ms"          # of base_time and new_time: ms for kernel rows, s for e2e rows
    cpu: bool = False         # one run or both timed on the CPU: no row gets a verdict

    def labels(self, frame: pd.DataFrame) -> list[str]:
        return labels(frame, self.label_columns)

    def count(self, verdict: str) -> int:
        return int((self.rows["verdict"] == verdict).sum())

    def unmatched(self) -> list[str]:
        """One line each for the rows only one run has, and the rows one run did not time."""
        lines = [f"{len(frame)} row(s) only in {name}: " + "; ".join(self.labels(frame))
                 for name, frame in (("BASE", self.only_base), ("NEW", self.only_new)) if not frame.empty]
        if not self.untimed.empty:
            lines.append("not timed in both runs: " + "; ".join(
                f"{label} (base {b}, new {n})"
                for label, b, n in zip(self.labels(self.untimed), self.untimed["base"], self.untimed["new"])))
        return lines

    def broken(self) -> list[str]:
        """Rows that passed the accuracy check in BASE and fail it, error, hang, crash or run out of
        memory in NEW."""
        timed = self.rows[(self.rows["base_check"] == "pass") & (self.rows["check"] != "pass")]
        untimed = self.untimed[(self.untimed["base"] == "pass") & self.untimed["new"].isin(BROKEN)]
        return self.labels(timed) + self.labels(untimed)

    def notes(self) -> list[str]:
        """Why rows got no verdict, and what the intervals could not see (rows without replicates)."""
        lines = [CPU_NO_VERDICT] if self.cpu else []
        unjudged = self.count("unjudged")
        if unjudged and not self.cpu:
            lines.append(f"{unjudged} row(s) store no spread (median only): no verdict, nothing says how noisy "
                         "they are")
        hosts = int(self.rows["host_bound"].sum())
        moved = self.rows[~self.rows["host_bound"] & (self.rows["verdict"] == "host-bound")]
        if hosts:
            judged = self.count("host-bound") - len(moved)
            lines.append(f"{hosts} " + HOST_BOUND_NOTE.format(factor=HOST_BOUND, verdict=f"{judged} would have been "
                                                             "slower or faster"))
        if len(moved):
            lines.append(f"{len(moved)} {GRAPH_TWIN_NOTE}")
        if self.count("clock-shifted"):
            lines.append(f"{self.count('clock-shifted')} {CLOCK_NOTE}")
        fallback = self.rows[self.rows["method"] != "replicates"]
        if not fallback.empty and self.unit == "ms":
            widened = "" if self.cpu else (", so their interval is widened to the two runs' own p10..p90 spread; "
                                           "run both with --replicates 3")
            lines.append(f"{len(fallback)} of {len(self.rows)} row(s) lack replicates in one run or both (an older "
                         f"run, or --replicates 1): one run's samples cannot see drift between runs{widened}")
        return lines

    @property
    def regressed(self) -> bool:
        """Slower beyond threshold and noise, or a correctness regression: either fails a gate."""
        return self.count("slower") > 0 or bool(self.broken())


def by_verdict(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in VERDICTS' order, the largest ratio first within a verdict (stable)."""
    order = {v: i for i, v in enumerate(VERDICTS)}
    return rows.sort_values(["verdict", "ratio"], key=lambda s: s.map(order) if s.name == "verdict" else -s,
                            kind="stable").reset_index(drop=True)


def compare_runs(base: pd.DataFrame, new: pd.DataFrame, threshold: float, key: list[str] | None = None,
                 kind: ResultKind = KERNEL, cpu: bool = False) -> Comparison:
    """Rows of BASE and NEW (of one kind) matched on key (default: the kind's whole key) and judged as
    far as the data supports. A run whose rows say device = cpu is known here; cpu=True: the caller
    knows so from env.json (verdicts.on_cpu)."""
    key = list(kind.key) if key is None else key
    cpu = cpu or on_cpu(base, {}) or on_cpu(new, {})
    base_k, new_k = _keyed(base, "BASE", key), _keyed(new, "NEW", key)
    common = base_k.index.intersection(new_k.index, sort=False)
    if common.empty:
        raise UsageError("BASE and NEW have no configuration in common (rows match on "
                         + ", ".join(key) + ")")
    timed = [k for k in common if base_k.at[k, "verdict"] in MEASURED and new_k.at[k, "verdict"] in MEASURED]
    modes = kind is KERNEL and "mode" in key
    point = [c for c in key if c != "mode"]
    hosts = set() if not modes else set.intersection(*(
        host_bound(frame[frame["verdict"].isin(MEASURED)], point, kind.measure, canonical) for frame in (base_k, new_k)))
    mode = {k: str(new_k.at[k, "mode"]) if modes else "" for k in timed}
    twin = {k: "|".join(canonical(new_k.at[k, c]) for c in point) for k in timed} if modes else {}
    kernels, records = {}, []  # each point's graph row verdict: judged first, asked by the point's eager row
    for k in sorted(timed, key=lambda k: mode[k] != "graph"):
        b, n = base_k.loc[k], new_k.loc[k]
        kernel = kernels.get(twin[k]) if mode[k] == "eager" else None
        judged = supported(judge(b, n, threshold, kind.measure, kind.replicates), b, n, threshold, kind.measure,
                           kind.spread, cpu, host=k in hosts, kernel=kernel)
        if mode[k] == "graph":
            kernels[twin[k]] = judged["verdict"]
        records.append({**{c: n[c] for c in key}, "base_time": b[kind.measure], "new_time": n[kind.measure], **judged,
                        "host_bound": k in hosts, "graph_verdict": kernel or "", "check": n["verdict"],
                        "base_check": b["verdict"]})
    rows = pd.DataFrame(records, columns=[*key, "base_time", "new_time", "ratio", "ci_low", "ci_high", "method",
                                          "verdict", "host_bound", "graph_verdict", "clock_ratio", "check",
                                          "base_check"])
    label_columns = varying(pd.concat([base, new]), key)
    rows["label"] = labels(rows, label_columns)
    rows = by_verdict(rows)
    untimed_keys = [k for k in common if k not in set(timed)]
    untimed = new_k.loc[untimed_keys, key].assign(
        base=list(base_k.loc[untimed_keys, "verdict"]), new=list(new_k.loc[untimed_keys, "verdict"]))

    def only(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.loc[frame.index.difference(common, sort=False), key].reset_index(drop=True)

    return Comparison(rows=rows, only_base=only(base_k), only_new=only(new_k), untimed=untimed.reset_index(drop=True),
                      threshold=threshold, label_columns=label_columns, unit=kind.unit, cpu=cpu)


# ---- labels: a row named by the key columns that tell it apart ----------------------------------

_FORMAT = {f.name: f.metadata[LABEL] for part in (SweepPoint, RunColumns, *E2E_ROW_PARTS) for f in fields(part)
           if LABEL in f.metadata}  # the row dataclasses say how a label names each value


def format_field(column: str, value) -> str:
    if column == "causal":
        return "causal" if canonical(value) == "true" else "non-causal"
    if column == "dtype":
        return {"bfloat16": "bf16", "float16": "fp16"}.get(value, str(value))
    return _FORMAT.get(column, "{}").format(value)


def row_label(row, columns) -> str:
    return " ".join(format_field(c, row[c]) for c in columns)


def varying(df: pd.DataFrame, key: list[str]) -> list[str]:
    """The kind plus the key columns that vary in df: short labels, enough to tell rows apart."""
    return [c for c in key if c == "kind" or df[c].map(canonical).nunique() > 1] or key[:1]


def labels(df: pd.DataFrame, columns: list[str]) -> list[str]:
    return [row_label(row, columns) for _, row in df.iterrows()]


# ---- environments ---------------------------------------------------------------------------------

def load_env(results: str | Path, name: str = "") -> dict:
    """The env.json beside a run's results ({} when there is none); AttnbenchError when it is broken:
    compare shows environment differences first, and a broken file must not hide them."""
    path = results_file(results).with_name("env.json")
    if not os.path.lexists(path):
        return {}
    try:
        return read_env(path, f"{name}: {path}" if name else str(path))
    except AttnbenchError as exc:
        raise AttnbenchError(f"{exc}; fix it or move it away to compare without environments") from None


def _flatten(env: dict) -> dict:
    """{"gpu": {"name": x}} -> {"gpu.name": x}, in file order; a loop, so no nesting is too deep."""
    flat, todo = {}, [("", env)]
    while todo:
        prefix, value = todo.pop()
        if isinstance(value, dict):
            todo += reversed([(f"{prefix}{k}.", v) for k, v in value.items()])
        else:
            flat[prefix.rstrip(".")] = value
    return flat


IGNORED_ENV = ("timestamp", "command")


def env_differences(base_env: dict, new_env: dict) -> list[tuple[str, object, object]]:
    """(key, base value, new value) for every env.json entry that differs: GPU, driver, versions, ..."""
    base, new = _flatten(base_env), _flatten(new_env)
    keys = [k for k in dict.fromkeys([*base, *new]) if k not in IGNORED_ENV]
    return [(k, base.get(k), new.get(k)) for k in keys if base.get(k) != new.get(k)]


# ---- Markdown for a PR comment --------------------------------------------------------------------

def summary_line(c: Comparison) -> str:
    counts = ", ".join(f"{c.count(v)} {v}" for v in VERDICTS if v not in UNCOUNTED or c.count(v))
    return f"{len(c.rows)} rows compared: {counts} (threshold {c.threshold:.1%}, {CONFIDENCE:.0%} intervals)"


def _markdown_rows(rows: pd.DataFrame, unit: str) -> list[str]:
    lines = [f"| row | base {unit} | new {unit} | new / base | interval | verdict |", "|---|---:|---:|---:|---|---|"]
    for r in rows.itertuples(index=False):
        verdict = f"**{r.verdict}**" if r.verdict == "slower" else r.verdict
        check = "" if r.check == "pass" else f" (new: check {r.check})"
        lines.append(f"| {r.label} | {r.base_time:.4f} | {r.new_time:.4f} | {r.ratio:.3f} | "
                     f"{r.ci_low:.3f}–{r.ci_high:.3f} ({r.method}) | {verdict}{check} |")
    return lines


def markdown(c: Comparison, env_diff: list[tuple[str, object, object]]) -> str:
    head = "**regression**" if c.regressed else "no regression shown (CPU timings: no verdict)" if c.cpu else \
        "no regression"
    lines = [f"### attnbench compare: {head}", "", summary_line(c), ""]
    if env_diff:
        lines += ["| environment | base | new |", "|---|---|---|",
                  *[f"| {k} | {b} | {n} |" for k, b, n in env_diff], ""]
    changed = c.rows[c.rows["verdict"] != "same"]
    same = c.rows[c.rows["verdict"] == "same"]
    if not changed.empty:
        lines += _markdown_rows(changed, c.unit)
    if not same.empty:  # folded: a PR comment should open on what changed
        lines += ["", f"<details><summary>{len(same)} rows the same within {c.threshold:.1%}</summary>", "",
                  *_markdown_rows(same, c.unit), "", "</details>"]
    lines += [f"\n{line}" for line in [*c.notes(), *c.unmatched()]]
    return "\n".join(lines) + "\n"
