#!/usr/bin/env bash
# Issue 10, device call 2 (nvidia-h200-x2): the real-GPU end-to-end record on the
# calibrated h200-torch-bf16 profile. References on card 0, then full-load rounds:
# (a) one honest identity per card, (b) two identities sharing card 0, (c) a float16
# node claiming bfloat16 and a split-batch node (benchmarks/gpu_e2e.py). The database
# comes back in $OUT for the cross-machine check (benchmarks/h200_crossmachine.sh).
# Meanwhile card 1 first calibrates a candidate 1b shape (B = 256) with a time limit.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/e2e"
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/e2e/gpus-call2.csv"
python3 -c "from netcheck.engines import ensure_synth_model as e, weight_hash as w; d = e('1b'); print('synth:1b', w(d))"
P=h200-torch-bf16
(export CUDA_VISIBLE_DEVICES=1; timeout -k 10 ${CAND_LIMIT:-200} python3 -m netcheck engine calibrate \
  --profile configs/profiles/h200-torch-1b-b256-bf16.toml --out "$OUT/e2e" --batches 8 \
  --trials 3 --max-k 3 --no-selftest > "$OUT/e2e/candidate.log" 2>&1; echo "candidate exit $?") &
cand=$!
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/gpu_e2e.py build --profile $P --db "$OUT/e2e/refs.db" \
  --count 768 --json "$OUT/e2e/build.json"
wait $cand
tail -n 25 "$OUT/e2e/candidate.log"
cp "$OUT/e2e/refs.db" "$OUT/e2e/refs-as-built.db"
timeout -k 10 ${E2E_LIMIT:-330} python3 benchmarks/gpu_e2e.py rounds --profile $P --db "$OUT/e2e/refs.db" \
  --phases a,b,c --rounds 5 --cards 2 --json "$OUT/e2e/e2e-call2.json"
echo "rounds exit status: $?"
(cd "$OUT" && tar czf e2e.tgz e2e && rm -rf e2e)
ls -la "$OUT"
