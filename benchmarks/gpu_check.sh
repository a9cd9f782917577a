#!/usr/bin/env bash
# Everything a change to the backends, the sweep or the e2e engine touches, on one GPU machine.
# Each part fits one device call (< 10 minutes); pick parts by name, in the order given:
#   tests  the GPU test suite (kernels, e2e with every backend x strategy under graphs, profiling)
#   e2e    attnbench e2e --model llama-7b --backend vllm-fa2,vllm-fa3 on the seed lengths, bs 1/8/32
#   seed   scenarios/seed-kernel-table.toml: BASELINE's code, this code, this code again; compare both
#   host   eager llama-7b prefill steps (32 tokens x bs 1, 8): host time to issue a step, BASELINE vs this
#   hostprof  where an eager llama-7b step's host time goes (cProfile), split, vllm-fa2 and vllm-fa3,
#          BASELINE vs this
#   aa     benchmarks/aa_check.py: the seed scenario twice (A/A, compare at 2 %) and with planted 3 % / 10 %
#          extra device time on vllm-fa2 (detections); aa-check.json, aa-runs.tgz
#   isolate  --isolate on the GPU: a kernel sweep with --profile (profile files written by workers),
#          a sweep with the test-only faulting backend (the faulting point crashed, the others pass),
#          llama-7b e2e in-process then with --isolate (wall time of each)
# BASELINE is a directory holding another version's `attnbench/` package (e.g. made with
# `git archive <commit> attnbench | tar -x -C .baseline`); parts that need it skip without it.
# Usage, from the repo root: source .device/bootstrap.sh && OUT=$OUT bash benchmarks/gpu_check.sh tests e2e
# Full logs and result tarballs land in $OUT (default ./gpu-check-out); a short summary prints last.
set -u
OUT=${OUT:-$PWD/gpu-check-out}
BASELINE=${BASELINE:-}
mkdir -p "$OUT"
RUN=$(mktemp -d)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
start=$SECONDS
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
ROOT=$PWD
# prefix: the same command on BASELINE's package. It runs from BASELINE, because `python -m` puts the
# working directory first on sys.path (before PYTHONPATH): from ROOT it would import this package.
old=(env "PYTHONPATH=$BASELINE:$PYTHONPATH" bash -c 'cd "$0" && exec "$@"' "$BASELINE")

nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used,memory.total --format=csv,noheader | tee -a "$SUMMARY"
for part in "$@"; do
  case $part in
    tests)
      step pytest 240 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_kernels.py tests/test_e2e.py \
        tests/test_backend_contract.py tests/test_profiling.py tests/test_cli_kernel.py
      grep -E "passed|failed|error" "$OUT/pytest.log" | tail -n 1 >> "$SUMMARY" ;;
    e2e)
      step e2e 380 python3 -m attnbench e2e --model llama-7b --backend vllm-fa2,vllm-fa3 --input-len 32,512 \
        --output-len 128,32 --batch-size 1,8,32 --warmup 2 --iters 5 --out "$RUN/e2e"
      [ -d "$RUN/e2e" ] && tar -C "$RUN" -czf "$OUT/e2e-results.tgz" e2e
      [ -f "$RUN/e2e/summary.md" ] && awk '/^\| backend \| mode \| input len/{on=1} on&&!/^\|/{exit} on' \
        "$RUN/e2e/summary.md" >> "$SUMMARY"
      grep -oE ': (match|near-tie|MISMATCH|non-finite) ' "$OUT/e2e.log" | sort | uniq -c >> "$SUMMARY" ;;
    seed)
      [ -n "$BASELINE" ] && step seed-before 70 "${old[@]}" python3 -m attnbench run "$ROOT/scenarios/seed-kernel-table.toml" \
        --out "$RUN/seed-before"
      step seed-after 70 python3 -m attnbench run scenarios/seed-kernel-table.toml --out "$RUN/seed-after"
      step seed-repeat 70 python3 -m attnbench run scenarios/seed-kernel-table.toml --out "$RUN/seed-repeat"
      tar -C "$RUN" -czf "$OUT/seed-results.tgz" $(cd "$RUN" && ls -d seed-*)
      [ -n "$BASELINE" ] && step compare-before-after 60 python3 -m attnbench compare "$RUN/seed-before" \
        "$RUN/seed-after" --threshold 3% --markdown "$OUT/compare-before-after.md"
      step compare-repeat 60 python3 -m attnbench compare "$RUN/seed-after" "$RUN/seed-repeat" --threshold 3% \
        --markdown "$OUT/compare-repeat.md"
      tail -n 1 "$OUT"/compare-*.log >> "$SUMMARY" ;;
    host)
      args=(e2e --model llama-7b --backend vllm-fa2,vllm-fa3 --input-len 32 --output-len 8 --batch-size 1,8
            --eager --warmup 1 --iters 3)
      [ -n "$BASELINE" ] && step host-before 150 "${old[@]}" python3 -m attnbench "${args[@]}" --out "$RUN/host-before"
      step host-after 150 python3 -m attnbench "${args[@]}" --out "$RUN/host-after"
      tar -C "$RUN" -czf "$OUT/host-results.tgz" $(cd "$RUN" && ls -d host-*)
      python3 - "$RUN" >> "$SUMMARY" <<'PY'
