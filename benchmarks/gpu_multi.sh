#!/usr/bin/env bash
# Past one GPU (issue 12) on the 2-GPU kind (nvidia-h200-x2). Each part fits one device call (< 540 s);
# pick parts by name, in the order given:
#   kernel  scenarios/seed-kernel-table.toml (9 decode points x vllm-fa2/vllm-fa3 x unified/split, graphs):
#           1. a small warm-up on both GPUs (--devices all: JIT caches, imports), not timed
#           2. on one GPU (--device cuda:0)                        wall time
#           3. --devices all: one worker per GPU                   wall time
#           4. torchrun, 2 ranks (gloo carries the rows)           wall time
#           5. --shard 0/2 on cuda:0 and --shard 1/2 on cuda:1 at once, then `attnbench merge`   wall time
#           then a table: wall time, rows, passes and devices of each, whether both strategies of every
#           point ran on one GPU, and each 2-GPU run's medians against the 1-GPU run's (median ratio).
#   tp      tensor-parallel e2e (its own device call, up to 520 s):
#           1. benchmarks/tp_agreement.py under torchrun: llama-13b TP 2 vs TP 1 greedy tokens, vllm-fa3,
#              unified and split under decode CUDA graphs (rank 0 also runs the whole model alone)
#           2. llama-2-70b (random weights, ~69.5 GB bf16 per rank) at --tp 2 on vllm-fa3: input/output
#              32/128 and 512/32 x batch 1/8/32, unified and split, graphs on; --warmup 1 --iters 3 to fit
#           it leaves logs, tp-agreement.json, tp-e2e-summary.md and tp-e2e-results.tgz in $OUT
# Usage, from the repo root: source .device/bootstrap.sh && OUT=$OUT bash benchmarks/gpu_multi.sh kernel
# Every step runs under `timeout`. The kernel part leaves 2 files in $OUT (default ./gpu-multi-out):
# summary.txt and multi-results.tgz (its result directories and step logs); the table prints last.
set -u
OUT=${OUT:-$PWD/gpu-multi-out}
mkdir -p "$OUT"
RUN=$(mktemp -d)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0  # NVLink multicast off, as the machine sets it
start=$SECONDS
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

source "$(dirname "${BASH_SOURCE[0]}")/step.sh"
torchrun=(python3 -m torch.distributed.run --standalone --nproc-per-node 2)
SEED=scenarios/seed-kernel-table.toml
# the scenario's values as kernel flags (a kernel scenario does not run under torchrun)
SEED_FLAGS=(--shapes 12x64,32x128,64x128 --kind decode --tokens 100,500,1000 --strategy unified,split --mode graph
            --context 1024)

# timed NAME LIMIT CMD...: step, with its wall time appended to $RUN/wall.txt
timed() {
  local name=$1 t0
  t0=$(date +%s.%N)
  step "$@"
  awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$name" 'BEGIN {printf "%s %.1f\n", n, b - a}' >> "$RUN/wall.txt"
}
# left LIMIT: LIMIT, or less when the call's MULTI_BUDGET (default 520 s, for one part a call) would run out first
left() { local l=$((${MULTI_BUDGET:-520} - (SECONDS - start))); [ "$l" -gt "$1" ] && l=$1; echo $((l > 10 ? l : 10)); }

nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader | tee -a "$SUMMARY"
for part in "$@"; do
  case $part in
    kernel)
      : > "$RUN/wall.txt"
      step multi-warm "$(left 60)" python3 -m attnbench kernel --heads 12 --dim 64 --tokens 100 --kind decode --mode graph \
        --replicates 1 --budget-ms 50 --devices all --out "$RUN/warm"
      timed seed-1gpu "$(left 130)" python3 -m attnbench run $SEED --device cuda:0 --out "$RUN/seed-1gpu"
      timed seed-devices "$(left 110)" python3 -m attnbench run $SEED --devices all --out "$RUN/seed-devices"
      timed seed-torchrun "$(left 130)" "${torchrun[@]}" -m attnbench kernel "${SEED_FLAGS[@]}" \
        --out "$RUN/seed-torchrun"
      # each shard sees one GPU as cuda:0: a one-process run on --device cuda:1 never makes cuda:1 the
      # current device, so its CUDA events and graph capture stream would sit on GPU 0 (its rows say cuda:0)
      timed seed-shards "$(left 110)" bash -c '
        CUDA_VISIBLE_DEVICES=0 python3 -m attnbench run "$1" --shard 0/2 --device cuda:0 --out "$2/shard-0" > "$2/shard-0.log" 2>&1 & a=$!
        CUDA_VISIBLE_DEVICES=1 python3 -m attnbench run "$1" --shard 1/2 --device cuda:0 --out "$2/shard-1" > "$2/shard-1.log" 2>&1 & b=$!
        wait $a; ra=$?; wait $b; rb=$?; tail -n 2 "$2/shard-0.log" "$2/shard-1.log"
        [ $ra -eq 0 ] && [ $rb -eq 0 ] && python3 -m attnbench merge "$2/shard-0" "$2/shard-1" --out "$2/seed-shards"' \
        _ $SEED "$RUN"
      python3 - "$RUN" >> "$SUMMARY" <<'PY'
