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
from attnbench.e2e.presets import MIN_ITERS, PRECISION, PRESETS, default_text

if TYPE_CHECKING:
    from attnbench.e2e.args import E2EArgs


def e2e(
    ctx: typer.Context,
    model: Annotated[Optional[str], typer.Option(help=f"A preset ({', '.join(PRESETS)}) or a local Hugging Face Llama/Qwen2 checkpoint directory (config.json + *.safetensors; never downloaded); {default_text('model')}. Example: --model ./checkpoints/my-llama")] = None,
    input_len: Annotated[Optional[list], typer.Option(parser=list_of(int, "--input-len"), help=f"Prompt lengths, zipped with --output-len (one value pairs with all); {default_text('input_len')}. Example: --input-len 32,512")] = None,
    output_len: Annotated[Optional[list], typer.Option(parser=list_of(int, "--output-len"), help=f"Generated tokens per request (greedy, EOS ignored); {default_text('output_len')}. Example: --output-len 128,32")] = None,
    batch_size: Annotated[Optional[list], typer.Option(parser=list_of(int, "--batch-size"), help=f"Concurrent requests per run; {default_text('batch_size')}. Example: --batch-size 1,2,4,8,16,32")] = None,
    chunk_size: Annotated[Optional[int], typer.Option(help="Chunked prefill: token budget per step, which makes mixed prefill+decode batches (default: whole prefill). Example: --chunk-size 256")] = None,
    strategy: options.Strategy = "unified,split",
    backend: options.Backend = None,
    eager: Annotated[bool, typer.Option(help="No CUDA graphs: the same as --cudagraph none. Example: --eager")] = False,
    cudagraph: Annotated[Optional[str], typer.Option(help="CUDA graph mode: none (eager), decode (decode steps replay graphs, prefill and mixed steps eager), piecewise (every step replays graphs of everything but attention, n_layer + 1 per token bucket, attention eager in between, as vLLM V1's PIECEWISE), full (every step replays a graph, buckets over tokens and sequences; a backend whose graphs replay on decode batches only runs its prefill and mixed steps piecewise). Graphs of piecewise and full are captured on first use in the untimed check run (with --trace: every bucket the trace's steps can reach, before the check serve). On the CPU, or a backend that cannot be captured (decode, full), rows fall back to none with a note. Default: full (under --tp too). Example: --cudagraph decode")] = None,
    graph_policy: Annotated[str, typer.Option(help="With --cudagraph full: safe (static max_seqlen upper bounds, padded cu_seqlens) or naive (metadata as it comes: the seed's graph bug, which the agreement check should call MISMATCH). Example: --cudagraph full --graph-policy naive")] = "safe",
    dtype: options.Dtype = "bf16",
    block_size: options.BlockSize = 16,
    warmup: Annotated[Optional[int], typer.Option(help=f"Warm-up rounds per backend (each strategy runs once a round), after the untimed check runs, which already warm every engine; {default_text('warmup')} (vllm bench latency: 10). Example: --warmup 10")] = None,
    iters: Annotated[Optional[int], typer.Option(help=f"The most measured runs per row (with --precision 0: exactly this many, as vllm bench latency's --num-iters); {default_text('iters')}. With --trace: measured serves per backend x strategy, at least 2 (default 3 on a GPU, 2 on the CPU). Example: --iters 30 --precision 0")] = None,
    min_iters: Annotated[Optional[int], typer.Option(help=f"The fewest measured runs per row before --precision may stop it (default {MIN_ITERS}, the fewest whose range is a 95 % interval of the median; at most --iters). Example: --min-iters 10")] = None,
    precision: Annotated[float, typer.Option(help=f"Stop a backend's measured rounds (its strategies run in turns) once the 95 % confidence interval (distribution-free, from order statistics) of every row's p50, or of every strategy's run-by-run ratio to unified, has a half-width within this share of it: 0.01 is ±1 %; 0 runs a fixed --iters. Default {PRECISION}. Example: --precision 0.005")] = PRECISION,
    seed: Annotated[int, options.seed("random weights, prompts and block order")] = 0,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], options.run_out("e2e", "runs/h200-e2e")] = None,
    profile: Annotated[bool, options.profile("each row's measured runs, profile one more request run with torch.profiler", " and the attention kernels' share")] = False,
    force: options.Force = False,
    resume: Annotated[Optional[Path], options.resume("e2e")] = None,
    isolate: Annotated[bool, options.isolate("(input len, output len, batch size) point", "; a worker builds the model once and is reused while healthy", "kills the CUDA context becomes timeout / crashed rows")] = False,
    point_timeout: Annotated[Optional[float], options.point_timeout("--isolate", "default 600 on a GPU, 120 on the CPU", "; a worker's start, model build included, gets at least 120 s")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Serve a request trace instead of the grid: vLLM's timed trace JSON Lines (timestamp, input_length, output_length) or a BurstGPT CSV (*.csv); each request's prompt and output length from it (EOS ignored), and TTFT, TPOT, ITL and E2E latency percentiles per backend x strategy, as vllm bench serve reports them (docs/guides/e2e.md). Example: --trace scenarios/traces/chat-high.requests.jsonl")] = None,
    arrivals: Annotated[str, typer.Option(help="With --trace: trace (each request joins when its timestamp has passed, on the wall clock since serving began) or all-at-once (every request at 0). Example: --arrivals all-at-once")] = "trace",
    time_unit: Annotated[str, typer.Option(help="With --trace: the unit of a timed trace's timestamps, s or ms (Mooncake-style traces); a BurstGPT CSV's are seconds. Example: --time-unit ms")] = "s",
    max_requests: Annotated[Optional[int], typer.Option(help="With --trace: serve only its first N requests (by arrival); default all on a GPU, 1 on the CPU. Example: --max-requests 40")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(help="With --trace: the most requests running at once (vLLM's max_num_seqs); later ones wait. Default: every request served, up to 128. Example: --max-num-seqs 64")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel ranks, one process per GPU under torchrun: each holds n_heads/N query and n_kv_heads/N KV heads (its attention shape), its share of the MLP and its KV heads' cache; rank 0 writes the results. Example: python -m torch.distributed.run --nproc-per-node 2 -m attnbench e2e --model llama-2-70b --tp 2")] = 1,
) -> None:
    """Request latency of a whole model, unified vs split attention: p50/p90/p99 request latency,
    prefill/decode step times, tokens/s, and greedy-token agreement between the runs.

    Default on a GPU: the seed's table, llama-7b with random weights, input/output 32/128 and 512/32
    x batch 1-32, every step replayed from CUDA graphs (--cudagraph full), each row measured until
    its p50 is known within ±2 % (--precision). Without a GPU the defaults scale to a pipeline demo
    on tiny, said in one line. The plan and an ETA are printed before the first row.

    Examples: attnbench e2e --model llama-7b;
    attnbench e2e --model llama-7b --warmup 10 --iters 30 --precision 0 (vllm bench latency's fixed count);
    attnbench e2e --model qwen-14b --input-len 512 --output-len 32 --chunk-size 256;
    attnbench e2e --model ./checkpoints/my-llama --eager;
    attnbench e2e --model llama-7b --chunk-size 256 --cudagraph full;
    attnbench e2e --model llama-7b --chunk-size 256 --cudagraph piecewise;
    python -m torch.distributed.run --nproc-per-node 2 -m attnbench e2e --model llama-2-70b --tp 2;
    attnbench e2e --model llama-3-8b --trace scenarios/traces/chat-high.requests.jsonl --chunk-size 2048
    """
    from attnbench.e2e.args import E2EArgs

    start_e2e(E2EArgs(**ctx.params))  # the flags, parsed by their declarations, under their own names


def start_e2e(args: E2EArgs) -> None:
    """Run an e2e job for `attnbench e2e` or an e2e scenario."""
    from attnbench.e2e.parallel import exit_now, teardown_code
    from attnbench.runs.e2e import run_e2e
    from attnbench.runs.e2e_trace import run_trace

    console = make_console()
    with user_errors(console):
        (run_trace if args.trace is not None else run_e2e)(args, console, command=command_line())
    if args.tp > 1:  # every rank's files are written: skip a teardown that can abort (parallel.exit_now)
        exit_now(teardown_code())
