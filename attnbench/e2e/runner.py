"""The e2e runner: one (input_len, output_len, batch_size) point of a whole model, every backend x strategy.

For each (input_len, output_len, batch_size) point, every backend x strategy runs the same
requests on one model and one KV cache: one untimed check run per row that records logits, then a
backend's rows measured in turns (turns.py: warm-up rounds, then measured rounds of every strategy
until the stopping rule is met). Between compared runs only the attention backend and strategy change. The
check runs are compared (unified vs split; graph vs eager, from an extra eager check run when
graphs are on) and each comparison becomes a row of agreement.csv. Rows go to results.csv as
soon as they exist; parquet, summary.md and plots are written from them at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from attnbench.e2e.args import E2EArgs
from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.checkpoint import load_hf_checkpoint, read_hf_config
from attnbench.e2e.engine import Engine, Generation
from attnbench.e2e.model import PRESETS, ModelArgs, Transformer, fused, random_model
from attnbench.e2e.modes import GraphChoice, GraphMode
from attnbench.e2e.parallel import SINGLE, TensorParallel, all_reduce_outputs_, random_rank_model
from attnbench.e2e.agreement import compare_checks, run_metrics, settle_agreement
from attnbench.e2e.rows import E2E_POINT, E2EHead, E2EMeasures
from attnbench.e2e.scheduler import KVCache, make_prompts
from attnbench.e2e.turns import interval_cells, measure_turns, ratio_cells
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
    """The model, the KV cache and one engine per (backend, strategy, GraphMode, policy), made on first use;
    kv_write: how every engine's layers store their new K/V (attention.KV_WRITES)."""

    def __init__(self, model: Transformer, max_num_seqs: int, max_model_len: int, block_size: int = 16,
                 chunk_size: int | None = None, seed: int = 0, tp: TensorParallel = SINGLE, kv_write: str = "torch"):
        dtype = model.tok_embeddings.dtype
        self.tp = tp  # under --tp every rank runs as many requests as rank 0 decides (turns.measure_turns)
        self.model, self.max_num_seqs, self.max_model_len, self.chunk_size = model, max_num_seqs, max_model_len, chunk_size
        self.point = attention_point(model.args, str(dtype).removeprefix("torch."), block_size)
        self.cache = KVCache(model.args, KVCache.blocks_for(max_num_seqs, max_model_len, block_size), block_size,
                             dtype, model.tok_embeddings.device, seed)
        self.kv_write = kv_write
        self.engines: dict[tuple[str, str, GraphMode, str], Engine] = {}
        model.setup_rope(max_model_len)

    def engine(self, backend: str, strategy: str, cudagraph: GraphMode = GraphMode.NONE,
               graph_policy: str = "safe") -> Engine:
        key = (backend, strategy, cudagraph, graph_policy if cudagraph == GraphMode.FULL else "")
        if key not in self.engines:
            attn = PagedAttention(get_backend(backend), strategy, self.point, self.cache.k, self.cache.v,
                                  self.kv_write)
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


def check_runs(engines: ModelEngines, args: E2EArgs, backend: str, choice: GraphChoice, heads: dict[str, dict],
               prompts: list, output_len: int, checks: dict) -> tuple[dict[str, Engine], dict[str, Exception]]:
    """Each strategy's untimed check run (logits recorded; full and piecewise graphs captured on
    first use, so the row's graph counts are known after it): the engines that ran it, and the failures."""
    ran, failed = {}, {}
    mode = "eager" if choice.cudagraph == GraphMode.NONE else "graph"
    for strategy in args.strategy:
        try:
            engine = engines.engine(backend, strategy, choice.cudagraph, args.graph_policy)
            checks[(backend, strategy, mode)] = engine.generate(prompts, output_len, record_logits=True)
            count, reserved = engine.graph_stats()
            heads[strategy].update(graphs=count, graph_mem_mb=round(reserved / 2**20, 1))
            ran[strategy] = engine
        except Exception as exc:  # noqa: BLE001  one failed row must not lose the others
            failed[strategy] = exc
    return ran, failed


