"""Fused against the best of the other strategies, beside the parts it overlaps.

The seed table divides every strategy by unified. For fusion (POD) the question is sharper: does
one launch beat the best that the other strategies manage on this point, and does the point give
it a chance? Fusion overlaps a batch's prefill part and decode part, so it can win only where the
two take comparable time. This table puts, per point, backend and mode with a fused row: fused
over the best of the others, then the parts each timed alone (kernels/parts.py), their ratio
(prefill / decode: 1 is balanced) and their sum (what two launches one after the other would take
with no gap between them).
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.results.tables import (COLUMN_NAMES, markdown_table, mixed_settings, strategies_in,
                                     without_blank_mixed)

FUSED = "fused"
POINT = ["kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "context", "decode_share", "decode_seqs",
         "prefix_ratio"]


def fusion_table(df: pd.DataFrame) -> pd.DataFrame:
    """One line per (point, backend, mode, l2) that has a passing fused row and another strategy."""
    passed = df[df["verdict"] == "pass"] if "verdict" in df else df.iloc[0:0]
    if passed.empty or FUSED not in set(passed["strategy"]):
        return pd.DataFrame()
    passed = passed.assign(**mixed_settings(passed))
    others = [s for s in strategies_in(passed["strategy"].unique()) if s != FUSED]
    best_name = f"best({','.join(others)})"
    group = [c for c in POINT if c in passed] + [c for c in ("backend", "mode", "l2") if c in passed]
    records = []
    for key, rows in passed.groupby(group, sort=False, dropna=False):
        ms = dict(zip(rows["strategy"], rows["median_ms"]))
        timed = {s: ms[s] for s in others if s in ms}
        if FUSED not in ms or not timed:
            continue
        best = min(timed, key=timed.get)
        prefill, decode = _part(rows, "prefill_part_ms"), _part(rows, "decode_part_ms")
        records.append({**dict(zip(group, key)), "fused ms": ms[FUSED], f"{best_name} ms": timed[best],
                        "best": best, f"fused / {best_name}": ms[FUSED] / timed[best],
                        "prefill alone ms": prefill, "decode alone ms": decode,
                        "prefill / decode": prefill / decode if decode > 0 else math.nan,
                        "parts sum ms": prefill + decode, "split ms": ms.get("split", math.nan)})
    if not records:
        return pd.DataFrame()
    return without_blank_mixed(pd.DataFrame(records).drop(columns=["prefix_ratio"], errors="ignore")
                               .rename(columns=COLUMN_NAMES))


def _part(rows: pd.DataFrame, column: str) -> float:
    """The part's time on the point's split row (the fused row carries the same); NaN where untimed."""
    if column not in rows:
        return math.nan
    values = pd.to_numeric(rows[column], errors="coerce")
    seen = pd.concat([values[rows["strategy"] == "split"], values]).dropna()  # split's first
    return float(seen.iloc[0]) if not seen.empty else math.nan


def fusion_lines(df: pd.DataFrame) -> list[str]:
    """summary.md's section: the table and how to read it; [] without a fused row."""
    table = fusion_table(df)
    if table.empty:
        return []
    return ["## Fused against the best of the others\n",
            "fused / best < 1: the one fused launch beat every other strategy. prefill / decode near 1: the "
            "point's two parts, each timed alone on split's launches, take comparable time, where fusion has a "
            "chance; far from 1, one part is the whole cost. split ms over parts sum: what split's two launches "
            "cost beyond their parts' own times.\n",
            markdown_table(table)]
