#!/usr/bin/env bash
# Session 3, device call 2 (nvidia-h200, 16 CPU cores): issue 11's stamp error at 1,000
# nodes split at the senders' kernel transmit stamps (more client processes than call 1),
# and issue 16's gateways at 5,000 nodes on one PostgreSQL. PostgreSQL 16 comes from the
# pgserver wheel's bundled binaries (.pgw/, carried: the device has no PostgreSQL and no
# network), run as an unprivileged user; scipy/jinja2/prometheus-client are the image's.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nproc; uptime; python3 -m pip show aiohttp scipy 2>/dev/null | grep -E "^(Name|Version)"
step() { echo; echo "=== $* ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))"; }
step "PostgreSQL from the pgserver wheel"
mkdir -p /tmp/pgw && python3 -m zipfile -e .pgw/pgserver-*.whl /tmp/pgw && chmod -R a+rX /tmp/pgw
B=/tmp/pgw/pgserver/pginstall/bin; chmod a+x $B/*
id pg >/dev/null 2>&1 || useradd -M pg
mkdir -p /tmp/pgd && chown pg /tmp/pgd
runuser -u pg -- $B/initdb -D /tmp/pgd/data -U netcheck --auth=trust >/dev/null || exit 1
runuser -u pg -- $B/pg_ctl -D /tmp/pgd/data -l /tmp/pgd/log -w start -o \
  "-p 54329 -k /tmp/pgd -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400" || exit 1
$B/psql -h 127.0.0.1 -p 54329 -U netcheck -d postgres -qc "create database netcheck" || exit 1
URL=postgresql+psycopg://netcheck@127.0.0.1:54329/netcheck
sysctl net.core.netdev_tstamp_prequeue net.core.netdev_budget net.core.netdev_budget_usecs
if [ "${SKIP_TIMING:-0}" = 0 ]; then
step "timing: 1,000 nodes at once, 100 per client process, transmit-stamp split"
timeout -k 5 200 python3 scripts/bench_timing.py --nodes 1000 --shapes h200 --mode instant \
  --rounds 3 --per-host 100 --gap 3 --json "$OUT/timing_1000.json"
fi
step "gateways: 1 and 4 gateways, 5,000 nodes"
timeout -k 5 "${GW_TIMEOUT:-350}" python3 scripts/bench_gateways --postgres "$URL" --gateways 1 4 --nodes 5000 \
  --floor --hosts-nice 10 --rounds 5 2>&1 | tee "$OUT/gateways_5000.txt"
step done
