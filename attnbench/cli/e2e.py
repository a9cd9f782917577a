"""`attnbench e2e`: typed flags in, an e2e job (attnbench.runs.e2e) out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attnbench.cli.common import command_line, user_errors
from attnbench.cli.flags import e2e_args
from attnbench.console import make_console
from attnbench.e2e.model import PRESETS
from attnbench.e2e.parallel import exit_now, teardown_code
from attnbench.e2e.runner import SEED_BATCH_SIZES, SEED_INPUT_LENS, SEED_OUTPUT_LENS
from attnbench.runs.e2e import run_e2e


def e2e(
    model: Annotated[str, typer.Option(help=f"A preset ({', '.join(PRESETS)}) or a local Hugging Face Llama/Qwen2 checkpoint directory (config.json + *.safetensors; never downloaded). Example: --model ./checkpoints/my-llama")] = "llama-7b",
    input_len: Annotated[str, typer.Option(help="Prompt lengths, zipped with --output-len (one value pairs with all). Example: --input-len 32,512")] = SEED_INPUT_LENS,
    output_len: Annotated[str, typer.Option(help="Generated tokens per request (greedy, EOS ignored). Example: --output-len 128,32")] = SEED_OUTPUT_LENS,
    batch_size: Annotated[str, typer.Option(help="Concurrent requests per run. Example: --batch-size 1,2,4,8,16,32")] = SEED_BATCH_SIZES,
    chunk_size: Annotated[Optional[int], typer.Option(help="Chunked prefill: token budget per step, which makes mixed prefill+decode batches (default: whole prefill). Example: --chunk-size 256")] = None,
    strategy: Annotated[str, typer.Option(help="Attention strategies. Example: --strategy unified,split")] = "unified,split",
    backend: Annotated[Optional[str], typer.Option(help="Attention backends (default: every available kernel backend; reference on CPU). Example: --backend vllm-fa2")] = None,
    eager: Annotated[bool, typer.Option(help="No CUDA graphs: the same as --cudagraph none. Example: --eager")] = False,
    cudagraph: Annotated[Optional[str], typer.Option(help="CUDA graph mode: none (eager), decode (decode steps replay graphs, prefill and mixed steps eager), piecewise (every step replays graphs of everything but attention, n_layer + 1 per token bucket, attention eager in between, as vLLM V1's PIECEWISE), full (every step replays a graph, buckets over tokens and sequences; a backend whose graphs replay on decode batches only runs its prefill and mixed steps piecewise). Graphs of piecewise and full are captured on first use in the untimed check run. On the CPU, or a backend that cannot be captured (decode, full), rows fall back to none with a note. Default: full (under --tp too). Example: --cudagraph decode")] = None,
    graph_policy: Annotated[str, typer.Option(help="With --cudagraph full: safe (static max_seqlen upper bounds, padded cu_seqlens) or naive (metadata as it comes: the seed's graph bug, which the agreement check should call MISMATCH). Example: --cudagraph full --graph-policy naive")] = "safe",
    dtype: Annotated[str, typer.Option(help="bf16 or fp16. Example: --dtype fp16")] = "bf16",
    block_size: Annotated[int, typer.Option(help="KV cache block size, a multiple of 16. Example: --block-size 32")] = 16,
    warmup: Annotated[int, typer.Option(help="Warm-up runs per row (as vllm bench latency). Example: --warmup 2")] = 10,
    iters: Annotated[int, typer.Option(help="Measured runs per row (as vllm bench latency). Example: --iters 5")] = 30,
    seed: Annotated[int, typer.Option(help="Seed for random weights, prompts and block order. Example: --seed 1")] = 0,
    device: Annotated[str, typer.Option(help="auto, cuda, cuda:N or cpu. Example: --device cpu")] = "auto",
    out: Annotated[Optional[Path], typer.Option(help="Results directory (default results/<time>-<gpu>-e2e). Example: --out runs/h200-e2e")] = None,
    profile: Annotated[bool, typer.Option(help="After each row's measured runs, profile one more request run with torch.profiler: traces under <out>/profile, kernel breakdown and the attention kernels' share in profile_kernels.csv and profile.md. Example: --profile")] = False,
    force: Annotated[bool, typer.Option(help="Run into an --out that holds an earlier run, removing the files attnbench wrote there first (other files stay). Example: --force")] = False,
    resume: Annotated[Optional[Path], typer.Option(help="Finish an interrupted run: the same flags, and the directory it wrote; only the points it lacks are measured (refused if the GPU or library versions differ). Example: --resume results/20261130-h200-e2e")] = None,
    isolate: Annotated[bool, typer.Option(help="Run each (input len, output len, batch size) point in a worker process with a watchdog; a worker builds the model once and is reused while healthy: a point that hangs (past --point-timeout), crashes its process or kills the CUDA context becomes timeout / crashed rows and the run goes on. Example: --isolate")] = False,
    point_timeout: Annotated[Optional[float], typer.Option(help="With --isolate: the longest a point may go without a row, in seconds (default 600 on a GPU, 120 on the CPU); a worker's start, model build included, gets at least 120 s. Example: --point-timeout 300")] = None,
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
    values = dict(locals())  # every flag, by parameter name
    console = make_console()
    with user_errors(console):
        run_e2e(e2e_args(values), console, command=command_line())
    if tp > 1:  # every rank's files are written: skip a teardown that can abort (parallel.exit_now)
        exit_now(teardown_code())
