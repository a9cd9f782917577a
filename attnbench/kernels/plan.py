"""Parsed kernel flags -> a SweepPlan: the one place that validates a sweep and fills its defaults.

`attnbench kernel`, `attnbench run` (and its `--check`) and the scenario-file checks all call
`plan_sweep`, so a value refused here is refused the same way everywhere. With `machine=False`
it checks only what the values say (for a file read on a machine that will not run it): device
defaults are the GPU's, and backend availability and free memory are not looked at.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attnbench.device import resolve_device
from attnbench.errors import UsageError
from attnbench.kernels.backends.base import STRATEGIES
from attnbench.kernels.backends.registry import REGISTRY, get_backend, resolve_backends
from attnbench.kernels.sweep import SweepPlan, check_memory
from attnbench.kernels.timing import MODES, TimingConfig
from attnbench.kernels.workload import KINDS, SweepPoint

# The seed's token counts on a GPU. The CPU reference runs a tenth of them on short contexts: a
# decode batch of 1000 x 1024 tokens at 32 x 128 is 17 GB of KV cache, minutes of CPU time.
GPU_DEFAULTS = {"tokens": [100, 500, 1000], "context": "1024"}
CPU_DEFAULTS = {"tokens": [10, 50, 100], "context": "256"}


@dataclass
class KernelArgs:
    shapes: list[tuple[int, int]]
    kv_heads: int | None = None
    tokens: list[int] | None = None  # None: GPU_DEFAULTS or CPU_DEFAULTS
    kinds: list[str] = ("all",)
    strategies: list[str] = STRATEGIES
    backends: list[str] | None = None
    modes: list[str] | None = None
    dtype: str = "bf16"
    block_size: int = 16
    context: str | None = None
    decode_share: float = 0.5
    prefix_ratios: list[float] = (0.5,)
    spec_k: int = 4
    prefill_len: int = 512
    causal: bool = True
    cold_l2: bool = False
    budget_ms: float | None = None
    rel_spread: float = 0.01
    seed: int = 0
    device: str = "auto"
    out: Path | None = None
    json_rows: bool = False
    profile: bool = False


def resolve_modes(requested: list[str] | None, device: torch.device) -> list[str]:
    if not requested:
        return ["eager", "graph"] if device.type == "cuda" else ["eager"]
    modes = list(MODES) if requested == ["both"] else requested
    for m in modes:
        if m not in MODES:
            raise UsageError(f"--mode: unknown mode {m!r}; choose eager, graph or both")
    if "graph" in modes and device.type != "cuda":
        raise UsageError("--mode: graph mode needs a CUDA GPU; use --mode eager on the CPU")
    return modes


def check_strategies(strategies: list[str]) -> None:
    for s in strategies:
        if s not in STRATEGIES:
            raise UsageError(f"--strategy: unknown strategy {s!r}; choose {', '.join(STRATEGIES)}")


def build_points(args: KernelArgs) -> list[SweepPoint]:
    """Every (shape, kind, tokens, prefix ratio) point; args.tokens and args.context must be set."""
    kinds = list(KINDS) if list(args.kinds) == ["all"] else list(args.kinds)
    for k in kinds:
        if k not in KINDS:
            raise UsageError(f"--kind: unknown kind {k!r}; choose from {', '.join(KINDS)} or all")
    points = []
    for (heads, dim), kind, n in itertools.product(args.shapes, kinds, args.tokens):
        ratios = args.prefix_ratios if kind == "prefix" else [args.prefix_ratios[0]]
        for ratio in ratios:
            points.append(SweepPoint(
                kind=kind, num_tokens=n, num_heads=heads, head_dim=dim,
                num_kv_heads=heads if args.kv_heads is None else args.kv_heads,
                dtype=args.dtype, block_size=args.block_size, causal=args.causal, context=args.context,
                decode_share=args.decode_share, prefix_ratio=ratio, spec_k=args.spec_k,
                prefill_len=args.prefill_len, seed=args.seed))
    return points


def plan_sweep(args: KernelArgs, machine: bool = True) -> SweepPlan:
    """Validate every value and decide everything the sweep needs; run nothing.

    machine=True: for this machine (its device, its backends, its free memory), with notices
    for the defaults chosen on the user's behalf. machine=False: the values alone, as a GPU sees them.
    """
    check_strategies(args.strategies)
    device = resolve_device(args.device) if machine else torch.device("cuda")
    on_cpu = device.type == "cpu"
    defaults = CPU_DEFAULTS if on_cpu else GPU_DEFAULTS
    scaled = [f"--{k} {','.join(map(str, v)) if isinstance(v, list) else v}"
              for k, v in defaults.items() if getattr(args, k) is None]
    tokens, context = args.tokens or defaults["tokens"], args.context or defaults["context"]
    budget = args.budget_ms if args.budget_ms is not None else (200.0 if on_cpu else 1000.0)
    if budget <= 0:
        raise UsageError(f"--budget-ms: must be positive, got {budget}")
    points = build_points(replace(args, tokens=tokens, context=context))
    modes = resolve_modes(args.modes, device)
    if not machine:
        for name in args.backends or []:
            get_backend(name)  # a known name; whether it can run here is not asked
        return SweepPlan(tuple(points), tuple(args.backends or ()), tuple(args.strategies), tuple(modes),
                         TimingConfig(budget_ms=budget, rel_spread=args.rel_spread), str(device))
    backends = resolve_backends(args.backends, device)
    if args.backends:  # a backend the user named must be able to run something
        for name in backends:
            reasons = [get_backend(name).supports(p, s, device) for p in points for s in args.strategies]
            if all(reasons):
                raise UsageError(reasons[0] if reasons[0].startswith("--") else f"--backend: {name}: {reasons[0]}")
    check_memory(points, device)

    notices = []
    if on_cpu and scaled:
        notices.append(f"CPU defaults: {' '.join(scaled)} (pass them to choose).")
    if on_cpu and args.backends is None:
        notices.append("No GPU: running the reference backend on the CPU (plain torch, perf_counter timing).")
    elif all(REGISTRY[b].oracle for b in backends) and args.backends is None:
        notices.append("No GPU kernel backend is available (see `attnbench backends`): "
                       "timing the reference backend on the GPU.")
    if not on_cpu and "graph" in modes and any(not REGISTRY[b].graph_safe for b in backends):
        unsafe = [b for b in backends if not REGISTRY[b].graph_safe]
        notices.append(f"{', '.join(unsafe)} rows are eager only (not graph-safe).")

    timing = TimingConfig(cold_l2=args.cold_l2 and not on_cpu, budget_ms=budget, rel_spread=args.rel_spread,
                          warmup_ms=0.0 if on_cpu else 25.0, min_samples=3 if on_cpu else 10)
    return SweepPlan(tuple(points), tuple(backends), tuple(args.strategies), tuple(modes), timing, str(device),
                     notices=tuple(notices))
