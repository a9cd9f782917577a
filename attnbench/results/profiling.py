"""Profiling reports: what a median cannot say (which kernels ran, how long each took, who owns the time).

attnbench.profiler captures (torch.profiler runs, NVTX ranges) into the run directory: traces
under profile/ and the kernel breakdown in profile_kernels.csv. This module reads that breakdown
and writes profile.md and the overview in summary.md, and prints it.
"""

from __future__ import annotations

import re
from pathlib import Path

from attnbench.profiler import BREAKDOWN_COLUMNS, CSV_NAME, LOG_NAME, TRACE_DIR
from attnbench.results.tables import md_lines

MARKDOWN_NAME = "profile.md"
# why a CPU window has no attention share: "0.0 %" there was false (every op of a kernel sweep's window is attention's)
NO_SHARE = "n/a on the CPU"
NO_SHARE_WHY = ("attention: n/a on the CPU: the reference backend's attention is plain torch ops (bmm, softmax, "
                "index), which name no attention kernel, so the ops cannot be told apart by name; on a GPU it is "
                "the share of kernel time in kernels named flash, fmha, attn or attention")


def short_name(kernel: str, width: int = 90) -> str:
    """A kernel's name without `void` and its parameter list, cut to width, for tables."""
    name, depth = re.sub(r"^void\s+", "", kernel), 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">" and depth > 0)
        if ch == "(" and depth == 0 and i > 0:
            name = name[:i].rstrip()
            break
    return name if len(name) <= width else name[:width - 1] + "…"


def load_breakdown(run_dir: Path):
    import pandas as pd

    path = run_dir / CSV_NAME
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=["label", *BREAKDOWN_COLUMNS])
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def overview(df) -> list[dict]:
    """One line per label: device time per profiled step, the attention kernels' share of it (None
    for CPU ops: NO_SHARE_WHY), the top kernel and the named ranges (engine steps) with their mean wall time."""
    lines = []
    for label, rows in df[df["source"] != "error"].groupby("label", sort=False):
        work = rows[rows["source"].isin(["device", "cpu"])]
        ranges = rows[rows["source"] == "range"]
        steps = int(work["steps"].iloc[0]) if not work.empty else 1
        total = float(work["total_us"].sum())
        attention = float(work.loc[work["attention"].astype(str) == "True", "total_us"].sum())
        top = work.sort_values("total_us", ascending=False).head(1)
        per_step = rows["calls_per_sample"].iloc[0] if "calls_per_sample" in rows else None  # kernel sweeps
        source = work["source"].iloc[0] if not work.empty else ""
        lines.append({
            "label": label, "source": source,
            "us_per_step": total / steps, "attention_share": None if source == "cpu" else attention / total if total else 0.0,
            "us_per_call": total / steps / per_step if per_step and per_step == per_step else None,
            "top_kernel": short_name(str(top["kernel"].iloc[0]), 60) if not top.empty else "",
            "top_share": float(top["share"].iloc[0]) if not top.empty else 0.0,
            "ranges": "; ".join(f"{r.kernel} {int(r.calls)}x {r.total_us / r.calls:.0f} µs"
                                for r in ranges.itertuples(index=False)),
        })
    return lines


def _md(header: list[str], rows: list[list]) -> list[str]:
    return [*md_lines(header, rows), ""]


def overview_markdown(lines: list[dict]) -> list[str]:
    """µs / call (kernel sweeps: a step is one timing sample of several calls) compares with the
    row's median; ranges (e2e: engine steps) only when the window had any."""
    per_call = any(o["us_per_call"] is not None for o in lines)
    ranges = any(o["ranges"] for o in lines)
    header = ["label", "time", "µs / profiler step", *(["µs / call"] if per_call else []),
              "attention share of kernel time", "top kernel",
              "its share", *(["ranges (count, mean wall)"] if ranges else [])]
    rows = [[o["label"], "GPU kernels" if o["source"] == "device" else "CPU ops (self)", f"{o['us_per_step']:.1f}",
             *([f"{o['us_per_call']:.2f}" if o["us_per_call"] is not None else ""] if per_call else []),
             share_text(o), f"`{o['top_kernel']}`", f"{o['top_share']:.1%}",
             *([o["ranges"]] if ranges else [])] for o in lines]
    why = [NO_SHARE_WHY[0].upper() + NO_SHARE_WHY[1:] + ".", ""] if any(o["attention_share"] is None for o in lines) else []
    return [*_md(header, rows), *why]


