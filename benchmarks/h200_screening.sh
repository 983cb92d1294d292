#!/usr/bin/env bash
# Session 9: the coordinator's own screening loop on real co-location (no emulation).
# Two identities share card 0 (two node processes, one H200); on a two-card machine an
# honest identity has card 1. Screening blocks of 16 rounds + analysis + confirmation
# (benchmarks/gpu_e2e.py phase s / s1) until a shared-backend flag; the JSON keeps the
# flags with their evidence and the per-node service times split by co-load.
#   nvidia-h200:    OUT=$OUT bash benchmarks/h200_screening.sh           (phase s1)
#   nvidia-h200-x2: OUT=$OUT CARDS=2 bash benchmarks/h200_screening.sh   (phase s)
#   PHASES=s1j: the pair as a jittering farm (session 15); PHASES=s1,s1j: both in turn
#   PHASES=s1p: the pair as a padding farm (session 16): each identity holds every answer
#     to just before the deadline its job names (short of it by 5% or 100 ms, the larger),
#     so alone it is never late; co-loaded the compute alone, t(2) ~ 2 t(1), is past it
#   PHASES=s1s: a selective farm (session 16): both identities in one process over one
#     engine; B gives its batch up (engine error: missing) whenever A is busy, answers alone
#   s1p and s1s stop at the first flag of any kind on a farm identity (checked after every
#   round) or after ROUNDS; e.g. PHASES=s1p COUNT=768 LIMIT=330 ROUNDS=32 OUT=$OUT bash ...
# screening.json, per phase: summary.first_farm_flag / flag_timeline (kind, identities,
# screening rounds run when first seen, stage round or analysis), summary.verdict_counts
# (per identity and round kind, alone / co-loaded: pass, late, missing), rounds_table
# (every round: kind, identities loaded, each one's verdict and elapsed_s), the flags with
# their evidence and the service times by co-load.
# The wheels the device lacks travel in .whl/ (how to make it: benchmarks/device_env.sh).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CARDS=${CARDS:-1}; PHASE=s1; [ "$CARDS" -ge 2 ] && PHASE=s; PHASE=${PHASES:-$PHASE}
P=${PROFILE:-h200-torch-bf16}
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/gpus.csv"
python3 -c "from netcheck.engines import ensure_synth_model as e, weight_hash as w; d = e('1b'); print('synth:1b', w(d))"
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/gpu_e2e.py build --profile $P --db /tmp/refs.db \
  --count ${COUNT:-768} --json "$OUT/build.json" | tail -n 1
timeout -k 10 ${LIMIT:-420} python3 benchmarks/gpu_e2e.py rounds --profile $P --db /tmp/refs.db \
  --phases $PHASE --screen-rounds ${ROUNDS:-48} --cards $CARDS --json "$OUT/screening.json" \
  2>&1 | grep -v -e ' verdict late ' -e ' verdict missing ' -e 'batch given up' | tail -n 40
echo "rounds exit status: ${PIPESTATUS[0]}"
