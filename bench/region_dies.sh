#!/usr/bin/env bash
# A region dies under load (issue 62). Three regions (eu, us, ap), two `iuid-router echo`
# upstreams each; ap fails over to eu for reads (`failover: { region: eu, serves: reads,
# overprovisioning: 1.4 }`), active health checks every 500 ms. A paced keep-alive load, 80 %
# GET / 20 % POST of /v1/orders/{id} to ids of all three regions; after a warm-up and 10 s of
# "before", both ap upstreams are `kill -9`ed, restarted 10 s later, and the load runs 10 s
# more. bench/region_dies.py runs it and prints the table (per region, access and phase:
# requests, errors, 503s with Retry-After, p50/p99) and one line per acceptance criterion.
#
#   bash bench/region_dies.sh                 # print the Markdown (about 40 s after the build)
#   bash bench/region_dies.sh --runs 3        # the first run's report, then every run's criteria
#   bash bench/region_dies.sh --out FILE      # and add it to FILE under a dated heading
#   bash bench/region_dies.sh -- --rate 100   # options after -- go to region_dies.py
#
# Needs python3 (standard library only). Installs nothing. Uses loopback ports 18300-18315;
# stops only the processes it started (their pids are listed in its work directory). The load
# client is in region_dies.py, not bench/loadgen, which sends GETs only and reports no headers.
set -euo pipefail
cd "$(dirname "$0")/.."
out=""
runs=1
extra=()
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--runs N] [--out FILE] [-- region_dies.py options]" >&2; exit 2 ;;
  esac
done

if [[ ! -x target/release/iuid-router ]]; then
  timeout 2400 cargo build --release --locked --bin iuid-router
fi

work=$(mktemp -d /tmp/region-dies.XXXXXX)
cleanup() {
  # region_dies.py stops what it started; this is for an interrupted run.
  for pids in "$work"/run*/pids; do
    [[ -f $pids ]] || continue
    while read -r pid; do
      # Only if that pid is still one of ours (the router, an echo), not a reused one.
      if grep -qa iuid-router "/proc/$pid/cmdline" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    done <"$pids"
  done
  if [[ -n ${KEEP_WORK:-} ]]; then echo "work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cmd="bash bench/region_dies.sh"
if ((runs > 1)); then cmd+=" --runs $runs"; fi
if ((${#extra[@]})); then cmd+=" -- ${extra[*]}"; fi
summaries=()
for ((i = 1; i <= runs; i++)); do
  mkdir "$work/run$i"
  echo "run $i of $runs" >&2
  timeout 300 python3 bench/region_dies.py --work "$work/run$i" --bin target/release/iuid-router \
    "${extra[@]}" >"$work/run$i/report.md"
  summaries+=("$work/run$i/summary.json")
  sleep 2  # the ports' TIME_WAIT and the last run's processes gone
done
{
  if ((runs > 1)); then echo "\`$cmd\`; the first run's report:"; else echo "\`$cmd\`:"; fi
  echo
  cat "$work/run1/report.md"
  if ((runs > 1)); then
    echo
    echo "Each criterion over the $runs runs (run 1 is the one above):"
    echo
    python3 bench/region_dies.py --summarize "${summaries[@]}"
  fi
} >"$work/report.md"
cat "$work/report.md"
if [[ -n $out ]]; then
  { echo; echo "## A region dies under load (issue 62), $(date -u +%F)"; echo; cat "$work/report.md"; } >>"$out"
  echo "appended to $out" >&2
fi
