"""`attnbench trace summary`'s tables: the header in words, step kinds, then the distributions.

Why apart from cli/trace.py: the command stays a list of thin subcommands; this is only rendering
(traces/summary.py computes every number).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.traces.steps import Trace
from attnbench.traces.summary import QUANTILES, distributions, kind_counts


def print_summary(console: Console, path: Path, trace: Trace) -> None:
    header = trace.header
    shape = ", ".join(f"{k}={v}" for k, v in header.shape.as_dict().items()) or "not recorded"
    console.print(f"[bold]{escape(str(path))}[/]: step trace v{header.version} from {escape(header.source)}; "
                  f"shape: {escape(shape)}; lengths {'synthesized' if header.synthesized else 'read'}",
                  highlight=False)
    for key in ("finished", "unfinished", "simulated_seconds", "log", "lengths"):
        if key in header.generator:
            console.print(f"  {key.replace('_', ' ')}: {escape(str(header.generator[key]))}", highlight=False)
    marked = sum(step.synthesized for step in trace.steps)
    if marked:
        console.print(f"  steps marked synthesized (counts read, lengths drawn): {marked} of {len(trace.steps)}",
                      highlight=False)
    kinds = Table(title=f"{len(trace.steps)} steps by kind")
    for column in ("kind", "steps", "share"):
        kinds.add_column(column, justify="left" if column == "kind" else "right")
    for kind, n in kind_counts(trace).items():
        kinds.add_row(kind, str(n), f"{100 * n / len(trace.steps):.1f} %")
    console.print(kinds)
    table = Table(title="distributions (quantiles by nearest rank)")
    table.add_column("quantity")
    for column in ("n", "mean", "min", *(f"p{round(q * 100)}" for q in QUANTILES), "max"):
        table.add_column(column, justify="right")
    for d in distributions(trace):
        if d.n:
            table.add_row(d.name, str(d.n), f"{d.mean:.1f}", str(d.low), *map(str, d.quantiles), str(d.high))
    console.print(table)
