"""A 10,000-step trace replayed on the goal's four backends x both strategies: how long it takes, and how far its buckets are
from timing every step.

    python3 benchmarks/replay_scale.py --out results/replay-scale [--steps 10000] [--exact-sample 500]
        [--bucket-split N] [--flags "--backend vllm-fa2,vllm-fa3,flashinfer,flashinfer-ba --mode graph
        --budget-ms 5 --replicates 1 --bucket-ratio 3"]

Makes the trace with attnbench's own generator and scheduler (`attnbench trace synth`: long
prompts chunked at 512 tokens, up to 128 running, a 2048-token budget, llama-3-8b's 32/8x128 shape,
seed 0; stopped at --steps), then runs `attnbench replay` on it with --exact-sample steps also
timed one by one. A replay times its buckets' representatives first, then the sampled steps, and
writes each point's rows when it is done: the moment the first sampled step's rows appear in
results.csv closes the replay proper (the buckets; at most one sampled point later). Prints,
whatever they are: the trace's steps, buckets and timed points, the wall time of the buckets (goal:
at most 5 minutes for 4 backends x 2 strategies on an H200) and of the whole command, and per mode
and choice the total, the oracle's saving and the bucketing error against the sample with its
standard error (goal: within 2 %), as one table, also written to OUT/report.md. Interrupted
(SIGINT: Ctrl-C, `timeout -s INT`), it passes the signal on to the replay once, which stops after
its point and writes its outputs, and still prints and writes the table of what was measured.
With --resume (the same --out and flags) it goes on where an interrupted run stopped: the same
trace, `attnbench replay --resume`, and a report over both parts (the wall times of the parts are
kept in OUT/timing.json, so the buckets' time is the first part's and the whole command's the sum).
A device call of 10 minutes holds the buckets and about 300 sampled steps; a second call on the
same machine finishes them. `--exact-sample 0` times the buckets alone (the time goal, in one call). Not a test: a benchmark that prints numbers. The replay's directory
holds everything else.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from attnbench.results.replay import GOAL_PCT
from attnbench.traces.buckets import DEFAULT_SPLIT

# the goal's four backends, named so that another pack carried beside them (vllm-triton's, say) does
# not join the replay and change what the buckets' time measures
GOAL_BACKENDS = "vllm-fa2,vllm-fa3,flashinfer,flashinfer-ba"
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


def replay(*args: str, results: Path, resumed: bool) -> tuple[float, float | None, bool]:
    """Run `attnbench replay` in a process group of its own: (wall s, s until the first sampled
    step's rows appeared, or None if not seen or `resumed` (the buckets were the earlier part's),
    whether it was interrupted). A SIGINT here (`timeout -s INT`, Ctrl-C) is passed on to it once,
    so it stops after its point and writes its outputs, which are reported."""
    start, since = time.perf_counter(), (float("inf") if resumed else time.time())
    process = subprocess.Popen([sys.executable, "-m", "attnbench", "replay", *args], start_new_session=True)
    buckets_s, stopped = None, False
    while process.poll() is None:
        try:
            time.sleep(1.0)
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            stopped = True
        if buckets_s is None and sampled_rows(results, since):
            buckets_s = time.perf_counter() - start
    if process.returncode != 0 and not stopped:
        sys.exit(f"attnbench replay failed with exit {process.returncode}")
    return time.perf_counter() - start, buckets_s, stopped


def points_of(results: Path) -> dict[str, int]:
    """Distinct steps timed per part (bucket representatives, sampled steps) in results.csv."""
    try:
        with open(results, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {"bucket": 0, "sample": 0}
    return {part: len({row["step"] for row in rows if row["part"] == part}) for part in ("bucket", "sample")}


def report(env: dict, wall_s: float, buckets_s: float | None, points: dict[str, int], stopped: bool) -> list[str]:
    """The closing table: where the time went, and per mode each choice's total and bucketing error."""
    replay = env["replay"]
    goal = GOAL_PCT
    lines = [f"trace: {replay['steps']} steps {replay['kinds']}, {replay['buckets']} buckets (--bucket-ratio "
             f"{replay['bucket_ratio']}, --bucket-split {replay.get('bucket_split', 'not recorded')}); "
             f"{replay['exact_sample']} steps asked for one by one" + ("; INTERRUPTED (SIGINT)" if stopped else "")]
    sample_s = None if buckets_s is None else wall_s - buckets_s
    lines += ["", "| part | points | wall s |", "|---|---|---|",
              f"| buckets (goal: <= 300 s for 4 backends x 2 strategies) | {points['bucket']} | "
              f"{'not seen' if buckets_s is None else f'{buckets_s:.1f}'} |",
              f"| sampled steps | {points['sample']} | {'not seen' if sample_s is None else f'{sample_s:.1f}'} |",
              f"| the whole replay command | {points['bucket'] + points['sample']} | {wall_s:.1f} |"]
    for mode, numbers in replay.get("results", {}).items():
        lines += ["", f"[{mode}]", "", f"| choice | total ms per layer | bucketing error | SE | steps | "
                  f"within {goal:g} % |", "|---|---|---|---|---|---|"]
        for choice, total in numbers["totals_ms"].items():
            error = numbers["exact_sample"].get(choice)
            said = "| not measured | | | " if not error else \
                f"| {error['error_pct']:+.2f} % | {error['stderr_pct']} % | {error['steps']} | " \
                f"{'yes' if abs(error['error_pct']) <= goal else 'no'} "
            lines.append(f"| {choice} | {'incomplete' if total is None else f'{total:.3f}'} {said}|")
        oracle = numbers["oracle"]
        if oracle:
            lines += ["", f"per-step oracle {oracle['total_ms']:.3f} ms, {oracle['saving_pct']:.2f} % below the best "
                      f"single choice ({oracle['best_single']})"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a new directory: the trace and the replay's run")
    parser.add_argument("--steps", type=int, default=10_000, help="steps of the trace (the scheduler stops there)")
    parser.add_argument("--exact-sample", type=int, default=500, help="steps also timed one by one")
    parser.add_argument("--bucket-split", type=int, default=DEFAULT_SPLIT, help="replay's --bucket-split")
    parser.add_argument("--flags", default=f"--backend {GOAL_BACKENDS} --mode graph --budget-ms 5 --replicates 1 "
                                           "--bucket-ratio 3", help="more replay flags, as one string")
    parser.add_argument("--resume", action="store_true",
                        help="go on with the interrupted replay in --out (the same flags), and report both parts")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a plain `timeout` too: passed on, reported
    trace, run, timing_file = args.out / "trace.jsonl", args.out / "replay", args.out / "timing.json"
    if args.resume:
        try:
            parts = json.loads(timing_file.read_text())["parts"]
        except (OSError, ValueError, KeyError) as exc:
            sys.exit(f"--resume: {timing_file} unreadable ({exc}): resume a run this benchmark started")
        if not (run / "env.json").is_file():
            sys.exit(f"--resume: {run} holds no replay to go on with")
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        parts = []
        made_s = attnbench("trace", "synth", *SYNTH, "--max-steps", str(args.steps), "--out", str(trace), "--force")
        print(f"trace made in {made_s:.1f} s: {trace}")
    where = ["--resume", str(run)] if args.resume else ["--out", str(run), "--force"]
    wall_s, buckets_s, stopped = replay(str(trace), "--exact-sample", str(args.exact_sample), "--bucket-split",
                                        str(args.bucket_split), *shlex.split(args.flags), *where,
                                        results=run / "results.csv", resumed=args.resume)
    if args.exact_sample == 0 and not stopped and not args.resume:
        buckets_s = wall_s  # nothing sampled: the whole replay is its buckets
    parts.append({"wall_s": wall_s, "buckets_s": buckets_s, "interrupted": stopped})
    timing_file.write_text(json.dumps({"parts": parts}, indent=2) + "\n")
    wall_s = sum(part["wall_s"] for part in parts)
    buckets_s = parts[0]["buckets_s"]
    if len(parts) > 1:
        print(f"{len(parts)} parts: " + ", ".join(f"{part['wall_s']:.1f} s" for part in parts))
    try:
        env = json.loads((run / "env.json").read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"no report: {run}/env.json unreadable ({exc})")
    lines = report(env, wall_s, buckets_s, points_of(run / "results.csv"), stopped)
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines) + f"\n\n(also in {args.out / 'report.md'})")


if __name__ == "__main__":
    main()
