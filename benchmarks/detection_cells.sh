#!/usr/bin/env bash
# A few scenarios x configs x seeds of benchmarks/detection.py in parallel (EMULATED
# populations), one process per (scenario, config, seed), merged into $OUT/cells.txt.
# Usage: OUT=/tmp/c SEEDS=8 CONFIGS="new s5a" bash benchmarks/detection_cells.sh "jitter" "plain n=200 s=0.05 b=0.3"
# (locally: JOBS=2; the .venv's python is used where there is one). MAX_ROUNDS=32 stops
# every run at 32 rounds; EXTRA="--speed-sd 0.01" adds options to every run and the merge.
# Exits 1 when a job failed.
set -uo pipefail
. "$(dirname "$0")/device_env.sh"  # PY, PYTHONPATH (wheels on the device)
OUT=${OUT:-/tmp/cells}; mkdir -p "$OUT/parts"
EXTRA=${EXTRA:-}; JOBS=${JOBS:-$(nproc)}; MAX_ROUNDS=${MAX_ROUNDS:-}; SEEDS=${SEEDS:-4}; CONFIGS=${CONFIGS:-"new"}; LIMIT=${LIMIT:-540}
: > "$OUT/jobs.txt"
for name in "$@"; do for c in $CONFIGS; do for s in $(seq 0 $((SEEDS - 1))); do
  printf '%s\t%s\t%s\n' "$name" "$c" "$s" >> "$OUT/jobs.txt"; done; done; done
run_one() {
  IFS=$'\t' read -r name c s <<< "$1"
  timeout -k 5 "$LIMIT" "$PY" benchmarks/detection.py --scenario "$name" --config "$c" --seeds 1 \
    --first-seed "$s" --ff-seeds 0 ${EXTRA:-} ${MAX_ROUNDS:+--max-rounds "$MAX_ROUNDS"} --json "$OUT/parts/$(echo "$name-$c-$s" | tr -c 'A-Za-z0-9.=-' _).json" \
    > /dev/null 2>&1 || { echo "failed: $name $c $s"; touch "$OUT/failed.$name-$c-$s"; }
}
export -f run_one; export OUT PY LIMIT MAX_ROUNDS EXTRA
start=$(date +%s)
tr '\n' '\0' < "$OUT/jobs.txt" | xargs -0 -P "$JOBS" -I{} bash -c 'run_one "$@"' _ {}
echo "all jobs in $(( $(date +%s) - start )) s"
"$PY" benchmarks/detection.py --from-json "$OUT"/parts/*.json ${EXTRA:-} | tee "$OUT/cells.txt"
failed=$(ls "$OUT"/failed.* 2>/dev/null | wc -l); rm -f "$OUT"/failed.*
[ "$failed" -eq 0 ] || { echo "$failed jobs failed or timed out"; exit 1; }