def finish_row(engines: ModelEngines, engine: Engine, row: dict, measured: dict[str, list[Generation]],
               fields: dict, checks: dict, profile_out: Path | None, prompts: list) -> None:
    """A measured row's metrics and intervals; --profile's runs; under graphs, the eager check run
    of the same strategy (for the graph-vs-eager comparison only)."""
    backend, strategy, output_len = row["backend"], row["strategy"], fields["output_len"]
    check = checks[(backend, strategy, row["mode"])]
    if profile_out is not None:  # extra runs after the measured ones, never among them
        profile_generation(engine, prompts, output_len, profile_out, row)
    runs = measured[strategy]
    row.update(run_metrics(runs, fields["batch_size"], output_len), **interval_cells(runs),
               **ratio_cells(measured, strategy), finite=bool(torch.isfinite(check.logits).all()),
               repeatable=all(g.tokens == check.tokens for g in runs), verdict="pass", reason="")
    if row["mode"] == "graph":
        checks[(backend, strategy, "eager")] = engines.engine(backend, strategy, GraphMode.NONE).generate(
            prompts, output_len, record_logits=True)


def run_point(engines: ModelEngines, args: E2EArgs, choices: dict[str, GraphChoice], fields: dict,
              profile_out: Path | None = None,
              on_row: Callable[[dict], None] = lambda row: None,
              on_probe: Callable[[float], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Every backend x strategy on one point: per backend, each strategy's check run, then their
    measured runs in turns (turns.py), then each row's eager check; then the agreement of the check
    runs. `on_row` sees each row as it is measured (a worker's sign of life), before agreement
    settles its verdict; `on_probe` the seconds of the point's first timed-path run (what an ETA is
    calibrated on). choices: each backend's modes.choose_graphs answer."""
    prompts = make_prompts(fields["batch_size"], fields["input_len"], engines.model.args.vocab_size, args.seed)
    rows, checks, agreements = [], {}, []
    for backend, choice in choices.items():
        mode = "eager" if choice.cudagraph == GraphMode.NONE else "graph"
        heads = {s: row_head(fields, backend, s, choice, args.graph_policy) for s in args.strategy}
        ran, failed = check_runs(engines, args, backend, choice, heads, prompts, fields["output_len"], checks)
        measured, lost = measure_turns(ran, prompts, fields["output_len"], args.warmup, args.stopping, on_probe,
                                       engines.tp)
        on_probe = None  # a point's first timed run only
        failed.update(lost)
        for strategy, row in heads.items():
            try:
                if strategy in failed:
                    raise failed[strategy]
                finish_row(engines, ran[strategy], row, measured, fields, checks, profile_out, prompts)
            except Exception as exc:  # noqa: BLE001  one failed row must not lose the others
                row.update(verdict=failure_verdict(exc), reason=error_reason(exc))
            rows.append({**row, "fused_ops": fused.status})
            on_row(rows[-1])
        agreements += backend_agreements(args, backend, mode, rows, checks, fields)
    settle_verdicts(rows, agreements)
    for check in checks.values():
        check.logits = None  # free the recorded logits before the next point
    return rows, agreements


def backend_agreements(args: E2EArgs, backend: str, mode: str, rows: list[dict], checks: dict,
                       fields: dict) -> list[dict]:
    """One backend's comparisons of check runs: unified vs each other strategy (in its mode), and
    under graphs each strategy's graph run vs its eager run; a failed row's logits prove nothing."""
    pairs = [("unified", mode, s, mode) for s in args.strategy if s != "unified" and "unified" in args.strategy]
    pairs += [(s, "eager", s, "graph") for s in args.strategy if mode == "graph"]
    failed = {r["strategy"] for r in rows if r["backend"] == backend and r["verdict"] != "pass"}
    found = []
    for ref_s, ref_m, run_s, run_m in pairs:
        ref, run = checks.get((backend, ref_s, ref_m)), checks.get((backend, run_s, run_m))
        if ref is None or run is None or {ref_s, run_s} & failed:
            continue
        found.append(compare_checks({**{k: fields[k] for k in E2E_POINT}, "backend": backend},
                                    f"{ref_s} {ref_m}", ref, f"{run_s} {run_m}", run))
    return found


def settle_verdicts(rows: list[dict], agreements: list[dict]) -> None:
    """Each row's agreement (the worst comparison it is in) and, for a measured row, its verdict."""
    for row in rows:
        row["agreement"], problem = settle_agreement(agreements, row["backend"], f"{row['strategy']} {row['mode']}")
        if row["verdict"] == "pass":
            problems = [problem,
                        "" if row["finite"] else "logits have NaN/inf",
                        "" if row["repeatable"] else "measured runs' tokens differ from the check run's"]
            problems = [p for p in problems if p]
            row.update(verdict="fail" if problems else "pass", reason="; ".join(problems))
