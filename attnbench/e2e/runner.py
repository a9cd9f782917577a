"""The e2e job: request latency of a whole model with unified vs split attention.

For each (input_len, output_len, batch_size) point, every backend x strategy runs the same
requests on one model and one KV cache: one untimed check run that records logits, warm-up runs,
then measured runs. Between compared runs only the attention backend and strategy change. The
check runs are compared (unified vs split; graph vs eager, from an extra eager check run when
graphs are on) and each comparison becomes a row of agreement.csv. Rows go to results.csv as
soon as they exist; parquet, summary.md and plots are written from them at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir, progress
from attnbench.device import device_name, resolve_device
from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.checkpoint import load_hf_checkpoint, read_hf_config
from attnbench.e2e.engine import GRAPH_NOTE, Engine, estimate_bytes, graph_buckets
from attnbench.e2e.model import PRESETS, ModelArgs, Transformer, fused, random_model
from attnbench.e2e.report import FAILING, compare_generations, run_metrics, worst, write_e2e_outputs
from attnbench.e2e.scheduler import KVCache, make_prompts
from attnbench.errors import AttnbenchError, UsageError, error_reason
from attnbench.kernels.backends.base import STRATEGIES
from attnbench.kernels.backends.registry import get_backend, resolve_backends
from attnbench.kernels.inputs import torch_dtype
from attnbench.kernels.workload import DTYPE_ALIASES, SweepPoint
from attnbench.results import files
from attnbench.results.env import collect
from attnbench.results.profiling import profile_generation, write_report

SEED_INPUT_LENS, SEED_OUTPUT_LENS, SEED_BATCH_SIZES = "32,512", "128,32", "1,2,4,8,16,32"
CPU_LIMIT_BYTES = 2 * 2**30  # the CPU path (reference attention) is for tests and small models
GiB = 2**30


@dataclass
class E2EArgs:
    model: str = "llama-7b"
    input_lens: list[int] = field(default_factory=lambda: [32, 512])
    output_lens: list[int] = field(default_factory=lambda: [128, 32])
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    chunk_size: int | None = None
    strategies: list[str] = STRATEGIES
    backends: list[str] | None = None
    eager: bool = False
    dtype: str = "bf16"
    block_size: int = 16
    warmup: int = 10
    iters: int = 30
    seed: int = 0
    device: str = "auto"
    out: Path | None = None
    profile: bool = False


def length_pairs(args: E2EArgs) -> list[tuple[int, int]]:
    """--input-len and --output-len zipped; a single value goes with every value of the other."""
    ins, outs = list(args.input_lens), list(args.output_lens)
    if len(ins) == 1:
        ins *= len(outs)
    if len(outs) == 1:
        outs *= len(ins)
    if len(ins) != len(outs):
        raise UsageError(f"--input-len/--output-len: {len(ins)} input lengths and {len(outs)} output lengths "
                         "do not pair up; give equally many (they are zipped) or one of either")
    return list(zip(ins, outs))


def validate_args(args: E2EArgs) -> None:
    checks = [("--input-len", args.input_lens), ("--output-len", args.output_lens), ("--batch-size", args.batch_sizes),
              ("--chunk-size", [] if args.chunk_size is None else [args.chunk_size]), ("--iters", [args.iters]), ("--block-size", [args.block_size])]
    for flag, values in checks:
        bad = [v for v in values if v <= 0]
        if bad:
            raise UsageError(f"{flag}: must be positive, got {bad[0]}")
    if args.warmup < 0:
        raise UsageError(f"--warmup: must be >= 0, got {args.warmup}")
    if DTYPE_ALIASES.get(args.dtype) is None:
        raise UsageError(f"--dtype: unknown dtype {args.dtype!r}; choose bf16 or fp16")
    for s in args.strategies:
        if s not in STRATEGIES:
            raise UsageError(f"--strategy: unknown strategy {s!r}; choose unified, split")


def resolve_model(name: str) -> tuple[ModelArgs, Path | None]:
    """A preset name, or a local checkpoint directory (anything that exists or looks like a path)."""
    if name in PRESETS:
        return ModelArgs.from_name(name), None
    path = Path(name).expanduser()
    if path.exists() or "/" in name or name.startswith("."):
        return read_hf_config(path), path
    return ModelArgs.from_name(name), None  # raises: unknown model, with the presets


def check_fits(parts: dict[str, int], model: str, device: torch.device) -> None:
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


def attention_point(args: ModelArgs, dtype: str, block_size: int) -> SweepPoint:
    """What a backend needs to know of the model's attention (heads, head dim, dtype, blocks)."""
    return SweepPoint(kind="decode", num_tokens=1, num_heads=args.n_head, head_dim=args.head_dim,
                      num_kv_heads=args.n_kv_head, dtype=dtype, block_size=block_size)


