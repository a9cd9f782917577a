"""`attnbench merge` as a job: claim the output run directory and write the merged run into it.

results/merge.py reads, checks and joins the inputs (rows and env.json); here the merged run is
written like any other run (runs/rundir.py: claimed new or empty, or `--force`, locked, every file
recorded), and the outputs made from the merged results.csv (parquet, summary.md, plots, the
console table) come from the writers the kernel, e2e and replay jobs use, so a merged run looks like
one that measured every point: the shards of a replay (`replay --shard I/N`) merge into a replay run
with its summary.md (totals, oracle, wins, bucketing error), its plots and buckets.csv, which every
shard holds the same (one trace, one bucket rule).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from rich.console import Console

from attnbench.errors import AttnbenchError, UsageError
from attnbench.results.e2e_report import write_e2e_outputs
from attnbench.results.merge import Merged, merge_runs, read_run_dir
from attnbench.runs.kernel import write_kernel_outputs
from attnbench.runs.replay import write_replay_outputs
from attnbench.runs.record import check_apart
from attnbench.runs.rundir import LOCK, RunDir


def run_merge(runs: list[Path], out: Path, allow_mixed: bool, partial: bool, force: bool, command: str,
              console: Console) -> Path:
    """Merge the run directories `runs` into `out`; refused before anything is written if it cannot be."""
    inputs = [read_run_dir(path) for path in runs]
    check_apart(out, runs, what="one of the runs being merged")
    held = sorted(p.name for p in out.iterdir() if p.name != LOCK) if out.is_dir() and not force else []
    if held:
        raise UsageError(f"--out: {out} is not empty (it holds {held[0]}"
                         f"{f' and {len(held) - 1} more' if len(held) > 1 else ''}); choose a new directory "
                         "or --force over it")
    merged = merge_runs(inputs, allow_mixed, partial, command)
    steps = replay_steps(runs, merged) if "replay" in merged.env else None
    run = RunDir.prepare(out, force=force, inputs=runs)
    with run.locked():
        write_merged(merged, run)
        console.print(f"merged {len(merged.rows)} rows of {len(inputs)} run(s) into {run.path}")
        for note in merged.notes:
            console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
        if steps is not None:
            write_replay_outputs(run, merged.env, steps, console)
        else:
            write = write_kernel_outputs if merged.kind.name == "kernel" else write_e2e_outputs
            write(run.path, merged.env, console)
    return run.path


def replay_steps(runs: list[Path], merged: Merged):
    """A merged replay's buckets.csv: every input's, and one and the same (the shards of one trace,
    bucketed by one rule), after its rows are checked; AttnbenchError naming the first that differs."""
    import pandas as pd

    from attnbench.results.replay import check_rows, read_steps

    check_rows(pd.DataFrame(merged.rows, columns=merged.header))

    tables = [read_steps(path) for path in runs]
    for path, table in zip(runs[1:], tables[1:]):
        if not table.equals(tables[0]):
            raise AttnbenchError(f"{path}'s buckets.csv differs from {runs[0]}'s: merge joins the shards of one "
                                 "replay (one trace, one --bucket-ratio, --bucket-split and --steps)")
    return tables[0]


def table_text(header: list[str], rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_merged(merged: Merged, run: RunDir) -> None:
    """results.csv, env.json and the extra tables; the outputs made from them are the caller's."""
    run.write_text("results.csv", table_text(merged.header, merged.rows))
    for name, (header, rows) in merged.tables.items():
        if rows:
            run.write_text(name, table_text(header, rows))
    run.write_text("env.json", json.dumps(merged.env, indent=2, default=str) + "\n")
