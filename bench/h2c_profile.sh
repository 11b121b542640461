#!/usr/bin/env bash
# User-space instructions per HTTP/2 request (h2c, prior knowledge) of iuid-router under
# callgrind, one worker: an nginx upstream answering `ok`, the REST path
# (GET /v1/orders/<iUID>), `h2load -n 20000 -c 8 -m 10` after a warm-up of 2,000; the
# counters are zeroed after the warm-up and dumped after the run, so the count is the run's
# alone. Usage: bench/h2c_profile.sh [BINARY] (default target/release/iuid-router); with
# CG_OUT=FILE the dump is kept there; with TRACE_RATIO=r the router traces at `sample_ratio: r`,
# its spans posted to the upstream nginx's /v1/traces (the export thread counted too).
# Needs nginx, valgrind and h2load (Debian: nginx-light valgrind nghttp2-client).
set -euo pipefail
BIN=${1:-target/release/iuid-router}
BIN=$(realpath "$BIN")
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
UP=18281 RT=18280 ADM=18282
cat > "$W/nginx.conf" <<NG
daemon off; worker_processes 1; pid $W/nginx.pid; error_log $W/nginx.err;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$UP; location / { return 200 "ok"; }
  location = /v1/traces { return 200 ""; } } }
NG
cat > "$W/routing-table.yaml" <<TB
version: h2c-profile
regions:
  eu: { upstreams: ["http://127.0.0.1:$UP"] }
countries:
  3: eu
default_region: eu
TB
cat > "$W/router.yaml" <<RY
listen: 127.0.0.1:$RT
admin_listen: 127.0.0.1:$ADM
region: edge
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{id}
reload: { watch: false }
workers: 1
RY
if [ -n "${TRACE_RATIO:-}" ]; then
  echo "tracing: { otlp: { endpoint: \"http://127.0.0.1:$UP\", protocol: http/protobuf }, sample_ratio: $TRACE_RATIO }" >> "$W/router.yaml"
fi
ID=$("$BIN" mint --country 3 --service 1 2>/dev/null | head -1 || true)
[ -n "$ID" ] || ID=0190b4d2-3c4e-8a76-9276-0b1c2d3e4f50
nginx -c "$W/nginx.conf" -p "$W" &
valgrind --tool=callgrind --callgrind-out-file="$W/cg" "$BIN" serve --config "$W/router.yaml" \
  > "$W/router.log" 2>&1 &
VG=$!
for _ in $(seq 1 120); do
  curl -s -o /dev/null "http://127.0.0.1:$ADM/readyz" && break
  sleep 0.5
done
URL="http://127.0.0.1:$RT/v1/orders/$ID"
curl -s --http2-prior-knowledge -o /dev/null -w "status %{http_code}\n" "$URL"
h2load -n 2000 -c 8 -m 10 "$URL" > /dev/null
callgrind_control -z "$VG" > /dev/null
h2load -n 20000 -c 8 -m 10 "$URL" | grep -E "^requests:|status codes:"
callgrind_control -d "$VG" > /dev/null
kill -TERM "$VG"; wait "$VG" || true
TOTAL=$(callgrind_annotate "$W/cg.1" 2>/dev/null | grep "PROGRAM TOTALS" | awk '{gsub(",","",$1); print $1}')
echo "instructions per request: $((TOTAL / 20000)) (total $TOTAL)"
# CG_OUT=FILE keeps the callgrind dump (for callgrind_annotate).
if [ -n "${CG_OUT:-}" ]; then cp "$W/cg.1" "$CG_OUT"; fi
