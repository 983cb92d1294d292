# Sourced by the benchmark scripts that run on the device (detection_device.sh,
# detection_cells.sh): sets PY and PYTHONPATH. The device lacks some of netcheck's
# dependencies; they travel as wheels in a carried .whl/ folder and are unpacked into
# /tmp/site (no network there). Locally (.venv present) nothing is installed.
# Make .whl/ once on a machine with the package registry (the device image runs
# CPython 3.12 on x86_64 and has torch, transformers, aiohttp, msgpack, numpy):
#   pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --no-deps -d .whl pydantic pydantic-core annotated-types typing-extensions \
#     typing-inspection sqlalchemy greenlet
#   pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --no-deps -d .whl/extra cryptography cffi pycparser
# PY defaults to the project's .venv where there is one (a local run), else python3
# (the device, which has torch but no .venv).
if [ -z "${PY:-}" ]; then [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; fi
if ls .whl/*.whl >/dev/null 2>&1 && ! "$PY" -c "import pydantic, sqlalchemy" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=${PYTHONPATH:-$PWD}
fi
