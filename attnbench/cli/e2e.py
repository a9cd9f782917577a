"""`attnbench e2e`: typed flags in, an e2e job (attnbench.runs.e2e) out.

The flags' presets and defaults come from e2e/presets.py (plain data); the job and the args object
are imported when the command runs, so `--help` answers without torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from attnbench.cli import options
from attnbench.cli.common import command_line, user_errors
from attnbench.cli.options import list_of
from attnbench.console import make_console
from attnbench.e2e.presets import PRESETS, SEED_BATCH_SIZES, SEED_INPUT_LENS, SEED_OUTPUT_LENS

if TYPE_CHECKING:
    from attnbench.e2e.runner import E2EArgs


def e2e(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(help=f"A preset ({', '.join(PRESETS)}) or a local Hugging Face Llama/Qwen2 checkpoint directory (config.json + *.safetensors; never downloaded). Example: --model ./checkpoints/my-llama")] = "llama-7b",
    input_len: Annotated[list, typer.Option(parser=list_of(int, "--input-len"), help="Prompt lengths, zipped with --output-len (one value pairs with all). Example: --input-len 32,512")] = SEED_INPUT_LENS,
    output_len: Annotated[list, typer.Option(parser=list_of(int, "--output-len"), help="Generated tokens per request (greedy, EOS ignored). Example: --output-len 128,32")] = SEED_OUTPUT_LENS,
    batch_size: Annotated[list, typer.Option(parser=list_of(int, "--batch-size"), help="Concurrent requests per run. Example: --batch-size 1,2,4,8,16,32")] = SEED_BATCH_SIZES,
    chunk_size: Annotated[Optional[int], typer.Option(help="Chunked prefill: token budget per step, which makes mixed prefill+decode batches (default: whole prefill). Example: --chunk-size 256")] = None,
    strategy: options.Strategy = "unified,split",
    backend: options.Backend = None,
    eager: Annotated[bool, typer.Option(help="No CUDA graphs: the same as --cudagraph none. Example: --eager")] = False,
    cudagraph: Annotated[Optional[str], typer.Option(help="CUDA graph mode: none (eager), decode (decode steps replay graphs, prefill and mixed steps eager), piecewise (every step replays graphs of everything but attention, n_layer + 1 per token bucket, attention eager in between, as vLLM V1's PIECEWISE), full (every step replays a graph, buckets over tokens and sequences; a backend whose graphs replay on decode batches only runs its prefill and mixed steps piecewise). Graphs of piecewise and full are captured on first use in the untimed check run. On the CPU, or a backend that cannot be captured (decode, full), rows fall back to none with a note. Default: full (under --tp too). Example: --cudagraph decode")] = None,
    graph_policy: Annotated[str, typer.Option(help="With --cudagraph full: safe (static max_seqlen upper bounds, padded cu_seqlens) or naive (metadata as it comes: the seed's graph bug, which the agreement check should call MISMATCH). Example: --cudagraph full --graph-policy naive")] = "safe",
    dtype: options.Dtype = "bf16",
    block_size: options.BlockSize = 16,
    warmup: Annotated[int, typer.Option(help="Warm-up runs per row (as vllm bench latency). Example: --warmup 2")] = 10,
    iters: Annotated[int, typer.Option(help="Measured runs per row (as vllm bench latency). Example: --iters 5")] = 30,
    seed: Annotated[int, options.seed("random weights, prompts and block order")] = 0,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], options.run_out("e2e", "runs/h200-e2e")] = None,
    profile: Annotated[bool, options.profile("each row's measured runs, profile one more request run with torch.profiler", " and the attention kernels' share")] = False,
    force: options.Force = False,
    resume: Annotated[Optional[Path], options.resume("e2e")] = None,
    isolate: Annotated[bool, options.isolate("(input len, output len, batch size) point", "; a worker builds the model once and is reused while healthy", "kills the CUDA context becomes timeout / crashed rows")] = False,
    point_timeout: Annotated[Optional[float], options.point_timeout("--isolate", "default 600 on a GPU, 120 on the CPU", "; a worker's start, model build included, gets at least 120 s")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel ranks, one process per GPU under torchrun: each holds n_heads/N query and n_kv_heads/N KV heads (its attention shape), its share of the MLP and its KV heads' cache; rank 0 writes the results. Example: python -m torch.distributed.run --nproc-per-node 2 -m attnbench e2e --model llama-2-70b --tp 2")] = 1,
) -> None:
    """Request latency of a whole model, unified vs split attention: p50/p90/p99 request latency,
    prefill/decode step times, tokens/s, and greedy-token agreement between the runs.

    Default: the seed's table, llama-7b with random weights, input/output 32/128 and 512/32 x batch
    1-32, every step replayed from CUDA graphs (--cudagraph full).

    Examples: attnbench e2e --model llama-7b;
    attnbench e2e --model qwen-14b --input-len 512 --output-len 32 --chunk-size 256;
    attnbench e2e --model ./checkpoints/my-llama --eager;
    attnbench e2e --model llama-7b --chunk-size 256 --cudagraph full;
    attnbench e2e --model llama-7b --chunk-size 256 --cudagraph piecewise;
    python -m torch.distributed.run --nproc-per-node 2 -m attnbench e2e --model llama-2-70b --tp 2
    """
    from attnbench.e2e.runner import E2EArgs

    start_e2e(E2EArgs(**ctx.params))  # the flags, parsed by their declarations, under their own names


def start_e2e(args: E2EArgs) -> None:
    """Run an e2e job for `attnbench e2e` or an e2e scenario."""
    from attnbench.e2e.parallel import exit_now, teardown_code
    from attnbench.runs.e2e import run_e2e

    console = make_console()
    with user_errors(console):
        run_e2e(args, console, command=command_line())
    if args.tp > 1:  # every rank's files are written: skip a teardown that can abort (parallel.exit_now)
        exit_now(teardown_code())
