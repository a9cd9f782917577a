"""What the terminal shows: the seed-shaped table, the progress bar, JSON rows, run directories."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table


def make_console(stderr: bool = False) -> Console:
    """A rich console; when the output is a pipe or a file (CI logs), wide enough for the tables. No
    emoji: what it prints holds the user's values (`uniform:100:400` would print with a picture)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160, emoji=False)


def _slug(name: str) -> str:
    name = re.sub(r"^nvidia\s+", "", name.lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def default_out_dir(device_name: str, command: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{stamp}-{_slug(device_name)}-{command}"


def print_seed_table(console: Console, df) -> None:
    """The seed-shaped table; columns that hold one value for the whole run go to the title."""
    from attnbench.results.tables import ratio_meaning, seed_table

    table = seed_table(df)
    if table.empty:
        console.print("[yellow]no measured rows[/]")
        return
    meaning = ratio_meaning(df["strategy"].dropna().unique())
    print_titled(console, table, ("backend", "mode", "l2", "kind", "prefix ratio", "decode share", "decode seqs"),
                 "{title}" + (f" ({meaning})" if meaning else ""))
    print_run_notes(console, df)


def print_titled(console: Console, table, constant_candidates: tuple[str, ...], caption: str) -> None:
    """`table` as a rich table whose title (`caption`, formatted with `title`) says once what its
    columns would repeat: the candidates holding one value, a single decode share or count of the
    mixed rows; kv heads are left out where they equal the heads."""
    from attnbench.results.tables import format_cell

    constant = [c for c in constant_candidates if c in table and table[c].nunique() == 1]
    if (table["kv heads"] == table["heads"]).all():
        table = table.drop(columns="kv heads")
    title = ", ".join(f"{c} {table[c].iloc[0]}" for c in constant)
    table, mixed = mixed_to_title(table.drop(columns=constant))
    rich_table = Table(*table.columns, title=caption.format(title=", ".join(p for p in (title, mixed) if p)))
    for row in table.itertuples(index=False):
        rich_table.add_row(*(format_cell(col, v) for col, v in zip(table.columns, row)))
    console.print(rich_table)


def mixed_to_title(table):
    """(table, title text): a decode share or count that one value holds for every mixed row is said
    once in the title (other kinds show "-" there), not in a column."""
    said = []
    for column in ("decode share", "decode seqs"):
        values = set(table[column]) - {"-"} if column in table else set()
        if column in table and len(values) <= 1:
            said += [f"mixed {column} {values.pop()}"] if values else []
            table = table.drop(columns=column, errors="ignore")
    return table, ", ".join(said)


def print_fusion_table(console: Console, df) -> None:
    """Fused over the best of the others, with the parts timed alone (results/fusion.py), the
    columns summary.md adds left out; nothing without a passing fused row."""
    from attnbench.results.fusion import fusion_table

    table = fusion_table(df)
    if table.empty:
        return
    table = table.drop(columns=[c for c in table if c.endswith(" ms") and "alone" not in c])
    print_titled(console, table, ("mode", "l2", "kind", "context"),
                 "{title}: fused / best of the others (< 1: fused is faster); each part timed alone "
                 "(prefill / decode near 1: balanced)")


def print_run_notes(console: Console, df) -> None:
    """What the table cannot say: replicates, unconverged rows, the CPU caveat, throttling."""
    from attnbench.results.notes import run_notes

    for note in run_notes(df):
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


def emit_json(row: dict) -> None:
    print(json.dumps(row, default=str), flush=True)
