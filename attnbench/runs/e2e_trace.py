"""`attnbench e2e --trace FILE` as a job: the engine serves a request trace --iters times per backend x strategy.

Why: a grid point is a batch that arrives at once; a serving workload is a stream. Here the trace's
requests (a vLLM timed trace or a BurstGPT CSV, read by traces/requests.py) are served by the
e2e engine with continuous batching (e2e/serving.py), arrivals honoured or all at once, and each
backend x strategy reports what `vllm bench serve` prints (e2e/serve_metrics.py). This module
decides what runs (model, backends, graphs, memory) and writes the files; e2e_trace_serves.py
spends the time: every graph captured and an untimed check serve per choice, then measured serves
in rounds. Each metric is reported as the median over the serves with their range, and split is
called faster or slower than unified only where the paired serves' interval says so
(results/trace_results.py); on the CPU the run is a pipeline demo on the trace's first few
requests, said in one line, with no verdict.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from attnbench.console import default_out_dir
from attnbench.device import device_name, resolve_device
from attnbench.e2e.args import E2EArgs, check_backends, run_backends, validate_args
from attnbench.e2e.engine import estimate_bytes
from attnbench.e2e.modes import GraphChoice, choose_graphs, cudagraph_of
from attnbench.e2e.model import ModelArgs
from attnbench.e2e.presets import GPU_DEFAULTS
from attnbench.e2e.runner import attention_point, check_fits, resolve_model
from attnbench.errors import AttnbenchError, Interrupted, UsageError
from attnbench.interrupts import SignalReceived, signal_of, signals_raise
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.notices import cpu_run_line
from attnbench.kernels.workload import DTYPE_ALIASES
from attnbench.results.e2e_trace_report import write_trace_outputs
from attnbench.results.env import collect
from attnbench.runs.e2e_files import model_env
from attnbench.runs.e2e_trace_serves import serve_choices
from attnbench.runs.resume import sweep_record
from attnbench.runs.rundir import RunDir
from attnbench.traces.files import base_suffix
from attnbench.traces.requests import TimedRequest, read_burstgpt, read_timed

CPU_REQUESTS = 1  # on the CPU: the trace's first request, served 2 times per choice, a pipeline demo under a minute
# ... cut to these many prompt and output tokens (a chat prompt of 1,274 tokens took 108 s on a 2-core host);
# --max-requests given serves the requests as they are
CPU_PROMPT, CPU_OUTPUT = 64, 8
SERVES = {"cpu": 2, "cuda": 3}  # --iters when not given: measured serves per choice (2: the fewest with an interval)
MAX_RUNNING = 128  # --max-num-seqs when not given: every request, up to vLLM's usual cap
MAX_SPAN_S = 86_400  # arrivals honoured are waited for in real time: a serve past a day is a mistake, not a plan


@dataclass(frozen=True)
class RequestTrace:
    """The trace file and the requests of it that are served (in arrival order, the first at 0)."""

    path: Path
    format: str
    sha256: str
    in_file: int  # requests the file holds (BurstGPT rows without a response are not requests)
    skipped: int  # BurstGPT rows without response tokens
    requests: list[TimedRequest]
    cut_to: tuple[int, int] | None = None  # the CPU demo's (prompt, output) tokens at most a request

    def record(self, arrivals: str) -> dict:
        """env.json's `trace`."""
        return {"path": str(self.path), "format": self.format, "sha256": self.sha256, "requests_in_file": self.in_file,
                "requests_served": len(self.requests), "skipped_no_response": self.skipped, "arrivals": arrivals,
                "prefix_length_ignored": sum(r.prefix_len > 0 for r in self.requests),
                **({"cpu_demo_cut_to": dict(zip(("prompt_tokens", "output_tokens"), self.cut_to))} if self.cut_to else {})}

    def cut(self, prompt: int, output: int) -> RequestTrace:
        """The CPU demo's requests: each prompt and output cut to at most `prompt` and `output` tokens."""
        cut = [TimedRequest(r.arrival, min(r.input_len, prompt), min(r.output_len, output), min(r.prefix_len, prompt))
               for r in self.requests]
        return dataclasses.replace(self, requests=cut, cut_to=(prompt, output))


