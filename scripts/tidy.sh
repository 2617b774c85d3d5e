#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over dtrun's own sources. Fails on any check listed in
# WarningsAsErrors.
# Usage: scripts/tidy.sh [dir (default build-tidy)]
# clang-tidy needs each source's own compile command, and the presets compile in unity batches
# (CMakeLists.txt): the commands come from the release preset configured without batches in
# <dir>, which is configured only, never built (nothing dtrun's sources include is generated).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
db=${1:-build-tidy}
cmake --preset release -B "$db" -DCMAKE_UNITY_BUILD=OFF >/dev/null
mapfile -t files < <(git ls-files 'common/*.cpp' 'scheduler/*.cpp' 'placement/*.cpp' 'rendezvous/*.cpp' 'launcher/*.cpp' 'agent/*.cpp' \
  'worker_runtime/*.cpp' 'bench/*.cpp')
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$db" --quiet \
  --extra-arg=-Wno-unknown-warning-option 2>/dev/null
