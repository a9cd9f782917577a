"""`attnbench kernel` and `attnbench backends`: typed flags in, a kernel job out.

The job, the registry and the args object are imported when a command runs, not with this module:
`--help` and a usage error answer without torch (tests/test_cli_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.cli.options import list_of, parse_shapes
from attnbench.console import make_console
from attnbench.kernels.choices import MODES
from attnbench.kernels.workload import KINDS


def kernel(
    ctx: typer.Context,
    heads: Annotated[Optional[list], typer.Option(parser=list_of(int, "--heads"), help="Query heads, a list sweeps them. Example: --heads 32 or --heads 12,32")] = None,
    dim: Annotated[Optional[list], typer.Option(parser=list_of(int, "--dim"), help="Head dim, a list sweeps them. Example: --dim 128 or --dim 64,128")] = None,
    shapes: Annotated[Optional[list], typer.Option(parser=parse_shapes, help="(heads x dim) pairs instead of the --heads x --dim product; HEADS/KVxDIM gives a shape its own kv heads. Example: --shapes 12x64,32/8x128")] = None,
    kv_heads: Annotated[Optional[int], typer.Option(help="KV heads (GQA); default = heads. Example: --kv-heads 8")] = None,
    tokens: Annotated[Optional[list], typer.Option(parser=list_of(int, "--tokens", optional=True), help="Query-token counts N per batch (default 100,500,1000 on GPU; 10,50,100 on CPU). Example: --tokens 100,500,1000")] = None,
    kind: Annotated[list, typer.Option(parser=list_of(str, "--kind", choices=lambda: (*KINDS, "all")), help="Batch kinds: decode, prefill, mixed, prefix, specdec, or all. Example: --kind decode,mixed")] = "all",
    strategy: options.Strategy = "unified,split",
    backend: options.Backend = None,
    mode: Annotated[Optional[list], typer.Option(parser=list_of(str, "--mode", optional=True, choices=lambda: (*MODES, "both")), help="Timing mode: eager, graph or both (both on GPU, eager on CPU by default). Example: --mode graph")] = "",
    dtype: options.Dtype = "bf16",
    block_size: options.BlockSize = 16,
    context: Annotated[Optional[str], typer.Option(help="KV length of decode/specdec sequences and of the mixed chunk's prefix: a number or uniform:LOW:HIGH (default 1024 on GPU, 256 on CPU). Example: --context uniform:1:4096")] = None,
    decode_share: Annotated[list, typer.Option(parser=list_of(float, "--decode-share"), help="mixed: share of the N tokens that are decode tokens, a list sweeps it. Example: --decode-share 0.5,0.9")] = "0.5",
    decode_seqs: Annotated[Optional[list], typer.Option(parser=list_of(int, "--decode-seqs", optional=True), help="mixed: instead of --decode-share, this many decode sequences beside a prefill chunk of all N tokens; a list sweeps it. Example: --tokens 2048 --decode-seqs 32,128")] = None,
    prefix_ratio: Annotated[list, typer.Option(parser=list_of(float, "--prefix-ratio"), help="prefix: cached share of each sequence's KV, a list sweeps it. Example: --prefix-ratio 0,0.5,0.9")] = "0.5",
    spec_k: Annotated[int, typer.Option(help="specdec: query tokens per sequence. Example: --spec-k 4")] = 4,
    prefill_len: Annotated[int, typer.Option(help="prefill/prefix: max query tokens per sequence. Example: --prefill-len 512")] = 512,
    causal: Annotated[bool, typer.Option(help="Causal mask (bottom-right aligned). Example: --no-causal")] = True,
    cold_l2: Annotated[bool, typer.Option(help="Flush L2 before every sample. Example: --cold-l2")] = False,
    budget_ms: Annotated[Optional[float], typer.Option(help="Sampling time budget per row and replicate, ms (default on a GPU 50 when replicates stop when enough, 1000 with --replicates N; 200 on the CPU). Example: --budget-ms 500")] = None,
    replicates: Annotated[Optional[int], typer.Option(help="Measure every row exactly this many times, each on freshly allocated inputs with a new plan and new graphs, interleaved; median_ms is the median of replicate medians and compare's interval comes from them, so it includes between-run noise (default on a GPU: replicates stop when enough, see --threshold; 1 on the CPU). Example: --replicates 3")] = None,
    min_replicates: Annotated[Optional[int], typer.Option(help="Replicates stop when enough: each row takes at least this many (at least 2; default 2 on a GPU). Example: --min-replicates 3")] = None,
    max_replicates: Annotated[Optional[int], typer.Option(help="Replicates stop when enough: each row takes at most this many; a row that reaches it without resolving --threshold records stopped=budget (default 3 on a GPU). Example: --max-replicates 6")] = None,
    threshold: Annotated[Optional[str], typer.Option(help="Replicates stop when enough: a row stops (stopped=converged) once compare's 95 % interval for an A/A pair of runs like it is within half of this, so `compare --threshold` this resolves it (default 5 %, compare's). Example: --threshold 3%")] = None,
    rel_spread: Annotated[float, typer.Option(help="Stop sampling once IQR / median is below this. Example: --rel-spread 0.005")] = 0.01,
    seed: Annotated[int, options.seed("lengths, block tables and inputs")] = 0,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], options.run_out("kernel", "runs/h200")] = None,
    json: Annotated[bool, typer.Option("--json", help="Print each row as a JSON line on stdout. Example: --json | jq .median_ms")] = False,
    profile: Annotated[bool, options.profile("timing each row, run torch.profiler over a few more calls", "")] = False,
    force: options.Force = False,
    resume: Annotated[Optional[Path], options.resume("kernel")] = None,
    isolate: Annotated[bool, options.isolate("point", "", "runs out of memory becomes a timeout / crashed / oom row")] = False,
    point_timeout: Annotated[Optional[float], options.point_timeout("--isolate or --devices", "default 600 on a GPU, above FA2's 1-2 minute first-use compile on Hopper; 120 on the CPU")] = None,
    shard: Annotated[Optional[str], typer.Option(help="Measure only shard I of N of the points (counted from 0; the same flags give every shard the same split), for job arrays; join the shards with `attnbench merge`. Example: --shard $SLURM_ARRAY_TASK_ID/4")] = None,
    devices: Annotated[Optional[str], typer.Option(help="Spread the points over local GPUs, one worker process each (both strategies of a point on one GPU; every row records its device): all, or a list (cpu,cpu: CPU workers, for tests). Example: --devices all or --devices cuda:0,cuda:1")] = None,
) -> None:
    """Sweep query-token counts x heads x head dims over unified and split attention, check every
    result against a float32 reference, time it, and write tables and plots.

    Under torchrun every rank measures its share of the points and rank 0 writes the run.

    Example: attnbench kernel --heads 32 --dim 128
    """
    from attnbench.kernels.plan import KernelArgs
    from attnbench.runs.kernel import run_kernel
    from attnbench.runs.kernel_ranks import run_kernel_ranks
    from attnbench.workers import distributed

    args = KernelArgs(**ctx.params)  # the flags, parsed by their declarations, under their own names
    console = make_console(args.json)
    with user_errors(console):
        job = run_kernel_ranks if distributed.launched() else run_kernel
        job(args, console, command=command_line())


def backends() -> None:
    """List every backend as available (with its library and version) or unavailable with the reason.

    Example: attnbench backends
    """
    from attnbench.kernels.backends.registry import REGISTRY

    console = make_console()
    table = Table("backend", "status", "library", "strategies", "graph", "what it runs")
    for name, b in REGISTRY.items():
        reason = b.unavailable_reason()
        lib = "/".join(b.library()) if reason is None else ""
        status = "[green]available[/]" + (" (opt-in: name it with --backend)" if b.opt_in else "")
        table.add_row(name, status if reason is None else f"[red]unavailable[/]: {escape(reason)}",
                      lib, ",".join(b.strategies), "yes" if b.graph_safe else "no", escape(b.description))
    console.print(table)
