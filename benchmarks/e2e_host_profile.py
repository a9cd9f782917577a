"""Where an eager engine step's host time goes: cProfile over eager generate() runs.

An eager step's device time is bounded below by the host time it takes to issue its kernels
(every layer's GEMMs, norms, RoPE, KV write and attention). This runs a model eagerly with one
backend and strategy, reports per-step host time (issuing the forward) and device time (CUDA
events), then profiles a few more runs with cProfile and prints the functions that own the time.

It also runs on the package layout from before attnbench was split into rooms (attnbench.e2e_cmd,
attnbench.engine, attnbench.model), so one script measures a change before and after: put the
older `attnbench/` first on PYTHONPATH.

Usage (GPU): python3 benchmarks/e2e_host_profile.py --model llama-7b --backend vllm-fa2 --strategy unified
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics

import math

import torch

try:
    from attnbench.e2e.model import ModelArgs, fused, random_model
    from attnbench.e2e.runner import ModelEngines
    from attnbench.e2e.scheduler import make_prompts
except ImportError:  # the flat layout before the rooms: for a before/after run
    from attnbench.e2e_cmd import Runner as ModelEngines
    from attnbench.engine import make_prompts
    from attnbench.model import ModelArgs, fused, random_model

ATTENTION_CALL = ("attention.py", "attention_ops.py")  # PagedAttention.__call__, now and before
ELEMENTWISE_CALL = ("elementwise.py", "model.py")  # fused.__call__: Triton kernels now, torch.compile before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-7b")
    parser.add_argument("--backend", default="vllm-fa2")
    parser.add_argument("--strategy", default="unified")
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    margs = ModelArgs.from_name(args.model)
    model = random_model(margs, torch.bfloat16, device)
    engines = ModelEngines(model, args.batch_size, args.input_len + args.output_len)
    engine = engines.engine(args.backend, args.strategy)
    prompts = make_prompts(args.batch_size, args.input_len, margs.vocab_size)
    for _ in range(2):  # compile and warm up
        engine.generate(prompts, args.output_len)
    steps = [s for _ in range(args.runs) for s in engine.generate(prompts, args.output_len).steps]
    for kind in ("prefill", "decode"):
        mine = [s for s in steps if s.kind == kind]
        if mine:
            issue = statistics.median(getattr(s, "launch_host_us", math.nan) for s in mine)
            print(f"{kind}: {len(mine)} steps, p50 host before launch {statistics.median(s.host_us for s in mine):.0f} us, "
                  f"issuing the forward {issue:.0f} us, device {statistics.median(s.device_ms for s in mine):.3f} ms")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.runs):
        engine.generate(prompts, args.output_len)
    profiler.disable()
    stats = pstats.Stats(profiler)
    said = {ATTENTION_CALL: "attention callable (write K/V + attention, per layer)",
            ELEMENTWISE_CALL: f"elementwise ops (RMSNorm, RoPE, SiLU-and-mul: {fused.status})"}
    for (path, _, name), (_, calls, _, cumulative, _) in stats.stats.items():
        for files, what in said.items():
            if path.endswith(files) and name == "__call__":
                print(f"{what}: {calls} calls, {cumulative / calls * 1e6:.1f} us each under cProfile")
    text = io.StringIO()
    stats.stream = text
    stats.sort_stats("tottime").print_stats(args.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
