#!/usr/bin/env bash
# The project's GPU checks, one section each, several run on a lent GPU machine in one call (the
# device tool gives a call 10 minutes and a session 30, and a fresh machine costs 2 minutes to start):
#   bash scripts/device/checks.sh SECTION [SECTION ...]
# Each section is one attnbench command or benchmark of benchmarks/README.md, with the flags its
# measurements-page entry was made with; with no section this text is printed.
# from the project's root, with $OUT set (the device tool sets it) and the packs carried:
# .device (FA2/FA3, ../shared/device/prepare.sh), .device-fi (FlashInfer) and .device-triton
# (scripts/device/prepare_triton.sh) where a section's backends need them; a pack not carried is
# skipped, and the backends it holds then report themselves unavailable in the rows. All three and
# the tree fit the 64 MiB carry only after scripts/device/fa2_cache_dtype.py (the FA2 cache's bf16
# half).
#
# Every section runs under its own time limit (a hung step cannot eat the call), writes its run
# directories under $OUT/SECTION/ and its console to $OUT/SECTION.log, and adds one line to
# $OUT/checks.md: the section, its exit status, its seconds and the command. The run directories
# and the logs go back as one $OUT/runs.tgz (the device tool returns at most 8 files, not trees);
# the table is printed last.
# A call has 600 s. CALL_BUDGET_S (default 570) is this script's share of it: each section's limit
# shrinks to what is left of that budget (less 10 s for the table and the tar), and a section with
# under 30 s left is recorded as skipped, so the sections after a slow one cannot push the call
# past its end and lose the files. Sections that stop themselves (floor's --deadline-s, the
# SIGINT of replay-scale and atlas) are told the shrunk limit.
#
# Sections (limit in seconds; what it settles):
#   doctor        300  `attnbench doctor`: every backend x strategy x mode against the reference, safe replays
#   gpu-tests     420  `pytest -m gpu` on $GPU_TESTS (default: the files of the kernels and paths not yet run
#                      on an H200; a file missing from this checkout is left out)
#   floor         450  benchmarks/e2e_floor.py: llama-7b's graph decode step against the weight-read
#                      floor and transformers, each --engines variant, GEMV ways per shape (issue 24)
#   readme        300  the README's main command twice, timed, and `attnbench compare` of the pair
#                      (issue 23: <= 60 s with replicates that stop, A/A clean at its threshold)
#   readme-again  300  the same, a second pair in the same call
#   ab            560  benchmarks/ab_check.py: A/A and planted 3 % / 10 % under `attnbench ab` at its own sampling
#                      window (1000 ms a row) (issue 23); PLANTED=3 plants 3 % only, AB_ARGS adds ab_check flags
#   ab-100        560  the same with kernel --budget-ms 100 (shorter, noisier rounds, more of them): run beside
#                      `ab`, benchmarks/ab_power.py on each run's folder compares the per-round spreads
#   replay-scale  545  benchmarks/replay_scale.py on a 10,000-step trace (issue 21); SIGINT at the limit,
#                      so what was measured is written. Its run lives in $SCALE_DIR (default
#                      /tmp/attnbench-replay-scale, kept on a warm machine between calls) and is copied
#                      under $OUT; the next call's section resumes it:
#   replay-scale-resume 545  the same benchmark with --resume: the rest of the sample, a report over both parts
#   replay-scale-buckets 400  the same trace's buckets alone (--exact-sample 0): the 5-minute goal on the
#                      goal's four backends, in one call
#   e2e-trace     300  `attnbench e2e --trace` on llama-3-8b, vllm-fa3 and FlashInfer (issue 21)
#   triton-e2e    300  vllm-triton against vllm-fa3 in e2e on llama-3-8b, full, piecewise and decode graphs (issue 24)
#   atlas         540  the 560-cell atlas of the measurements page, with the rule's new columns (issue 22)
#   replays       510  chat-high, decode-heavy, prefix-heavy replayed for the rule's held-out check (issue 22);
#                      then on the CPU: benchmarks/rule_loto.py ATLAS DECODE_HEAVY PREFIX_HEAVY CHAT_HIGH LONG --depth 6
#   replay-long   240  the long-context sample trace (1,843 steps) replayed the same way (issue 22)
#   replays-chat  340  chat-mid and chat-low replayed the same way: the rule's fifth and sixth held-out traces, the
#                      chat traffic at 6 and 2 requests a second (issue 22)
#   replays-more  510  spec-decode, prefix-low and long-mid replayed the same way: three more kinds of traffic
#                      (speculative decoding, the prefix trace at a third of the load, prompts between
#                      decode-heavy's and long-context's) for the rule's held-out check (issue 22)
#   replays-noise 360  decode-heavy and chat-low with --replicates 2: is the per-step oracle real? then on the CPU,
#                      benchmarks/oracle_repeat.py on each run (the oracle's picks from one replicate timed in the other)
#   first-hour    570  what a new user meets on a GPU (issue 40): the README's main command, `kernel --profile`'s
#                      console (profiler lines kept in profile/profiler.log), a sample trace's replay and a 20-cell
#                      atlas ending with their headline tables, `e2e --trace` with its plan and ETA, and a small e2e
#                      grid (the runs the docs' e2e pictures are redrawn from)
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder whose files come back}"
[ $# -gt 0 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }

for pack in .device/bootstrap.sh .device-fi/bootstrap_fi.sh .device-triton/bootstrap.sh; do
  # shellcheck disable=SC1090
  if [ -f "$pack" ]; then source "$pack"; else echo "checks: $pack not carried: its backends are unavailable"; fi
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
AB="python3 -m attnbench"
GPU_TESTS="${GPU_TESTS:-tests/test_gpu_kernels.py}"
TABLE="$OUT/checks.md"
CALL_BUDGET_S="${CALL_BUDGET_S:-570}"
PLANTED="${PLANTED:-3,10}"  # the ab sections' planted regressions, % (PLANTED=3 runs A/A and 3 % only)
AB_ARGS="${AB_ARGS:-}"  # more ab_check.py flags for the ab sections, e.g. "--max-rounds 16 --budget-s 300"
[ -f "$TABLE" ] || printf '| section | exit | seconds | command |\n|---|---:|---:|---|\n' > "$TABLE"

left() {  # left LIMIT_S: the limit, or what the call's budget has left for a section if that is less
  local rest=$((CALL_BUDGET_S - SECONDS - 10))
  echo $(( $1 < rest ? $1 : rest ))
}

run() {  # run SECTION LIMIT_S COMMAND...: the command under the limit, console to $OUT/SECTION.log
  local section="$1" limit; limit=$(left "$2"); shift 2
  local started=$SECONDS rc
  if [ "$limit" -lt 30 ]; then
    echo "== $section skipped: ${limit} s left of CALL_BUDGET_S=$CALL_BUDGET_S" | tee -a "$OUT/$section.log"
    printf '| %s | skipped | 0 | `%s` |\n' "$section" "$*" >> "$TABLE"
    return
  fi
  echo "== $section (limit ${limit} s): $*" | tee -a "$OUT/$section.log"
  timeout -k 10 "$limit" "$@" >> "$OUT/$section.log" 2>&1
  rc=$?
  tail -n 40 "$OUT/$section.log"
  printf '| %s | %s | %s | `%s` |\n' "$section" "$rc" "$((SECONDS - started))" "$*" >> "$TABLE"
}

readme() {  # readme SECTION: the main command twice (A, B), each timed, then their comparison
  local dir="$OUT/$1"
  for side in a b; do
    run $1-$side 140 $AB kernel --heads 32 --dim 128 --out "$dir/$side"
  done
  run $1-compare 60 $AB compare "$dir/a" "$dir/b"
}

for section in "$@"; do
  mkdir -p "$OUT/$section"
  case "$section" in
    doctor) run doctor 300 $AB doctor --json "$OUT/doctor/doctor.json" ;;
    gpu-tests) tests=""; for t in $GPU_TESTS; do [ -f "$t" ] && tests="$tests $t"; done  # decide's file only on its branch
               run gpu-tests 420 python3 -m pytest -q -m gpu -p no:cacheprovider -rs $tests ;;
    floor) run floor 450 python3 benchmarks/e2e_floor.py --backend vllm-fa3 --hf-compile \
             --deadline-s $(( $(left 450) - 20 )) --out "$OUT/floor/floor.json" ;;
    readme|readme-again) readme "$section" ;;
    ab) run ab 560 python3 benchmarks/ab_check.py --planted "$PLANTED" $AB_ARGS --out "$OUT/ab/ab-check" ;;
    ab-100) run ab-100 560 python3 benchmarks/ab_check.py --planted "$PLANTED" $AB_ARGS --extra "--budget-ms 100" \
              --out "$OUT/ab-100/ab-check" ;;
    replay-scale|replay-scale-resume|replay-scale-buckets)
      scale="${SCALE_DIR:-/tmp/attnbench-replay-scale}"; resume=""; sample=500
      case "$section" in
        replay-scale-resume) resume="--resume" ;;
        replay-scale-buckets) scale="$scale-buckets"; sample=0; rm -rf "$scale" ;;
        *) rm -rf "$scale" ;;
      esac
      run "$section" 545 timeout -s INT $(( $(left 545) - 10 )) python3 benchmarks/replay_scale.py --out "$scale" \
        --steps 10000 --exact-sample $sample $resume
      # all but the trace (tens of MB; `attnbench trace synth` with the benchmark's flags remakes it)
      mkdir -p "$OUT/$section/scale" && tar -C "$scale" --exclude=./trace.jsonl -cf - . | tar -C "$OUT/$section/scale" -xf - ;;
    e2e-trace) run e2e-trace 300 $AB e2e --model llama-3-8b --trace scenarios/traces/chat-high.requests.jsonl \
                 --max-requests 24 --chunk-size 2048 --backend vllm-fa3,flashinfer --out "$OUT/e2e-trace/run" ;;
    triton-e2e)
      for mode in full piecewise decode; do
        run triton-e2e-$mode 150 $AB e2e --model llama-3-8b --backend vllm-triton,vllm-fa3 --cudagraph $mode \
          --input-len 512 --output-len 32 --batch-size 8 --chunk-size 2048 --out "$OUT/triton-e2e/$mode"
      done ;;
    atlas) run atlas 540 timeout -s INT -k 80 $(( $(left 540) - 90 )) $AB atlas --heads 32 --gqa-group 4 --head-dim 128 --chunk 512 \
             --decode-share 0:1:5 --decode-context 512:16384:4 --tokens 1:1024:5 --prefill-context 0:8192:3 \
             --backend vllm-fa2,vllm-fa3,flashinfer,flashinfer-ba --strategy unified,split --mode graph --budget-ms 20 \
             --replicates 1 --max-cells 560 --out "$OUT/atlas/run" ;;
    replays)  # the three sample traces as in the measurements page (d4770dd), for the rule's held-out check
      for t in chat-high:2 decode-heavy:3 prefix-heavy:3; do
        run replay-${t%%:*} 170 $AB replay scenarios/traces/${t%%:*}.jsonl --mode graph --budget-ms 5 --replicates 1 \
          --exact-sample 20 --bucket-ratio ${t##*:} --out "$OUT/replays/${t%%:*}"
      done ;;
    replays-chat)
      for t in chat-mid.jsonl chat-low.jsonl.gz; do
        run replay-${t%%.*} 170 $AB replay scenarios/traces/$t --mode graph --budget-ms 5 --replicates 1 \
          --exact-sample 20 --bucket-ratio 2 --out "$OUT/replays-chat/${t%%.*}"
      done ;;
    replays-more)
      for t in spec-decode.jsonl:2 prefix-low.jsonl.gz:3 long-mid.jsonl.gz:3; do
        name=${t%%.*}
        run replay-$name 170 $AB replay scenarios/traces/${t%%:*} --mode graph --budget-ms 5 --replicates 1 \
          --exact-sample 20 --bucket-ratio ${t##*:} --out "$OUT/replays-more/$name"
      done ;;
    replays-noise)
      for t in decode-heavy.jsonl:3 chat-low.jsonl.gz:2; do
        name=${t%%.*}
        run replay-$name-x2 180 $AB replay scenarios/traces/${t%%:*} --mode graph --budget-ms 5 --replicates 2 \
          --exact-sample 20 --bucket-ratio ${t##*:} --out "$OUT/replays-noise/$name"
      done ;;
    first-hour)
      fh="$OUT/first-hour"
      run fh-kernel 120 $AB kernel --heads 32 --dim 128 --out "$fh/kernel"
      run fh-profile 90 $AB kernel --heads 32 --kv-heads 8 --dim 128 --tokens 100,1000 --kind decode,mixed --profile \
        --out "$fh/profile"
      run fh-replay 150 $AB replay scenarios/traces/chat-high.jsonl --mode graph --budget-ms 5 --replicates 1 \
        --exact-sample 20 --bucket-ratio 2 --out "$fh/replay-chat-high"
      run fh-e2e-trace 120 $AB e2e --model llama-3-8b --trace scenarios/traces/chat-high.requests.jsonl --max-requests 8 \
        --chunk-size 2048 --backend vllm-fa3,flashinfer --out "$fh/e2e-trace"
      run fh-atlas 100 timeout -s INT -k 20 70 $AB atlas --heads 32 --gqa-group 4 --head-dim 128 --chunk 512 \
        --decode-share 0:1:2 --decode-context 512:8192:2 --tokens 16:1024:2 --prefill-context 0 \
        --backend vllm-fa3,flashinfer --strategy unified,split --mode graph --budget-ms 20 --replicates 1 --max-cells 20 \
        --out "$fh/atlas"
      run fh-e2e 120 $AB e2e --model llama-7b --input-len 32,512 --output-len 128,32 --batch-size 1,8 --backend vllm-fa3 \
        --iters 10 --out "$fh/e2e" ;;
    replay-long) run replay-long-context 240 $AB replay scenarios/traces/long-context.jsonl.gz --mode graph --budget-ms 5 \
                   --replicates 1 --exact-sample 20 --bucket-ratio 3 --out "$OUT/replay-long/long-context" ;;
    *) echo "checks: unknown section $section" | tee -a "$OUT/checks.log"; printf '| %s | unknown | 0 | |\n' "$section" >> "$TABLE" ;;
  esac
done

# the run directories and the sections' logs as one file beside the table: the device tool returns
# at most 8 files from $OUT and leaves out the rest, runs.tgz too (2026-12-02: a call of 7 sections
# wrote 8 logs and lost its runs that way)
find "$OUT" -mindepth 1 -maxdepth 1 \( -type d -o -name '*.log' \) -printf '%f\n' | tar -C "$OUT" -czf "$OUT/runs.tgz" -T - \
  && find "$OUT" -mindepth 1 -maxdepth 1 \( -type d -o -name '*.log' \) -exec rm -rf {} +
echo; cat "$TABLE"
