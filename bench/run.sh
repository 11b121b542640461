#!/usr/bin/env bash
# Side-by-side benchmark (issue 6): nginx as three regional upstreams, then — interleaved,
# several rounds — wrk against the upstream directly, nginx routing by the id's country,
# HAProxy doing the same, and iuid-router. Writes bench/RESULTS.md.
#
#   bash bench/run.sh [--duration 10] [--rounds 5] [--connections 64] [--out bench/RESULTS.md]
#   bash bench/run.sh --profile-only --out /tmp/after.md   # callgrind counts alone (~4 min)
#   IUID_ROUTER_BIN=/tmp/iuid-router.before bash bench/run.sh --profile-only --out /tmp/before.md
#
# Modes, from the environment; each applies to nginx, HAProxy and iuid-router alike, they
# combine (TLS=1 CONNCLOSE=1 is a TLS handshake per request), and the report's header line
# names them. Unset, the run is the default one (GET, plain HTTP/1.1 keep-alive, 3-byte answers).
#   TLS=1         HTTPS to every proxy with one certificate (nginx `listen ssl`, HAProxy
#                 `bind ... ssl crt`, iuid-router `tls:`); their TLS listeners are the measured
#                 targets. wrk (OpenSSL) negotiates TLS 1.2 and resumes its session on a new
#                 connection, so with CONNCLOSE=1 the handshakes are abbreviated ones.
#   CONNCLOSE=1   a new connection per request (`Connection: close` on every request)
#   HTTP1_ENGINE=own|hyper  `http1_engine` for an older IUID_ROUTER_BIN (before issue 37;
#                 the current binary refuses the key; bench/idle.py too)
#   RESP_BYTES=N  the upstreams answer N-byte bodies (a static file); nginx routing gets
#                 `proxy_max_temp_file_size 0` so large answers stream rather than spill to disk
#   REQ_BYTES=N   POST with N-byte bodies; both nginx layers get `client_max_body_size` and
#                 `client_body_buffer_size 1m` (kept in memory); HAProxy and iuid-router need
#                 no setting (a body up to iuid-router's retries.buffer_bytes, 64 KiB, is kept
#                 for a retry, a larger one streams)
#   UPSTREAM_TLS=1  the upstreams serve TLS 1.3 only (nginx `ssl_protocols TLSv1.3`, a leaf for
#                 localhost and 127.0.0.1 signed by the throwaway CA, `ssl_session_cache` and
#                 tickets on, keep-alive); every proxy verifies it against that CA as localhost,
#                 keeps upstream connections alive and resumes sessions (nginx `proxy_pass
#                 https://` with `proxy_ssl_verify on`, `proxy_ssl_name localhost`, `keepalive 64`;
#                 HAProxy `server ... ssl verify required ca-file sni str(localhost) verifyhost
#                 localhost`, `http-reuse always`; iuid-router `https://` upstreams with the
#                 region's `tls: { ca, server_name: localhost }`); callgrind uses them too
#   GRAPHQL=1     POST /graphql, `{"query":"query { node(id: \"<id>\") { id } }"}` (JSON, a
#                 different id per request): iuid-router routes by the id (a `graphql:` route);
#                 nginx and HAProxy read no id and proxy every such POST to one fixed region (eu),
#                 a floor, not the same work; iuid-router's REST path is driven in the same
#                 rounds as one more target (`iuid-router REST`). Not with REQ_BYTES.
#   Every run also reports, per target, the upstream nginx's CPU-s per 100k requests, the
#   connections it accepted (its stub_status on 18084) and the upstream connections each round
#   left in TIME-WAIT (a proxy that churns them opens and leaves thousands).
#   e.g. TLS=1 CONNCLOSE=1 bash bench/run.sh --rounds 1 --duration 5 --no-criterion --no-profile
#        UPSTREAM_TLS=1 CONNCLOSE=1 bash bench/run.sh --rounds 1 --duration 5 --no-criterion --no-profile
#        GRAPHQL=1 bash bench/run.sh --rounds 1 --duration 5 --no-criterion --no-profile
#        CONNCLOSE=1 bash bench/run.sh --profile-only --out /tmp/cg.md   # callgrind: all but TLS
#
# bench/idle.py (run it after this script has installed and built what it needs) measures
# memory instead: RSS per idle connection (HTTP/1.1, TLS, h2c, h2) and per request waiting on
# a silent upstream, iuid-router against nginx, and appends a section to a report:
#   python3 bench/idle.py --proxy both --n 3000 --out bench/RESULTS.md
#
# Installs what it needs from Debian's packages, uses loopback ports 18081-18105 (callgrind's
# TLS listeners 18114-18115; bench/idle.py 18121-18134), and stops only the processes it
# started.
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
