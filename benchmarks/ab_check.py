"""Does `attnbench ab` tell noise from a regression, and how fast? An A/A run and planted regressions.

    python3 benchmarks/ab_check.py [--out DIR] [--threshold 2%] [--planted 3,10] [--budget-s 100] [--extra FLAGS]
    python3 benchmarks/ab_check.py --wrap reference --extra "" --flags "--heads 2 --dim 16 --tokens 4,8
        --context 16 --kind decode --device cpu --budget-ms 5"   # the pipeline on a CPU (no verdicts there)

1. A/A: `attnbench ab` on the seed scenario (18 rows with vllm-fa2), both sides this checkout,
   told apart by a variable only: every `slower` row is a false alarm (goal: 0 of 18 at 2 %).
2. Planted: the candidate side loads benchmarks/planted_backend.py's AbPlantedFA2, vllm-fa2 plus a
   device copy of the given fraction of each row's A/A baseline median, under vllm-fa2's own name;
   every `slower` row is a detection (goals: all at 10 %, >= 90 % at 3 %). `achieved` is the median
   paired ratio, to show what was really planted.

For each case: rows caught, the verdict counts, why rows stopped, rounds (median and max), and
the command's wall time (issue 23's goal: below ~65 s each; benchmarks/ab_power.py predicts what
these defaults take, from the last run's measured noise and round cost).
Prints numbers and writes ab-check.json and ab-runs.tgz (every run directory) into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLANTED_CLASS = {"vllm-fa2": "AbPlantedFA2", "reference": "AbPlantedReference"}


def planted_table(aa: pd.DataFrame, fraction: float) -> dict:
    """{planted_key(point, strategy): extra ms} from the A/A run's baseline medians."""
    sys.path.insert(0, str(HERE))
    from planted_backend import planted_key

    from attnbench.kernels.workload import SweepPoint

    table = {}
    for r in aa[aa["rounds"] > 0].itertuples(index=False):
        point = SweepPoint(kind=r.kind, num_tokens=int(r.num_tokens), num_heads=int(r.num_heads),
                           num_kv_heads=int(r.num_kv_heads), head_dim=int(r.head_dim), context=str(r.context))
        table[planted_key(point, r.strategy)] = fraction * float(r.baseline_ms)
    return table


def run_ab(name: str, candidate: str, sweep: list[str], args, work: Path) -> dict:
    """One `attnbench ab` run; its rows' verdicts, stops, rounds and wall time."""
    out = work / name
    command = [sys.executable, "-m", "attnbench", "ab", "--baseline", "AB_SIDE=a", "--candidate", candidate,
               "--threshold", args.threshold, "--budget-s", str(args.budget_s), "--max-rounds", str(args.max_rounds),
               "--out", str(out), *sweep]
    start = time.perf_counter()
    with (work / f"{name}.log").open("w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=args.run_timeout,
                              env={**os.environ, "COLUMNS": "200"}).returncode
    wall = time.perf_counter() - start
    print(f"run {name}: exit {code}, {wall:.1f} s", flush=True)
    if not (out / "ab.csv").is_file():
        raise SystemExit(f"{name}: no ab.csv; see {work / name}.log")
    frame = pd.read_csv(out / "ab.csv")
    timed = frame[frame["rounds"] >= 2]
    return {"rows": len(frame), "exit": code, "wall_s": round(wall, 1),
            **{v: int((frame["verdict"] == v).sum()) for v in ("slower", "faster", "same", "noisy", "unjudged")},
            "stopped": frame["stopped"].value_counts().to_dict(),
            "rounds_median": float(timed["rounds"].median()) if len(timed) else None,
            "rounds_max": int(timed["rounds"].max()) if len(timed) else None,
            "achieved": float(timed["ratio"].median()) if len(timed) else None, "frame": frame}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "seed-kernel-table.toml"))
    parser.add_argument("--flags", help="`attnbench kernel` flags instead of the scenario")
    parser.add_argument("--extra", default="",
                        help="more `attnbench kernel` flags for every run, e.g. \"--budget-ms 100\"; none by "
                             "default: ab's own sampling window (1000 ms a row), whose rounds were quieter on the "
                             "H200 than 100 ms ones (the measurements page)")
    parser.add_argument("--wrap", default="vllm-fa2", choices=sorted(PLANTED_CLASS))
    parser.add_argument("--threshold", default="2%")
    parser.add_argument("--planted", default="3,10", help="planted extra time, %% of each row's A/A baseline median")
    parser.add_argument("--budget-s", type=float, default=100.0,
                        help="ab's --budget-s per case (rounds only; ~10 rounds on the H200: benchmarks/ab_power.py)")
    parser.add_argument("--max-rounds", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "ab-check")))
    parser.add_argument("--run-timeout", type=float, default=300.0, help="seconds per run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ab-check-"))
    sweep = shlex.split(args.flags) if args.flags else ["--scenario", args.scenario]
    sweep += ["--backend", args.wrap, *shlex.split(args.extra)]

    cases = {"A/A": run_ab("aa", "AB_SIDE=b", sweep, args, work)}
    for percent in [float(x) for x in args.planted.split(",") if x.strip()]:
        table_path = work / f"planted-{percent:g}.json"
        table_path.write_text(json.dumps(planted_table(cases["A/A"]["frame"], percent / 100)))
        candidate = ",".join([f"ATTNBENCH_EXTRA_BACKENDS=planted_backend:{PLANTED_CLASS[args.wrap]}",
                              f"ATTNBENCH_PLANTED_TABLE={table_path}", f"PYTHONPATH={HERE}"])
        cases[f"planted {percent:g}%"] = run_ab(f"planted-{percent:g}", candidate, sweep, args, work)

    with tarfile.open(args.out / "ab-runs.tgz", "w:gz") as tar:
        tar.add(work, arcname="ab-runs")
    result = {name: {k: v for k, v in case.items() if k != "frame"} for name, case in cases.items()}
    (args.out / "ab-check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\n== ab_check (threshold {args.threshold}, budget {args.budget_s:g} s, at most {args.max_rounds} rounds)")
    for name, c in result.items():
        caught = "false slower" if name == "A/A" else "caught"
        print(f"{name}: {caught} {c['slower']} of {c['rows']} (faster {c['faster']}, same {c['same']}, noisy "
              f"{c['noisy']}, unjudged {c['unjudged']}); stopped {c['stopped']}; rounds median {c['rounds_median']}, "
              f"max {c['rounds_max']}; achieved ratio {c['achieved']}; exit {c['exit']}; wall {c['wall_s']} s")
    for name, case in cases.items():
        print(f"\n{name} rows:")
        print(case["frame"][["label", "rounds", "baseline_ms", "ratio", "ci_low", "ci_high", "verdict", "stopped"]]
              .to_string(index=False, float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()
