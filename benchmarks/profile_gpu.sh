#!/usr/bin/env bash
# Issue 4, profiling, on one H200 in under 9 minutes. From the repo root:
#   source .device/bootstrap.sh && bash benchmarks/profile_gpu.sh
# 1. tests/test_profiling.py, GPU tests included (flash kernels in a vllm-fa2 breakdown, e2e share)
# 2. attnbench kernel --profile: 32 q / 8 kv heads x 128, 100 and 1000 tokens, decode and mixed,
#    vllm-fa2, eager and graph: 16 profiled rows
# 3. attnbench e2e --profile (when e2e exists): llama-7b random weights, 512 in / 32 out, batch 8
# Every step runs under `timeout` with what time is left. $OUT (default ./profile-gpu-out) gets at
# most 7 files: pytest.log, kernel.log, e2e.log, kernel-profile.md, e2e-profile.md and the two run
# directories as .tgz (traces included; the Perfetto copies are dropped first if a .tgz is over 15 MiB).
set -u
OUT=${OUT:-$PWD/profile-gpu-out}
mkdir -p "$OUT"
RUN=$(mktemp -d)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
BUDGET=520
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start) - ${1:-0})); }

source "$(dirname "${BASH_SOURCE[0]}")/step.sh"

pack() {  # pack NAME: $RUN/NAME -> $OUT/NAME.tgz, under the 16 MiB a returned file may have
  local name=$1 tgz="$OUT/$1.tgz"
  [ -d "$RUN/$name" ] || return
  tar -C "$RUN" -czf "$tgz" "$name"
  if [ "$(stat -c %s "$tgz")" -gt $((15 * 2**20)) ]; then
    tar -C "$RUN" -czf "$tgz" --exclude="$name/profile/chrome" "$name"  # same traces as profile/tb
  fi
  if [ "$(stat -c %s "$tgz")" -gt $((15 * 2**20)) ]; then
    tar -C "$RUN" -czf "$tgz" --exclude="$name/profile" "$name"
    echo "$name: traces too large to bring back; tables and CSVs only"
  fi
  echo "$name.tgz: $(du -h "$tgz" | cut -f1)"
}

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
python3 -m attnbench backends 2>&1 | grep -E "vllm-fa2|reference"

step pytest 150 python3 -m pytest -q -rs tests/test_profiling.py

limit=$(left 250)  # keep 250 s for e2e
[ "$limit" -gt 200 ] && limit=200
step kernel "$limit" python3 -m attnbench kernel --heads 32 --kv-heads 8 --dim 128 --tokens 100,1000 \
  --kind decode,mixed --backend vllm-fa2 --mode both --profile --out "$RUN/kernel"

if python3 -c "import attnbench.e2e.runner" 2>/dev/null; then
  step e2e "$(left 15)" python3 -m attnbench e2e --model llama-7b --backend vllm-fa2 --input-len 512 \
    --output-len 32 --batch-size 8 --warmup 2 --iters 5 --profile --out "$RUN/e2e"
else
  echo "== e2e: attnbench e2e does not exist here, skipped"
fi

for name in kernel e2e; do
  [ -f "$RUN/$name/profile.md" ] && cp "$RUN/$name/profile.md" "$OUT/$name-profile.md"
  pack "$name"
done

echo
echo "== tests: $(grep -E '(passed|failed|error)' "$OUT/pytest.log" | tail -n 1)"
grep -E "^SKIPPED" "$OUT/pytest.log"
for name in kernel e2e; do
  echo "== $name --profile: overview (full per-label tables in $name-profile.md)"
  if [ -f "$OUT/$name-profile.md" ]; then
    awk '/^\| label/{on=1} on&&!/^\|/{exit} on' "$OUT/$name-profile.md"
    echo "-- top kernels of the first two labels"
    awk '/^## /{n++} n>=1&&n<=2' "$OUT/$name-profile.md"
  else
    echo "(no profile.md: see $name.log)"; tail -n 15 "$OUT/$name.log"
  fi
done
echo "== total $((SECONDS - start))s"
rm -rf "$RUN"
