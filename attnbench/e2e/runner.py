"""The e2e runner: one (input_len, output_len, batch_size) point of a whole model, every backend x strategy.

For each (input_len, output_len, batch_size) point, every backend x strategy runs the same
requests on one model and one KV cache: one untimed check run that records logits, warm-up runs,
then measured runs. Between compared runs only the attention backend and strategy change. The
check runs are compared (unified vs split; graph vs eager, from an extra eager check run when
graphs are on) and each comparison becomes a row of agreement.csv. Rows go to results.csv as
soon as they exist; parquet, summary.md and plots are written from them at the end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Callable

import torch

from attnbench.e2e.args import E2EArgs
from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.checkpoint import load_hf_checkpoint, read_hf_config
from attnbench.e2e.engine import Engine, Generation
from attnbench.e2e.model import PRESETS, ModelArgs, Transformer, fused, random_model
from attnbench.e2e.modes import GraphChoice, GraphMode
from attnbench.e2e.parallel import SINGLE, TensorParallel, all_reduce_outputs_, from_leader, random_rank_model
from attnbench.e2e.agreement import FAILING, compare_generations, run_metrics, worst
from attnbench.e2e.rows import E2E_POINT, E2EHead, E2EMeasures
from attnbench.e2e.scheduler import KVCache, make_prompts
from attnbench.e2e.stopping import StoppingRule, median_interval
from attnbench.errors import AttnbenchError, UsageError, error_reason
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.inputs import available_host_bytes, torch_dtype
from attnbench.kernels.rows import cells
from attnbench.kernels.sweep import failure_verdict
from attnbench.kernels.workload import SweepPoint
from attnbench.profiler import profile_generation

CPU_LIMIT_BYTES = 2 * 2**30  # the CPU path (reference attention) is for tests and small models
GiB = 2**30


def resolve_model(name: str) -> tuple[ModelArgs, Path | None]:
    """A preset name, or a local checkpoint directory (anything that exists or looks like a path)."""
    if name in PRESETS:
        return ModelArgs.from_name(name), None
    if not name.strip():
        raise UsageError(f"--model: empty; presets: {', '.join(PRESETS)} (or a local checkpoint directory)")
    path = Path(name).expanduser()
    try:
        exists = path.exists()
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long for the file system
        raise UsageError(f"--model: {name!r} is not a usable path ({exc})") from None
    if exists or "/" in name or name.startswith("."):
        return read_hf_config(path), path
    return ModelArgs.from_name(name), None  # raises: unknown model, with the presets


def check_fits(parts: dict[str, int], model: str, device: torch.device) -> None:
    """Refuse up front a run that cannot fit: free GPU memory; on the CPU, 2 GiB and what is available."""
    need = int(sum(parts.values()) * 1.1) + (512 * 2**20 if device.type == "cuda" else 0)
    detail = ", ".join(f"{k.replace('_', ' ')} {v / GiB:.2f}" for k, v in parts.items())
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if need > free:
            raise AttnbenchError(f"--model {model}: needs ~{need / GiB:.1f} GiB ({detail} GiB + 10 %), "
                                 f"{free / GiB:.1f} GiB free on {torch.cuda.get_device_name(device)}; "
                                 "use a smaller --batch-size or lengths")
    elif need > CPU_LIMIT_BYTES:
        raise AttnbenchError(f"--model {model}: needs ~{need / GiB:.1f} GiB ({detail} GiB); without a GPU "
                             f"only runs up to {CPU_LIMIT_BYTES / GiB:.0f} GiB are allowed (e.g. --model tiny)")
    else:
        available = available_host_bytes()
        if available is not None and need > available:
            raise AttnbenchError(f"--model {model}: needs ~{need / GiB:.1f} GiB ({detail} GiB + 10 %), "
                                 f"{available / GiB:.1f} GiB available on this machine; "
                                 "use a smaller --batch-size or lengths")


def attention_point(args: ModelArgs, dtype: str, block_size: int) -> SweepPoint:
    """What a backend needs to know of the model's attention (heads, head dim, dtype, blocks); with
    tensor parallelism, of one rank's (parallel.rank_args): 64/8 heads at TP 2 are 32/4."""
    return SweepPoint(kind="decode", num_tokens=1, num_heads=args.n_head, head_dim=args.head_dim,
                      num_kv_heads=args.n_kv_head, dtype=dtype, block_size=block_size)


