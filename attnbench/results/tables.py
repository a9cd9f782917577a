"""The tables a run's rows become: the seed PR's shape (one line per point, a column per strategy
and each strategy over unified), and the Markdown and cell formatting every writer shares.

Split from files.py, which reads and writes the rows; these only lay them out.
"""

from __future__ import annotations

import math
from dataclasses import fields

import pandas as pd

from attnbench.kernels.workload import HEADER, STRATEGIES, SweepPoint


def seed_table(df: pd.DataFrame) -> pd.DataFrame:
    """The seed PR's table shape, one line per (kind, backend, mode, l2, point)."""
    measured = df[df["verdict"].isin(["pass", "fail"])]
    if measured.empty:
        return pd.DataFrame()
    # the hit ratio only shapes prefix batches, the decode share or count mixed ones: "-" elsewhere
    measured = measured.assign(prefix_ratio=[f"{r:g}" if k == "prefix" else "-" for k, r in
                                             zip(measured["kind"], measured["prefix_ratio"])], **mixed_settings(measured))
    index = ["kind", "backend", "mode", "l2", "prefix_ratio", "decode_share", "decode_seqs", "num_tokens", "num_heads",
             "num_kv_heads", "head_dim"]
    ms = measured.pivot_table(index=index, columns="strategy", values="median_ms", aggfunc="first")
    ok = measured.assign(ok=measured["verdict"].eq("pass")).pivot_table(
        index=index, columns="strategy", values="ok", aggfunc="all")
    table = pd.DataFrame(index=ms.index)
    present = strategies_in(ms.columns)
    for strategy in present:
        table[f"{strategy} ms"] = ms[strategy]
    if "unified" in present:  # every other strategy against the one-call baseline
        for strategy in present[1:]:
            table[f"{strategy} / unified"] = ms[strategy] / ms["unified"]
    table["check"] = ok.all(axis=1).map({True: "pass", False: "FAIL"})
    table = table.reset_index().rename(columns=COLUMN_NAMES)
    if not (measured["kind"] == "prefix").any():
        table = table.drop(columns="prefix ratio")  # the ratio only shapes prefix batches
    return without_blank_mixed(table)


# results.csv's point columns as the tables head them
COLUMN_NAMES = {f.name: f.metadata[HEADER] for f in fields(SweepPoint) if HEADER in f.metadata}


def without_blank_mixed(table: pd.DataFrame) -> pd.DataFrame:
    """The table without a decode share or decode seqs column that is "-" on every line (no mixed row uses it)."""
    return table.drop(columns=[c for c in ("decode share", "decode seqs") if c in table and (table[c] == "-").all()])


def mixed_settings(rows: pd.DataFrame) -> dict[str, list[str]]:
    """What shapes each mixed row's batch beside N: its decode share, or its decode sequence count
    (--decode-seqs); "-" for other kinds. Files from before --decode-seqs lack the column: 0."""
    mixed = (rows["kind"] == "mixed").tolist()
    seqs = [int(n) if pd.notna(n) else 0 for n in rows.get("decode_seqs", pd.Series(0, index=rows.index))]
    shares = rows.get("decode_share", pd.Series(math.nan, index=rows.index)).tolist()
    return {"decode_share": [f"{s:g}" if m and not n and pd.notna(s) else "-" for m, s, n in zip(mixed, shares, seqs)],
            "decode_seqs": [str(n) if m and n else "-" for m, n in zip(mixed, seqs)]}


def strategies_in(names) -> list[str]:
    """The strategies among `names`, known ones in STRATEGIES order (unified first), then any other."""
    names = [n for n in names if isinstance(n, str) and n]
    return [s for s in STRATEGIES if s in names] + sorted(n for n in names if n not in STRATEGIES)


def ratio_names(strategies) -> str:
    """The ratios a run has, named: "split / unified", or "split / unified, fused / unified"."""
    others = [s for s in strategies_in(strategies) if s != "unified"]
    return ", ".join(f"{s} / unified" for s in others) or "strategy / unified"


def ratio_meaning(strategies) -> str:
    """What a ratio to unified means, with the run's own strategy names; "" when it has no ratio."""
    present = strategies_in(strategies)
    if "unified" not in present or len(present) < 2:
        return ""
    return f"{ratio_names(present)} > 1 means unified is faster"


def ratio_clause(strategies) -> str:
    """ratio_meaning as a clause to append to a line ("; split / unified > 1 means ..."), or ""."""
    meaning = ratio_meaning(strategies)
    return f"; {meaning}" if meaning else ""


def format_params(params_b) -> str:
    """A parameter count given in billions, in a unit that shows it: 6.7 B, 1.7 M, 12 k."""
    count = float(params_b or 0) * 1e9
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.3g} {unit} params"
    return f"{count:.0f} params"


def format_cell(column: str, value) -> str:
    """A table cell: times as ms with 4 decimals, ratios with 3, blanks for NaN."""
    if column.endswith(" ms"):
        return format_ms(value)
    if " / " in column:
        return "" if value is None or pd.isna(value) else f"{value:.3f}"
    return str(value)


def format_ms(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def md_lines(header, rows) -> list[str]:
    """A Markdown table: the header row, the rule, one line per row (cells already formatted)."""
    return ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def markdown_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "_no measured rows_\n"
    shown = table.copy()
    for col in shown.columns:
        shown[col] = [format_cell(col, v) for v in shown[col]]
    return "\n".join(md_lines(shown.columns, shown.itertuples(index=False))) + "\n"
