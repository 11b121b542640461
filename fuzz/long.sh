#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, two at a time, new inputs kept
# in target/fuzz-corpus/<target> (the committed seeds in fuzz/corpus/<target> are read, not
# written), and prints one Markdown row per target: executions, exec/s, coverage (libFuzzer's
# `cov:` edges and `ft:` features), corpus size, and whether it crashed (the input is then
# in fuzz/artifacts/<target>/). fuzz/README.md keeps the last table.
#
#   bash fuzz/long.sh 600                 # every target, 10 minutes each
#   bash fuzz/long.sh 60 iuid graphql     # two targets, a minute each
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: fuzz/long.sh SECONDS [TARGET...]}
shift
targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi
RUSTC_BOOTSTRAP=1 cargo fuzz build --fuzz-dir fuzz -a >/dev/null 2>&1 || {
  echo "cargo fuzz build failed" >&2
  exit 1
}
mkdir -p target/fuzz-logs
run() {
  local t=$1
  mkdir -p "target/fuzz-corpus/$t"
  RUSTC_BOOTSTRAP=1 timeout $((seconds + 300)) cargo fuzz run --fuzz-dir fuzz -a "$t" \
    "target/fuzz-corpus/$t" "fuzz/corpus/$t" -- -max_total_time="$seconds" -max_len=8192 \
    -timeout=10 -print_final_stats=1 >"target/fuzz-logs/$t.log" 2>&1
  echo $? >"target/fuzz-logs/$t.rc"
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  run "${targets[$i]}" &
  if ((i + 1 < ${#targets[@]})); then run "${targets[$((i + 1))]}" & fi
  wait
done
echo "| target | seconds | executions | exec/s | cov | ft | corpus | result |"
echo "|---|---|---|---|---|---|---|---|"
for t in "${targets[@]}"; do
  log="target/fuzz-logs/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*$')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*$')
  corp=$(grep -o 'corp: [0-9]*' <<<"$last" | grep -o '[0-9]*$')
  result=ok
  [[ "$(cat "target/fuzz-logs/$t.rc")" == 0 ]] || result="crash: see $log"
  echo "| $t | $seconds | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $result |"
done