import sys, pathlib, pandas as pd
cols = ["backend", "strategy", "batch_size", "prefill_step_p50_ms", "decode_step_p50_ms", "prefill_launch_host_us"]
for name in ("host-before", "host-after"):
    path = pathlib.Path(sys.argv[1]) / name / "results.csv"
    if path.exists():
        df = pd.read_csv(path)
        print(name); print(df[[c for c in cols if c in df]].to_string(index=False))
PY
      ;;
    hostprof)
      for backend in vllm-fa2 vllm-fa3; do
        prof=(python3 "$ROOT/benchmarks/e2e_host_profile.py" --backend $backend --strategy split --runs 5)
        [ -n "$BASELINE" ] && step hostprof-before-$backend 90 "${old[@]}" "${prof[@]}"
        step hostprof-after-$backend 90 "${prof[@]}"
      done
      grep -HE "^(prefill|decode|attention)" "$OUT"/hostprof-*.log | sed "s|$OUT/||" >> "$SUMMARY" ;;
    aa)
      step aa 540 python3 benchmarks/aa_check.py --out "$OUT" --run-timeout 200
      grep -E "^(== aa_check|A/A:|planted|replicates per run)" "$OUT/aa.log" >> "$SUMMARY" ;;
    isolate)
      step isolate-profile 60 python3 -m attnbench kernel --heads 32 --dim 128 --tokens 64,1000 --backend vllm-fa2 \
        --isolate --profile --out "$RUN/iso-profile"
      for f in profile_kernels.csv profile.md; do
        [ -s "$RUN/iso-profile/$f" ] && echo "isolate --profile: $f written" || echo "isolate --profile: $f MISSING"
      done >> "$SUMMARY"
      echo "isolate --profile: $(find "$RUN/iso-profile/profile" -name '*.json' 2>/dev/null | wc -l) trace files" >> "$SUMMARY"
      # the test-only backend reads far out of bounds at 8 tokens: a device-side assert kills the CUDA context,
      # so the 8-token rows must be crashed ("the CUDA context died: ...") and the 4- and 12-token rows pass
      step isolate-fault 40 env PYTHONPATH="$ROOT/tests:$PYTHONPATH" ATTNBENCH_EXTRA_BACKENDS=fake_backends:FaultingBackend \
        python3 -m attnbench kernel --heads 32 --kv-heads 8 --dim 128 --tokens 4,8,12 --kind decode \
        --backend test-fault --isolate --budget-ms 100 --out "$RUN/iso-fault"
      # in-process first: it pays what a cold cache costs once per machine (FA2's PTX outside the packed JIT
      # cache, torch.compile of the fused ops), so the isolated run is not blamed for it
      e2e_args=(e2e --model llama-7b --backend vllm-fa2 --input-len 32 --output-len 16 --batch-size 1,8 --warmup 1 --iters 3)
      for how in in-process isolated; do
        flag=() limit=110; [ $how = isolated ] && flag=(--isolate) limit=85
        t0=$(date +%s.%N)
        step isolate-e2e-$how $limit python3 -m attnbench "${e2e_args[@]}" "${flag[@]}" --out "$RUN/iso-e2e-$how"
        awk -v a="$t0" -v b="$(date +%s.%N)" -v how=$how 'BEGIN {printf "e2e llama-7b %s: %.1f s wall\n", how, b - a}' \
          >> "$SUMMARY"
      done
      tar -C "$RUN" -czf "$OUT/isolate-results.tgz" $(cd "$RUN" && ls -d iso-*)
      python3 - "$RUN" >> "$SUMMARY" <<'PY'
import sys, pathlib, pandas as pd
run = pathlib.Path(sys.argv[1])
e2e = ["batch_size", "strategy", "mode", "verdict", "request_p50_s"]
cols = {"iso-fault": ["num_tokens", "strategy", "mode", "verdict", "reason"],
        "iso-e2e-in-process": e2e, "iso-e2e-isolated": e2e}
for name, keep in cols.items():
    path = run / name / "results.csv"
    if path.exists():
        df = pd.read_csv(path)
        print(name); print(df[[c for c in keep if c in df]].to_string(index=False, max_colwidth=110))
PY
      ;;
    *) echo "unknown part $part (tests, e2e, seed, host, hostprof, aa, isolate)" ;;
  esac
done
rm -rf "$RUN"
echo "== summary (total $((SECONDS - start))s)"
cat "$SUMMARY"
