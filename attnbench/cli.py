"""The attnbench command line: thin typed commands over the sweep, backends and reports.

Helpers raise AttnbenchError; only this layer turns one into a red one-line message and a
non-zero exit, so a user never sees a traceback for bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from attnbench.console import make_console
from attnbench.errors import AttnbenchError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark LLM attention kernels: one paged varlen call (unified) vs kvcache + varlen (split).")


def fail(console: Console, message: str, code: int = 1) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def kernel(
    heads: Annotated[Optional[str], typer.Option(help="Query heads, a list sweeps them. Example: --heads 32 or --heads 12,32")] = None,
    dim: Annotated[Optional[str], typer.Option(help="Head dim, a list sweeps them. Example: --dim 128 or --dim 64,128")] = None,
    shapes: Annotated[Optional[str], typer.Option(help="(heads x dim) pairs instead of the --heads x --dim product. Example: --shapes 12x64,32x128,64x128")] = None,
    kv_heads: Annotated[Optional[int], typer.Option(help="KV heads (GQA); default = heads. Example: --kv-heads 8")] = None,
    tokens: Annotated[Optional[str], typer.Option(help="Query-token counts N per batch (default 100,500,1000 on GPU; 10,50,100 on CPU). Example: --tokens 100,500,1000")] = None,
    kind: Annotated[str, typer.Option(help="Batch kinds: decode, prefill, mixed, prefix, specdec, or all. Example: --kind decode,mixed")] = "all",
    strategy: Annotated[str, typer.Option(help="Strategies. Example: --strategy unified,split")] = "unified,split",
    backend: Annotated[Optional[str], typer.Option(help="Backends (default: every available kernel backend; reference on CPU). Example: --backend vllm-fa2")] = None,
    mode: Annotated[str, typer.Option(help="Timing mode: eager, graph or both (both on GPU, eager on CPU by default). Example: --mode graph")] = "",
    dtype: Annotated[str, typer.Option(help="bf16 or fp16. Example: --dtype fp16")] = "bf16",
    block_size: Annotated[int, typer.Option(help="KV cache block size, a multiple of 16. Example: --block-size 32")] = 16,
    context: Annotated[Optional[str], typer.Option(help="KV length of decode/specdec sequences and of the mixed chunk's prefix: a number or uniform:LOW:HIGH (default 1024 on GPU, 256 on CPU). Example: --context uniform:1:4096")] = None,
    decode_share: Annotated[float, typer.Option(help="mixed: share of the N tokens that are decode tokens. Example: --decode-share 0.9")] = 0.5,
    prefix_ratio: Annotated[str, typer.Option(help="prefix: cached share of each sequence's KV, a list sweeps it. Example: --prefix-ratio 0,0.5,0.9")] = "0.5",
    spec_k: Annotated[int, typer.Option(help="specdec: query tokens per sequence. Example: --spec-k 4")] = 4,
    prefill_len: Annotated[int, typer.Option(help="prefill/prefix: max query tokens per sequence. Example: --prefill-len 512")] = 512,
    causal: Annotated[bool, typer.Option(help="Causal mask (bottom-right aligned). Example: --no-causal")] = True,
    cold_l2: Annotated[bool, typer.Option(help="Flush L2 before every sample. Example: --cold-l2")] = False,
    budget_ms: Annotated[Optional[float], typer.Option(help="Sampling time budget per row, ms (default 1000 on GPU, 200 on CPU). Example: --budget-ms 500")] = None,
    rel_spread: Annotated[float, typer.Option(help="Stop sampling once IQR / median is below this. Example: --rel-spread 0.005")] = 0.01,
    seed: Annotated[int, typer.Option(help="Seed for lengths, block tables and inputs. Example: --seed 1")] = 0,
    device: Annotated[str, typer.Option(help="auto, cuda, cuda:N or cpu. Example: --device cpu")] = "auto",
    out: Annotated[Optional[Path], typer.Option(help="Results directory (default results/<time>-<gpu>-kernel). Example: --out runs/h200")] = None,
    json_rows: Annotated[bool, typer.Option("--json", help="Print each row as a JSON line on stdout. Example: --json | jq .median_ms")] = False,
    profile: Annotated[bool, typer.Option(help="After timing each row, run torch.profiler over a few more calls: traces for TensorBoard and Perfetto under <out>/profile, kernel breakdown in profile_kernels.csv and profile.md. Example: --profile")] = False,
) -> None:
    """Sweep query-token counts x heads x head dims over unified and split attention, check every
    result against a float32 reference, time it, and write tables and plots.

    Example: attnbench kernel --heads 32 --dim 128
    """
    values = dict(locals())  # every flag, by parameter name
    console = make_console(json_rows)
    try:
        from attnbench.flags import kernel_args
        from attnbench.kernel_cmd import run_kernel

        args = kernel_args(values)
        run_kernel(args, console, command=["attnbench", *sys.argv[1:]])
    except AttnbenchError as exc:
        fail(console, str(exc))


@app.command()
def backends() -> None:
    """List every backend as available (with its library and version) or unavailable with the reason.

    Example: attnbench backends
    """
    from attnbench.backends import REGISTRY

    console = make_console()
    table = Table("backend", "status", "library", "what it runs")
    for name, b in REGISTRY.items():
        reason = b.unavailable_reason()
        lib = "/".join(b.library()) if reason is None else ""
        table.add_row(name, "[green]available[/]" if reason is None else f"[red]unavailable[/]: {reason}", lib, b.description)
    console.print(table)


# Commands that live in their own modules; each module defines `register(app)`.
COMMAND_MODULES: tuple[str, ...] = ("attnbench.run_cmd", "attnbench.results_cmd", "attnbench.e2e_cmd")


def _register_commands() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_commands()


def main() -> None:
    app()
