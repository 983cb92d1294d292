#!/usr/bin/env bash
# Session 13, device (nvidia-h200, 16 CPU cores): benign host coupling on a real H200.
# The shipped h200-torch-bf16 profile's batch time through the node's engine worker,
# with the host idle / CPU-loaded / memory-bandwidth-loaded (benchmarks/host_coupling.py),
# against the profile's deadline. Results go to $OUT (copied to docs/calibration/s13/).
#   run(command="OUT=$OUT bash benchmarks/h200_host_coupling.sh", carry=[".whl"])
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nproc; uptime; nvidia-smi --query-gpu=name,uuid,power.draw,temperature.gpu --format=csv
step() { echo; echo "=== $* ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))"; }
step "synth:1b"
timeout -k 5 180 python3 -c "from netcheck.engines import ensure_synth_model as e; print(e('1b'))"
step "host coupling, h200-torch-bf16"
timeout -k 5 420 python3 benchmarks/host_coupling.py --profile h200-torch-bf16 \
  --batches "${BATCHES:-24}" --json "$OUT/host_coupling_h200_bf16.json"
step done
