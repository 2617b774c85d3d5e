#!/usr/bin/env bash
# Everything, on a fresh Debian bookworm machine: installs the dependencies, checks formatting,
# builds (warnings are errors) an ASan+UBSan tree (clang), a release tree (GCC) and a TSan tree
# (clang), runs every test of the first, the integration scripts, libdtrt's and dtrun::ddp's of
# the second (a few integration scripts in one of the two only: release_tree_only,
# release_in_short_form and sanitizers_in_short_form in tests/integration/lib/preamble.sh) and
# the store and agent tests of the third (one ctest run),
# fuzzes each parser for FUZZ_SECONDS (default 20) under libFuzzer, and runs clang-tidy. Exits
# non-zero on the first failure. TEST_JOBS (default 6): how many tests run at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Each stage's wall time and how busy the machine's cores were meanwhile (/proc/stat: the
# CPU-seconds used by anything, and those left idle), printed as it ends and again in one table
# at the end (also on failure). A stage with no idle CPU is bound by its work, not by waiting.
stages=()
stage_name=""
stage_start=$SECONDS
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6 }' /proc/stat; }
stage_ticks=$(cpu_ticks)
end_stage() {
  [[ -n $stage_name ]] || return 0
  local took=$((SECONDS - stage_start)) total idle total0 idle0 hz line
  read -r total idle <<<"$(cpu_ticks)"
  read -r total0 idle0 <<<"$stage_ticks"
  hz=$(getconf CLK_TCK)
  line=$(printf '%5d s  %6d CPU-s busy  %5d idle  %s' "$took" $(((total - total0 - idle + idle0) / hz)) \
    $(((idle - idle0) / hz)) "$stage_name")
  stages+=("$line")
  printf '=== %s\n' "$line"
  stage_name=""
}
step() {
  end_stage
  stage_name=$*
  stage_start=$SECONDS
  stage_ticks=$(cpu_ticks)
  printf '\n=== %s\n' "$*"
}
print_stages() {
  end_stage
  printf '\n=== stage times (%d s in all, %d cores)\n' "$SECONDS" "$(nproc)"
  printf '%s\n' "${stages[@]}"
}

# Runs ctest in a build directory and adds its counts to the totals printed at the end. A script
# that does not run in a tree or form (tests/integration/lib/preamble.sh: release_tree_only,
# release_in_short_form, sanitizers_in_short_form) is counted as skipped, not passed.
passed=0
skipped=0
failed=0
summary=$(mktemp)
run_ctest() {  # <build dir> [ctest args...]
  local dir=$1 rc=0
  shift
  (cd "$dir" && ctest "$@") | tee "$summary" || rc=$?
  local line total bad skip
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$summary" | tail -n 1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  bad=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  skip=$(grep -cE '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$summary" || true)
  passed=$((passed + ${total:-0} - ${bad:-0} - skip))
  skipped=$((skipped + skip))
  failed=$((failed + ${bad:-0}))
  return "$rc"
}

# Work that can wait (clang-tidy, fuzzing) runs beside the builds and the tests, at the lowest
# priority: they keep the CPU whenever they want it (the suite passes under a load on every core,
# scripts/flake_table.sh) and it takes what they leave idle. Each in a session of its own, so that a
# failing stage stops it whole; its output is shown when it is waited for. A new session is a new
# scheduler autogroup where the kernel groups sessions (sched_autogroup_enabled): nice only ranks
# processes inside their group, and groups share the CPU evenly, so the session's group is made
# nice 19 too (a build at nice 19 in a group of its own took half of the CPU from the tests).
build_logs=$(mktemp -d)
beside=()
run_beside() {  # <nice> <name> <command...>: starts it, its log in $build_logs/<name>.log
  local nice=$1 name=$2
  shift 2
  setsid -w bash -c 'echo "$0" >/proc/self/autogroup 2>/dev/null || true; exec nice -n "$0" "$@"' \
    "$nice" "$@" >"$build_logs/$name.log" 2>&1 &
  beside+=("$!")
  eval "beside_$name=$!"
}
idle_beside() { run_beside 19 "$@"; }
wait_beside() {  # <name> [all]: waits for it; its log's tail (all of it: failed, or `all`)
  local name=$1 pid rc=0
  pid=$(eval "echo \$beside_$name")
  wait "$pid" || rc=$?
  if ((rc != 0)); then
    cat "$build_logs/$name.log" >&2
    echo "the $name step (run beside the tests) failed: exit $rc" >&2
    return "$rc"
  fi
  if [[ ${2:-} == all ]]; then cat "$build_logs/$name.log"; else tail -n 2 "$build_logs/$name.log"; fi
}
stop_beside() {
  local pid
  for pid in "${beside[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
  rm -rf "$build_logs"
}
trap 'stop_beside; rm -f "$summary"; print_stages' EXIT

