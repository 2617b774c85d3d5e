#!/usr/bin/env bash
# Runs the integration tests of a build N times while a load generator keeps every core busy,
# and prints how often each passed: a test that fails here fails some day in CI. Outputs of
# failed runs stay in <build>/flake/<test>.<pass>.log.
# Usage: scripts/flake_table.sh [-n N (default 20)] [-j ctest jobs (default 2)]
#                               [-l load processes (default: one per core)] [BUILD (default build)]
#                               [ctest -R regex (default ^integration/)]
#   e.g. scripts/flake_table.sh -n 3 build-asan '^integration/(hang|console)'
# The load: `yes > /dev/null` per core at normal priority, bounded by each pass's own timeout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=20
jobs=2
load=$(nproc)
while getopts "n:j:l:" opt; do
  case $opt in
    n) runs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    l) load=$OPTARG ;;
    *) echo "usage: scripts/flake_table.sh [-n N] [-j J] [-l L] [BUILD] [REGEX]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
build=${1:-build}
regex=${2:-^integration/}
[[ $build == /* ]] || build=$root/$build
for value in "$runs" "$jobs" "$load"; do
  [[ $value =~ ^[0-9]+$ ]] || { echo "flake_table.sh: -n, -j and -l take whole numbers, got '$value'" >&2; exit 2; }
done
[[ -f $build/CTestTestfile.cmake ]] ||
  { echo "flake_table.sh: no tests in '$build' (build it first: scripts/build.sh release)" >&2; exit 2; }
# The suite's own sanitizer settings, as scripts/test.sh sets them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1}

out=$build/flake
rm -rf "$out"
mkdir -p "$out"
declare -A passes fails slowest
hogs=()
stop_load() {
  local p
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done
  hogs=()
}
trap stop_load EXIT

for ((pass = 1; pass <= runs; pass++)); do
  for ((i = 0; i < load; i++)); do
    timeout 3600 yes >/dev/null &
    hogs+=("$!")
  done
  log=$out/pass.$pass.log
  (cd "$build" && ctest -R "$regex" -j "$jobs" --timeout 600 --output-on-failure) >"$log" 2>&1 || true
  stop_load
  # "12/42 Test #313: integration/hang_report_test ....   Passed   22.37 sec"
  while read -r name result seconds; do
    if [[ $result == Passed ]]; then
      passes[$name]=$((${passes[$name]:-0} + 1))
    else
      fails[$name]=$((${fails[$name]:-0} + 1))
      passes[$name]=${passes[$name]:-0}
      awk -v t="$name" 'index($0, t) && /Test *#/ {on=1} on {print} /^ *[0-9]+\/[0-9]+ Test/ && !index($0, t) {on=0}' \
        "$log" >"$out/${name//\//_}.$pass.log"
    fi
    if [[ $seconds =~ ^[0-9.]+$ ]] && awk -v a="$seconds" -v b="${slowest[$name]:-0}" 'BEGIN {exit !(a > b)}'; then
      slowest[$name]=$seconds
    fi
  done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[^A-Za-z]*([A-Za-z*]+)[^0-9]*([0-9.]+) sec.*/\1 \2 \3/p' "$log" | tr -d '*')
  echo "pass $pass of $runs done ($(grep -cE 'Test +#' "$log") results)" >&2
done

total_fails=0
printf '%-45s %6s %6s %10s\n' test passed failed slowest_s
for name in $(printf '%s\n' "${!passes[@]}" | sort); do
  printf '%-45s %6d %6d %10s\n' "$name" "${passes[$name]}" "${fails[$name]:-0}" "${slowest[$name]:-?}"
  total_fails=$((total_fails + ${fails[$name]:-0}))
done
echo "$runs pass(es) under a load of $load process(es), ctest -j $jobs: $total_fails failure(s)"
[[ $total_fails -eq 0 ]]
