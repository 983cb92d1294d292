#!/usr/bin/env bash
# Session 14: calibrate the shipped GPU profiles on the card this device call got, so
# that `netcheck engine pool` can pool several cards' records (docs/capacity.md,
# "Pooling several cards"). Run on the device machine with .whl/ carried
# (benchmarks/device_env.sh says how it is made); results go to $OUT/cards.
# PROFILES (default "h200-torch-bf16 h200-torch-fp32"), BATCHES (24), LIMIT (s, 560).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}/cards; mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpus.csv"
START=$(date +%s); LIMIT=${LIMIT:-560}
python3 -c "from netcheck.engines import ensure_synth_model as e, weight_hash as w; d = e('1b'); print('synth:1b', w(d))"
for p in ${PROFILES:-h200-torch-bf16 h200-torch-fp32}; do
  left=$((LIMIT - ($(date +%s) - START)))
  [ "$left" -gt 60 ] || { echo "skipped $p: ${left}s left"; continue; }
  timeout -k 10 "$left" python3 -m netcheck engine calibrate --profile "$p" --out "$OUT" \
    --batches "${BATCHES:-24}" --trials 3 --max-k 3 --no-selftest > "$OUT/$p.log" 2>&1
  echo "exit status ($p): $? after $(( $(date +%s) - START )) s"
  tail -n 30 "$OUT/$p.log"
done
