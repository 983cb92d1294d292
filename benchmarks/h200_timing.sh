#!/usr/bin/env bash
# Session 3, device call 1 (nvidia-h200, 16 CPU cores): issue 11's timing benchmark with
# kernel receive stamps against the code before them (.base = main at d10b4b4^1, copied
# by `git archive d10b4b4^1 netcheck scripts pyproject.toml configs | tar -x -C .base`
# and carried), plan time with decoys made ahead at 1,000 H200 nodes, and issue 10's
# first-batch cost on the GPU. Results go to $OUT (copied to docs/calibration/).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nproc; uptime; sysctl net.ipv4.tcp_congestion_control
step() { echo; echo "=== $* ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))"; }
step "timing: instant, h200 frames, this vs .base"
timeout -k 5 240 python3 scripts/bench_timing.py --nodes 100 1000 --shapes h200 --mode instant \
  --rounds 3 --baseline .base --json "$OUT/timing_instant.json"
step "timing: own service times spread 0.2 s, 1,000 nodes"
timeout -k 5 100 python3 scripts/bench_timing.py --nodes 1000 --shapes h200 --mode own \
  --spread 0.2 --rounds 3 --json "$OUT/timing_own.json"
step "first batch on the GPU (synth:1b generated first)"
timeout -k 5 120 python3 -c "from netcheck.engines import ensure_synth_model as e; print(e('1b'))"
timeout -k 5 120 python3 benchmarks/first_batch.py --profile h200-torch-bf16 --batches 6 \
  --json "$OUT/first_batch_h200.json"
step "plan with decoys made ahead"
timeout -k 5 150 python3 benchmarks/plan_decoys.py --profiles h200-torch-bf16 --nodes 100 1000 --workers 4
step done