class ModelEngines:
    """The model, the KV cache and one engine per (backend, strategy, GraphMode, policy), made on first use."""

    def __init__(self, model: Transformer, max_num_seqs: int, max_model_len: int, block_size: int = 16,
                 chunk_size: int | None = None, seed: int = 0, tp: TensorParallel = SINGLE):
        dtype = model.tok_embeddings.dtype
        self.tp = tp  # under --tp every rank runs as many requests as rank 0 decides (measure_runs)
        self.model, self.max_num_seqs, self.max_model_len, self.chunk_size = model, max_num_seqs, max_model_len, chunk_size
        self.point = attention_point(model.args, str(dtype).removeprefix("torch."), block_size)
        self.cache = KVCache(model.args, KVCache.blocks_for(max_num_seqs, max_model_len, block_size), block_size,
                             dtype, model.tok_embeddings.device, seed)
        self.engines: dict[tuple[str, str, GraphMode, str], Engine] = {}
        model.setup_rope(max_model_len)

    def engine(self, backend: str, strategy: str, cudagraph: GraphMode = GraphMode.NONE,
               graph_policy: str = "safe") -> Engine:
        key = (backend, strategy, cudagraph, graph_policy if cudagraph == GraphMode.FULL else "")
        if key not in self.engines:
            attn = PagedAttention(get_backend(backend), strategy, self.point, self.cache.k, self.cache.v)
            self.engines[key] = Engine(self.model, self.cache, attn, self.max_num_seqs, self.max_model_len,
                                       self.chunk_size, cudagraph, graph_policy)
        return self.engines[key]


@dataclass(frozen=True)
class ModelSpec:
    """What builds a run's model, KV cache and engines: plain data, so that a worker process
    (--isolate) builds its own from it."""

    args: ModelArgs
    checkpoint: Path | None  # None: random weights from `seed`
    dtype: str
    device: torch.device
    seed: int
    max_num_seqs: int
    max_model_len: int
    block_size: int
    chunk_size: int | None
    tp: TensorParallel = SINGLE  # this process's rank: it builds its shard of the model

    def build(self) -> ModelEngines:
        dtype = torch_dtype(self.dtype)
        if self.checkpoint:
            model = load_hf_checkpoint(self.checkpoint, dtype, self.device, self.args, self.tp)
        elif self.tp.size > 1:
            model = random_rank_model(self.args, dtype, self.device, self.seed, self.tp)
        else:
            model = random_model(self.args, dtype, self.device, self.seed)
        if self.tp.size > 1:
            all_reduce_outputs_(model)
        return ModelEngines(model, self.max_num_seqs, self.max_model_len, self.block_size, self.chunk_size, self.seed,
                            self.tp)


def request_p50(run: Generation) -> float:
    """A run's median request latency: the sample the stopping rule watches (one per run, since a
    batch's requests share their steps and are not independent of each other)."""
    return median(run.latency_s)


def measure_runs(engine: Engine, prompts: list, output_len: int, warmup: int, rule: StoppingRule,
                 on_probe: Callable[[float], None] | None, tp: TensorParallel = SINGLE) -> list[Generation]:
    """Warm-ups, then measured runs until `rule` is satisfied (by rank 0's times under --tp: every
    rank must run the same requests); on_probe hears the first run's seconds."""
    measured: list[Generation] = []
    samples: list[float] = []  # each measured run's request p50, as the runs come
    for n in range(warmup + rule.max_runs):
        if n >= warmup and from_leader(tp, lambda: rule.done(samples)):
            break
        start = time.perf_counter()
        run = engine.generate(prompts, output_len)
        if n == 0 and on_probe is not None:
            on_probe(time.perf_counter() - start)
        if n >= warmup:
            measured.append(run)
            samples.append(request_p50(run))
    return measured


def interval_cells(measured: list[Generation]) -> dict:
    """How many runs were measured and the 95 % interval of their median request p50 (blank below
    the 6 runs an interval needs)."""
    interval = median_interval([request_p50(g) for g in measured]) or (math.nan, math.nan)  # a blank cell
    return cells(E2EMeasures(measured_runs=len(measured), request_p50_ci_low_s=interval[0],
                             request_p50_ci_high_s=interval[1]))


def row_head(fields: dict, backend: str, strategy: str, choice: GraphChoice, graph_policy: str = "safe") -> dict:
    """A row's point, backend, library, strategy and mode: what it is, before what it measured."""
    package, version = get_backend(backend).library()
    cudagraph = choice.cudagraph
    return {**fields, **cells(E2EHead(backend, package, version, strategy,
                                      "eager" if cudagraph == GraphMode.NONE else "graph", cudagraph.value,
                                      graph_policy if cudagraph == GraphMode.FULL else "", choice.note))}


