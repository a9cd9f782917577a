"""`attnbench merge`: shard run directories (or any runs of one setup) -> one run directory.

Thin: the job is runs/merge.py (results/merge.py reads, checks and joins the inputs), imported
when the command runs so that `--help` needs no pandas.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.console import make_console


def merge(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to merge: the shards of one sweep, or runs of one setup. Example: runs/shard-*")],
    out: Annotated[Path, typer.Option(help="The merged run directory (new or empty). Example: --out runs/all")],
    allow_mixed: Annotated[bool, typer.Option(help="Merge runs measured on different GPUs or with different attnbench, torch or kernel library versions; env.json records what differed. Example: --allow-mixed")] = False,
    partial: Annotated[bool, typer.Option(help="Merge shards that are not one whole split of one sweep (a shard missing or held twice, other --shard counts, other sweep flags); env.json records the split as not complete. Example: --partial")] = False,
    force: options.Force = False,
) -> None:
    """Merge run directories into one: every row once (two different rows for one measurement are
    refused), env.json listing the inputs and their shards, then summary, parquet and plots. Shards
    must be every shard of one split of one sweep (same flags less --shard and --out), unless --partial.

    Example: attnbench merge runs/shard-0 runs/shard-1 runs/shard-2 runs/shard-3 --out runs/all
    """
    from attnbench.cli.atlas_results import any_atlas, refuse_merge
    from attnbench.runs.merge import run_merge

    console = make_console()
    with user_errors(console):
        if atlas := any_atlas(runs):
            refuse_merge(atlas)
        run_merge(runs, out, allow_mixed, partial, force, shlex.join(command_line()), console)
