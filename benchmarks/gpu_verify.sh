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

# FA2 compiles its PTX on first use on Hopper unless the pack's JIT cache is carried: 240 s covers one module
step verify 240 python3 -m attnbench verify --backend "$backends" --strategy unified,split \
  --policy naive,safe --heads 32 --kv-heads 8 --dim 128 --out "$OUT/verify"
cat "$OUT/verify.log"
step gpu-tests 150 python3 -m pytest -q -rs -s -p no:cacheprovider tests/test_graphsafe.py -k OnTheGPU
