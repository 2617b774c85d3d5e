#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over dtrun's own sources against a build's compile commands.
# Usage: scripts/tidy.sh [build-dir]   Fails on any check listed in WarningsAsErrors.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mapfile -t files < <(git ls-files 'common/*.cpp' 'scheduler/*.cpp' 'placement/*.cpp' 'rendezvous/*.cpp' 'launcher/*.cpp' 'agent/*.cpp' \
  'worker_runtime/*.cpp' 'bench/*.cpp')
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet \
  --extra-arg=-Wno-unknown-warning-option 2>/dev/null
