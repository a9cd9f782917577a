"""`attnbench replay TRACE`: a step trace's steps timed on every backend x strategy, and what they say.

Thin: the job is runs/replay.py, imported when the command runs (tests/test_cli_startup.py); the
shared flags come from cli/options.py and the shape flags mean what they mean to `attnbench trace`.
The guide is docs/guides/replay.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.cli.options import list_of
from attnbench.cli.trace import TraceDtype, shape_of_flags
from attnbench.console import make_console
from attnbench.kernels.choices import MODES

Heads = Annotated[Optional[int], typer.Option(help="Query heads, over the trace header's shape (needed when the header "
                                                   "has none; on the CPU without --heads, --kv-heads or --dim: 4 heads, "
                                                   "1 KV head, dim 32). Example: --heads 32")]
KvHeads = Annotated[Optional[int], typer.Option(help="KV heads, over the header's (default: its, else --heads). "
                                                     "Example: --kv-heads 8")]
Dim = Annotated[Optional[int], typer.Option(help="Head dim, over the header's (needed when the header has none). "
                                                 "Example: --dim 128")]
BlockSize = Annotated[Optional[int], typer.Option(help="KV block size, over the header's (default: its, else 16). "
                                                       "Example: --block-size 16")]


def replay(
    ctx: typer.Context,
    trace: Annotated[Path, typer.Argument(help="The step trace (`attnbench trace convert` or `trace synth` writes one). Example: traces/decode-heavy.jsonl", show_default=False)],
    heads: Heads = None,
    kv_heads: KvHeads = None,
    dim: Dim = None,
    dtype: TraceDtype = None,
    block_size: BlockSize = None,
    strategy: options.Strategy = "unified,split",
    backend: options.Backend = None,
    mode: Annotated[Optional[list], typer.Option(parser=list_of(str, "--mode", optional=True, choices=lambda: (*MODES, "both")), help="Timing mode: eager, graph or both (both on GPU, eager on CPU by default). Example: --mode graph")] = "",
    bucket_ratio: Annotated[Optional[float], typer.Option(help="Steps share a bucket when they have the same kind and their decode rows, query tokens and total KV tokens fall in the same log-spaced bins of this ratio (closer to 1: more buckets, each timed on a few of its steps; default 2, 4 on the CPU). Example: --bucket-ratio 1.5")] = None,
    bucket_split: Annotated[int, typer.Option(help="Cut a bucket holding more than 1/N of the trace's steps (and more than 64) into near-equal pieces, each timed on its own representatives: more points where most steps are (1: no cut). Example: --bucket-split 32")] = 12,
    steps: Annotated[Optional[int], typer.Option(help="Replay only the trace's first N steps (default: all of them on a GPU, 32 on the CPU). Example: --steps 1000")] = None,
    exact_sample: Annotated[int, typer.Option(help="Also time this many steps drawn from the trace (with --seed) one by one, and report each choice's bucketed estimate of them against their timed total. Example: --exact-sample 500")] = 0,
    budget_ms: Annotated[Optional[float], typer.Option(help="Sampling time budget per row and replicate, ms (default 1000 on GPU, 5 on CPU). Example: --budget-ms 100")] = None,
    rel_spread: Annotated[float, typer.Option(help="Stop sampling once IQR / median is below this. Example: --rel-spread 0.005")] = 0.01,
    replicates: Annotated[Optional[int], typer.Option(help="Measure every row this many times on fresh inputs, plans and graphs (default 3 on a GPU, 1 on the CPU). Example: --replicates 3")] = None,
    seed: Annotated[int, options.seed("drawing the --exact-sample steps")] = 0,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], options.run_out("replay", "runs/h200-replay")] = None,
    force: options.Force = False,
    resume: Annotated[Optional[Path], options.resume("replay")] = None,
    isolate: Annotated[bool, options.isolate("bucket", "", "runs out of memory becomes a timeout / crashed / oom row")] = False,
    point_timeout: Annotated[Optional[float], options.point_timeout("--isolate", "default 600 on a GPU, 120 on the CPU")] = None,
    shard: Annotated[Optional[str], typer.Option(help="Measure only shard I of N of the buckets (counted from 0), for job arrays. Example: --shard 0/4")] = None,
) -> None:
    """Time a step trace's steps on every backend x strategy (grouped into buckets of alike steps),
    each checked against the reference, and report the total per choice, the per-step oracle, where
    each choice wins and the bucketing error.

    Example: attnbench replay traces/decode-heavy.jsonl --exact-sample 500 --mode graph
    """
    from attnbench.runs.replay import ReplayArgs, run_replay

    console = make_console()
    with user_errors(console):
        shape_of_flags(heads, kv_heads, dim, dtype, block_size)
        run_replay(ReplayArgs(**ctx.params), console, command=command_line())
