"""The serves of `e2e --trace`: graphs captured and a check serve per choice, then measured serves in rounds.

Why apart from e2e_trace.py (which decides what runs and writes the files): this is the order the
time is spent in. Per backend x strategy, before anything is timed: every graph bucket a step of
the trace can reach is captured (Engine.capture_every: the schedule follows the wall clock, so a
second serve meets other batches than the first, and a graph first needed inside a timed serve
would put its capture in the latencies), then an untimed check serve records the greedy logits the
agreement between strategies reads (on the CPU, where nothing is captured, it is also the first
measured serve: the demo stays quick). Then `--iters` rounds: each round serves every choice once, in
an order rotated from round to round, so drift (clocks, heat, the host's other work) falls on every
choice alike and a choice's serves are paired with the others' of the same round. Each measured
serve's row says how many graphs it captured (0 once everything was captured up front).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from rich.console import Console

from attnbench.device import device_name
from attnbench.e2e.agreement import compare_checks, settle_agreement
from attnbench.e2e.engine import Engine
from attnbench.e2e.modes import GraphChoice
from attnbench.e2e.runner import ModelEngines, ModelSpec, row_head
from attnbench.e2e.serve_metrics import request_row, summarize
from attnbench.e2e.serving import Served, serve, trace_prompts
from attnbench.errors import error_reason
from attnbench.kernels.rows import cells
from attnbench.kernels.sweep import failure_verdict
from attnbench.runs.e2e_plan import ServeEta, duration


@dataclass
class Choice:
    """One backend x strategy: its engine, its row's head (the columns every serve's row repeats),
    the graphs captured before timing, its check serve's tokens, and why it stopped (None: it serves)."""

    backend: str
    strategy: str
    engine: Engine | None
    head: dict
    graphs_before_timing: int = 0
    check: Served | None = None  # until the agreement has read its logits
    first: Served | None = None  # on the CPU, the check serve is the first measured serve (nothing is captured)
    check_tokens: list[list[int]] | None = None
    check_failure: str = ""  # the check serve's logits or agreement failed: every serve's row fails
    failed: dict | None = None  # verdict and reason: it could not serve
    check_s: float = 0.0  # the check serve's wall time (the ETA's first reading)

    @property
    def name(self) -> str:
        return f"{self.backend} {self.strategy}"


def start_eta(setup, console: Console) -> ServeEta:
    """Every serve the run will make, by choice (a GPU's untimed check serve too; a CPU's is its first
    measured one), said once before the first; the ETA follows each serve."""
    each = setup.serves + (setup.device.type == "cuda")
    eta = ServeEta({f"{b} {s}": each for b in setup.choices for s in setup.args.strategy})
    span = max(setup.arrivals)
    least = f", each at least {duration(span)} (the arrivals' span)" if span >= 1 else ""
    console.print(f"{sum(eta.left.values())} serves in all{least}; {eta.text()}", highlight=False, soft_wrap=True)
    return eta


def serve_choices(setup, console: Console, rows: list[dict], request_rows: list[dict], agreements: list[dict]) -> None:
    """Every choice prepared (graphs, check serve, agreement), then the measured rounds; rows,
    their requests' rows and the agreements added as they come (an interrupted run keeps them)."""
    args, reqs = setup.args, setup.trace.requests
    spec = ModelSpec(setup.margs, setup.path, setup.dtype_name, setup.device, args.seed, setup.max_num_seqs,
                     setup.max_model_len, args.block_size, args.chunk_size)
    engines = spec.build()
    prompts = trace_prompts([r.input_len for r in reqs], setup.margs.vocab_size, args.seed)
    outputs = [r.output_len for r in reqs]
    base = {"model": setup.margs.name, "params_b": round(setup.margs.num_params / 1e9, 6), "dtype": setup.dtype_name,
            "block_size": args.block_size, "chunk_size": args.chunk_size or 0, "device": setup.device.type,
            "gpu": device_name(setup.device) or "cpu", "arrivals": args.arrivals, "max_num_seqs": setup.max_num_seqs,
            "trace": setup.trace.path.name}
    choices, eta = [], start_eta(setup, console)
    for backend, choice in setup.choices.items():
        prepared = [checked(prepare(engines, setup, backend, s, choice, base, prompts, outputs), eta, console)
                    for s in args.strategy]
        agreements += strategy_agreements(backend, choice, prepared)
        choices += prepared
    for c in choices:
        if c.failed:
            rows.append({**c.head, "serve": 0, **c.failed})
            console.print(progress_line(rows[-1]), highlight=False, soft_wrap=True)
    for serve_index in range(1, setup.serves + 1):
        shift = (serve_index - 1) % len(choices)
        for c in choices[shift:] + choices[:shift]:  # rotated: no choice always first after the idle gap
            if c.failed:
                continue
            row, requests = measure(c, serve_index, setup.arrivals, prompts, outputs, eta)
            rows.append(row)
            request_rows += requests
            console.print(f"{progress_line(row)}; {eta.text()}", highlight=False, soft_wrap=True)


