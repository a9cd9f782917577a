#!/usr/bin/env bash
# Everything the kernel sweep (issue 2) claims, run on a GPU machine in one go:
#   GPU tests, the seed-table benchmark, both README kernel commands, and two repeats of a small
#   sweep (example results + a compare that must say "same").
# Usage, from the repo root (OUT defaults to ./gpu-check): bash benchmarks/gpu_kernel_check.sh
set -uo pipefail
OUT=${OUT:-gpu-check}
runs=/tmp/attnbench-runs
rm -rf "$runs" && mkdir -p "$runs" "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { echo "== $*"; }

step "GPU tests"
timeout 200 python3 -m pytest -q -rs tests/test_gpu_kernels.py 2>&1 | tee "$runs/gpu_tests.log" | tail -5
step "seed table benchmark"
timeout 150 python3 benchmarks/seed_table.py --out "$runs/seed" > "$runs/seed.log" 2>&1; echo "rc=$?"
step "attnbench kernel --heads 32 --dim 128"
timeout 200 python3 -m attnbench kernel --heads 32 --dim 128 --out "$runs/k32" > "$runs/k32.log" 2>&1; echo "rc=$?"
step "attnbench kernel --heads 12 --dim 64"
timeout 150 python3 -m attnbench kernel --heads 12 --dim 64 --out "$runs/k12" > "$runs/k12.log" 2>&1; echo "rc=$?"
for rep in a b; do
  step "small sweep, repeat $rep"
  timeout 90 python3 -m attnbench kernel --heads 32 --kv-heads 8 --dim 128 --tokens 100,1000 --kind decode,mixed \
    --backend vllm-fa2 --out "$runs/small-$rep" > "$runs/small-$rep.log" 2>&1; echo "rc=$?"
done
tar czf "$OUT/runs.tgz" -C /tmp attnbench-runs
grep -E "^figure|max \|" "$runs/seed.log"
for r in k32 k12; do grep -E "^rows:" "$runs/$r.log" | sed "s/^/$r /"; done
