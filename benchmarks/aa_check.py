"""Does `attnbench compare` tell noise from a regression? An A/A pair and planted regressions.

    python3 benchmarks/aa_check.py [--out DIR] [--threshold 2%] [--planted 3,10]
    python3 benchmarks/aa_check.py --flags "--heads 2 --dim 16 --tokens 4,8 --context 16 --kind decode
        --device cpu --budget-ms 5 --replicates 3" --wrap reference          # the pipeline on a CPU

1. A/A: the scenario (default scenarios/seed-kernel-table.toml, 36 rows on a GPU with vllm-fa2 and
   vllm-fa3) run twice, each in its own process, compared at --threshold: every `slower` row is a
   false alarm (goal: 0 of 36 at 2 %), with the smallest A/A-clean threshold (calibrate's).
2. Planted: the scenario once more per fraction, with only a test-only backend that wraps --wrap
   (vllm-fa2; the reference on the CPU) and adds that fraction of each row's run-A median as
   extra device time (benchmarks/planted_backend.py: a sized device copy, not a host sleep), compared
   against runs A and B's rows of --wrap: every `slower` row is a detection (goal: all at 10 %,
   >= 90 % at 3 %). `achieved` is the median measured ratio, to show what was really planted.
3. How many replicates per run a 3 % change needs to be told from the A/A pair's replicate spread.

Prints numbers (a table last) and writes aa-check.json and aa-runs.tgz (every run directory) into
--out. Not a timed test. On an H200 with 3 replicates it takes ~5 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pandas as pd

from attnbench.results.calibrate import calibrate_pair, pair_commands, run_pair
from attnbench.results.compare import compare_runs, parse_threshold
from attnbench.results.read import KERNEL, load_run
from attnbench.results.replicates import parse_times, replicates_needed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLANTED_CLASS = {"vllm-fa2": "PlantedFA2", "reference": "PlantedReference"}


def planted_name(wrap: str) -> str:
    return {"vllm-fa2": "planted-fa2", "reference": "planted-reference"}[wrap]


def planted_table(rows: pd.DataFrame, wrap: str, fraction: float) -> dict:
    sys.path.insert(0, str(HERE))
    from planted_backend import planted_key

    from attnbench.kernels.workload import SweepPoint

    table = {}
    for r in rows[(rows["backend"] == wrap) & rows["verdict"].isin(["pass", "fail"])].itertuples(index=False):
        point = SweepPoint(kind=r.kind, num_tokens=int(r.num_tokens), num_heads=int(r.num_heads),
                           num_kv_heads=int(r.num_kv_heads), head_dim=int(r.head_dim), context=str(r.context))
        table[planted_key(point, r.strategy)] = fraction * float(r.median_ms)
    return table


def run_planted(args, base_command: list[str], work: Path, fraction: float, table: dict) -> pd.DataFrame:
    name = f"planted-{round(fraction * 100)}"
    table_path = work / f"{name}.json"
    table_path.write_text(json.dumps(table))
    command = [*base_command[:-1], str(work / name), "--backend", planted_name(args.wrap)]
    env = {**os.environ, "ATTNBENCH_EXTRA_BACKENDS": f"planted_backend:{PLANTED_CLASS[args.wrap]}",
           "ATTNBENCH_PLANTED_TABLE": str(table_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    with (work / f"{name}.log").open("w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=args.run_timeout).returncode
    print(f"run {name}: exit {code}, {time.perf_counter() - start:.1f} s", flush=True)
    if code != 0:
        raise SystemExit(f"planted run failed: see {work / name}.log")
    return load_run(work / name, name).rows


def detections(base: pd.DataFrame, planted: pd.DataFrame, wrap: str, threshold: float) -> dict:
    key = [c for c in KERNEL.key if c != "backend"]
    c = compare_runs(base[base["backend"] == wrap], planted, threshold, key, KERNEL)
    return {"rows": len(c.rows), "detected": c.count("slower"), "noisy": c.count("noisy"), "same": c.count("same"),
            "faster": c.count("faster"), "achieved": statistics.median(c.rows["ratio"]) if len(c.rows) else math.nan}


def needed_for(a: pd.DataFrame, b: pd.DataFrame, effect: float, threshold: float) -> list[int]:
    """Per row: replicates per run for compare to call this effect slower 9 times in 10 at this
    threshold, from the pooled spread of the A/A pair's replicate medians."""
    key = list(KERNEL.key)
    merged = a.merge(b, on=key, suffixes=("_a", "_b"))
    needs = []
    for cell_a, cell_b in zip(merged["replicate_medians_ms_a"], merged["replicate_medians_ms_b"]):
        logs = [[math.log(v) for v in parse_times(cell)] for cell in (cell_a, cell_b)]
        if min(len(x) for x in logs) < 2:
            continue
        pooled = sum(statistics.variance(x) * (len(x) - 1) for x in logs) / (sum(len(x) for x in logs) - 2)
        needs.append(replicates_needed(math.sqrt(pooled), effect, threshold))
    return needs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "seed-kernel-table.toml"))
    parser.add_argument("--flags", help="`attnbench kernel` flags instead of a scenario")
    parser.add_argument("--replicates", type=int, help="pass --replicates N to every run (default: the device's)")
    parser.add_argument("--backend", help="the A/A runs' backends (default with the scenario: vllm-fa2,vllm-fa3, "
                                          "its 36 rows, whatever else is installed)")
    parser.add_argument("--threshold", default="2%")
    parser.add_argument("--planted", default="3,10", help="planted extra time, %% of each row's median")
    parser.add_argument("--wrap", default="vllm-fa2", choices=sorted(PLANTED_CLASS))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "aa-check")))
    parser.add_argument("--run-timeout", type=float, default=240.0, help="seconds per run")
    args = parser.parse_args()
    threshold = parse_threshold(args.threshold)
    fractions = [float(x) / 100 for x in args.planted.split(",") if x.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="aa-check-"))
    run_args = shlex.split(args.flags) if args.flags else [args.scenario]
    run_args += ["--replicates", str(args.replicates)] if args.replicates else []
    backend = args.backend or (None if args.flags else "vllm-fa2,vllm-fa3")
    run_args += ["--backend", backend] if backend else []
    start = time.perf_counter()

    a, b = run_pair(run_args, work, lambda line: print(line, flush=True))
    aa = compare_runs(a, b, threshold, list(KERNEL.key), KERNEL)
    calibration = calibrate_pair(a, b)
    # the gate as CI would run it: `attnbench compare A B --threshold T`, its exit code (0: nothing slower)
    gate = subprocess.run([sys.executable, "-m", "attnbench", "compare", str(work / "a"), str(work / "b"),
                           "--threshold", args.threshold], capture_output=True, text=True)
    (work / "compare-a-b.txt").write_text(gate.stdout + gate.stderr)
    reps = sorted({int(n) for n in a["replicates"].dropna()}) if "replicates" in a else []
    result = {"threshold": threshold, "replicates": reps, "aa_rows": len(aa.rows),
              **{f"aa_{v}": aa.count(v) for v in ("slower", "faster", "noisy", "same")},
              "aa_compare_exit": gate.returncode, "aa_clean_threshold": calibration.clean, "aa_all_same_threshold": calibration.all_same, "planted": {}}
    base_command = pair_commands(run_args, work)[0]
    for fraction in fractions:
        planted = run_planted(args, base_command, work, fraction, planted_table(a, args.wrap, fraction))
        result["planted"][f"{fraction:.0%}"] = {name: detections(base, planted, args.wrap, threshold)
                                                for name, base in (("vs A", a), ("vs B", b))}
    for effect in (0.03, 0.10):
        needs = needed_for(a, b, effect, threshold)
        result[f"replicates_for_{effect:.0%}"] = {"median": statistics.median(needs) if needs else None,
                                                  "p90": float(pd.Series(needs).quantile(0.9)) if needs else None,
                                                  "max": max(needs) if needs else None}
    flags = a["clock_flag"].fillna("").astype(str) if "clock_flag" in a else pd.Series(dtype=str)
    result["aa_rows_clock_flagged"] = int(flags.ne("").sum())
    clocks = pd.to_numeric(a.get("sm_clock_min_mhz", pd.Series(dtype=float)), errors="coerce").dropna()
    result["aa_sm_clock_min_mhz"] = float(clocks.min()) if len(clocks) else None
    result["wall_s"] = round(time.perf_counter() - start, 1)

    with tarfile.open(args.out / "aa-runs.tgz", "w:gz") as tar:
        tar.add(work, arcname="aa-runs")
    (args.out / "aa-check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print("\nA/A rows (largest change first):")
    print(calibration.rows.head(12).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"\n== aa_check ({result['wall_s']} s, threshold {threshold:.1%}, replicates {reps})")
    print(f"A/A: {aa.count('slower')} slower, {aa.count('faster')} faster, {aa.count('noisy')} noisy, "
          f"{aa.count('same')} same of {len(aa.rows)}; clean from {calibration.clean:.1%}, all same from "
          f"{calibration.all_same:.1%}; run A rows with a clock flag: {result['aa_rows_clock_flagged']}, lowest SM "
          f"clock {result['aa_sm_clock_min_mhz']} MHz")
    print(f"`attnbench compare A B --threshold {args.threshold}`: exit {gate.returncode} (compare-a-b.txt in aa-runs.tgz)")
    for label, pair in result["planted"].items():
        for name, d in pair.items():
            print(f"planted {label} {name}: detected {d['detected']} of {d['rows']} (noisy {d['noisy']}, same "
                  f"{d['same']}, faster {d['faster']}), achieved ratio {d['achieved']:.3f}")
    for effect in ("3%", "10%"):
        need = result[f"replicates_for_{effect}"]
        print(f"replicates per run to call {effect} slower 9 times in 10 at {threshold:.1%} (A/A spread): median "
              f"{need['median']}, 90th percentile {need['p90']}, max {need['max']} of the rows")


if __name__ == "__main__":
    main()
