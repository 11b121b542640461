#!/usr/bin/env bash
# The cost of a hop in the mesh (docs/mesh.md): requests per second through one edge (eu's edge to
# eu's upstream) and through two (eu's edge to us's edge, over mTLS and HTTP/2, to us's
# upstream), with wrk over HTTPS on loopback. The edges are the release binary; the upstreams
# are its `echo` command. Prints a Markdown table.
#
#   bash bench/mesh.sh [--duration 10] [--connections 32]
#
# Uses loopback ports 18181-18189 and stops only the processes it started. wrk presents no
# client certificate, so the edges take clients without one (client_auth required: false);
# the edges present theirs to each other.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=10
connections=32
while (($#)); do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    *) echo "usage: $0 [--duration S] [--connections N]" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
cargo build --release --locked --bin iuid-router
bin=$PWD/target/release/iuid-router
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

bash config/make-certs.sh "$work/certs" eu us ap >/dev/null
bash config/make-certs.sh --client "$work/certs" eu-peer us-peer ap-peer >/dev/null
regions=(eu us ap)
declare -A up=([eu]=18181 [us]=18182 [ap]=18183) edge=([eu]=18184 [us]=18185 [ap]=18186) admin=([eu]=18187 [us]=18188 [ap]=18189)
for r in "${regions[@]}"; do
  "$bin" echo --region "$r" --listen "127.0.0.1:${up[$r]}" >"$work/echo-$r.log" 2>&1 &
  pids+=($!)
  mkdir -p "$work/$r"
  {
    echo "version: mesh-bench"
    echo "regions:"
    for o in "${regions[@]}"; do
      if [[ $o == "$r" ]]; then
        echo "  $o: { upstreams: [\"http://127.0.0.1:${up[$o]}\"] }"
      else
        echo "  $o: { upstreams: [\"https://127.0.0.1:${edge[$o]}\"], protocol: h2, tls: { ca: ../certs/ca.pem, client_cert: ../certs/$r-peer.pem, client_key: ../certs/$r-peer-key.pem, server_name: $o } }"
      fi
    done
    echo "countries: { 1: eu, 2: us, 3: ap }"
    echo "default_region: $r"
  } >"$work/$r/routing-table.yaml"
  cat >"$work/$r/router.yaml" <<YAML
listen: 127.0.0.1:${edge[$r]}
admin_listen: 127.0.0.1:${admin[$r]}
region: $r
routing_table: routing-table.yaml
routes: [ { path: "/v1/orders/{id}" } ]
tls:
  certificates: [ { cert: ../certs/$r.pem, key: ../certs/$r-key.pem } ]
  client_auth: { ca: ../certs/ca.pem, required: false }
access_log: false
reload: { watch: false }
YAML
  "$bin" serve --config "$work/$r/router.yaml" >"$work/$r.log" 2>&1 &
  pids+=($!)
done
for r in "${regions[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${admin[$r]}/readyz" >/dev/null && break; sleep 0.1; done
done
eu_id=$("$bin" mint --country 1)
us_id=$("$bin" mint --country 2)
echo "| path | requests/s | p50 | p99 |"
echo "|---|---:|---:|---:|"
for pair in "one edge (eu → eu upstream):$eu_id" "two edges (eu → us edge → us upstream):$us_id"; do
  label=${pair%%:*}; id=${pair#*:}
  url="https://127.0.0.1:${edge[eu]}/v1/orders/$id"
  test "$(curl -sk -o /dev/null -w '%{http_code}' "$url")" = 200 || { echo "$label: not 200" >&2; exit 1; }
  wrk -t2 -c"$connections" -d2s "$url" >/dev/null  # warm-up
  out=$(wrk -t2 -c"$connections" -d"${duration}s" --latency "$url")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  echo "| $label | $rps | $p50 | $p99 |"
done
