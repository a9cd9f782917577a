"""The seed PR's 9-point decode table, measured and cross-checked on this GPU.

    python3 benchmarks/seed_table.py [--context 1024] [--out DIR]

Prints two figures, whatever they are:
1. wall time of the whole table (9 decode points x unified/split, CUDA-graph timing, every result
   checked against the float32 reference), counted from after the imports; goal <= 20 s on an H200;
2. for every row, the graph-mode median against the per-kernel device time torch.profiler
   (CUPTI) reports for the same graph replays; goal: within +-2 %.
It also times one point eager / graph / eager / graph in a row, so a graph-vs-eager gap can be
told apart from drift. Not a test: a benchmark that prints numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

import torch

from attnbench.results import files as report
from attnbench.results.tables import markdown_table, seed_table
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.sweep import SweepPlan, run_sweep
from attnbench.kernels.timing import TimedKernel, TimingConfig, estimate_call_ms, make_timed_kernel, time_kernels
from attnbench.kernels.workload import SweepPoint

SHAPES = [(12, 64), (32, 128), (64, 128)]
TOKENS = [100, 500, 1000]


def seed_points(context: str) -> list[SweepPoint]:
    return [SweepPoint(kind="decode", num_tokens=n, num_heads=h, head_dim=d, context=context)
            for h, d in SHAPES for n in TOKENS]


def timed_under_profiler(runner: TimedKernel, samples: int = 30) -> tuple[float, float]:
    """(median of event-timed samples, profiler kernel time per call) over the same replays."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    runner()
    torch.cuda.synchronize()
    cfg = TimingConfig(mode=runner.mode, warmup_ms=0.0, min_samples=samples, max_samples=samples,
                       rel_spread=0.0, budget_ms=1e9)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        (timing,) = time_kernels([runner], cfg)  # one untimed warm-up call, then `samples` event-timed ones
    calls = (samples + 1) * runner.inner
    kernel_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return timing.median_ms, kernel_us / 1e3 / calls


def build_runner(point: SweepPoint, strategy: str, mode: str, timing: TimingConfig):
    inputs = make_inputs(point, "cuda")
    metadata = build_metadata(strategy, inputs.batch, inputs.block_table).to("cuda")
    out = torch.empty_like(inputs.q)
    plan = get_backend("vllm-fa2").plan(strategy, point, metadata)

    def fn() -> torch.Tensor:
        return plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)

    device = torch.device("cuda")
    return make_timed_kernel(fn, mode, device, timing, estimate_call_ms(fn, device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--context", default="1024", help="decode KV length (the seed PR did not say)")
    parser.add_argument("--out", type=Path, default=Path("results/seed-table"))
    parser.add_argument("--cprofile", action="store_true", help="print where the sweep's host time goes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    timing = TimingConfig(mode="graph")
    plan = SweepPlan(tuple(seed_points(args.context)), ("vllm-fa2",), ("unified", "split"), ("graph",),
                     timing, "cuda")
    writer = report.RowWriter(args.out)
    start = last = time.perf_counter()
    point_s = []

    def point_done(point: SweepPoint) -> None:
        nonlocal last
        now = time.perf_counter()
        point_s.append(f"{point.num_tokens}x{point.num_heads}x{point.head_dim}: {now - last:.1f}s")
        last = now

    profiler = cProfile.Profile() if args.cprofile else None
    if profiler:
        profiler.enable()
    run_sweep(plan, torch.cuda.get_device_name(), writer.write, point_done)
    wall_s = time.perf_counter() - start
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    writer.close()
    df = report.load_results(args.out)
    print(markdown_table(seed_table(df)))
    print(f"figure 1: seed decode table (9 points x 2 strategies, graph mode, checked) wall {wall_s:.1f} s "
          f"after import; verdicts {df['verdict'].value_counts().to_dict()}")
    print("  per point: " + ", ".join(point_s))

    print("\nfigure 2: event-timed graph replays vs torch.profiler kernel time, same replays")
    print("| tokens | heads | dim | strategy | sweep median ms | median ms under profiler | profiler kernel ms | median / kernel |")
    print("|---|---|---|---|---|---|---|---|")
    deviations = []
    for row in df.itertuples(index=False):
        point = next(p for p in plan.points if (p.num_tokens, p.num_heads, p.head_dim) ==
                     (row.num_tokens, row.num_heads, row.head_dim))
        runner = build_runner(point, row.strategy, "graph", timing)
        median_ms, kernel_ms = timed_under_profiler(runner)
        ratio = median_ms / kernel_ms
        deviations.append(abs(ratio - 1))
        print(f"| {row.num_tokens} | {row.num_heads} | {row.head_dim} | {row.strategy} | {row.median_ms:.4f} | "
              f"{median_ms:.4f} | {kernel_ms:.4f} | {ratio:.3f} |")
        del runner
        torch.cuda.empty_cache()
    print(f"max |median / kernel - 1| = {100 * max(deviations):.1f} %  "
          f"(median over rows {100 * statistics.median(deviations):.1f} %)")

    print("\ndrift check: decode 1000 tokens, 12 x 64, unified, eager/graph alternated")
    point = SweepPoint(kind="decode", num_tokens=1000, num_heads=12, head_dim=64, context=args.context)
    runners = {m: build_runner(point, "unified", m, timing) for m in ("eager", "graph")}
    for mode in ("eager", "graph", "eager", "graph"):
        print(f"  {mode}: {time_kernels([runners[mode]], TimingConfig(mode=mode))[0].median_ms:.4f} ms")


if __name__ == "__main__":
    main()
