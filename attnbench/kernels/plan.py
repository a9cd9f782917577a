"""Parsed kernel flags -> a SweepPlan: the one place that validates a sweep and fills its defaults.

`attnbench kernel`, `attnbench run` (and its `--check`) and the scenario-file checks all call
`plan_sweep` (through runs/kernel.py's plan_kernel), so a value refused here is refused the same
way everywhere. With `machine=False` it checks only what the values say (for a file read on a
machine that will not run it): device defaults are the GPU's, and backend availability and free
memory are not looked at.

Refused up front, each naming its flag: unknown names, a value listed twice, sizes out of range
(workload.MAX_*), timing flags that are not finite or out of range, and a sweep none of whose
points fits in free GPU memory or, on the CPU, in the memory the machine has available (points
that do not fit, beside ones that do, become `skipped` rows: SweepPlan.unfit). Where the sweep
runs and which share of its points (`--devices`, `--shard`) are the job's (runs/kernel.py): it
passes them in, and a sharded plan holds its shard's points only.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

import torch

from attnbench.device import point_timeout_s, resolve_device
from attnbench.errors import AttnbenchError, UsageError, check_choices, check_unique
from attnbench.kernels.backends.registry import EXTRA_BACKEND_ERRORS, REGISTRY, get_backend, resolve_backends
from attnbench.kernels.inputs import HEADROOM, device_bytes, free_bytes, host_bytes
from attnbench.kernels.notices import notices
from attnbench.kernels.replicate_rule import ADAPTIVE_BUDGET_MS, DEFAULT_REPLICATES, ReplicateRule, check_count, rule_for
from attnbench.kernels.sweep import SweepPlan
from attnbench.kernels.choices import MODES
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import DEFAULT_STRATEGIES, KINDS, STRATEGIES, SweepPoint, build_batch

# The seed's token counts on a GPU. The CPU reference runs a tenth of them on short contexts: a
# decode batch of 1000 x 1024 tokens at 32 x 128 is 17 GB of KV cache, minutes of CPU time.
GPU_DEFAULTS = {"tokens": [100, 500, 1000], "context": "1024"}
CPU_DEFAULTS = {"tokens": [10, 50, 100], "context": "256"}
MAX_BUDGET_MS = 3_600_000.0  # an hour of sampling per row
GiB = 2**30


@dataclass
class KernelArgs:
    """The kernel command's flags, one field per flag under the flag's name; list flags as lists."""

    heads: list[int] | None = None
    dim: list[int] | None = None
    shapes: list[tuple[int, ...]] | None = None  # (heads, dim), or (heads, dim, kv heads); over heads x dim
    kv_heads: int | None = None
    tokens: list[int] | None = None  # None: GPU_DEFAULTS or CPU_DEFAULTS
    kind: list[str] = ("all",)
    strategy: list[str] = DEFAULT_STRATEGIES  # these: each backend runs those it has; others: as asked
    backend: list[str] | None = None
    mode: list[str] | None = None
    dtype: str = "bf16"
    block_size: int = 16
    context: str | None = None
    decode_share: list[float] = (0.5,)
    decode_seqs: list[int] | None = None  # mixed: decode sequences beside an N-token chunk, instead of a share
    prefix_ratio: list[float] = (0.5,)
    spec_k: int = 4
    prefill_len: int = 512
    causal: bool = True
    cold_l2: bool = False
    budget_ms: float | None = None
    rel_spread: float = 0.01
    seed: int = 0
    device: str = "auto"
    out: Path | None = None
    json: bool = False  # --json: each row as a JSON line on stdout
    profile: bool = False
    force: bool = False  # --force: run into a directory that holds attnbench outputs, removing them first
    resume: Path | None = None  # --resume DIR: measure only the points DIR lacks
    isolate: bool = False  # --isolate: each point in a worker process with a watchdog
    point_timeout: float | None = None  # --point-timeout S (default: 600 on a GPU, 120 on the CPU)
    replicates: int | None = None  # --replicates N: exactly N (default: DEFAULT_REPLICATES, or ADAPTIVE)
    min_replicates: int | None = None  # --min-replicates: replicates stop when enough (replicate_rule.py)
    max_replicates: int | None = None
    threshold: str | None = None  # --threshold: what the stopping rule resolves, as compare's flag
    shard: str | None = None  # --shard I/N: measure shard I of N of the points (workers/shards.py)
    devices: str | None = None  # --devices all | cuda:0,cuda:1: one worker per device (workers/devices.py)


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


def check_lists(args: KernelArgs) -> None:
    check_choices(args.strategy, STRATEGIES, "--strategy", "strategy")
    if args.context is not None and not str(args.context).strip():  # not the default in disguise
        raise UsageError("--context: empty; give a length or uniform:LOW:HIGH, e.g. --context 1024")
    for values, flag, alone in [(args.kind, "--kind", "all"), (args.mode or [], "--mode", "both")]:
        if alone in values and len(values) > 1:
            raise UsageError(f"{flag}: {alone} cannot be combined with other values, got "
                             f"{','.join(map(str, values))}")
    for values, flag in [(args.tokens or [], "--tokens"), (args.kind, "--kind"), (args.strategy, "--strategy"),
                         (args.backend or [], "--backend"), (args.mode or [], "--mode"),
                         (args.prefix_ratio, "--prefix-ratio"), (args.decode_share, "--decode-share"),
                         (args.decode_seqs or [], "--decode-seqs")]:
        check_unique(values, flag)
    check_unique(sweep_shapes(args), "--shapes", shape_text)
    if args.decode_seqs and len(args.decode_share) > 1:
        raise UsageError("--decode-share/--decode-seqs: with --decode-seqs the chunk is all N tokens and the "
                         "decode share is not used; give a list of one of them")


def sweep_shapes(args: KernelArgs) -> list[tuple[int, ...]]:
    """The shapes to sweep: --shapes, or the product of --heads and --dim."""
    if args.shapes:
        return list(args.shapes)
    if args.heads is None or args.dim is None:
        raise UsageError("--heads and --dim: both are needed (or --shapes 32x128,...), e.g. --heads 32 --dim 128")
    check_unique(args.heads, "--heads")
    check_unique(args.dim, "--dim")
    return list(itertools.product(args.heads, args.dim))


def shape_text(shape: tuple[int, ...]) -> str:
    """12x64, or 32/8x128 for a shape with its own kv heads."""
    return f"{shape[0]}{f'/{shape[2]}' if len(shape) > 2 else ''}x{shape[1]}"


def check_timing(budget_ms, rel_spread) -> None:
    """Finite numbers in range: NaN compares false with everything, so it is refused here."""
    number = (int, float)
    if not (isinstance(budget_ms, number) and 0 < budget_ms <= MAX_BUDGET_MS):
        raise UsageError(f"--budget-ms: must be a number of ms above 0 and at most {MAX_BUDGET_MS:.0f} (an hour), "
                         f"got {budget_ms}")
    if not (isinstance(rel_spread, number) and 0 <= rel_spread <= 1):
        raise UsageError(f"--rel-spread: must be between 0 and 1 (0: sample for the whole --budget-ms), "
                         f"got {rel_spread}")


def check_fits(points: list[SweepPoint], device: torch.device,
               available: int | None = None) -> list[tuple[SweepPoint, str]]:
    """(point, why) for each point that cannot fit where it will run (a CUDA OOM or a MemoryError
    midway, or the machine swapping, is the alternative): those become `skipped` rows and the rest
    run. A sweep none of whose points fits is refused, naming its largest point.

    Sizing a point draws its batch, in time linear in its tokens; a point's need grows with its
    tokens, so each family (points that differ only in --tokens) is bisected for its first misfit:
    about log2(len(family)) points sized, not all of them (time quadratic in a long --tokens list),
    and the points after it are said to need more."""
    free = free_bytes(device) if available is None else available
    if free is None:
        return []
    size = device_need if device.type == "cuda" else lambda p: int(host_bytes(p) * HEADROOM)
    where = f"{free / GiB:.1f} GiB {'free' if device.type == 'cuda' else 'available'}"
    need = functools.cache(size)
    families = token_families(points)
    amount = lambda n: f"~{n / GiB:.1f} GiB{'' if device.type == 'cuda' else ' on the CPU'}, {where}"
    why: dict[int, str] = {}  # the first misfit of a family is sized; the ones after it need more
    for family in families:
        first = bisect.bisect_right(family, free, key=need)
        why.update({id(p): f"needs {'' if p is family[first] else 'over '}{amount(need(family[first]))}"
                    for p in family[first:]})
    if len(why) == len(points):
        worst = max((family[-1] for family in families), key=need)
        flags = "--tokens/--context" if device.type == "cuda" else "--tokens/--context/--heads/--dim"
        raise UsageError(f"{flags}: the largest point ({worst.kind}, {worst.num_tokens} tokens, "
                         f"{worst.num_heads}x{worst.head_dim}, context {worst.context}) needs {amount(need(worst))}")
    return [(p, why[id(p)]) for p in points if id(p) in why]


def token_families(points: list[SweepPoint]) -> list[list[SweepPoint]]:
    """The points grouped by everything but their token count, each group in order of tokens."""
    others = [f.name for f in fields(SweepPoint) if f.name != "num_tokens"]
    families: dict[tuple, list[SweepPoint]] = {}
    for p in points:
        families.setdefault(tuple(getattr(p, name) for name in others), []).append(p)
    return [sorted(family, key=lambda p: p.num_tokens) for family in families.values()]


def device_need(point: SweepPoint) -> int:
    """Device bytes a point takes (inputs.device_bytes), with the headroom."""
    return int(device_bytes(point) * HEADROOM)


def sized(args: KernelArgs, device: torch.device) -> KernelArgs:
    """args with --tokens and --context the device's defaults where not given: the sweep's points."""
    defaults = CPU_DEFAULTS if device.type == "cpu" else GPU_DEFAULTS
    return replace(args, tokens=args.tokens or defaults["tokens"], context=args.context or defaults["context"])


def build_points(args: KernelArgs) -> list[SweepPoint]:
    """Every (shape, kind, tokens, prefix ratio or decode share / seqs) point; args.tokens and args.context
    must be set."""
    kinds = list(KINDS) if list(args.kind) == ["all"] else list(args.kind)
    for k in kinds:
        if k not in KINDS:
            raise UsageError(f"--kind: unknown kind {k!r}; choose from {', '.join(KINDS)} or all")
    points = []
    for shape, kind, n in itertools.product(sweep_shapes(args), kinds, args.tokens):
        heads, dim = shape[:2]
        kv_heads = shape[2] if len(shape) > 2 else heads if args.kv_heads is None else args.kv_heads
        ratios = args.prefix_ratio if kind == "prefix" else [args.prefix_ratio[0]]
        # (decode share, decode seqs): only mixed batches are shaped by them
        mixes = [(args.decode_share[0], 0)]
        if kind == "mixed":
            mixes = ([(args.decode_share[0], r) for r in args.decode_seqs] if args.decode_seqs else
                     [(share, 0) for share in args.decode_share])
        for ratio, (share, seqs) in itertools.product(ratios, mixes):
            points.append(SweepPoint(
                kind=kind, num_tokens=n, num_heads=heads, head_dim=dim, num_kv_heads=kv_heads,
                dtype=args.dtype, block_size=args.block_size, causal=args.causal, context=args.context,
                decode_share=share, prefix_ratio=ratio, spec_k=args.spec_k,
                prefill_len=args.prefill_len, seed=args.seed, decode_seqs=seqs))
    return points


def plan_sweep(args: KernelArgs, machine: bool = True, device: torch.device | None = None,
               share: Callable[[list[SweepPoint]], list[SweepPoint]] | None = None,
               given: list[SweepPoint] | None = None, adaptive: bool = False) -> SweepPlan:
    """Validate every value and decide everything the sweep needs; run nothing.

    machine=True: for this machine (its device, its backends, its free memory), with notices
    for the defaults chosen on the user's behalf. machine=False: the values alone, as a GPU sees them.
    device: where the sweep runs (default: args.device); share(points): the points this run
    measures of the sweep's (a shard of them; runs/kernel.py), before memory is looked at.
    given: the points to measure instead of the grid the flags build (a replay's buckets,
    runs/replay.py); everything else is decided as for a sweep.
    """
    check_lists(args)
    device = device or (resolve_device(args.device) if machine else torch.device("cuda"))
    on_cpu = device.type == "cpu"
    defaults = CPU_DEFAULTS if on_cpu else GPU_DEFAULTS
    point_timeout, replicates, rule = check_counts(args, device, adaptive)
    budget = args.budget_ms if args.budget_ms is not None else \
        200.0 if on_cpu else ADAPTIVE_BUDGET_MS if rule else 1000.0
    check_timing(budget, args.rel_spread)
    if machine and EXTRA_BACKEND_ERRORS:
        raise UsageError(EXTRA_BACKEND_ERRORS[0])
    points = list(given) if given is not None else build_points(sized(args, device))
    if not points:
        raise UsageError("--shapes/--tokens: nothing to measure")
    points = share(points) if share else points
    modes = resolve_modes(args.mode, device)
    if not machine:
        for name in args.backend or []:
            get_backend(name)  # a known name; whether it can run here is not asked
        return SweepPlan(tuple(points), tuple(args.backend or ()), tuple(args.strategy), tuple(modes),
                         TimingConfig(budget_ms=budget, rel_spread=args.rel_spread), str(device),
                         replicates=replicates, rule=rule)
    backends = check_backends(args, points, device)
    missing = [(b, s) for b in backends for s in args.strategy if s not in REGISTRY[b].strategies]
    unfit = check_fits(points, device)
    left_out = {id(point) for point, _ in unfit}
    points = [p for p in points if id(p) not in left_out]
    timing = TimingConfig(cold_l2=args.cold_l2 and not on_cpu, budget_ms=budget, rel_spread=args.rel_spread,
                          warmup_ms=0.0 if on_cpu else 25.0, min_samples=3 if on_cpu else 10)
    named = set(args.strategy) != set(DEFAULT_STRATEGIES)  # asked for: a backend lacking one skips it in rows
    scaled = {k: ",".join(map(str, v)) if isinstance(v, list) else v
              for k, v in defaults.items() if getattr(args, k) is None}
    said = notices(device, scaled, bool(args.backend), backends, modes, unfit, missing, named)
    return SweepPlan(tuple(points), tuple(backends), tuple(args.strategy), tuple(modes), timing, str(device),
                     notices=tuple(said), isolate=args.isolate, point_timeout_s=float(point_timeout),
                     replicates=replicates, rule=rule, unfit=tuple(unfit), lacking=() if named else tuple(missing))


def check_counts(args: KernelArgs, device: torch.device, adaptive: bool = False
                 ) -> tuple[float, int, ReplicateRule | None]:
    """(point timeout, replicates (the most, with a rule), the rule that stops them when enough),
    the device's defaults where not given, each in range; adaptive: a GPU's default is ADAPTIVE."""
    if args.point_timeout is not None and not (args.isolate or args.devices):
        raise UsageError("--point-timeout: only worker processes have a watchdog; add --isolate (or --devices)")
    point_timeout = point_timeout_s(args.point_timeout, device)
    if not (isinstance(point_timeout, (int, float)) and 0 < point_timeout <= 86400):
        raise UsageError(f"--point-timeout: must be a number of seconds above 0 and at most 86400, got {point_timeout}")
    rule = rule_for(args, device.type, adaptive)
    if rule is not None:
        return point_timeout, rule.max_replicates, rule
    replicates = args.replicates if args.replicates is not None else DEFAULT_REPLICATES.get(device.type, 1)
    check_count(replicates, "--replicates", 1)
    return point_timeout, replicates, None


def check_backends(args: KernelArgs, points: list[SweepPoint], device: torch.device) -> list[str]:
    """The backends that run here; every strategy and every backend the user named can run something."""
    backends = resolve_backends(args.backend, device)
    for s in args.strategy:  # a strategy no backend of the run has would only make skipped rows
        if not any(s in REGISTRY[b].strategies for b in backends):
            raise UsageError(f"--strategy: none of {', '.join(backends)} has a {s} strategy "
                             f"(see `attnbench backends`)")
    if args.backend:  # a backend the user named must be able to run something
        for name in backends:  # stops at the first point and strategy it can run
            reasons = (get_backend(name).supports(p, s, device) for p in points for s in args.strategy)
            first = next(reasons)
            if first and all(reasons):
                raise UsageError(first if first.startswith("--") else f"--backend: {name}: {first}")
    return backends


def check_measured(verdicts: dict[str, int], out_dir: Path) -> None:
    """After a sweep: a run in which no row was timed (every row skipped or an error) failed, and
    says so with an exit code, not only in its files."""
    if not verdicts.get("pass") and not verdicts.get("fail"):
        counts = ", ".join(f"{n} {v}" for v, n in verdicts.items()) or "no rows"
        raise AttnbenchError(f"nothing was measured ({counts}): the reason column of {out_dir / 'results.csv'} "
                             "says why")
