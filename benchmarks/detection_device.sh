#!/usr/bin/env bash
# The detection benchmark (benchmarks/detection.py, EMULATED populations) over every
# scenario, seed and config at once, one process per (scenario, config, seed) or per
# chunk of false-flag seeds, on all cores of a bigger machine (session 4: the device's
# 16 CPU cores; the GPU is not used). The merged table and goals land in
# $OUT/detection.txt, the plot in $OUT/detection.png, the parts (JSON per job) and
# their logs in $OUT/parts.tar.gz (re-merge: tar -xzf it, then detection.py --from-json parts/*.json).
# Exits 1 when a job failed or timed out. Locally (the .venv's python): OUT=/tmp/det bash benchmarks/detection_device.sh
# Configs: new (defaults) and coins (screening coins in confirmation rounds, off by default; CONFIGS="new s4" for session 5's baseline).
set -uo pipefail
. "$(dirname "$0")/device_env.sh"  # PY, PYTHONPATH (wheels on the device)
OUT=${OUT:-/tmp/det}; mkdir -p "$OUT/parts" "$OUT/logs"
JOBS=${JOBS:-$(nproc)}; SEEDS=${SEEDS:-2}; FF_SEEDS=${FF_SEEDS:-125}; FF_CHUNK=${FF_CHUNK:-16}
CONFIGS=${CONFIGS:-"new coins"}; LIMIT=${LIMIT:-540}
# SKIP / ONLY: extended regexps on scenario names (e.g. SKIP='n=1000' ONLY='n=1000' to
# split one run over two device calls); FF_SEEDS=0 leaves the false-flag runs out
# EXTRA: options added to every job and the merge (e.g. EXTRA="--speed-sd 0.01")
EXTRA=${EXTRA:-}
SKIP=${SKIP:-'^$'}; ONLY=${ONLY:-.}
echo "cores $(nproc), jobs $JOBS, seeds $SEEDS, false-flag runs $FF_SEEDS, configs $CONFIGS"
list=$OUT/jobs.txt; : > "$list"
# longest first: the 1,000-node scenarios, then the false-flag chunks, then the rest
"$PY" -c "import sys; sys.path.insert(0, 'benchmarks'); import detection as d
print('\n'.join(s.name for s in sorted(d.scenarios(), key=lambda s: -s.spec.n_nodes)))" \
  | grep -E -- "$ONLY" | grep -v -E -- "$SKIP" > "$OUT/names.txt"
[ -s "$OUT/names.txt" ] || [ "$FF_SEEDS" -gt 0 ] || { echo "no scenario left"; exit 1; }
n=0
add() { n=$((n + 1)); printf '%s\0' "$n" "$@" >> "$OUT/jobs.txt.tmp.$n"; echo "$n" >> "$list"; }
while IFS= read -r name; do
  case "$name" in *n=1000*) ;; *) continue;; esac
  for c in $CONFIGS; do for s in $(seq 0 $((SEEDS - 1))); do
    add --scenario "$name" --config "$c" --seeds 1 --first-seed "$s" --ff-seeds 0; done; done
done < "$OUT/names.txt"
[ "$FF_SEEDS" -gt 0 ] && for sigma in 0.05 0.15; do for c in $CONFIGS; do
  for first in $(seq 0 "$FF_CHUNK" $((FF_SEEDS - 1))); do
    k=$((FF_SEEDS - first < FF_CHUNK ? FF_SEEDS - first : FF_CHUNK))
    add --only NOSUCH --config "$c" --ff-sigma "$sigma" --ff-seeds "$k" --first-seed "$first"; done
done; done
while IFS= read -r name; do
  case "$name" in *n=1000*) continue;; esac
  for c in $CONFIGS; do for s in $(seq 0 $((SEEDS - 1))); do
    add --scenario "$name" --config "$c" --seeds 1 --first-seed "$s" --ff-seeds 0; done; done
done < "$OUT/names.txt"
echo "$n jobs"
run_one() {  # job number; its arguments are in $list.tmp.N
  local i=$1; mapfile -d '' -t args < "$OUT/jobs.txt.tmp.$i"
  timeout -k 5 "$LIMIT" "$PY" benchmarks/detection.py "${args[@]:1}" ${EXTRA:-} --json "$OUT/parts/$i.json" \
    > "$OUT/logs/$i.txt" 2>&1 || { echo "job $i failed or timed out: ${args[*]:1}"; touch "$OUT/failed.$i"; }
}
export -f run_one; export OUT PY LIMIT EXTRA
start=$(date +%s)
xargs -a "$list" -P "$JOBS" -I{} bash -c 'run_one {}'
echo "all jobs in $(( $(date +%s) - start )) s"
"$PY" benchmarks/detection.py --from-json "$OUT"/parts/*.json --plot "$OUT/detection.png" ${EXTRA:-} \
  | tee "$OUT/detection.txt"
rm -f "$OUT"/jobs.txt.tmp.*
# one archive instead of hundreds of small files (what comes back from a device is limited)
tar -C "$OUT" -czf "$OUT/parts.tar.gz" parts logs jobs.txt names.txt && rm -rf "$OUT"/parts "$OUT"/logs
echo "parts and logs: $OUT/parts.tar.gz (re-merge: tar -xzf it, then detection.py --from-json parts/*.json)"
failed=$(ls "$OUT"/failed.* 2>/dev/null | wc -l); rm -f "$OUT"/failed.*
[ "$failed" -eq 0 ] || { echo "$failed jobs failed (their logs are in parts.tar.gz)"; exit 1; }