class ModelEngines:
    """The model, the KV cache and one engine per (backend, strategy, graphs), made on first use."""

    def __init__(self, model: Transformer, max_num_seqs: int, max_model_len: int, block_size: int = 16,
                 chunk_size: int | None = None, seed: int = 0):
        dtype = model.tok_embeddings.dtype
        self.model, self.max_num_seqs, self.max_model_len, self.chunk_size = model, max_num_seqs, max_model_len, chunk_size
        self.point = attention_point(model.args, str(dtype).removeprefix("torch."), block_size)
        self.cache = KVCache(model.args, KVCache.blocks_for(max_num_seqs, max_model_len, block_size), block_size,
                             dtype, model.tok_embeddings.device, seed)
        self.engines: dict[tuple[str, str, bool], Engine] = {}
        model.setup_rope(max_model_len)

    def engine(self, backend: str, strategy: str, graphs: bool) -> Engine:
        key = (backend, strategy, graphs)
        if key not in self.engines:
            attn = PagedAttention(get_backend(backend), strategy, self.point, self.cache.k, self.cache.v)
            self.engines[key] = Engine(self.model, self.cache, attn, self.max_num_seqs, self.max_model_len,
                                       self.chunk_size, graphs)
        return self.engines[key]


def graph_mode(backend: str, device: torch.device, eager: bool, max_num_seqs: int) -> tuple[bool, str]:
    if eager:
        return False, "eager (--eager)"
    if device.type != "cuda":
        return False, f"eager: CUDA graphs need a GPU (this run is on {device.type})"
    if not get_backend(backend).graph_safe:
        return False, f"eager: the {backend} backend cannot be captured in a CUDA graph"
    return True, GRAPH_NOTE.format(buckets=",".join(map(str, graph_buckets(max_num_seqs))))


def run_e2e(args: E2EArgs, console: Console, command: list[str]) -> Path:
    validate_args(args)
    pairs = length_pairs(args)
    device = resolve_device(args.device)
    margs, path = resolve_model(args.model)
    dtype_name = DTYPE_ALIASES[args.dtype]
    max_model_len = max(i + o for i, o in pairs)
    if max_model_len > margs.max_positions:
        raise UsageError(f"--input-len/--output-len: {max_model_len} tokens exceed {margs.name}'s "
                         f"{margs.max_positions} positions")
    point = attention_point(margs, dtype_name, args.block_size)
    backends = resolve_backends(args.backends, device)
    for b in backends:
        reason = get_backend(b).supports(point, "unified", device)
        if reason:
            raise UsageError(f"--backend: {b} cannot run {margs.name} here: {reason}")
    max_bs = max(args.batch_sizes)
    plans = {b: graph_mode(b, device, args.eager, max_bs) for b in backends}
    runs_at_once = len(backends) * len(args.strategies) * (2 if any(g for g, _ in plans.values()) else 1)
    elt = torch.empty((), dtype=torch_dtype(dtype_name)).element_size()
    parts = estimate_bytes(margs, elt, max_bs, max_model_len, args.block_size,
                           args.chunk_size or max(b * i for b in args.batch_sizes for i, _ in pairs),
                           max(b * o for b in args.batch_sizes for _, o in pairs) * runs_at_once)
    check_fits(parts, args.model, device)

    dtype = torch_dtype(dtype_name)
    model = load_hf_checkpoint(path, dtype, device, margs) if path else random_model(margs, dtype, device, args.seed)
    engines = ModelEngines(model, max_bs, max_model_len, args.block_size, args.chunk_size, args.seed)

    gpu_name = device_name(device)
    out_dir = args.out or default_out_dir(gpu_name or "cpu", "e2e")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = collect(command)
    env["e2e"] = {"model": margs.name, "model_args": {k: v for k, v in vars(margs).items()},
                  "params_b": margs.num_params / 1e9, "weights": f"checkpoint {path}" if path else f"random (seed {args.seed})",
                  "dtype": dtype_name, "block_size": args.block_size, "chunk_size": args.chunk_size,
                  "max_model_len": max_model_len, "warmup": args.warmup, "iters": args.iters,
                  "memory_estimate_gib": {k: round(v / GiB, 3) for k, v in parts.items()},
                  "graphs": {b: note for b, (_, note) in plans.items()}}
    files.write_env(out_dir, env)
    base = {"model": margs.name, "params_b": round(margs.num_params / 1e9, 3), "dtype": dtype_name,
            "block_size": args.block_size, "chunk_size": args.chunk_size or 0, "device": device.type,
            "gpu": gpu_name or "cpu", "warmup": args.warmup, "iters": args.iters}
    points = [(i, o, b) for i, o in pairs for b in args.batch_sizes]
    console.print(f"{margs.name} ({margs.num_params / 1e9:.2f} B params, {dtype_name}) on {gpu_name or 'cpu'}: "
                  f"{len(points)} points x {len(backends)} backend(s) x {len(args.strategies)} strategies -> {out_dir}")
    rows: list[dict] = []
    agreements: list[dict] = []
    with progress(console) as bar:
        task = bar.add_task("e2e", total=len(points))
        for input_len, output_len, batch_size in points:
            bar.update(task, description=f"in {input_len} / out {output_len} / batch {batch_size}")
            fields = {**base, "input_len": input_len, "output_len": output_len, "batch_size": batch_size}
            new_rows, new_agreements = run_point(engines, args, plans, fields, out_dir if args.profile else None)
            rows += new_rows
            agreements += new_agreements
            pd.DataFrame(rows).to_csv(out_dir / "results.csv", index=False)
            if agreements:
                pd.DataFrame(agreements).to_csv(out_dir / "agreement.csv", index=False)
            bar.update(task, advance=1)
    env["e2e"]["fused_ops"] = fused.status
    files.write_env(out_dir, env)
    write_e2e_outputs(out_dir, env, console)
    if args.profile:
        write_report(out_dir, console)
    return out_dir


