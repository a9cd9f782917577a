#!/usr/bin/env bash
# The kernel families of issue 10 on one H200, in one device call (< 570 s): FlashInfer (unified, split,
# fused POD, BatchAttention), FlexAttention and vLLM's FA2/FA3 side by side.
#   1. POD's kernels for head dims 64 and 128 compile in the background (a carried .device-fi/fi-jit-pod*
#      pack is resumed or loaded) and are packed into $OUT for the next machine;
#   2. the seed's 9-point decode table with vllm-fa2, vllm-fa3, flashinfer and flex (unified, split);
#   3. scenarios/mixed-families.toml: mixed batches, 32/8 x 128 and 12 x 64, every backend x strategy;
#   4. scenarios/pod-balanced.toml: points where the prefill part alone and the decode part alone take
#      comparable time, the fused / best-of table and the part times;
#   5. e2e llama-3-8b 512/32 batch 8 --chunk-size 256 on flashinfer unified / split / fused.
# One replicate per row (ratios inside one run are solid; absolute numbers need replicates).
# From the repo root, carrying .device/{bootstrap.sh,vllm-fa,warm_fa2.py} and .device-fi:
#   source .device/bootstrap.sh && source .device-fi/bootstrap_fi.sh && OUT=$OUT bash benchmarks/gpu_families.sh
set -u
OUT=${OUT:-$PWD/gpu-families}
mkdir -p "$OUT"
[ -n "${FLASHINFER_WORKSPACE_BASE:-}" ] || source .device-fi/bootstrap_fi.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
BUDGET=${FAMILIES_BUDGET:-560}
start=$SECONDS
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
# cap LIMIT RESERVE: LIMIT, or what is left of the budget less what later steps keep
cap() { local n=$((BUDGET - (SECONDS - start) - $2)); [ "$n" -gt "$1" ] && n=$1; [ "$n" -lt 10 ] && n=10; echo "$n"; }

nvidia-smi --query-gpu=index,name,clocks.sm,memory.used --format=csv,noheader | tee -a "$SUMMARY"
timeout -k 10 330 python3 .device-fi/warm_flashinfer.py --groups pod --dims 64,128 --budget 300 --reserve 30 \
  --pack "$OUT/fi-jit-pod.tar.xz" > "$OUT/warm-pod.log" 2>&1 &
warm=$!

step seed-families "$(cap 150 380)" python3 -m attnbench run scenarios/seed-kernel-table.toml \
  --backend vllm-fa2,vllm-fa3,flashinfer,flex --replicates 1 --out "$OUT/seed-families"
wait $warm
echo "== warm-pod: rc=$? at $((SECONDS - start))s" | tee -a "$SUMMARY"
grep -E "^pod|POD \(" "$OUT/warm-pod.log" | tail -n 6 | tee -a "$SUMMARY"
step mixed-families "$(cap 240 150)" python3 -m attnbench run scenarios/mixed-families.toml --replicates 1 \
  --out "$OUT/mixed-families"
step pod-balanced "$(cap 90 70)" python3 -m attnbench run scenarios/pod-balanced.toml --replicates 1 \
  --out "$OUT/pod-balanced"
step e2e-chunked "$(cap 150 10)" python3 -m attnbench e2e --model llama-3-8b --backend flashinfer \
  --strategy unified,split,fused --input-len 512 --output-len 32 --batch-size 8 --chunk-size 256 \
  --warmup 1 --iters 3 --out "$OUT/e2e-chunked"

python3 - "$OUT" >> "$SUMMARY" 2>&1 <<'PY'
import sys
from pathlib import Path
import pandas as pd
out = Path(sys.argv[1])
for name in ("seed-families", "mixed-families", "pod-balanced"):
    path = out / name / "results.csv"
    if not path.exists():
        print(f"== {name}: no results.csv")
        continue
    df = pd.read_csv(path)
    print(f"== {name}: {len(df)} rows; verdicts by backend x strategy")
    print(df.groupby(["backend", "strategy", "verdict"]).size().to_string())
    bad = df[~df.verdict.isin(["pass"])]
    if len(bad):
        print(bad[["kind", "num_tokens", "num_heads", "head_dim", "backend", "strategy", "mode", "verdict",
                   "reason"]].head(20).to_string())
PY
for name in seed-families mixed-families pod-balanced e2e-chunked; do
  [ -f "$OUT/$name/summary.md" ] && { echo "== $name summary.md (tables)"; grep -E '^(\||#)' "$OUT/$name/summary.md" | head -n 60; } >> "$SUMMARY"
done
grep -oE ': (match|near-tie|MISMATCH|non-finite) ' "$OUT/e2e-chunked.log" 2>/dev/null | sort | uniq -c \
  | sed 's/^/e2e-chunked agreement verdicts: /' >> "$SUMMARY"
echo "== total $((SECONDS - start))s" >> "$SUMMARY"
cat "$SUMMARY"