import json, pathlib, sys
import pandas as pd
run = pathlib.Path(sys.argv[1])
wall = dict(line.split() for line in (run / "wall.txt").read_text().splitlines() if line.strip())
point = ["kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "backend", "mode"]
key = [*point, "strategy"]
base = None
print("| run | wall s | rows | pass | devices | strategies of a point on one GPU | median ms / 1-GPU (median, min-max) |")
print("|---|---:|---:|---:|---|---|---|")
for name in ("seed-1gpu", "seed-devices", "seed-torchrun", "seed-shards"):
    path = run / name / "results.csv"
    if not path.exists():
        print(f"| {name} | {wall.get(name, '-')} | no results.csv | | | | |")
        continue
    df = pd.read_csv(path)
    env = json.loads((run / name / "env.json").read_text())
    timed = df[df["verdict"].isin(["pass", "fail"])]
    one_gpu = timed.groupby(point)["device"].nunique().le(1).all()
    counts = timed.groupby("device").size().to_dict()
    ratio = "-"
    if base is None:
        base = timed.set_index(key)["median_ms"]
    else:
        r = (timed.set_index(key)["median_ms"] / base).dropna()
        ratio = f"{r.median():.3f} ({r.min():.3f}-{r.max():.3f}), {len(r)} rows" if len(r) else "-"
    print(f"| {name} | {wall.get(name, '-')} | {len(df)} | {(df['verdict'] == 'pass').sum()} | "
          f"{', '.join(f'{d}: {n}' for d, n in counts.items())} | {'yes' if one_gpu else 'NO'} | {ratio} |")
    extra = env.get("devices") or (env.get("distributed") or {}).get("ranks") or (env.get("merged") or {}).get("inputs")
    for entry in extra or []:
        print(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in entry.items() if k not in ("command", "git_sha")))
PY
      cp "$OUT"/multi-warm.log "$OUT"/seed-*.log "$RUN"/ 2>/dev/null
      rm -f "$OUT"/multi-warm.log "$OUT"/seed-*.log
      tar -C "$RUN" -czf "$OUT/multi-results.tgz" --exclude=warm $(cd "$RUN" && ls) ;;
    tp)
      step tp-agreement "$(left 170)" "${torchrun[@]}" benchmarks/tp_agreement.py --model llama-13b --backend vllm-fa3 \
        --strategy unified,split --mode graph --batch-size 4 --input-len 64 --output-len 32 \
        --out "$OUT/tp-agreement.json"
      grep -E "^TP 2 vs TP 1" "$OUT/tp-agreement.log" >> "$SUMMARY"
      step tp-e2e "$(left 330)" "${torchrun[@]}" -m attnbench e2e --model llama-2-70b --tp 2 --backend vllm-fa3 \
        --strategy unified,split --input-len 32,512 --output-len 128,32 --batch-size 1,8,32 --warmup 1 --iters 3 \
        --out "$RUN/tp-e2e"
      [ -f "$RUN/tp-e2e/summary.md" ] && cp "$RUN/tp-e2e/summary.md" "$OUT/tp-e2e-summary.md"
      [ -d "$RUN/tp-e2e" ] && tar -C "$RUN" -czf "$OUT/tp-e2e-results.tgz" tp-e2e
      grep -E "^- tensor parallel" "$RUN/tp-e2e/summary.md" >> "$SUMMARY" 2>/dev/null
      if [ -f "$RUN/tp-e2e/summary.md" ]; then
        awk '/^\| backend \| mode \| input len/{on=1} on&&!/^\|/{exit} on' "$RUN/tp-e2e/summary.md" >> "$SUMMARY"
      elif [ -f "$RUN/tp-e2e/results.csv" ]; then  # cut short: the points measured so far
        python3 - "$RUN/tp-e2e/results.csv" >> "$SUMMARY" <<'PY'
import sys, pandas as pd
df = pd.read_csv(sys.argv[1])
cols = ["input_len", "output_len", "batch_size", "strategy", "mode", "verdict", "request_p50_s", "decode_step_p50_ms"]
print(df[[c for c in cols if c in df]].to_string(index=False))
PY
      fi
      grep -oE ': (match|near-tie|MISMATCH|non-finite) ' "$OUT/tp-e2e.log" | sort | uniq -c \
        | sed 's/^/tp-e2e agreement verdicts: /' >> "$SUMMARY" ;;
    *) echo "unknown part $part (kernel, tp)" ;;
  esac
done
rm -rf "$RUN"
echo "== summary (total $((SECONDS - start))s)"
cat "$SUMMARY"
