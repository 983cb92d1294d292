#!/usr/bin/env bash
# Issue 10, device call 3 (nvidia-h200-x2, a fresh machine): cross-machine check and the
# record of the shipped B = 256 shape.
# 1. The database of call 2 (references built there on another machine's card 0, carried
#    in carried/refs-b128.db) verifies one honest identity per card here (phase x) for
#    the B = 128 shape those references were built for.
# 2. The shipped h200-torch-bf16 (B = 256): quick selftest, references on card 0, then
#    phases a, b, c (benchmarks/gpu_e2e.py).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/x"
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/x/gpus-call3.csv"
python3 -c "from netcheck.engines import ensure_synth_model as e, weight_hash as w; d = e('1b'); print('synth:1b', w(d))"
cp carried/refs-b128.db "$OUT/x/refs-b128.db"
timeout -k 10 150 python3 benchmarks/gpu_e2e.py rounds \
  --profile docs/calibration/profiles/h200-torch-bf16-b128.toml --db "$OUT/x/refs-b128.db" \
  --phases x --rounds 5 --cards 2 --json "$OUT/x/crossmachine-call3.json"
echo "cross-machine exit status: $?"
CUDA_VISIBLE_DEVICES=0 timeout -k 10 90 python3 -m netcheck engine selftest --profile h200-torch-bf16 \
  --quick --json "$OUT/x/selftest-b256.json"
echo "selftest exit status: $?"
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/gpu_e2e.py build --profile h200-torch-bf16 \
  --db "$OUT/x/refs-b256.db" --count 1024 --json "$OUT/x/build-b256.json"
timeout -k 10 240 python3 benchmarks/gpu_e2e.py rounds --profile h200-torch-bf16 \
  --db "$OUT/x/refs-b256.db" --phases a,b,c --rounds 5 --cards 2 --json "$OUT/x/e2e-b256-call3.json"
echo "b256 rounds exit status: $?"
(cd "$OUT" && tar czf x.tgz x && rm -rf x)
ls -la "$OUT"
