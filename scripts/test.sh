#!/usr/bin/env bash
# Everything, on a fresh Debian bookworm machine: installs the dependencies, checks formatting,
# builds (warnings are errors) and runs every test in a release build, again under ASan+UBSan,
# runs the store and agent tests under TSan, and runs clang-tidy. Exits non-zero on the first failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
step() { printf '\n=== %s\n' "$*"; }

step "setup"
bash scripts/setup.sh

step "format check"
bash scripts/format.sh --check

step "release build and tests"
bash scripts/build.sh release
(cd build && ctest --output-on-failure --timeout 600 -j2)

step "ASan+UBSan build and tests"
bash scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure --timeout 900 -j2)

step "TSan build: store and agent tests"
bash scripts/build.sh tsan rdzv_tests agent_tests dtrun
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure --timeout 900 -R '^(rdzv|agent)/')

step "clang-tidy"
bash scripts/tidy.sh build

step "all checks passed"