def read_trace(path: Path, max_requests: int | None, time_unit: str = "s") -> RequestTrace:
    """A request trace, by its suffix: `.csv` a BurstGPT CSV, anything else vLLM's timed trace JSON
    Lines (timestamps in `time_unit`); every refusal is the reader's one line naming the file, line and field."""
    path = Path(path)
    if base_suffix(path) == ".csv":
        if time_unit != "s":
            raise UsageError(f"--time-unit {time_unit}: {path} is read as a BurstGPT CSV, whose timestamps are seconds")
        requests, skipped, kind = *read_burstgpt(path), "BurstGPT CSV"
    else:
        requests, skipped, kind = read_timed(path, time_unit), 0, f"vLLM timed trace JSON Lines ({time_unit})"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return RequestTrace(path, kind, digest, len(requests), skipped, requests[:max_requests])


@dataclass
class TraceSetup:
    """What the run decided before it serves: the model, the backends and their graphs, the memory."""

    args: E2EArgs
    trace: RequestTrace
    margs: ModelArgs
    path: Path | None
    device: torch.device
    dtype_name: str
    max_num_seqs: int
    max_model_len: int
    backends: list[str]
    choices: dict[str, GraphChoice]
    parts: dict[str, int]
    left_out: str
    serves: int  # measured serves per backend x strategy
    max_step_tokens: int  # the most tokens one step can hold: every graph bucket up to it is captured up front

    @property
    def arrivals(self) -> list[float]:
        return [r.arrival if self.args.arrivals == "trace" else 0.0 for r in self.trace.requests]


def with_trace_defaults(args: E2EArgs, device_type: str) -> tuple[E2EArgs, dict[str, str]]:
    """--model and, on the CPU, --max-requests where not given; (args, the flags the CPU scaled)."""
    filled = {"model": "tiny", "max_requests": CPU_REQUESTS} if device_type == "cpu" else {"model": GPU_DEFAULTS["model"]}
    filled = {k: v for k, v in filled.items() if getattr(args, k) is None}
    scaled = {k.replace("_", "-"): str(v) for k, v in filled.items()} if device_type == "cpu" else {}
    return dataclasses.replace(args, **filled), scaled


def trace_setup(args: E2EArgs, trace: RequestTrace, device: torch.device) -> TraceSetup:
    """Refuse what cannot run before a weight is made: positions, a backend x strategy, memory."""
    margs, path = resolve_model(args.model)
    span = trace.requests[-1].arrival if args.arrivals == "trace" else 0.0
    if span > MAX_SPAN_S:
        raise UsageError(f"--trace {trace.path}: the served requests arrive over {span:.4g} s, and each serve waits "
                         f"for them in real time (at most {MAX_SPAN_S} s); keep fewer with --max-requests or use "
                         "--arrivals all-at-once")
    longest = max(r.input_len + r.output_len for r in trace.requests)
    if longest > margs.max_positions:
        raise UsageError(f"--trace {trace.path}: a request of {longest} tokens (prompt + output) exceeds "
                         f"{margs.name}'s {margs.max_positions} positions; keep fewer with --max-requests")
    dtype_name = DTYPE_ALIASES[args.dtype]
    backends, left_out = run_backends(args, device)
    check_backends(args, margs, attention_point(margs, dtype_name, args.block_size), backends, device)
    seqs = args.max_num_seqs or min(len(trace.requests), MAX_RUNNING)
    none_by = "--eager" if args.eager else "--cudagraph none"
    choices = {b: choose_graphs(get_backend(b), cudagraph_of(args), device.type, seqs, margs.n_layer,
                                args.graph_policy, none_by) for b in backends}
    elt = torch.empty((), dtype=torch_dtype(dtype_name)).element_size()
    prompts = sorted(r.input_len for r in trace.requests)
    step_tokens = min(args.chunk_size or sys.maxsize, sum(prompts[-seqs:]))  # a row: a chunk of a prompt, or 1
    parts = estimate_bytes(margs, elt, seqs, longest, args.block_size, step_tokens,
                           sum(r.output_len for r in trace.requests) * len(args.strategy))
    check_fits(parts, args.model, device)
    serves = args.iters or SERVES.get(device.type, SERVES["cuda"])
    return TraceSetup(args, trace, margs, path, device, dtype_name, seqs, longest, backends, choices, parts, left_out,
                      serves, step_tokens)


