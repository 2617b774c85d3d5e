#!/usr/bin/env bash
# Configures and builds one flavour of dtrun: release (default), asan (ASan+UBSan), tsan or fuzz
# (clang + libFuzzer harnesses),
# as defined by the presets in CMakePresets.json.
# Usage: scripts/build.sh [release|asan|tsan|fuzz] [ninja targets...]   -> build dir printed last
# DTRUN_UNITY_BATCH_SIZE: sources per unity batch (the presets' 16 when unset; 0, each target in
# one batch, as scripts/test.sh builds: least CPU from scratch, most for a one-file change).
# DTRUN_TESTS: the tests the tree lists and builds (tests/CMakeLists.txt; the preset's when unset).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-release}
shift || true
case $flavour in
  release | asan | tsan | fuzz) ;;
  *) echo "build.sh: unknown flavour '$flavour' (expected release, asan, tsan or fuzz)" >&2; exit 2 ;;
esac
dir=$root/build
[[ $flavour == release ]] || dir=$root/build-$flavour
# The presets (CMakePresets.json) hold each flavour's settings; this only selects one.
settings=()  # -D overrides of the preset
if [[ -n ${DTRUN_UNITY_BATCH_SIZE:-} ]]; then
  [[ $DTRUN_UNITY_BATCH_SIZE =~ ^[0-9]+$ ]] ||
    { echo "build.sh: DTRUN_UNITY_BATCH_SIZE must be a whole number (0: a target per batch), got '$DTRUN_UNITY_BATCH_SIZE'" >&2; exit 2; }
  settings=(-DCMAKE_UNITY_BUILD_BATCH_SIZE="$DTRUN_UNITY_BATCH_SIZE")
fi
[[ -z ${DTRUN_TESTS+set} ]] || settings+=(-DDTRUN_TESTS="$DTRUN_TESTS")
(cd "$root" && cmake --preset "$flavour" "${settings[@]}" >/dev/null)
ninja -C "$dir" "$@"
echo "$dir"
