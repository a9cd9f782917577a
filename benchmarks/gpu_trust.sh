#!/usr/bin/env bash
# Numbers a CI gate can trust (issue 9), on one GPU, in one device call (< 420 s). Parts (default both):
#   aa   benchmarks/aa_check.py: the seed scenario twice in separate processes (A/A at 2 %, and the gate's
#      exit code as CI would run it), then with a planted 3 % and 10 % of extra device time;
#   smi  telemetry through the nvidia-smi fallback: NVML hidden (a pynvml that fails to import), one
#      small kernel run, its telemetry source and per-row clock columns.
# From the repo root, carrying .device:  source .device/bootstrap.sh && OUT=$OUT bash benchmarks/gpu_trust.sh
set -u
source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
script_start gpu-trust
: > "$SUMMARY"

parts=" ${*:-aa smi} "
if [[ $parts == *" aa "* ]]; then
  step aa 380 python3 benchmarks/aa_check.py --out "$OUT" --run-timeout 150
  grep -E "^(== aa_check|A/A:|planted|replicates per run|.attnbench compare)" "$OUT/aa.log" >> "$SUMMARY"
fi
[[ $parts == *" smi "* ]] || { cat "$SUMMARY"; exit 0; }

nonvml=$(mktemp -d)
echo 'raise ImportError("NVML hidden by gpu_trust.sh: the nvidia-smi fallback is under test")' > "$nonvml/pynvml.py"
step smi-fallback 60 env PYTHONPATH="$nonvml:$PYTHONPATH" python3 -m attnbench kernel --heads 32 --kv-heads 8 \
  --dim 128 --tokens 1000 --kind decode,mixed --backend vllm-fa2 --replicates 1 --out "$OUT/smi"
python3 - "$OUT/smi" >> "$SUMMARY" 2>&1 <<'PY'
import json, sys
from pathlib import Path
import pandas as pd
run = Path(sys.argv[1])
df = pd.read_csv(run / "results.csv")
cols = [c for c in df.columns if c.startswith(("sm_clock", "mem_clock", "power", "temp", "throttle", "clock_flag"))]
tel = run / "telemetry.csv"
print("smi fallback: telemetry.csv", f"{len(pd.read_csv(tel))} samples" if tel.exists() else "MISSING")
if tel.exists():
    print(pd.read_csv(tel).head(3).to_string(index=False))
print("env.json gpu:", json.loads((run / "env.json").read_text()).get("gpu"))
print(df[["kind", "strategy", "mode", "verdict", *cols]].to_string(index=False))
PY
echo "== total $((SECONDS - start))s" >> "$SUMMARY"
cat "$SUMMARY"