def run_trace(args: E2EArgs, console: Console, command: list[str]) -> Path:
    validate_args(args)
    device = resolve_device(args.device)
    args, scaled = with_trace_defaults(args, device.type)
    trace = read_trace(args.trace, args.max_requests, args.time_unit)
    if "max-requests" in scaled:  # the demo's default: quick; --max-requests given serves requests as they are
        trace = trace.cut(CPU_PROMPT, CPU_OUTPUT)
    setup = trace_setup(args, trace, device)
    gpu = device_name(device)
    run = RunDir.claim(args.out, None, args.force, default_out_dir(gpu or "cpu", "e2e-trace"),
                       inputs=(args.trace, *((setup.path,) if setup.path else ())))
    with run.locked():  # every refusal is behind: from here on the run speaks
        if scaled:
            cut = f", cut to at most {CPU_PROMPT} prompt and {CPU_OUTPUT} output tokens" if trace.cut_to else ""
            console.print(cpu_run_line(f"a pipeline demo on reference attention serving the trace's first "
                                       f"{len(trace.requests)} request(s){cut}, no verdicts", scaled),
                          highlight=False, soft_wrap=True)
        env = trace_env(setup, command)
        run.write_env(env)
        serves = (f"every graph bucket captured and 1 untimed check serve, then {setup.serves} measured serves in rotated "
                  "rounds" if device.type == "cuda" else f"{setup.serves} measured serves, the first also the check serve")
        console.print(f"{setup.margs.name} on {gpu or 'cpu'} serving {len(trace.requests)} requests of {trace.path} "
                      f"({args.arrivals} arrivals over {max(setup.arrivals):.3g} s, at most {setup.max_num_seqs} "
                      f"running) -> {run.path}; plan: {len(setup.backends)} backend(s) x {len(args.strategy)} "
                      f"strategies, each {serves}", highlight=False, soft_wrap=True)
        if setup.left_out:
            console.print(setup.left_out, highlight=False, soft_wrap=True)
        rows, requests, agreements, stopped = [], [], [], None
        try:
            with signals_raise():
                serve_choices(setup, console, rows, requests, agreements)
        except (KeyboardInterrupt, SignalReceived) as exc:  # what was served is kept
            stopped = exc
        if rows:
            write_trace_outputs(run, rows, requests, agreements, env, console)
    if stopped is not None:
        name, number = signal_of(stopped)
        total = len(setup.backends) * len(args.strategy) * setup.serves
        raise Interrupted(f"interrupted by {name} after {len(rows)} of {total} measured serves; {run.path} "
                          "holds what was served", number)
    if not any(r["verdict"] in ("pass", "fail") for r in rows):
        raise AttnbenchError(f"no backend x strategy served the trace; the reasons are in {run.path}/trace.csv")
    return run.path


def trace_env(setup: TraceSetup, command: list[str]) -> dict:
    """env.json: the machine, the model and settings, and the trace (path, format, sha256, counts)."""
    args, margs = setup.args, setup.margs
    env = collect(command)
    env["e2e"] = {**model_env(margs, setup.path, args, setup.dtype_name, setup.max_model_len),
                  "max_num_seqs": setup.max_num_seqs,
                  "memory_estimate_gib": {k: round(v / 2**30, 3) for k, v in setup.parts.items()},
                  "graphs": {b: c.note for b, c in setup.choices.items()}, "cudagraph": cudagraph_of(args).value,
                  "graph_policy": args.graph_policy, "serves": setup.serves, "max_step_tokens": setup.max_step_tokens}
    env["trace"] = setup.trace.record(args.arrivals)
    env["sweep"] = sweep_record("e2e", args, {"model": margs.name, "backend": setup.backends,
                                              "cudagraph": cudagraph_of(args).value}, leave_out=("eager",))
    return env
