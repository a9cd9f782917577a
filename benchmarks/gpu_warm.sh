# Sourced by the GPU scripts: compile what the kernels need in the background while GPU work that
# needs none of it runs, then wait for it where it is needed.
#   warm_start          FA2's PTX into the driver's JIT cache (.device/warm_fa2.py; skipped when the
#                       carried JIT cache is there) and FlashInfer's modules not carried in a pack
#                       (.device-fi/warm_flashinfer.py: decode, prefill fa2/fa3, BatchAttention, POD;
#                       head dims 64 and 128; the packs it makes land in $WARM_OUT)
#   warm_wait fa2|fi    block until that compile is done (any process: it leaves a file behind)
# Each compile runs under a limit (WARM_LIMIT, default 400 s) and at most MAX_JOBS ninja jobs.
WARM_DIR=${WARM_DIR:-/tmp/attnbench-warm}

warm_start() {
  mkdir -p "$WARM_DIR" "${WARM_OUT:?}"
  local limit=${WARM_LIMIT:-400}
  if [ ! -f "$WARM_DIR/fa2.done" ]; then
    if ls .device/nvcache-*.tar.xz >/dev/null 2>&1; then
      echo "carried JIT cache" > "$WARM_DIR/fa2.done"
    else
      ( timeout -k 10 "$limit" python3 .device/warm_fa2.py > "$WARM_OUT/warm-fa2.log" 2>&1
        echo "rc=$? after ${SECONDS}s" > "$WARM_DIR/fa2.done" ) &
    fi
  fi
  if [ -f .device-fi/warm_flashinfer.py ] && [ ! -f "$WARM_DIR/fi.done" ]; then
    ( timeout -k 10 "$limit" python3 .device-fi/warm_flashinfer.py --groups decode,fa2,fa3,ba,pod --dims 64,128 \
        --budget "$((limit - 20))" --reserve 40 --no-test --pack "$WARM_OUT/fi-jit.tar.xz" > "$WARM_OUT/warm-fi.log" 2>&1
      { echo "rc=$?"; grep -E "compiled|TIMEOUT|cached|pack:" "$WARM_OUT/warm-fi.log"; } > "$WARM_DIR/fi.tmp"
      mv "$WARM_DIR/fi.tmp" "$WARM_DIR/fi.done" ) &
  fi
}

warm_wait() {
  local t0=$SECONDS
  while [ ! -f "$WARM_DIR/$1.done" ] && [ $((SECONDS - t0)) -lt "${WARM_LIMIT:-400}" ]; do sleep 2; done
  echo "== warm $1: waited $((SECONDS - t0))s: $(tr '\n' ' ' < "$WARM_DIR/$1.done" 2>/dev/null || echo NOT DONE)" \
    | tee -a "${SUMMARY:-/dev/null}"
}
