"""`attnbench atlas`: a map of the winning backend x strategy over the axes of a step, refined at crossovers.

Thin: the job is runs/atlas.py, imported when the command runs (tests/test_cli_startup.py); each
axis flag is VALUE (fixed) or LOW:HIGH[:COUNT] (it varies). The guide is docs/guides/atlas.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.console import make_console


def axis(meaning: str, gpu: str, cpu: str, example: str):
    return typer.Option(help=f"{meaning}: VALUE (fixed) or LOW:HIGH[:COUNT] (varies over COUNT coarse values, 4 by "
                             f"default, then refined at crossovers; default {gpu} on a GPU, {cpu} on the CPU). "
                             f"Example: {example}")


Axis = Optional[str]


def atlas(
    ctx: typer.Context,
    decode_share: Annotated[Axis, axis("Decode rows over the step's query tokens (linear)", "0:1:5", "0:1:3", "--decode-share 0:1:5")] = None,
    decode_context: Annotated[Axis, axis("KV tokens of each decode row (log-spaced)", "256:16384:4", "16:128:2", "--decode-context 512:32768")] = None,
    chunk: Annotated[Axis, axis("Query tokens of a prefill chunk, at most (log-spaced)", "512", "32", "--chunk 256:4096:3")] = None,
    prefill_context: Annotated[Axis, axis("Cached KV tokens before each prefill chunk (log-spaced)", "0", "0", "--prefill-context 0:8192:3")] = None,
    gqa_group: Annotated[Axis, axis("Query heads per KV head, a divisor of --heads (log-spaced)", "4", "4", "--gqa-group 1:8:4")] = None,
    head_dim: Annotated[Axis, axis("Head dim, a multiple of 8 up to 256 (log-spaced)", "128", "32", "--head-dim 64:256:3")] = None,
    tokens: Annotated[Axis, axis("Query tokens of the step (log-spaced)", "64:2048:4", "8:32:2", "--tokens 16:4096:5")] = None,
    heads: Annotated[int, typer.Option(help="Query heads of every cell (KV heads: heads / --gqa-group). Example: --heads 32")] = 32,
    dtype: options.Dtype = "bf16",
    block_size: options.BlockSize = 16,
    strategy: options.Strategy = "unified,split",
    backend: options.Backend = None,
    mode: Annotated[Optional[str], typer.Option(parser=options.one_of("--mode", lambda: ("eager", "graph")), help="The one timing mode the atlas maps: graph or eager (default graph on a GPU, eager on the CPU). Example: --mode eager")] = None,
    budget_ms: Annotated[Optional[float], typer.Option(help="Sampling time budget per row and replicate, ms (default 1000 on GPU, 200 on CPU). Example: --budget-ms 20")] = None,
    rel_spread: Annotated[float, typer.Option(help="Stop sampling once IQR / median is below this. Example: --rel-spread 0.005")] = 0.01,
    replicates: Annotated[Optional[int], typer.Option(help="Measure every row this many times on fresh inputs, plans and graphs (default 3 on a GPU, 1 on the CPU). Example: --replicates 1")] = None,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], options.run_out("atlas", "runs/h200-atlas")] = None,
    force: options.Force = False,
    max_cells: Annotated[int, typer.Option(help="Stop refining once this many cells are measured (the coarse grid must fit in it; a resume may raise it). Example: --max-cells 600")] = 500,
    resume: Annotated[Optional[Path], options.resume("atlas")] = None,
    isolate: Annotated[bool, options.isolate("cell", "", "runs out of memory becomes a timeout / crashed / oom row")] = False,
    point_timeout: Annotated[Optional[float], options.point_timeout("--isolate", "default 600 on a GPU, 120 on the CPU")] = None,
) -> None:
    """Map which backend x strategy wins over the axes of a step (decode share, decode context,
    prefill chunk and its context, GQA group, head dim, query tokens): a coarse grid, then
    refinement where neighbouring cells' winners differ, each cell checked against the reference,
    with its margin, interval and ties; tables, crossovers and winner maps.

    Example: attnbench atlas --decode-share 0:1:5 --tokens 64:4096:4 --decode-context 512:32768:4 --mode graph
    """
    from attnbench.runs.atlas import AtlasArgs, run_atlas

    console = make_console()
    with user_errors(console):
        run_atlas(AtlasArgs(**ctx.params), console, command=command_line())
