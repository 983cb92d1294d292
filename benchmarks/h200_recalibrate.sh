#!/usr/bin/env bash
# Issue 10, device call 5 (nvidia-h200-x2): the shipped profiles calibrated by the final
# code, tables written by `netcheck engine calibrate --update-profile`:
# card 0 h200-torch-bf16 (1b, B = 256; with the quick selftest), card 1 h200-torch-fp32.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/cal5"
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/cal5/gpus-call5.csv"
python3 -c "from netcheck.engines import ensure_synth_model as e, weight_hash as w; d = e('1b'); print('synth:1b', w(d))"
START=$(date +%s); LIMIT=${LIMIT:-420}
cal() {  # cal PROFILE BATCHES
  timeout -k 10 $((LIMIT - ($(date +%s) - START))) python3 -m netcheck engine calibrate \
    --profile "$1" --out "$OUT/cal5" --batches "$2" --trials 3 --max-k 3 --update-profile
  echo "exit status ($1): $?"
  cp "configs/profiles/$1.toml" "$OUT/cal5/$1.profile.toml"
}
(export CUDA_VISIBLE_DEVICES=1; cal h200-torch-fp32 12) > "$OUT/cal5/gpu1.log" 2>&1 &
g1=$!
(export CUDA_VISIBLE_DEVICES=0; cal h200-torch-bf16 12) > "$OUT/cal5/gpu0.log" 2>&1 &
g0=$!
wait $g0 $g1
tail -n 22 "$OUT/cal5/gpu0.log" "$OUT/cal5/gpu1.log"
(cd "$OUT" && tar czf cal5.tgz cal5 && rm -rf cal5)