def checked(c: Choice, eta: ServeEta, console: Console) -> Choice:
    """A prepared choice's check serve counted in the ETA and said (a failed one serves no more)."""
    if c.failed:
        eta.stopped(c.name)
        return c
    eta.served(c.name, c.check_s)
    also = " (also its first measured serve)" if c.first is not None else ""
    console.print(f"{c.name} check serve{also}: {c.check_s:.3g} s; {eta.text()}", highlight=False, soft_wrap=True)
    return c


def prepare(engines: ModelEngines, setup, backend: str, strategy: str, choice: GraphChoice, base: dict,
            prompts: list, outputs: list[int]) -> Choice:
    """The choice's engine with every graph it can need captured, and its untimed check serve."""
    head = row_head(base, backend, strategy, choice, setup.args.graph_policy)
    c = Choice(backend, strategy, None, head)
    try:
        c.engine = engines.engine(backend, strategy, choice.cudagraph, setup.args.graph_policy)
        c.engine.capture_every(setup.max_step_tokens)
        started = time.perf_counter()
        c.check = serve(c.engine, setup.arrivals, prompts, outputs, record_logits=True)  # captures nothing now
        c.check_s = time.perf_counter() - started
        c.graphs_before_timing = c.engine.graph_stats()[0]
        c.first = None if c.engine.cuda else c.check
        if not all(bool(torch.isfinite(x).all()) for x in c.check.logits):
            c.check_failure = "logits have NaN/inf"
    except Exception as exc:  # noqa: BLE001  one failed choice must not lose the others
        c.failed = {"verdict": failure_verdict(exc), "reason": error_reason(exc)}
    return c


def measure(c: Choice, serve_index: int, arrivals: list[float], prompts: list, outputs: list[int], eta: ServeEta
            ) -> tuple[dict, list[dict]]:
    """One measured serve of a choice: its row and its requests' rows (none when it failed, which
    ends the choice's serves); the ETA told what it took (the check serve reused is counted already)."""
    head = {**c.head, "serve": serve_index}
    try:
        before, started = c.engine.graph_stats()[0], time.perf_counter()
        served = c.first or serve(c.engine, arrivals, prompts, outputs)
        if c.first is None:
            eta.served(c.name, time.perf_counter() - started)
        c.first = None
        same = sum(a == b for x, y in zip(served.tokens, c.check_tokens) for a, b in zip(x, y)) / sum(outputs)
        measures = summarize(served)
        row = {**head, **cells(dataclasses.replace(
            measures, verdict="fail" if c.check_failure else "pass", reason=c.check_failure, tokens_as_check=same, graphs_before_timing=c.graphs_before_timing,
            graphs_captured_while_serving=c.engine.graph_stats()[0] - before, agreement=c.head["agreement"]))}
    except Exception as exc:  # noqa: BLE001  one failed serve must not lose the others
        c.failed = {"verdict": failure_verdict(exc), "reason": error_reason(exc)}
        eta.stopped(c.name)
        return {**head, **c.failed}, []
    label = {k: head[k] for k in ("backend", "strategy", "mode", "serve")}
    return row, [{**label, **request_row(i, r)} for i, r in enumerate(served.requests)]


def strategy_agreements(backend: str, choice: GraphChoice, prepared: list[Choice]) -> list[dict]:
    """Each strategy's check serve against unified's (greedy tokens, logits where inputs were equal);
    each choice's agreement is the worst it is in, and a failing one fails its serves. The check
    serves' logits are freed here, before the next backend's are recorded."""
    mode = prepared[0].head["mode"]
    checks = {c.strategy: c.check for c in prepared if c.check is not None}
    found = []
    ref = checks.get("unified")
    for strategy, run in checks.items():
        if strategy == "unified" or ref is None:
            continue
        found.append(compare_checks({"backend": backend, "cudagraph": choice.cudagraph.value},
                                    f"unified {mode}", ref, f"{strategy} {mode}", run))
    for c in prepared:
        c.head["agreement"], problem = settle_agreement(found, backend, f"{c.strategy} {mode}")
        c.check_failure = "; ".join(p for p in (problem, c.check_failure) if p)
        if c.check is not None:
            c.check_tokens, c.check = c.check.tokens, None
    return found


def progress_line(row: dict) -> str:
    """One line per measured serve as it finishes."""
    name = f"{row['backend']} {row['strategy']} {row['mode']}"
    if row.get("verdict") not in ("pass", "fail"):
        return f"{name}: {row.get('verdict')} ({row.get('reason')})"
    captured = row["graphs_captured_while_serving"]
    return (f"{name} serve {row['serve']}: {row['requests']} requests in {row['duration_s']:.2f} s; TTFT p50 "
            f"{row['ttft_p50_ms']:.1f} ms, TPOT p50 {row['tpot_p50_ms']:.2f} ms; graphs captured while timed: "
            f"{captured}" + (" (a bucket was missed: its capture is in these latencies)" if captured else ""))
