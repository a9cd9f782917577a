#!/usr/bin/env bash
# `attnbench verify` on the GPU machine (issue 11): is each backend x strategy graph-safe when a
# captured attention call is replayed on other batches (decode -> mixed, short -> long context,
# fewer -> more sequences)? naive policy: expected to reproduce the seed PR's garbage on FA2/FA3;
# safe policy (the recipe): expected to pass. Then the GPU tests of tests/test_graphsafe.py.
# FlashInfer joins when its pack is carried (.device-fi). From the repo root:
#   bash benchmarks/gpu_verify.sh            (output under $OUT, default ./gpu-verify)
set -u
OUT=${OUT:-$PWD/gpu-verify}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
start=$SECONDS
source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
SUMMARY=$OUT/steps.txt

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
backends=vllm-fa2,vllm-fa3
if [ -f .device-fi/bootstrap_fi.sh ]; then
  source .device-fi/bootstrap_fi.sh && backends=$backends,flashinfer
fi
backends=${VERIFY_BACKENDS:-$backends}  # e.g. VERIFY_BACKENDS=vllm-fa2,vllm-fa3 while FlashInfer still compiles

# FA2 compiles its PTX on first use on Hopper unless the pack's JIT cache is carried: 240 s covers one module
step verify 240 python3 -m attnbench verify --backend "$backends" --strategy unified,split \
  --policy naive,safe --heads 32 --kv-heads 8 --dim 128 --out "$OUT/verify"
cat "$OUT/verify.log"
step gpu-tests 150 python3 -m pytest -q -rs -s -p no:cacheprovider tests/test_graphsafe.py tests/test_flashinfer.py \
  tests/test_flashinfer_graphs.py -k OnTheGPU

# e2e CUDA graph modes (issue 11): tiny model, chunked prefill (prefill, mixed and decode steps), each mode's
# tokens against an eager check run (< 290 s in all); naive is expected to be flagged (MISMATCH / non-finite).
# piecewise: graphs of all but attention, attention eager (flashinfer's full rows run decode graphs + piecewise)
for cg in none decode piecewise full; do
  step "e2e-$cg" 50 python3 -m attnbench e2e --model tiny --backend "$backends" --input-len 24,64 --output-len 8 \
    --batch-size 1,3 --chunk-size 16 --warmup 1 --iters 2 --cudagraph "$cg" --out "$OUT/e2e-$cg"
done
step e2e-full-naive 40 python3 -m attnbench e2e --model tiny --backend "$backends" --input-len 24 --output-len 8 \
  --batch-size 3 --chunk-size 16 --warmup 0 --iters 1 --cudagraph full --graph-policy naive --out "$OUT/e2e-full-naive"
cat "$OUT"/e2e-*/agreement.csv 2>/dev/null
step e2e-graph-tests 120 python3 -m pytest -q -rs -s -p no:cacheprovider tests/test_e2e_graphs.py \
  tests/test_e2e_piecewise.py -k OnTheGPU
