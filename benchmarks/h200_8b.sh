#!/usr/bin/env bash
# The synth:8b preset on an H200: generate it (time, peak RSS, weight hash), then
# calibrate configs/profiles/h200-torch-8b-bf16.toml (selftest + timed batches).
# Run by the device tool from the repository root with the pydantic wheels carried in
# .whl/ (as benchmarks/h200_calibration.sh); results go to $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD NETCHECK_MODEL_CACHE=/tmp/models PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
df -h /tmp | tail -1
python3 - <<'PY'
import json, resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run([sys.executable, "-c",
                "from netcheck.engines import ensure_synth_model as e, weight_hash as w;"
                "d = e('8b'); print(d, w(d))"], check=True)
print("SYNTH", json.dumps({"preset": "8b", "seconds": round(time.perf_counter() - t, 1),
      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}))
PY
du -sh /tmp/models/8b
python3 benchmarks/calibrate_profile.py --profile configs/profiles/h200-torch-8b-bf16.toml \
  --batches "${BATCHES:-20}" --out "$OUT"
echo "exit status: $?"
