#!/usr/bin/env bash
# Issue 11 on an H200: e2e CUDA graph modes on real models. Parts, run in the order given, each
# step under a limit:
#   waitfa2   wait for FA2's JIT warm-up started by gpu_warm.sh's warm_start (vllm-fa3 needs none)
#   tests     the graph GPU tests: verify's replays, full and piecewise e2e against eager, the e2e
#             GPU tests (their CLI run takes the default mode), and
#             scenarios/graph-bug-naive.toml (naive must give MISMATCH, safe must pass)
#   floor     benchmarks/e2e_floor.py: llama-7b batch-1 decode step vs the weight-read floor, and
#             the 32-token prefill step vs the decode step under --cudagraph full
#   profile   llama-7b batch 1, 32/128, unified, --cudagraph full --profile: the decode step's kernels
#             by device time (profile.md), to see where the step's time above the weight-read floor goes
#   grid      the seed's e2e grid (llama-7b, 32/128 and 512/32, batch $GRID_BATCHES) under each of
#             $MODES (default decode piecewise full)
#   chunked   scenarios/chunked-prefill-e2e.toml (batch $CHUNK_BATCHES) on $CHUNK_MODELS (default llama-3-8b
#             llama-7b; llama-7b with prompts of 2048 and 4032) under $MODES
#   tp        full and piecewise graphs under tensor parallelism (both GPUs of nvidia-h200-x2, not in a lane):
#             the tiny model at --tp 2 on vllm-fa2 and vllm-fa3, unified and split, each mode checked
#             against eager; then llama-3-8b at --tp 2, chunked prefill (2048/64, batch 8, --chunk-size 512)
#             under $TP_8B_MODES (default decode full)
# Backend: $GRAPH_BACKEND (default vllm-fa2). --warmup 1 --iters 3 per row: the ratios within a
# run are what to read. From the repo root, carrying .device:
#   source .device/bootstrap.sh && OUT=$OUT bash benchmarks/gpu_graphs.sh tests floor grid chunked
set -u
source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
script_start gpu-graphs
source "$(dirname "${BASH_SOURCE[0]}")/gpu_warm.sh"
BACKEND=${GRAPH_BACKEND:-vllm-fa2}
MODES=${MODES:-decode piecewise full}
RUNS=(--warmup 1 --iters 3)

for part in "$@"; do
  case $part in
    waitfa2) warm_wait fa2 ;;
    tests)
      step graph-tests 300 python3 -m pytest -q -rs -s -p no:cacheprovider tests/test_e2e_graphs.py \
        tests/test_e2e_piecewise.py tests/test_graphsafe.py tests/test_e2e.py -k "OnTheGPU or TestGPU"
      grep -E "naive|safe" "$OUT/graph-tests.log" | grep -E "MISMATCH|non-finite|match|near-tie" | head -n 20 >> "$SUMMARY"
      grep -E "passed|failed" "$OUT/graph-tests.log" | tail -n 1 >> "$SUMMARY" ;;
    floor)
      step floor 150 python3 benchmarks/e2e_floor.py --backend "$BACKEND" --out "$OUT/floor.json" --deadline-s 140
      grep -E '^\|' "$OUT/floor.log" | tail -n 15 >> "$SUMMARY" ;;
    profile)
      step profile 150 python3 -m attnbench e2e --model llama-7b --backend "$BACKEND" --batch-size 1 --input-len 32 \
        --output-len 128 --strategy unified --cudagraph full --profile "${RUNS[@]}" --out "$OUT/profile"
      grep -E '^\|' "$OUT/profile/profile.md" | head -n 24 >> "$SUMMARY" ;;
    tp)
      export NCCL_NVLS_ENABLE=0  # NVLink multicast off, as the machine sets it
      torchrun=(python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m attnbench e2e --tp 2)
      for mode in full piecewise; do
        step "tp-tiny-$mode" 120 "${torchrun[@]}" --model tiny --backend vllm-fa2,vllm-fa3 --input-len 32,200 \
          --output-len 16 --batch-size 1,4 --chunk-size 64 --cudagraph "$mode" "${RUNS[@]}" --out "$OUT/tp-tiny-$mode"
      done
      for mode in ${TP_8B_MODES:-decode full}; do
        step "tp-8b-$mode" 150 "${torchrun[@]}" --model llama-3-8b --backend vllm-fa3 --input-len 2048 --output-len 64 \
          --batch-size 8 --chunk-size 512 --cudagraph "$mode" "${RUNS[@]}" --out "$OUT/tp-8b-$mode"
      done ;;
    grid)
      for mode in $MODES; do
        step "grid-$mode" "${GRID_LIMIT:-200}" python3 -m attnbench e2e --model llama-7b --backend "$BACKEND" \
          --batch-size "${GRID_BATCHES:-1,8,32}" --cudagraph "$mode" "${RUNS[@]}" --out "$OUT/grid-$mode"
      done ;;
    chunked)
      for model in ${CHUNK_MODELS:-llama-3-8b llama-7b}; do
        lens=()  # llama-7b has 4096 positions: its longer prompt leaves room for the 64 outputs
        [ "$model" = llama-7b ] && lens=(--input-len 2048,4032)
        for mode in $MODES; do
          step "chunked-$model-$mode" "${CHUNK_LIMIT:-150}" python3 -m attnbench run scenarios/chunked-prefill-e2e.toml \
            --model "$model" "${lens[@]}" --backend "$BACKEND" --batch-size "${CHUNK_BATCHES:-8}" --cudagraph "$mode" \
            "${RUNS[@]}" --out "$OUT/chunked-$model-$mode"
        done
      done ;;
    *) echo "unknown part $part (waitfa2 tests floor profile tp grid chunked)" ;;
  esac
done

# side by side: each run's rows (p50 request latency, step times, graphs) and agreement verdicts
for dir in "$OUT"/grid-* "$OUT"/chunked-* "$OUT"/tp-*; do
  [ -f "$dir/results.csv" ] || continue
  python3 - "$dir" >> "$SUMMARY" 2>&1 <<'PY'
import sys
from pathlib import Path
import pandas as pd
d = Path(sys.argv[1])
df = pd.read_csv(d / "results.csv")
cols = [c for c in ("input_len", "output_len", "batch_size", "strategy", "cudagraph", "request_p50_s",
                    "prefill_step_p50_ms", "mixed_step_p50_ms", "decode_step_p50_ms", "graphs", "graph_mem_mb",
                    "agreement", "verdict") if c in df]
print(f"== {d.name}: {len(df)} rows, verdicts {df.verdict.value_counts().to_dict()}")
print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
bad = df[df.verdict != "pass"]
if len(bad):
    print(bad[["input_len", "batch_size", "strategy", "reason"]].to_string(index=False))
PY
done
echo "== total $((SECONDS - start))s" >> "$SUMMARY"
