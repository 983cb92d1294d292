# Sourced by the benchmark scripts that run on the device (detection_device.sh,
# detection_cells.sh): sets PY and PYTHONPATH. The device lacks some of netcheck's
# dependencies; they travel as wheels in a carried .whl/ folder and are unpacked into
# /tmp/site (no network there). Locally (PY=.venv/bin/python) nothing is installed.
PY=${PY:-python3}
if ls .whl/*.whl >/dev/null 2>&1 && ! "$PY" -c "import pydantic, sqlalchemy" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=${PYTHONPATH:-$PWD}
fi
