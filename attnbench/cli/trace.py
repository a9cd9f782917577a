"""`attnbench trace`: make step traces from what users have, and look inside one.

Thin: the jobs are runs/trace.py (reading every input, the scheduler simulation, writing), and the
format is attnbench/traces; both are imported when a subcommand runs. The guide is
docs/guides/traces.md. Timing a trace is `attnbench replay` (cli/replay.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attnbench.cli.common import user_errors
from attnbench.cli.options import Dtype
from attnbench.console import make_console
from attnbench.errors import UsageError

app = typer.Typer(no_args_is_help=True, help="Step traces: convert (vLLM's bench forward cases and batch specs, "
                                              "batch-shapes files, request traces, flashinfer-bench workloads, "
                                              "engine step logs), synth, requests, summary, to-flashinfer-bench.")

Out = Annotated[Path, typer.Option(help="The step trace to write (JSON Lines; new, empty, or a trace attnbench "
                                        "wrote, with --force). Example: --out traces/mine.jsonl")]
Force = Annotated[bool, typer.Option(help="Replace --out when it is a file attnbench wrote (it reads as one); "
                                          "any other file is refused. Example: --force")]
Heads = Annotated[Optional[int], typer.Option(help="Query heads, recorded in the header (the attention shape, "
                                                   "when known). Example: --heads 32")]
KvHeads = Annotated[Optional[int], typer.Option(help="KV heads, recorded in the header. Example: --kv-heads 8")]
Dim = Annotated[Optional[int], typer.Option(help="Head dim, recorded in the header. Example: --dim 128")]
TraceDtype = Annotated[Optional[str], Dtype.__metadata__[0]]
BlockSize = Annotated[Optional[int], typer.Option(help="KV block size: recorded in the header; the scheduler "
                                                       "rounds prefix hits down to whole blocks (16 when not "
                                                       "given). Example: --block-size 16")]
Budget = Annotated[int, typer.Option(help="Scheduler: token budget per step (vLLM's max_num_batched_tokens). "
                                          "Example: --max-num-batched-tokens 8192")]
MaxSeqs = Annotated[int, typer.Option(help="Scheduler: most requests running at once (vLLM's max_num_seqs). "
                                           "Example: --max-num-seqs 256")]
Chunk = Annotated[int, typer.Option(help="Scheduler: most prompt tokens one request takes in a step, so longer "
                                         "prompts are chunked (vLLM's long_prefill_token_threshold); 0: only the "
                                         "budget caps it. Example: --chunk-size 512")]
Drafts = Annotated[int, typer.Option(help="Scheduler: speculative draft tokens per decode row, every one "
                                          "accepted (0: no speculative decoding). Example: --num-draft-tokens 3")]
StepMs = Annotated[float, typer.Option(help="Scheduler: simulated time of one step, in ms, against which "
                                            "arrivals are honoured (an assumption, not a measurement). "
                                            "Example: --step-ms 30")]
MaxSteps = Annotated[int, typer.Option(help="Scheduler: stop after this many steps; the header counts the "
                                            "requests left unfinished. Example: --max-steps 10000")]


def shape_of_flags(heads, kv_heads, dim, dtype, block_size):
    """The shape flags as a Shape, or one error naming the flag (trace and replay take the same ones)."""
    from attnbench.traces.steps import FieldError, Shape

    try:
        return Shape(heads, kv_heads, dim, dtype, block_size)
    except FieldError as exc:
        flags = {"shape.num_heads": "--heads", "shape.num_kv_heads": "--kv-heads", "shape.head_dim": "--dim",
                 "shape.dtype": "--dtype", "shape.block_size": "--block-size"}
        name, _, message = str(exc).partition(": ")
        raise UsageError(f"{flags.get(name, name)}: {message}") from None


def _config(budget, max_seqs, chunk, drafts, step_ms, max_steps, block_size):
    from attnbench.traces.scheduler import SchedulerConfig

    return SchedulerConfig(budget, max_seqs, chunk, drafts, step_ms, block_size or 16, max_steps)


def _log_lengths(input_len, kv_len, seed):
    from attnbench.traces.log_steps import LogLengths
    from attnbench.traces.requests import LengthDist

    return LogLengths(LengthDist.parse(input_len, "--log-input-len"), LengthDist.parse(kv_len, "--log-kv-len"), seed)


def _wrote(console, out: Path, trace) -> None:
    kinds, log = trace.kinds(), trace.header.generator.get("log")
    console.print(f"wrote {out}: {len(trace.steps)} steps ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})"
                  + (f"; {trace.header.generator['unfinished']} requests unfinished (--max-steps)"
                     if trace.header.generator.get("unfinished") else "")
                  + (f"; lengths drawn, every step marked synthesized; {log['ignored_lines']} of {log['lines']} log "
                     f"lines ignored, {log['empty_steps']} steps without a request skipped" if log else ""),
                  highlight=False)


def convert(
    out: Out,
    steps: Annotated[Optional[Path], typer.Option(help="An attnbench step trace (to check it, or to record a shape in its header). Example: --steps traces/mine.jsonl")] = None,
    shapes: Annotated[Optional[Path], typer.Option(help="attnbench's batch-shapes file, JSON or YAML (YAML needs pyyaml): {\"cases\": [{\"name\", \"requests\": [{\"query_len\", \"kv_len\", ...}]}]} (docs/guides/traces.md); one step per case. Example: --shapes shapes.json")] = None,
    case: Annotated[Optional[list[str]], typer.Option(help="A case as `vllm bench forward --case` takes it, NAME=\\[N*]Q\\[@K]\\[c]\\[:D]: N requests of Q query tokens on K keys, c a chunk, D drafts among the Q, requests joined by commas; repeat for more steps. Example: --case mix=32*1@2048,512@1024c")] = None,
    batch_spec: Annotated[Optional[list[str]], typer.Option(help="A vLLM attention_benchmarks batch spec, (<count>)q<q_len>\\[k]\\[kv<kv_len>\\[k]] joined by _; repeat for more steps. Example: --batch-spec 2q2k_32q1kv1k")] = None,
    timed_trace: Annotated[Optional[Path], typer.Option(help="A request trace as vLLM's timed trace JSON Lines (timestamp, input_length, output_length), scheduled by the simulation. Example: --timed-trace requests.jsonl")] = None,
    burstgpt: Annotated[Optional[Path], typer.Option(help="A BurstGPT-style CSV (Timestamp, Request tokens, Response tokens), scheduled by the simulation. Example: --burstgpt BurstGPT_1.csv")] = None,
    time_unit: Annotated[str, typer.Option(help="Unit of --timed-trace timestamps: s or ms (Mooncake-style traces). Example: --time-unit ms")] = "s",
    flashinfer_bench: Annotated[Optional[Path], typer.Option(help="A flashinfer-bench workload JSON Lines file of a paged GQA definition (gqa_paged_decode_* or gqa_paged_prefill_causal_*); its index tensors are read from the safetensors files it points to. One step per workload. Example: --flashinfer-bench workloads/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.jsonl")] = None,
    fib_root: Annotated[Optional[Path], typer.Option(help="The flashinfer-bench dataset root the workloads' safetensors paths are relative to (default: the folder above workloads/, else the file's own). Example: --fib-root flashinfer-trace")] = None,
    sglang_log: Annotated[Optional[Path], typer.Option(help="An SGLang server log: each `Prefill batch` / `Decode batch` line becomes one step with the line's counts, the per-request lengths drawn (--log-input-len, --log-kv-len, --seed) and marked synthesized. Example: --sglang-log server.log")] = None,
    vllm_log: Annotated[Optional[Path], typer.Option(help="A vLLM V1 log written with --enable-logging-iteration-details: each `Iteration(N): ...` line becomes one step with its counts, the per-request lengths drawn and marked synthesized. Example: --vllm-log vllm.log")] = None,
    log_input_len: Annotated[str, typer.Option(help="--sglang-log/--vllm-log: a step's new and cached prefill tokens are shared among its prefill requests in proportion to prompt lengths drawn from this: N, uniform:LOW:HIGH or lognormal:MEDIAN:SIGMA. Example: --log-input-len lognormal:600:0.8")] = "lognormal:600:0.8",
    log_kv_len: Annotated[str, typer.Option(help="--sglang-log/--vllm-log: KV lengths of decode requests drawn from this (then scaled to SGLang's #token when the line has it), as --log-input-len. Example: --log-kv-len lognormal:1000:0.8")] = "lognormal:1000:0.8",
    seed: Annotated[int, typer.Option(help="--sglang-log/--vllm-log: seed of the drawn lengths; the same log and seed give the same trace. Example: --seed 1")] = 0,
    heads: Heads = None, kv_heads: KvHeads = None, dim: Dim = None, dtype: TraceDtype = None,
    block_size: BlockSize = None, max_num_batched_tokens: Budget = 2048, max_num_seqs: MaxSeqs = 128,
    chunk_size: Chunk = 512, num_draft_tokens: Drafts = 0, step_ms: StepMs = 20.0, max_steps: MaxSteps = 100_000,
    force: Force = False,
) -> None:
    """Convert one kind of input into a step trace: a batch-shapes file, --case or batch-spec strings,
    flashinfer-bench workloads (one step each), a request trace (scheduled into steps by the simulation),
    or an SGLang or vLLM step log (its counts kept, the per-request lengths drawn and marked synthesized).

    Example: attnbench trace convert --batch-spec 2q2k_32q1kv1k --batch-spec 64q1kv4k --out mix.jsonl
    """
    from attnbench.runs import trace as job

    console = make_console()
    with user_errors(console):
        if time_unit not in ("s", "ms"):
            raise UsageError(f"--time-unit: expected s or ms, got {time_unit!r}")
        inputs = job.TraceInputs(steps, shapes, case or [], batch_spec or [], timed_trace, burstgpt, time_unit,
                                 flashinfer_bench, fib_root, sglang_log, vllm_log,
                                 _log_lengths(log_input_len, log_kv_len, seed))
        inputs.check_one()
        shape = shape_of_flags(heads, kv_heads, dim, dtype, block_size)
        config = _config(max_num_batched_tokens, max_num_seqs, chunk_size, num_draft_tokens, step_ms, max_steps,
                         block_size)
        job.claim_output(out, force, inputs.files(), job.jsonl.read_trace)
        trace = job.convert(inputs, shape, config)
        job.write_trace(trace, out, force, inputs.files())
        _wrote(console, out, trace)


NumRequests = Annotated[int, typer.Option(help="How many requests to draw. Example: --num-requests 500")]
Rate = Annotated[float, typer.Option(help="Poisson arrival rate, requests per second (0: all at once). Example: --rate 8")]
InputLen = Annotated[str, typer.Option(help="Prompt lengths: N, uniform:LOW:HIGH or lognormal:MEDIAN:SIGMA. Example: --input-len lognormal:600:0.8")]
OutputLen = Annotated[str, typer.Option(help="Output lengths, as --input-len. Example: --output-len uniform:64:400")]
PrefixLen = Annotated[int, typer.Option(help="Prompt tokens a prefix cache holds (a shared system prompt) for --prefix-share of the requests. Example: --prefix-len 1024")]
PrefixShare = Annotated[float, typer.Option(help="Share of requests that start with the cached prefix, 0 to 1. Example: --prefix-share 0.8")]
Seed = Annotated[int, typer.Option(help="Seed of the request generator. Example: --seed 1")]


def _synthetic(num_requests, rate, input_len, output_len, prefix_len, prefix_share, seed):
    from attnbench.runs.trace import Synthetic
    from attnbench.traces.requests import LengthDist

    return Synthetic(num_requests, rate, LengthDist.parse(input_len, "--input-len"),
                     LengthDist.parse(output_len, "--output-len"), prefix_len, prefix_share, seed)


def synth(
    out: Out, num_requests: NumRequests = 200, rate: Rate = 0.0, input_len: InputLen = "lognormal:600:0.8",
    output_len: OutputLen = "lognormal:250:0.8", prefix_len: PrefixLen = 0, prefix_share: PrefixShare = 0.0,
    seed: Seed = 0, heads: Heads = None, kv_heads: KvHeads = None, dim: Dim = None, dtype: TraceDtype = None,
    block_size: BlockSize = None, max_num_batched_tokens: Budget = 2048, max_num_seqs: MaxSeqs = 128,
    chunk_size: Chunk = 512, num_draft_tokens: Drafts = 0, step_ms: StepMs = 20.0, max_steps: MaxSteps = 100_000,
    force: Force = False,
) -> None:
    """Synthesize requests (stated length distributions, Poisson arrivals, a seed) and schedule them
    into a step trace; the header records every parameter and marks the lengths as synthesized.

    Example: attnbench trace synth --num-requests 300 --input-len lognormal:2000:0.5 --out decode-heavy.jsonl
    """
    from attnbench.runs import trace as job

    console = make_console()
    with user_errors(console):
        synthetic = _synthetic(num_requests, rate, input_len, output_len, prefix_len, prefix_share, seed)
        shape = shape_of_flags(heads, kv_heads, dim, dtype, block_size)
        config = _config(max_num_batched_tokens, max_num_seqs, chunk_size, num_draft_tokens, step_ms, max_steps,
                         block_size)
        job.claim_output(out, force, [], job.jsonl.read_trace)
        trace = job.synth(synthetic, shape, config)
        job.write_trace(trace, out, force, [])
        _wrote(console, out, trace)


def requests(
    out: Annotated[Path, typer.Option(help="The request trace to write, as vLLM's timed trace JSON Lines. Example: --out chat.requests.jsonl")],
    num_requests: NumRequests = 200, rate: Rate = 0.0, input_len: InputLen = "lognormal:600:0.8",
    output_len: OutputLen = "lognormal:250:0.8", prefix_len: PrefixLen = 0, prefix_share: PrefixShare = 0.0,
    seed: Seed = 0, force: Force = False,
) -> None:
    """Synthesize a request trace only (vLLM's timed trace JSON Lines), for `trace convert --timed-trace`
    or any tool that replays one.

    Example: attnbench trace requests --num-requests 200 --rate 4 --out chat.requests.jsonl
    """
    from attnbench.runs import trace as job

    console = make_console()
    with user_errors(console):
        synthetic = _synthetic(num_requests, rate, input_len, output_len, prefix_len, prefix_share, seed)
        job.write_requests(synthetic.draw(), out, force)
        console.print(f"wrote {out}: {num_requests} requests", highlight=False)


def to_flashinfer_bench(
    trace: Annotated[Path, typer.Argument(help="An attnbench step trace whose header records the attention shape. Example: scenarios/traces/chat-mid.jsonl")],
    out: Annotated[Path, typer.Option(help="The folder to write (new or empty; with --force, one this command wrote): workloads/gqa_paged/*.jsonl and blob/. Example: --out fib-chat")],
    page_size: Annotated[Optional[int], typer.Option(help="KV page size of the definitions (default: the trace's block size, else 1). Example: --page-size 64")] = None,
    force: Annotated[bool, typer.Option(help="Write into an --out that this command wrote before, replacing what it wrote (other files stay). Example: --force")] = False,
) -> None:
    """Write a step trace as flashinfer-bench workloads of its paged GQA definitions: each step's
    one-token rows as a decode call, its other rows as a causal prefill call.

    Example: attnbench trace to-flashinfer-bench scenarios/traces/chat-mid.jsonl --out fib-chat
    """
    from attnbench.runs import trace as job

    console = make_console()
    with user_errors(console):
        written = job.write_flashinfer_bench(job.jsonl.read_trace(trace), out, force, page_size, inputs=(trace,))
        for name, n in written.items():
            console.print(f"wrote {out}/workloads/gqa_paged/{name}.jsonl: {n} workloads", highlight=False)


def summary(
    trace: Annotated[Path, typer.Argument(help="An attnbench step trace. Example: scenarios/traces/decode-heavy.jsonl")],
) -> None:
    """Summarize a step trace: its header, how many steps decode only, prefill only or mix them, and
    the distributions of requests, tokens and KV lengths per step and per row.

    Example: attnbench trace summary scenarios/traces/decode-heavy.jsonl
    """
    from attnbench.cli.trace_table import print_summary
    from attnbench.traces.jsonl import read_trace

    console = make_console()
    with user_errors(console):
        print_summary(console, trace, read_trace(trace))


for _name, _command in (("convert", convert), ("synth", synth), ("requests", requests), ("summary", summary),
                        ("to-flashinfer-bench", to_flashinfer_bench)):
    app.command(_name, short_help=" ".join((_command.__doc__ or "").split("\n\n")[0].split()))(_command)
