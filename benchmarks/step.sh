# Sourced by the GPU scripts: `step NAME LIMIT_S CMD...` runs CMD under timeout, logs it to
# $OUT/NAME.log, shows its tail, and (when SUMMARY names a file) appends the outcome there.
# Needs OUT and start (the script's $SECONDS at its start); `script_start NAME` sets both up.
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name: limit ${limit}s, at $((SECONDS - start))s"
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "$name: TIMED OUT after ${limit}s" | tee -a "$OUT/$name.log"
  echo "== $name: rc=$rc, done at $((SECONDS - start))s" | tee -a "${SUMMARY:-/dev/null}"
  tail -n 3 "$OUT/$name.log"
}

# The common start of a GPU script: OUT (default ./NAME), the repo on PYTHONPATH with unbuffered
# Python, the clock (start) and SUMMARY=$OUT/summary.txt, kept if there (a lane's earlier parts).
script_start() {
  OUT=${OUT:-$PWD/$1}
  mkdir -p "$OUT"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  start=$SECONDS
  SUMMARY=$OUT/summary.txt
  touch "$SUMMARY"
}
