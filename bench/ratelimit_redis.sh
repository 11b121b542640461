#!/usr/bin/env bash
# The latency a rate-limit decision adds (docs/rate-limits.md "Cost"): wrk --latency against
# the router in front of one echo region, three ways in turn (no rule; one client_ip rule in
# memory; the same rule shared through a local redis-server), every request admitted (the
# rate is far above the load). Prints wrk's p50/p90/p99 and req/s for each, several rounds
# interleaved. Needs wrk and redis-server; uses ports 18090-18099.
#
#   bash bench/ratelimit_redis.sh [target/release/iuid-router] [rounds] [seconds]
set -euo pipefail
BIN=${1:-target/release/iuid-router}
ROUNDS=${2:-3}
SECS=${3:-10}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

redis-server --port 18099 --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
"$BIN" echo --region eu --listen 127.0.0.1:18098 >"$work/echo.log" 2>&1 &
pids+=($!)
cat >"$work/routing-table.yaml" <<EOF
version: bench
regions:
  eu: { upstreams: ["http://127.0.0.1:18098"] }
countries:
  1: eu
default_region: eu
EOF
ID=$("$BIN" mint --country 1 --service 1 2>/dev/null | head -1)
rule='  - { key: client_ip, rate: 1000000/s, burst: 1000000 }'
declare -A extra=(
  [none]=""
  [memory]=$'rate_limits:\n'"$rule"
  [redis]=$'rate_limits:\n'"$rule"$'\nstore: { redis: "redis://127.0.0.1:18099/0", on_error: local }'
)
port=18090
declare -A ports
for mode in none memory redis; do
  port=$((port + 1))
  ports[$mode]=$port
  cat >"$work/$mode.yaml" <<EOF
listen: 127.0.0.1:$port
region: edge
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{id}
workers: 1
reload: { watch: false }
${extra[$mode]}
EOF
  "$BIN" serve --config "$work/$mode.yaml" >"$work/$mode.log" 2>&1 &
  pids+=($!)
done
sleep 1
for mode in none memory redis; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${ports[$mode]}/v1/orders/$ID")
  [[ $code == 200 ]] || { echo "$mode: answered $code"; cat "$work/$mode.log"; exit 1; }
done
echo "mode    round  req/s     p50       p90       p99"
for round in $(seq 1 "$ROUNDS"); do
  for mode in none memory redis; do
    out=$(wrk -t1 -c16 -d"${SECS}s" --latency "http://127.0.0.1:${ports[$mode]}/v1/orders/$ID")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p90=$(awk '$1 == "90%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    printf '%-7s %-6s %-9s %-9s %-9s %-9s\n' "$mode" "$round" "$rps" "$p50" "$p90" "$p99"
  done
done