def run_point(engines: ModelEngines, args: E2EArgs, plans: dict, fields: dict,
              profile_out: Path | None = None) -> tuple[list[dict], list[dict]]:
    """Every backend x strategy on one point; then the agreement of their check runs."""
    prompts = make_prompts(fields["batch_size"], fields["input_len"], engines.model.args.vocab_size, args.seed)
    output_len = fields["output_len"]
    rows, checks, agreements = [], {}, []
    for backend, (graphs, note) in plans.items():
        package, version = get_backend(backend).library()
        mode = "graph" if graphs else "eager"
        for strategy in args.strategies:
            row = {**fields, "backend": backend, "library": package, "library_version": version,
                   "strategy": strategy, "mode": mode, "graph_note": note}
            try:
                engine = engines.engine(backend, strategy, graphs)
                check = checks[(backend, strategy, mode)] = engine.generate(prompts, output_len, record_logits=True)
                for _ in range(args.warmup):
                    engine.generate(prompts, output_len)
                measured = [engine.generate(prompts, output_len) for _ in range(args.iters)]
                if profile_out is not None:  # --profile: extra runs after the measured ones, never among them
                    profile_generation(engine, prompts, output_len, profile_out, row)
                row.update(run_metrics(measured, fields["batch_size"], output_len),
                           finite=bool(torch.isfinite(check.logits).all()),
                           repeatable=all(g.tokens == check.tokens for g in measured), verdict="pass", reason="")
                if graphs:  # the same strategy without graphs, for the graph-vs-eager check only
                    checks[(backend, strategy, "eager")] = engines.engine(backend, strategy, False).generate(
                        prompts, output_len, record_logits=True)
            except Exception as exc:  # one failed row must not lose the others
                row.update(verdict="error", reason=error_reason(exc))
            rows.append({**row, "fused_ops": fused.status})
        pairs = [("unified", mode, s, mode) for s in args.strategies if s != "unified" and "unified" in args.strategies]
        pairs += [(s, "eager", s, "graph") for s in args.strategies if graphs]
        for ref_s, ref_m, run_s, run_m in pairs:
            ref, run = checks.get((backend, ref_s, ref_m)), checks.get((backend, run_s, run_m))
            if ref is None or run is None:
                continue
            result = compare_generations(ref.tokens, ref.logits, run.tokens, run.logits)
            agreements.append({**{k: fields[k] for k in ("input_len", "output_len", "batch_size")}, "backend": backend,
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
