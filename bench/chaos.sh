#!/usr/bin/env bash
# The router under faults while a steady load runs (issue 40). One fault at a time, then
# several together, each during its own 26-36 s of paced keep-alive GETs (`loadgen steady`,
# bench/loadgen) that judge every request:
#   1 kill -9 of one of a region's two upstreams, and its restart
#   2 a routing-table reload every 200 ms, two valid versions in turn (POST /admin/reload)
#   3 an invalid table (the reload must answer 422, the last good table keep serving), fixed
#   4 certificate rotation (same CA) under HTTPS load, the router watching the files
#   5 `iuid-router upgrade` (upgrade_socket; the old process drains and exits)
#   6 kill -9 of one edge of a three-edge mesh (mTLS + HTTP/2, as bench/mesh.sh), restart
#   7 the link between two edges: +100 ms each way, 20 % loss, a partition (a network
#     namespace, a veth pair, nftables drops and `loadgen delay`), with a recovery window
#   8 several of them at once
# For each: requests, failures as refused / reset / closed / 5xx / no answer (timeout), p99,
# the router's RSS and open fds before and after, and when the failures happened; at the end
# RSS/fds against the start. bench/chaos.py runs the phases and writes the table.
#
#   bash bench/chaos.sh                    # print the Markdown (about 7 minutes after the build)
#   bash bench/chaos.sh --out FILE         # and append it to FILE under a dated heading
#
# Needs root for phase 7 (else that phase is skipped, with the reason in its row), python3,
# curl and openssl. Uses loopback ports 18200-18219, the namespace `chaos40-us` and the veth
# `chaos40-v0`/`chaos40-v1` (10.200.0.1/30 and .2); stops only the processes it started (their
# pids are listed in its work directory) and removes the namespace (with its nftables rules).
set -euo pipefail
cd "$(dirname "$0")/.."
out=""
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--out FILE]" >&2; exit 2 ;;
  esac
done

timeout 1800 cargo build --release --locked --bin iuid-router
timeout 1200 cargo build --release --locked --manifest-path bench/loadgen/Cargo.toml

work=$(mktemp -d /tmp/chaos.XXXXXX)
cleanup() {
  # chaos.py stops what it started; this is for an interrupted run.
  if [[ -f $work/pids ]]; then
    while read -r pid; do
      # Only if that pid is still one of ours (a router, an echo, loadgen), not a reused one.
      if grep -qa -e iuid-router -e loadgen "/proc/$pid/cmdline" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    done <"$work/pids"
  fi
  ip netns del chaos40-us 2>/dev/null || true
  ip link del chaos40-v0 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

timeout 1500 python3 bench/chaos.py --work "$work" --bin target/release/iuid-router \
  --loadgen bench/loadgen/target/release/loadgen >"$work/report.md"
cat "$work/report.md"
if [[ -n $out ]]; then
  { echo; echo "## Chaos (issue 40), $(date -u +%F)"; echo; cat "$work/report.md"; } >>"$out"
  echo "appended to $out" >&2
fi