def share_text(line: dict) -> str:
    return NO_SHARE if line["attention_share"] is None else f"{line['attention_share']:.1%}"


def write_report(run_dir: Path, console=None, top: int = 10) -> Path | None:
    """profile.md (an overview, then each label's top kernels by total time) and a Profile section
    appended to summary.md; the overview is printed too. None when nothing was profiled."""
    df = load_breakdown(run_dir)
    if df.empty:
        return None
    lines = overview(df)
    errors = df[df["source"] == "error"]
    text = ["# attnbench profile\n",
            "Per label, the GPU kernels of the profiler's active steps (CPU ops' self time when there was no "
            "GPU activity), largest total first. A profiler step is one timing sample in a kernel sweep "
            "(calls_per_sample calls, or one graph replay of them) and one whole request run in e2e. Attention "
            "kernels: names matching flash, fmha, attn or attention (the reference backend's plain torch ops do not). "
            f"Traces: {TRACE_DIR}/tb (TensorBoard), {TRACE_DIR}/chrome (ui.perfetto.dev); every row in {CSV_NAME}.\n",
            *overview_markdown(lines)]
    for label, rows in df[df["source"].isin(["device", "cpu"])].groupby("label", sort=False):
        rows = rows.sort_values("total_us", ascending=False).head(top)
        text += [f"## {label}\n", f"trace: `{rows['chrome_trace'].iloc[0]}`; profiler steps: {int(rows['steps'].iloc[0])}\n",
                 *_md(["#", "kernel", "calls / step", "total µs", "mean µs", "share", "attention"],
                      [[int(r.rank), f"`{short_name(str(r.kernel))}`", f"{r.calls_per_step:g}", f"{r.total_us:.1f}",
                        f"{r.mean_us:.2f}", f"{r.share:.1%}", "yes" if str(r.attention) == "True" else ""]
                       for r in rows.itertuples(index=False)])]
    if not errors.empty:
        text += ["## Profiling failures\n", *(f"- {r.label}: {r.kernel}" for r in errors.itertuples(index=False)), ""]
    path = run_dir / MARKDOWN_NAME
    path.write_text("\n".join(text))
    summary = run_dir / "summary.md"
    if summary.exists():
        with summary.open("a") as f:
            f.write("\n".join(["", "## Profile (--profile)\n", f"Top kernels per label in {MARKDOWN_NAME}; "
                               f"traces under {TRACE_DIR}/.\n", *overview_markdown(lines)]))
    if console is not None:
        _print_overview(console, lines, errors, path)
    return path


def _print_overview(console, lines: list[dict], errors, path: Path) -> None:
    from rich.table import Table

    per_call = any(o["us_per_call"] is not None for o in lines)
    table = Table("label", "µs / profiler step", *(["µs / call"] if per_call else []), "attention", "top kernel",
                  "share", title="profile: GPU kernel time (CPU ops' self time without a GPU)")
    for o in lines:
        call = [f"{o['us_per_call']:.2f}" if o["us_per_call"] is not None else ""] if per_call else []
        table.add_row(o["label"], f"{o['us_per_step']:.1f}", *call, share_text(o), o["top_kernel"],
                      f"{o['top_share']:.1%}")
    console.print(table)
    if any(o["attention_share"] is None for o in lines):
        console.print(NO_SHARE_WHY, highlight=False, soft_wrap=True)
    for r in errors.itertuples(index=False):
        console.print(f"[yellow]profiling failed for {r.label}: {r.kernel}[/]", highlight=False, soft_wrap=True)
    console.print(f"profile: {path}, {CSV_NAME}, traces under {path.parent / TRACE_DIR} (the profiler's own output: "
                  f"{TRACE_DIR}/{LOG_NAME})", highlight=False, soft_wrap=True)
