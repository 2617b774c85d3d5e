#!/usr/bin/env bash
# Builds the libFuzzer harnesses (preset fuzz: clang, ASan+UBSan, optimised -> build-fuzz/) and
# runs each for SECONDS, starting from the seed corpus in tests/fuzz/corpus/<target>/ and past
# crashes. Inputs that grow coverage go to <tree>/corpus/<target>/ (kept, never committed); a
# crash, leak, timeout or broken invariant stops with the input saved under
# <tree>/crashes/<target>/ and a non-zero exit. Add such an input to tests/fuzz/regressions/<target>/
# once fixed: the fuzz/ Catch2 tests replay it in every build from then on.
# Usage: scripts/fuzz.sh [--preset asan|fuzz] [SECONDS per target, default 30] [target...]
#        scripts/fuzz.sh [--preset asan|fuzz] --build     builds every harness, runs none
#   --preset asan: the ASan tree's harnesses (build-asan/, unoptimised: fewer executions a second;
#   that tree builds them anyway). CI: scripts/test.sh runs `--preset asan 20` (80 s of fuzzing,
#   40 s on 2 cores) beside its tests; long runs: scripts/fuzz.sh 3600 (the optimised tree).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
preset=fuzz
if [[ ${1:-} == --preset ]]; then
  preset=${2:-}
  [[ $preset == asan || $preset == fuzz ]] ||
    { echo "fuzz.sh: --preset takes asan or fuzz, got '$preset'" >&2; exit 2; }
  shift 2
fi
build_only=0
if [[ ${1:-} == --build ]]; then
  build_only=1
  set -- 1
fi
seconds=${1:-30}
shift || true
all_targets=(store_request round_codec launch_options hostlist)
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "fuzz.sh: SECONDS must be a whole number >= 1, got '$seconds'" >&2
  exit 2
fi
for t in "${targets[@]}"; do
  if [[ ! " ${all_targets[*]} " == *" $t "* ]]; then
    echo "fuzz.sh: unknown target '$t' (expected: ${all_targets[*]})" >&2
    exit 2
  fi
done

runtime=$(clang++ --print-runtime-dir 2>/dev/null || true)
if [[ ! -f $runtime/libclang_rt.fuzzer-x86_64.a && ! -f $runtime/libclang_rt.fuzzer.a ]]; then
  echo "fuzz.sh: clang's libFuzzer is missing (looked in '${runtime:-no clang++}'); install it:" \
    "apt-get install clang libclang-rt-dev (scripts/setup.sh does)" >&2
  exit 2
fi
build=$root/build-$preset
# Quiet when it builds; the compiler's errors (ninja prints them on stdout) when it does not.
if ! build_log=$(bash "$root/scripts/build.sh" "$preset" "${targets[@]/#/fuzz_}" 2>&1); then
  printf '%s\n' "$build_log" >&2
  echo "fuzz.sh: the $preset preset did not build (clang, ASan+UBSan): see the errors above" >&2
  exit 1
fi
((build_only == 0)) || exit 0

# One target: its summary line in $build/fuzz-<target>.summary, non-zero when it failed.
fuzz_one() {
  local t=$1 corpus=$build/corpus/$1 crashes=$build/crashes/$1 log=$build/fuzz-$1.log
  local rc=0 runs cov line regressions=()
  mkdir -p "$corpus" "$crashes"
  # Past crashes are seeds too: a fix that regresses fails at once.
  [[ ! -d $root/tests/fuzz/regressions/$t ]] || regressions=("$root/tests/fuzz/regressions/$t")
  echo "fuzz.sh: $t for ${seconds}s (log: $log)"
  # -timeout: one input running over FUZZ_INPUT_TIMEOUT s (default 10; wall time, so longer for
  # a run at the lowest priority beside other work) is a hang; -rss_limit_mb: over 2 GiB is a
  # leak or a runaway allocation. Both are reported as failures like a crash.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout="${FUZZ_INPUT_TIMEOUT:-10}" -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$crashes/" \
    "$corpus" "$root/tests/fuzz/corpus/$t" "${regressions[@]}" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2 || true)
  line=$(printf '%-16s %4ss %12s executions  %6s edges  %5s inputs in corpus' "$t" "$seconds" \
    "${runs:-?}" "${cov:-?}" "$(find "$corpus" -type f | wc -l)")
  if ((rc != 0)); then
    line+="  FAILED (exit $rc): see $log and $crashes/"
    tail -n 40 "$log" >&2
  fi
  echo "$line" >"$build/fuzz-$t.summary"
  return "$rc"
}

# One target per core at a time: each is one process, so the wall time is the sum over cores.
status=0
running=()
for t in "${targets[@]}"; do
  if ((${#running[@]} >= $(nproc))); then
    wait "${running[0]}" || status=1
    running=("${running[@]:1}")
  fi
  fuzz_one "$t" &
  running+=("$!")
done
for pid in "${running[@]}"; do wait "$pid" || status=1; done
printf '\nfuzz summary:\n'
for t in "${targets[@]}"; do printf '  %s\n' "$(cat "$build/fuzz-$t.summary")"; done
exit "$status"
