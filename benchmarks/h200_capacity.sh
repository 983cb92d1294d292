#!/usr/bin/env bash
# Issue 10, device call 1 (nvidia-h200-x2): capacity calibration of the re-shaped H200
# profiles, each with `netcheck engine calibrate --update-profile` (selftest, bf16 matmul
# peak, t(1), co-location k = 2, 3 as processes and as CUDA streams).
# GPU 0: synth:1b then synth:3b; GPU 1: synth:8b (in parallel, one card each).
# Run from a copy of the repository root, pydantic/cryptography/sqlalchemy wheels in .whl/.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/cal"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv | tee "$OUT/cal/gpus.csv"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
START=$(date +%s); LIMIT=${LIMIT:-550}  # seconds for all calibrations (device limit 600 s)
cal() {  # cal PROFILE BATCHES, killed when the LIMIT is reached
  timeout -k 10 $((LIMIT - ($(date +%s) - START))) python3 -m netcheck engine calibrate --profile "$1" --out "$OUT/cal" --batches "$2" \
    --trials 3 --max-k 3 --update-profile
  echo "exit status ($1): $?"
  cp "configs/profiles/$1.toml" "$OUT/cal/$1.profile.toml"
}
(export CUDA_VISIBLE_DEVICES=1; cal h200-torch-8b-bf16 8) > "$OUT/cal/gpu1.log" 2>&1 &
gpu1=$!
(export CUDA_VISIBLE_DEVICES=0; cal h200-torch-bf16 12; cal h200-torch-3b-bf16 10) \
  > "$OUT/cal/gpu0.log" 2>&1 &
gpu0=$!
wait $gpu0 $gpu1
tail -n 30 "$OUT/cal/gpu0.log" "$OUT/cal/gpu1.log"
(cd "$OUT" && tar czf cal.tgz cal && rm -rf cal)
ls -la "$OUT"
