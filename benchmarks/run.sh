#!/usr/bin/env bash
# Every benchmark in sequence, then one results.json: the date, the machine, and for each part its
# command, wall-clock seconds and JSON (benchmarks/collect.py).
#
#   bash benchmarks/run.sh            # full: about 20 minutes on 2 idle cores, JSON in benchmarks/
#   QUICK=1 bash benchmarks/run.sh    # smoke test: tiny sizes, about 3 minutes, JSON in a temp folder
#
# Each part's arguments can be overridden: TRAIN_STEP_ARGS, PRECISION_ARGS, EVALUATION_ARGS,
# SCALE_ARGS, GPU_ARGS (e.g. SCALE_ARGS="--sizes 10000 100000"); BENCH_OUT is the output folder.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${NLTK_DATA:-}" && -d ../shared/nltk_data ]]; then
  export NLTK_DATA="$PWD/../shared/nltk_data"  # the offline stopword lists of the phrases stage
fi

if [[ "${QUICK:-0}" == 1 ]]; then
  mode=quick
  BENCH_OUT="${BENCH_OUT:-$(mktemp -d)}"
  : "${TRAIN_STEP_ARGS=--methods simcse --steps 1}"
  : "${PRECISION_ARGS=--rounds 1 --steps 1 --train-steps 0}"
  : "${EVALUATION_ARGS=--rounds 1 --tasks STSBenchmark}"
  : "${SCALE_ARGS=--sizes 2000 5000}"
  : "${GPU_ARGS=--steps 3 --loop-steps 0 --corpus-size 2000}"
else
  mode=full
  BENCH_OUT="${BENCH_OUT:-benchmarks}"
  : "${TRAIN_STEP_ARGS=--steps 8}"
  : "${PRECISION_ARGS=--rounds 2 --steps 8 --train-steps 50}"
  : "${EVALUATION_ARGS=--rounds 2}"
  : "${SCALE_ARGS=--sizes 10000 100000 1000000}"
  : "${GPU_ARGS=--steps 50}"
fi
mkdir -p "$BENCH_OUT"
parts=()

# part NAME SCRIPT "ARGS": run benchmarks/SCRIPT ARGS --out BENCH_OUT/NAME.json and time it
part() {
  local name=$1 script=$2 args json=$BENCH_OUT/$1.json started=$SECONDS
  read -ra args <<< "$3"
  local command="python benchmarks/$script ${args[*]} --out $json"
  echo "== $command" >&2
  python "benchmarks/$script" "${args[@]}" --out "$json"
  parts+=(--part "$name" "$json" "$((SECONDS - started))" "$command")
}

part train_step train_step.py "$TRAIN_STEP_ARGS"
part precision precision.py "$PRECISION_ARGS"
part evaluation evaluation.py "$EVALUATION_ARGS"
part scale scale.py "$SCALE_ARGS"
part gpu gpu.py "$GPU_ARGS"
python benchmarks/collect.py --out "$BENCH_OUT/results.json" --mode "$mode" "${parts[@]}"
