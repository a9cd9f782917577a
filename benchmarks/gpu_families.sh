#!/usr/bin/env bash
# The kernel families of issue 10 on an H200: FlashInfer (unified, split, fused POD, BatchAttention),
# FlexAttention and vLLM's FA2/FA3 side by side. Parts, run in the order given (each step under a limit):
#   warm      start compiling FA2's PTX and FlashInfer's modules not carried in a pack (decode, prefill
#             fa2/fa3, BatchAttention, POD; head dims 64 and 128) in the background (gpu_warm.sh);
#             packs land in $OUT
#   wait      wait for those compiles (also from another process: they leave files behind); waitfa2 and
#             waitfi wait for one of them
#   seed      the seed's 9-point decode table with vllm-fa2, vllm-fa3, flashinfer and flex (unified, split),
#             each point in a worker process (--isolate): a point that kills its CUDA context costs that point
#   mixed     scenarios/mixed-families.toml: mixed batches, 32/8 x 128 and 12 x 64, every backend x strategy
#             ($MIXED_ARGS: overrides, e.g. "--context 8192 --shapes 12x64,32/8x128")
#   balanced  scenarios/pod-balanced.toml: prefill part and decode part of comparable time, fused vs the rest
#   e2e       e2e llama-3-8b 512/32 batch 8 --chunk-size 256 on flashinfer unified / split / fused
#   tests     the FlashInfer GPU tests (every strategy vs the float32 reference, POD's gathers and routes)
# One replicate per row and --budget-ms 100 (ratios inside one run are solid; absolute numbers need
# replicates). From the repo root, carrying .device and .device-fi (bootstrap_fi.sh, fi-site.tar.xz,
# warm_flashinfer.py):
#   source .device/bootstrap.sh && source .device-fi/bootstrap_fi.sh && OUT=$OUT bash benchmarks/gpu_families.sh warm wait seed
set -u
source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
script_start gpu-families
[ -n "${FLASHINFER_WORKSPACE_BASE:-}" ] || source .device-fi/bootstrap_fi.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_warm.sh"
FAST=(--replicates 1 --budget-ms 100)

for part in "$@"; do
  case $part in
    warm) WARM_OUT=$OUT warm_start; echo "== warm: FA2 and FlashInfer compiling in the background" | tee -a "$SUMMARY" ;;
    wait) warm_wait fa2; warm_wait fi ;;
    waitfa2) warm_wait fa2 ;;
    waitfi) warm_wait fi ;;
    seed)
      step seed-families 300 python3 -m attnbench run scenarios/seed-kernel-table.toml \
        --backend vllm-fa2,vllm-fa3,flashinfer,flex "${FAST[@]}" --isolate --point-timeout 150 --out "$OUT/seed-families" ;;
    mixed)
      step mixed-families "${MIXED_LIMIT:-420}" python3 -m attnbench run scenarios/mixed-families.toml "${FAST[@]}" \
        ${MIXED_ARGS:-} --out "$OUT/mixed-families" ;;
    balanced)
      step pod-balanced 150 python3 -m attnbench run scenarios/pod-balanced.toml "${FAST[@]}" --out "$OUT/pod-balanced" ;;
    e2e)
      step e2e-chunked 150 python3 -m attnbench e2e --model llama-3-8b --backend flashinfer \
        --strategy unified,split,fused --input-len 512 --output-len 32 --batch-size 8 --chunk-size 256 \
        --warmup 1 --iters 3 --out "$OUT/e2e-chunked"
      grep -oE ': (match|near-tie|MISMATCH|non-finite) ' "$OUT/e2e-chunked.log" | sort | uniq -c \
        | sed 's/^/e2e-chunked agreement verdicts: /' >> "$SUMMARY" ;;
    tests)
      step fi-tests 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_flashinfer.py \
        tests/test_flashinfer_pod.py tests/test_flashinfer_graphs.py -k OnTheGPU
      grep -E "passed|failed" "$OUT/fi-tests.log" | tail -n 1 >> "$SUMMARY" ;;
    *) echo "unknown part $part (warm wait seed mixed balanced e2e tests)" ;;
  esac
done

for name in seed-families mixed-families pod-balanced e2e-chunked; do
  [ -f "$OUT/$name/results.csv" ] || continue
  python3 - "$OUT/$name/results.csv" "$name" >> "$SUMMARY" 2>&1 <<'PY'
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1])
print(f"== {sys.argv[2]}: {len(df)} rows")
print(df.groupby(["backend", "strategy", "verdict"]).size().to_string())
bad = df[df.verdict != "pass"]
cols = [c for c in ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "context", "decode_share",
                    "decode_seqs", "input_len", "batch_size", "backend", "strategy", "mode", "verdict", "reason") if c in df]
if len(bad):
    print(bad[cols].head(20).to_string())
PY
  [ -f "$OUT/$name/summary.md" ] && grep -E '^(\||#)' "$OUT/$name/summary.md" | head -n 80 >> "$SUMMARY"
done
echo "== total $((SECONDS - start))s" >> "$SUMMARY"
