"""A 10,000-step trace replayed on every backend x strategy: how long it takes, and how far its buckets are
from timing every step.

    python3 benchmarks/replay_scale.py --out results/replay-scale [--steps 10000] [--exact-sample 500]
        [--flags "--mode graph --budget-ms 10 --replicates 1"]

Makes the trace with attnbench's own generator and scheduler (`attnbench trace synth`: long
prompts chunked at 512 tokens, up to 128 running, a 2048-token budget, llama-3-8b's 32/8x128 shape,
seed 0; stopped at --steps), then runs `attnbench replay` on it with --exact-sample steps also
timed one by one. A replay times its buckets' representatives first, then the sampled steps, and
writes each point's rows when it is done: the moment the first sampled step's rows appear in
results.csv closes the replay proper (the buckets; at most one sampled point later). Prints,
whatever they are: the trace's steps, buckets and timed points, the wall time of the buckets (goal:
at most 5 minutes for 4 backends x 2 strategies on an H200) and of the whole command, and per mode
and choice the total, the oracle's saving and the bucketing error against the sample with its
standard error (goal: within 2 %). Not a test: a benchmark that prints numbers. The replay's
directory holds everything else.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

SYNTH = ["--num-requests", "6000", "--rate", "25", "--input-len", "lognormal:1500:0.6", "--output-len",
         "lognormal:200:0.5", "--max-num-seqs", "128", "--chunk-size", "512", "--max-num-batched-tokens", "2048",
         "--heads", "32", "--kv-heads", "8", "--dim", "128", "--dtype", "bf16", "--block-size", "16", "--seed", "0"]


def attnbench(*args: str) -> float:
    """Run one attnbench command in its own process (as a user would); its wall time in seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "attnbench", *args])
    if done.returncode != 0:
        sys.exit(f"attnbench {' '.join(args[:2])} failed with exit {done.returncode}")
    return time.perf_counter() - start


def sampled_rows(results: Path, since: float) -> bool:
    """Whether results.csv, written after `since` (an earlier run's is removed by --force), holds a
    sampled step's row yet (the buckets' points come first)."""
    try:
        if results.stat().st_mtime < since:
            return False
        with open(results, newline="") as f:
            return any(row.get("part") == "sample" for row in csv.DictReader(f))
    except OSError:
        return False


def replay(*args: str, results: Path) -> tuple[float, float | None]:
    """Run `attnbench replay` in its own process: (wall s, s until the first sampled step's rows appeared)."""
    start, since = time.perf_counter(), time.time()
    process = subprocess.Popen([sys.executable, "-m", "attnbench", "replay", *args])
    buckets_s = None
    while process.poll() is None:
        time.sleep(1.0)
        if buckets_s is None and sampled_rows(results, since):
            buckets_s = time.perf_counter() - start
    if process.returncode != 0:
        sys.exit(f"attnbench replay failed with exit {process.returncode}")
    return time.perf_counter() - start, buckets_s


def report(env: dict, wall_s: float, buckets_s: float | None, points: int) -> None:
    replay = env["replay"]
    print(f"\ntrace: {replay['steps']} steps {replay['kinds']}, {replay['buckets']} buckets "
          f"(--bucket-ratio {replay['bucket_ratio']}) timed on {points} representative steps, "
          f"{replay['exact_sample']} steps timed one by one")
    said = f"{buckets_s:.1f} s" if buckets_s is not None else "not seen (no sampled step, or all in one poll)"
    print(f"replay wall time, the buckets: {said} (goal: <= 300 s on an H200 for 4 backends x 2 strategies); "
          f"with the sampled steps: {wall_s:.1f} s")
    for mode, numbers in replay["results"].items():
        print(f"\n[{mode}]  choice: total ms per layer over the trace | bucketing error on the sample")
        errors = numbers["exact_sample"]
        for choice, total in numbers["totals_ms"].items():
            error = errors.get(choice)
            said = f"{error['error_pct']:+.2f} % (standard error {error['stderr_pct']} %) over {error['steps']} " \
                   "steps" if error else "not measured"
            print(f"  {choice:32s} {'incomplete' if total is None else f'{total:10.3f}'} | {said}")
        oracle = numbers["oracle"]
        if oracle:
            print(f"  per-step oracle {oracle['total_ms']:.3f} ms, {oracle['saving_pct']:.2f} % below the best single "
                  f"choice ({oracle['best_single']}); per-bucket oracle {oracle.get('bucket_saving_pct')} % below it")
        worst = max((abs(e["error_pct"]) for e in errors.values()), default=None)
        if worst is not None:
            print(f"  largest |bucketing error|: {worst:.2f} % (goal: <= 2 %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a new directory: the trace and the replay's run")
    parser.add_argument("--steps", type=int, default=10_000, help="steps of the trace (the scheduler stops there)")
    parser.add_argument("--exact-sample", type=int, default=500, help="steps also timed one by one")
    parser.add_argument("--flags", default="--mode graph --budget-ms 10 --replicates 1",
                        help="more replay flags, as one string")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trace = args.out / "trace.jsonl"
    made_s = attnbench("trace", "synth", *SYNTH, "--max-steps", str(args.steps), "--out", str(trace), "--force")
    print(f"trace made in {made_s:.1f} s: {trace}")
    run = args.out / "replay"
    wall_s, buckets_s = replay(str(trace), "--exact-sample", str(args.exact_sample), *shlex.split(args.flags),
                               "--out", str(run), "--force", results=run / "results.csv")
    with open(run / "results.csv", newline="") as f:
        points = len({row["step"] for row in csv.DictReader(f) if row["part"] == "bucket"})
    report(json.loads((run / "env.json").read_text()), wall_s, buckets_s, points)


if __name__ == "__main__":
    main()
