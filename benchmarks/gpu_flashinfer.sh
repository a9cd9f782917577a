#!/usr/bin/env bash
# The flashinfer and flashinfer-ba backends (issue 10) on the H200, in one go, in under 560 s:
#   1. POD's kernels for head dim 128 compiled (~190 s the first time on 16 cores; nothing when a
#      carried .device-fi/fi-jit-pod-pod128.tar.xz has them) and packed into $OUT for next time;
#   2. the GPU tests: every strategy vs the float32 reference, eager and graph-replayed, decode /
#      prefill / mixed, 32/8 and 32/32 heads x dims 64 and 128, and a decode graph captured on
#      padding rows replaying a refreshed batch (the e2e engine's recipe);
#   3. a kernel sweep beside the reference: 32/8 x 128, tokens 64 and 1000, every kind, unified,
#      split and fused, eager and graph;
#   4. e2e llama-7b (random weights) on flashinfer unified / split / fused, batch 1 and 8, CUDA graphs;
#   5. what FlashInfer chose for each plan of step 3's points, and a short table of times, last.
# FlashInfer 0.6.6 comes from the pack (../shared/device/README.md, FlashInfer). From the repo root,
# carrying .device-fi:  source .device-fi/bootstrap_fi.sh && bash benchmarks/gpu_flashinfer.sh
# (with vllm-fa3 too: carry .device/bootstrap.sh and .device/vllm-fa as well, and source
# .device/bootstrap.sh first; all of .device plus .device-fi is over the 64 MiB carry limit: leave out
# .device/nvcache-*, and FA2 compiles on first use, or warm it first with .device/warm_fa2.py)
set -u
OUT=${OUT:-$PWD/gpu-flashinfer}
mkdir -p "$OUT"
[ -n "${FLASHINFER_WORKSPACE_BASE:-}" ] || source .device-fi/bootstrap_fi.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
BUDGET=${FI_BUDGET:-550}
start=$SECONDS
left() { echo $((BUDGET - (SECONDS - start) - $1)); }  # seconds left, less what later steps keep
cap() { local n; n=$(left "$2"); [ "$n" -gt "$1" ] && n=$1; [ "$n" -lt 10 ] && n=10; echo "$n"; }
source "$(dirname "${BASH_SOURCE[0]}")/step.sh"

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
python3 -c "import flashinfer, torch; print('flashinfer', flashinfer.__version__, 'torch', torch.__version__)"

# a carried POD pack has it all: then only check it (warm_flashinfer.py tests each wrapper), repack nothing
pack=(--pack "$OUT/fi-jit-pod.tar.xz")
# FI_POD_DIMS=64,128 compiles (and packs) both head dims: ~250 s on 24 jobs instead of ~190 s
POD_DIMS=${FI_POD_DIMS:-128}
missing=""
for d in ${POD_DIMS//,/ }; do ls .device-fi/fi-jit-*pod$d.tar.xz* >/dev/null 2>&1 || missing=1; done
[ -z "$missing" ] && pack=()
warm_budget=$(cap 300 220)
step warm-pod $((warm_budget + 15)) python3 .device-fi/warm_flashinfer.py --groups pod --dims "$POD_DIMS" \
  --budget "$warm_budget" --reserve 60 ${pack[@]+"${pack[@]}"}
grep -iE "^pod|pack:|POD \(" "$OUT/warm-pod.log" | tail -n 6

step gpu-tests "$(cap 120 150)" python3 -m pytest -q -rs -p no:cacheprovider tests/test_flashinfer.py -k OnTheGPU

# vllm-fa2 and vllm-fa3 beside FlashInfer when .device was carried and sourced first (FA3 ships Hopper code: no
# compile), so the libraries are compared in one run; one replicate to fit the step (ratios inside
# one run are solid, absolute numbers need replicates)
kernel_backends=reference,flashinfer,flashinfer-ba
python3 -c "import vllm.vllm_flash_attn" 2>/dev/null && kernel_backends=$kernel_backends,vllm-fa2,vllm-fa3
step kernel "$(cap 120 90)" python3 -m attnbench kernel --heads 32 --kv-heads 8 --dim 128 \
  --backend "$kernel_backends" --strategy unified,split,fused --tokens 64,1000 --budget-ms 200 --replicates 1 \
  --out "$OUT/fi"

step e2e "$(cap 150 25)" python3 -m attnbench e2e --model llama-7b --backend flashinfer --strategy unified,split,fused \
  --input-len 32 --output-len 16 --batch-size 1,8 --warmup 1 --iters 3 --out "$OUT/fi-e2e"

step choices "$(cap 60 0)" python3 - "$OUT/fi/results.csv" <<'EOF'
import sys

import pandas as pd

from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import KINDS, SweepPoint

for kind in KINDS:
    for n in (64, 1000):
        inputs = make_inputs(SweepPoint(kind=kind, num_tokens=n, num_heads=32, num_kv_heads=8, head_dim=128), "cuda")
        for name, strategy in [("flashinfer", "unified"), ("flashinfer", "split"), ("flashinfer", "fused"),
                               ("flashinfer-ba", "unified")]:
            md = build_metadata(strategy, inputs.batch, inputs.block_table).to("cuda")
            try:
                details = REGISTRY[name].plan(strategy, inputs.point, md).details
            except Exception as exc:  # a refusal says why
                details = {"refused": str(exc)[:100]}
            print(f"{kind:8} {n:5} {name:13} {strategy:8}", " ".join(f"{k}={v}" for k, v in details.items()))
df = pd.read_csv(sys.argv[1])
print(df.groupby(["backend", "strategy", "verdict"]).size().to_string())
bad = df[df.verdict.isin(["fail", "error", "oom"])]
if len(bad):
    print(bad[["kind", "num_tokens", "backend", "strategy", "mode", "verdict", "reason"]].to_string())
timed = df[(df.backend != "reference") & (df.verdict == "pass")]
print("median ms (pass rows)\n" + timed.pivot_table(index=["kind", "num_tokens"], columns=["mode", "backend", "strategy"],
                                                    values="median_ms").round(4).to_string())
EOF

echo
echo "== total $((SECONDS - start))s; packs for next time (copy into .device-fi/):"
ls -la "$OUT"/fi-jit-pod*.tar.xz* 2>/dev/null
echo "== gpu tests: $(grep -E '(passed|failed|error)' "$OUT/gpu-tests.log" | tail -n 1)"
echo "== e2e llama-7b (summary.md tables)"
grep -E '^\|' "$OUT/fi-e2e/summary.md" 2>/dev/null | head -n 24 || tail -n 5 "$OUT/e2e.log"
grep -oE ': (match|near-tie|MISMATCH|non-finite) ' "$OUT/e2e.log" | sort | uniq -c | sed 's/^/agreement verdicts: /'
echo "== kernel: flashinfer vs flashinfer-ba, median ms"
sed -n '/^median ms/,$p' "$OUT/choices.log"
