#!/usr/bin/env bash
# Several independent GPU scripts at once, one per GPU of a multi-GPU machine (nvidia-h200-x2), so that
# one device call does the work of several. Lane I runs its command with CUDA_VISIBLE_DEVICES=I, its own
# OUT=$RUN/laneI and a wall-clock limit; afterwards each lane's files come back as $OUT/laneI.tgz, except
# files named *.tar.xz* (FlashInfer JIT packs), which are moved to $OUT as they are, and the tail of
# each lane's console prints last.
#   LANE_LIMIT=570 bash benchmarks/gpu_lanes.sh "bash benchmarks/gpu_flashinfer.sh" "bash benchmarks/gpu_verify.sh"
# The lanes share the host's cores: host-bound timings (eager steps) in one lane see the other's load,
# CUDA-graph timings do not; each GPU has its own power cap. Say so beside numbers measured this way.
set -u
OUT=${OUT:-$PWD/gpu-lanes}
LIMIT=${LANE_LIMIT:-570}
mkdir -p "$OUT"
RUN=$(mktemp -d)
pids=()
i=0
for cmd in "$@"; do
  mkdir -p "$RUN/lane$i"
  CUDA_VISIBLE_DEVICES=$i OUT="$RUN/lane$i" timeout -k 15 "$LIMIT" bash -c "$cmd" > "$RUN/lane$i/console.log" 2>&1 &
  pids+=($!)
  i=$((i + 1))
done
for j in "${!pids[@]}"; do
  wait "${pids[$j]}"
  echo "lane$j: rc=$?" | tee -a "$RUN/lane$j/console.log"
done
for j in "${!pids[@]}"; do
  find "$RUN/lane$j" -maxdepth 3 -name '*.tar.xz*' -exec mv {} "$OUT/" \;
  tar -C "$RUN" -czf "$OUT/lane$j.tgz" "lane$j"
done
for j in "${!pids[@]}"; do
  echo "===== lane$j: $1"
  shift
  tail -n 40 "$RUN/lane$j/console.log"
done
rm -rf "$RUN"
