#!/usr/bin/env bash
# Everything, on a fresh Debian bookworm machine: installs the dependencies, checks formatting,
# builds (warnings are errors) and runs every test in a release build, again under ASan+UBSan,
# fuzzes each parser for FUZZ_SECONDS (default 20) under libFuzzer, runs the store and agent tests
# under TSan, and runs clang-tidy. Exits non-zero on the first failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Each stage's wall time, printed as it ends and again in one table at the end (also on failure).
stages=()
stage_name=""
stage_start=$SECONDS
end_stage() {
  [[ -n $stage_name ]] || return 0
  local took=$((SECONDS - stage_start))
  stages+=("$(printf '%5d s  %s' "$took" "$stage_name")")
  printf '=== %s: %d s\n' "$stage_name" "$took"
  stage_name=""
}
step() {
  end_stage
  stage_name=$*
  stage_start=$SECONDS
  printf '\n=== %s\n' "$*"
}
print_stages() {
  end_stage
  printf '\n=== stage times (%d s in all)\n' "$SECONDS"
  printf '%s\n' "${stages[@]}"
}

# Runs ctest in a build directory and adds its counts to the totals printed at the end.
passed=0
failed=0
summary=$(mktemp)
trap 'rm -f "$summary"; print_stages' EXIT
run_ctest() {  # <build dir> [ctest args...]
  local dir=$1 rc=0
  shift
  (cd "$dir" && ctest "$@") | tee "$summary" || rc=$?
  local line total bad
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$summary" | tail -n 1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  bad=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  passed=$((passed + ${total:-0} - ${bad:-0}))
  failed=$((failed + ${bad:-0}))
  return "$rc"
}

step "setup"
bash scripts/setup.sh

step "format check and the house rules (docs/ARCHITECTURE.md)"
bash scripts/format.sh --check
python3 scripts/check_rooms.py

step "release build and tests"
bash scripts/build.sh release
run_ctest build --output-on-failure --timeout 600 -j2

step "ASan+UBSan build and tests"
bash scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  run_ctest build-asan --output-on-failure --timeout 900 -j2

step "fuzzing: each libFuzzer target for ${FUZZ_SECONDS:=20}s under ASan+UBSan (clang)"
# Long runs by hand: scripts/fuzz.sh 3600 (seconds per target).
bash scripts/fuzz.sh "$FUZZ_SECONDS"

step "TSan build: store and agent tests"
bash scripts/build.sh tsan rdzv_tests agent_tests dtrun
TSAN_OPTIONS=halt_on_error=1 run_ctest build-tsan --output-on-failure --timeout 900 -R '^(rdzv|agent)/|^integration/multinode_test'

step "clang-tidy"
bash scripts/tidy.sh build

end_stage
echo "all checks passed; tests: $passed passed, $failed failed"
