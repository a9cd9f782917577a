"""`attnbench merge`: shard run directories (or any runs of one setup) -> one run directory.

Thin: results/merge.py reads, checks and joins the inputs; the outputs made from the merged
results.csv (parquet, summary.md, plots, the console table) come from the writers the kernel and
e2e jobs use, so a merged run looks like one that measured every point.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.console import make_console
from attnbench.e2e.report import write_e2e_outputs
from attnbench.errors import UsageError
from attnbench.kernels.job import write_kernel_outputs
from attnbench.results import rundir
from attnbench.results.merge import merge_runs, read_run_dir, write_merged


def merge(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to merge: the shards of one sweep, or runs of one setup. Example: runs/shard-*")],
    out: Annotated[Path, typer.Option(help="The merged run directory (new or empty). Example: --out runs/all")],
    allow_mixed: Annotated[bool, typer.Option(help="Merge runs measured on different GPUs or with different attnbench, torch or kernel library versions; env.json records what differed. Example: --allow-mixed")] = False,
    force: options.Force = False,
) -> None:
    """Merge run directories into one: every row once (two different rows for one measurement are
    refused), env.json listing the inputs and any missing shard, then summary, parquet and plots.

    Example: attnbench merge runs/shard-0 runs/shard-1 runs/shard-2 runs/shard-3 --out runs/all
    """
    console = make_console()
    with user_errors(console):
        inputs = [read_run_dir(path) for path in runs]
        real_out = os.path.realpath(out)
        for run in inputs:
            if os.path.realpath(run.path) == real_out:
                raise UsageError(f"--out: {out} is one of the runs being merged; choose a new directory")
        merged = merge_runs(inputs, allow_mixed, shlex.join(command_line()))
        held = sorted(p.name for p in out.iterdir() if p.name != rundir.LOCK) if out.is_dir() and not force else []
        if held:
            raise UsageError(f"--out: {out} is not empty (it holds {held[0]}"
                             f"{f' and {len(held) - 1} more' if len(held) > 1 else ''}); choose a new directory "
                             "or --force over it")
        out_dir = rundir.prepare(out, force=force)
        with rundir.locked(out_dir):
            write_merged(merged, out_dir)
            console.print(f"merged {len(merged.rows)} rows of {len(inputs)} run(s) into {out_dir}")
            for note in merged.notes:
                console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
            write = write_kernel_outputs if merged.kind.name == "kernel" else write_e2e_outputs
            write(out_dir, merged.env, console)