def failed_rows(args: E2EArgs, choices: dict[str, GraphChoice], fields: dict, verdict: str, reason: str) -> list[dict]:
    """The rows of a point lost as a whole (its worker timed out or crashed): one per backend x strategy."""
    return [{**row_head(fields, backend, strategy, choice, args.graph_policy),
             **cells(E2EMeasures(verdict=verdict, reason=reason, agreement=""))}
            for backend, choice in choices.items() for strategy in args.strategy]


def run_point(engines: ModelEngines, args: E2EArgs, choices: dict[str, GraphChoice], fields: dict,
              profile_out: Path | None = None,
              on_row: Callable[[dict], None] = lambda row: None,
              on_probe: Callable[[float], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Every backend x strategy on one point; then the agreement of their check runs. `on_row` sees
    each row as it is measured (a worker's sign of life), before agreement settles its verdict;
    `on_probe` the seconds of the point's first timed-path run (what an ETA is calibrated on).
    choices: each backend's modes.choose_graphs answer."""
    prompts = make_prompts(fields["batch_size"], fields["input_len"], engines.model.args.vocab_size, args.seed)
    output_len = fields["output_len"]
    rows, checks, agreements = [], {}, []
    for backend, choice in choices.items():
        graphs = choice.cudagraph != GraphMode.NONE
        mode = "graph" if graphs else "eager"
        for strategy in args.strategy:
            row = row_head(fields, backend, strategy, choice, args.graph_policy)
            try:
                engine = engines.engine(backend, strategy, choice.cudagraph, args.graph_policy)
                check = checks[(backend, strategy, mode)] = engine.generate(prompts, output_len, record_logits=True)
                count, reserved = engine.graph_stats()  # full/piecewise graphs are captured on first use: by the check run
                row.update(graphs=count, graph_mem_mb=round(reserved / 2**20, 1))
                measured = measure_runs(engine, prompts, output_len, args.warmup, args.stopping, on_probe, engines.tp)
                on_probe = None  # a point's first timed run only
                if profile_out is not None:  # --profile: extra runs after the measured ones, never among them
                    profile_generation(engine, prompts, output_len, profile_out, row)
                row.update(run_metrics(measured, fields["batch_size"], output_len), **interval_cells(measured),
                           finite=bool(torch.isfinite(check.logits).all()),
                           repeatable=all(g.tokens == check.tokens for g in measured), verdict="pass", reason="")
                if graphs:  # the same strategy without graphs, for the graph-vs-eager check only
                    checks[(backend, strategy, "eager")] = engines.engine(backend, strategy, GraphMode.NONE).generate(
                        prompts, output_len, record_logits=True)
            except Exception as exc:  # one failed row must not lose the others
                row.update(verdict=failure_verdict(exc), reason=error_reason(exc))
            rows.append({**row, "fused_ops": fused.status})
            on_row(rows[-1])
        pairs = [("unified", mode, s, mode) for s in args.strategy if s != "unified" and "unified" in args.strategy]
        pairs += [(s, "eager", s, "graph") for s in args.strategy if graphs]
        failed = {r["strategy"] for r in rows if r["backend"] == backend and r["verdict"] != "pass"}
        for ref_s, ref_m, run_s, run_m in pairs:
            ref, run = checks.get((backend, ref_s, ref_m)), checks.get((backend, run_s, run_m))
            if ref is None or run is None or {ref_s, run_s} & failed:  # a failed row's logits prove nothing
                continue
            result = compare_generations(ref.tokens, ref.logits, run.tokens, run.logits)
            agreements.append({**{k: fields[k] for k in E2E_POINT}, "backend": backend,
                               "reference": f"{ref_s} {ref_m}", "run": f"{run_s} {run_m}", **result.row()})
    for row in rows:
        mine = [a["verdict"] for a in agreements if a["backend"] == row["backend"]
                and f"{row['strategy']} {row['mode']}" in (a["reference"], a["run"])]
        row["agreement"] = worst(mine)
        if row["verdict"] == "pass":
            problems = [f"agreement {row['agreement']}" if row["agreement"] in FAILING else "",
                        "" if row["finite"] else "logits have NaN/inf",
                        "" if row["repeatable"] else "measured runs' tokens differ from the check run's"]
            problems = [p for p in problems if p]
            row.update(verdict="fail" if problems else "pass", reason="; ".join(problems))
    for check in checks.values():
        check.logits = None  # free the recorded logits before the next point
    return rows, agreements
