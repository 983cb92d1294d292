#!/usr/bin/env bash
# Issue 10, device call 4 (nvidia-h200, a fresh one-card machine): the references of the
# shipped h200-torch-bf16 (B = 256) built in call 3 on another machine (carried in
# carried/refs-b256.db) verify one honest identity here (phase y, 5 rounds).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/y"
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/y/gpus-call4.csv"
cp carried/refs-b256.db "$OUT/y/refs-b256.db"
timeout -k 10 200 python3 benchmarks/gpu_e2e.py rounds --profile h200-torch-bf16 \
  --db "$OUT/y/refs-b256.db" --phases y --rounds 5 --cards 1 --json "$OUT/y/crossmachine-b256-call4.json"
echo "cross-machine (B = 256) exit status: $?"
(cd "$OUT" && tar czf y.tgz y && rm -rf y)