# The short form of every slow check (each path once; support/test_form.h, LONG in
# tests/integration/lib/preamble.sh) in every tree: DTRUN_TEST_LONG=1 bash scripts/test.sh runs the
# long forms, as ctest does by hand in a release tree.
export DTRUN_TEST_LONG=${DTRUN_TEST_LONG:-0}
# Every tree here is built from scratch, each source once: a target compiles as one unity batch
# (scripts/build.sh, scripts/tidy.sh), which parses and instantiates what its sources share once
# (the agent's four batches of 16 took 165 CPU-seconds under ASan, 185 under GCC; as one, 93 and 120).
export DTRUN_UNITY_BATCH_SIZE=${DTRUN_UNITY_BATCH_SIZE:-0}

# What the ASan tree, the format check and clang-tidy need first; libtorch (the release tree's)
# and what the tests alone need (servers, chromium, ...) install while the ASan tree builds.
step "setup (the sanitizer builds' packages; the rest are installed beside the ASan build)"
bash scripts/setup.sh core
run_beside 0 packages bash scripts/setup.sh all

step "format check and the house rules (docs/ARCHITECTURE.md)"
bash scripts/format.sh --check
python3 scripts/check_rooms.py

# The three trees one after the other: each build takes both cores. ASan's first, which needs no
# libtorch, while the rest of the packages install; the release tree's after them. clang-tidy,
# which parses every source again, starts now at the lowest priority and fills what the builds
# leave idle (a tree's last batches and links, one at a time), then what the waiting tests leave.
step "builds: ASan+UBSan with the fuzzing harnesses (clang), release (GCC), TSan's store and agent tests (clang); clang-tidy beside them"
idle_beside tidy bash scripts/tidy.sh
bash scripts/build.sh asan
wait_beside packages
# The release tree lists, and builds, what its optimised code checks that no sanitizer tree does:
# the integration scripts, libdtrt's runtime/ checks (its transports at -O2) and dtrun::ddp's
# (libtorch). The unit tests of dtrun's logic (common, rdzv, launcher, scheduler, placement,
# fuzz, agent) run in the ASan tree, the store's and the agent's in TSan's too; in this tree they
# took about 150 CPU-seconds to build and 40 to run.
DTRUN_TESTS="integration;runtime;ddp" bash scripts/build.sh release
bash scripts/build.sh tsan rdzv_tests agent_tests dtrun

# One ctest run over the three trees, so that most of the tests, which wait (on timeouts, on other
# processes), overlap whatever tree they come from: ctest starts the long ones first (COST) and
# keeps TEST_JOBS running; a script never runs beside its twin from another tree (RESOURCE_LOCK,
# tests/CMakeLists.txt). The suite passes with every core busy (scripts/flake_table.sh).
# Fuzzing runs beside it: each target FUZZ_SECONDS (20) of wall time however much CPU it gets,
# after replaying its corpus and past crashes, so it adds no time of its own; at the lowest
# priority an input may wait for the CPU, so a hang is 60 s there, not 10. Long runs by hand:
# scripts/fuzz.sh 3600 (seconds per target, the optimised tree).
step "tests: release, ASan+UBSan and TSan in one ctest run, ${TEST_JOBS:=6} at a time (fuzzing beside them)"
idle_beside fuzz env FUZZ_INPUT_TIMEOUT=60 bash scripts/fuzz.sh --preset asan "${FUZZ_SECONDS:=20}"
trees=(build build-asan build-tsan)
mkdir -p build-all
first=1
quoted=()
for tree in "${trees[@]}"; do
  count=$( (cd "$tree" && ctest -N) | sed -n 's/^Total Tests: //p')
  echo "tests $first-$((first + count - 1)): $tree/"
  first=$((first + count))
  quoted+=("\"$root/$tree\"")
done
echo "subdirs(${quoted[*]})" >build-all/CTestTestfile.cmake
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 TSAN_OPTIONS=halt_on_error=1 \
  run_ctest build-all --output-on-failure --timeout 900 -j "$TEST_JOBS"

step "fuzzing: each libFuzzer target for ${FUZZ_SECONDS}s under ASan+UBSan (run beside the tests: waits for it)"
wait_beside fuzz all

step "clang-tidy (run beside the builds and tests: waits for it)"
wait_beside tidy

end_stage
echo "all checks passed; tests: $passed passed, $skipped skipped, $failed failed"
