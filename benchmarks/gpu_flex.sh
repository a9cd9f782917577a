#!/usr/bin/env bash
# The flex backend (torch FlexAttention over the paged cache, issue 10) on a GPU machine, in one go:
#   its GPU tests (compiled kernels vs the float32 reference, eager and graph-replayed), what each
#   plan compiles (kernel, tile, compile seconds and cache), a kernel sweep next to the reference
#   (and vLLM's FA2 when its pack travelled), then a short table of times. < 240 s on the H200.
# Usage, from the repo root (OUT defaults to ./gpu-flex): bash benchmarks/gpu_flex.sh
set -uo pipefail
OUT=${OUT:-gpu-flex}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { echo "== $* ($(date +%T))"; }
backends=reference,flex
# carry .device (see ../shared/device/prepare.sh) to time vLLM's FA2 beside flex
[ -f .device/bootstrap.sh ] && source .device/bootstrap.sh && backends=reference,flex,vllm-fa2

step "GPU tests (tests/test_flex.py, compiled class)"
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_flex.py -k OnGPU > "$OUT/gpu_tests.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/gpu_tests.log"

step "what flex plans for the sweep's points (first compile of each shape in this process)"
timeout 60 python3 - <<'EOF' 2>&1 | tee "$OUT/plans.txt"
import torch
from attnbench.kernels.backends.flex import FlexBackend
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import KINDS, SweepPoint

flex = FlexBackend()
for kind in KINDS:
    for n in (64, 1000):
        inputs = make_inputs(SweepPoint(kind=kind, num_tokens=n, num_heads=32, num_kv_heads=8, head_dim=128), "cuda")
        for s in ("unified", "split"):
            d = flex.plan(s, inputs.point, build_metadata(s, inputs.batch, inputs.block_table).to("cuda")).details
            print(f"{kind:8} {n:5} {s:8} {d['flex_kernel']:29} q_block {d['flex_q_block']:7} "
                  f"compile {d['compile_s']:6.2f}s ({d['compile_cache']}) mask entries {d['flex_mask_entries']}")
EOF

step "attnbench kernel --heads 32 --kv-heads 8 --dim 128 --backend $backends --tokens 64,1000"
timeout 150 python3 -m attnbench kernel --heads 32 --kv-heads 8 --dim 128 --backend "$backends" \
  --tokens 64,1000 --budget-ms 100 --out "$OUT/flex" > "$OUT/flex.log" 2>&1
echo "rc=$?"; grep -E "^rows:" "$OUT/flex.log"

step "median ms of the passing rows"
python3 - "$OUT/flex/results.csv" <<'EOF'
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1])
print(df.groupby(["backend", "verdict"]).size().to_string())
timed = df[(df.backend != "reference") & (df.verdict == "pass")]
print(timed.pivot_table(index=["kind", "num_tokens"], columns=["mode", "backend", "strategy"],
                        values="median_ms").round(4).to_string())
EOF
