"""`attnbench verify`: typed flags in, the graph-safety table out (kernels/verify.py does the work).

Why a command of its own: graph safety is a yes/no per backend x strategy x policy, found by
replaying captured calls on other batches; it times nothing and shares no flags' meaning with
`kernel` beyond the shape of the attention. The replays and the registry (torch) are imported
when the command runs; `--help` needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.cli import options
from attnbench.cli.common import user_errors
from attnbench.cli.options import list_of
from attnbench.console import make_console
from attnbench.errors import UsageError, check_choices

if TYPE_CHECKING:
    from attnbench.runs.rundir import RunDir


def verify(
    backend: options.Backend = None,
    strategy: options.Strategy = "unified,split",
    policy: Annotated[list, typer.Option(parser=list_of(str, "--policy"), help="naive (max_seqlen from the capture batch, buffers' tails left as they were) and/or safe (the seed's recipe). Example: --policy safe")] = "naive,safe",
    heads: Annotated[int, typer.Option(help="Query heads. Example: --heads 32")] = 32,
    kv_heads: Annotated[Optional[int], typer.Option(help="KV heads (GQA). Example: --kv-heads 32")] = 8,
    dim: Annotated[int, typer.Option(help="Head dim. Example: --dim 128")] = 128,
    dtype: options.Dtype = "bf16",
    block_size: options.BlockSize = 16,
    contexts: Annotated[list, typer.Option(parser=list_of(int, "--contexts"), help="SHORT,LONG: KV lengths of the capture batches and of the short -> long replay. Example: --contexts 512,4096")] = "512,4096",
    seqs: Annotated[int, typer.Option(help="Decode sequences of the capture batches. Example: --seqs 4")] = 4,
    seed: Annotated[int, options.seed("block tables and inputs")] = 0,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], typer.Option(help="Write verify.csv and summary.md into this new or empty directory (claimed before anything runs, as kernel's --out). Example: --out results/verify-h200")] = None,
) -> None:
    """Capture each backend x strategy's attention call in a CUDA graph on one batch, replay it on
    other batches written into the same buffers (decode -> mixed, short -> long context, fewer ->
    more sequences), and check every replay against the float32 reference, under the naive and
    the safe policy. A case outside what a backend declares its graphs may be replayed on
    (FlashInfer: single-token decode batches only) is reported unsupported, not run. Exit 1 when a
    graph-safe backend fails under the safe policy (what kernel and e2e graph modes use); naive
    failures are findings. `--device cpu` (given explicitly) runs the CPU emulation, for backends
    whose launches read the buffers when they run.

    Example: attnbench verify --backend vllm-fa2,vllm-fa3 --policy naive,safe
    """
    import torch

    from attnbench.device import resolve_device
    from attnbench.kernels.backends.registry import resolve_backends
    from attnbench.kernels.graphsafe import POLICIES
    from attnbench.kernels.verify import replay_cases, verify_rows
    from attnbench.kernels.workload import STRATEGIES, SweepPoint
    from attnbench.runs.rundir import RunDir

    console = make_console()
    with user_errors(console):
        if device == "auto" and not torch.cuda.is_available():
            raise UsageError("verify needs a CUDA GPU (none visible); --device cpu runs the CPU emulation")
        dev = resolve_device(device)
        short, long = _short_long(contexts)
        if not 1 <= seqs <= 4096:
            raise UsageError(f"--seqs: must be between 1 and 4096, got {seqs}")
        point = SweepPoint(kind="mixed", num_tokens=seqs, num_heads=heads, num_kv_heads=kv_heads,
                           head_dim=dim, dtype=dtype, block_size=block_size, seed=seed)
        check_choices(strategy, STRATEGIES, "--strategy", "strategy")
        check_choices(policy, POLICIES, "--policy", "policy")
        cases = replay_cases(short, long, seqs)
        backends = resolve_backends(backend, dev)
        run = RunDir.prepare(out) if out is not None else None
        rows = verify_rows(backends, strategy, policy, point, cases, dev)
    print_verify(console, rows, run, out)


def print_verify(console: Console, rows: list[dict], run: RunDir | None, out: Path | None) -> None:
    """The table and the summary; verify.csv and summary.md into `run` when --out was given; exit 1
    when a graph-safe backend failed under the safe policy."""
    from attnbench.kernels.verify import gating_failures, results_csv, summary

    table = Table("backend", "strategy", "policy", "case", "verdict", "rel L2", "reason")
    for r in rows:
        style = {"pass": "green", "FAIL": "red"}.get(r["verdict"], "yellow")
        table.add_row(r["backend"], r["strategy"], r["policy"], r["case"], f"[{style}]{r['verdict']}[/]",
                      f"{r['rel_l2_error']:.1e}", escape(r["reason"]))
    console.print(table)
    console.print(summary(rows).split("\n\n", 2)[-1].strip(), highlight=False, markup=False)
    if run is not None:
        with user_errors(console):
            run.write_text("verify.csv", results_csv(rows))
            run.write_text("summary.md", summary(rows))
        console.print(f"wrote {out / 'verify.csv'} and {out / 'summary.md'}")
    if gating_failures(rows):
        raise typer.Exit(1)


def _short_long(values: list[int]) -> tuple[int, int]:
    if len(values) != 2 or not 1 <= values[0] < values[1] <= 1 << 22:
        raise UsageError(f"--contexts: expected SHORT,LONG with 1 <= SHORT < LONG <= {1 << 22}, "
                         f"got {','.join(map(str, values))!r}")
    return values[0], values[1]
