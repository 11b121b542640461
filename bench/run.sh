#!/usr/bin/env bash
# Side-by-side benchmark (issue 6): nginx as three regional upstreams, then — interleaved,
# several rounds — wrk against the upstream directly, nginx routing by the id's country,
# HAProxy doing the same, and iuid-router. Writes bench/RESULTS.md.
#
#   bash bench/run.sh [--duration 10] [--rounds 5] [--connections 64] [--out bench/RESULTS.md]
#   bash bench/run.sh --profile-only --out /tmp/after.md   # callgrind counts alone (~4 min)
#   IUID_ROUTER_BIN=/tmp/iuid-router.before bash bench/run.sh --profile-only --out /tmp/before.md
#
# Installs what it needs from Debian's packages, uses loopback ports 18081-18097, and stops
# only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
if ((${#missing[@]})); then
  echo "== installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "== building iuid-router (release)"
cargo build --release --locked --bin iuid-router
exec python3 bench/bench.py "$@"
