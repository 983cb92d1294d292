#!/usr/bin/env bash
# Issue 4, item 4: the H200 runs, exactly as executed on the device machine (repo root,
# the image's python3 with torch 2.11 / transformers 5.17; pydantic and its needs are
# carried as wheels in .whl/). Results go to $OUT (copied to docs/calibration/).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 - <<'PY'
import importlib.util as u
import torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__,
      "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
for m in ["msgpack", "aiohttp", "pydantic", "sqlalchemy", "rich", "click", "safetensors",
          "cryptography", "numpy", "tokenizers"]:
    print(f"  {m}: {'present' if u.find_spec(m) else 'MISSING'}")
PY
# Largest preset: generate synth:1b (streamed shard by shard), time and peak RSS.
python3 - <<'PY'
import json, resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run([sys.executable, "-c",
                "from netcheck.engines import ensure_synth_model as e, weight_hash as w;"
                "d = e('1b'); print(d, w(d))"], check=True)
print("SYNTH", json.dumps({"preset": "1b", "seconds": round(time.perf_counter() - t, 1),
      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}))
PY
for name in h200-torch-bf16 h200-torch-fp32; do
  python3 benchmarks/calibrate_profile.py --profile "$name" --batches 30 --overhead-runs 5 \
    --out "$OUT"
  echo "exit status ($name): $?"
done
