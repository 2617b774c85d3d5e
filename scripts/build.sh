#!/usr/bin/env bash
# Configures and builds one flavour of dtrun: release (default), asan (ASan+UBSan), tsan or fuzz
# (clang + libFuzzer harnesses),
# as defined by the presets in CMakePresets.json.
# Usage: scripts/build.sh [release|asan|tsan|fuzz] [ninja targets...]   -> build dir printed last
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
(cd "$root" && cmake --preset "$flavour" >/dev/null)
ninja -C "$dir" "$@"
echo "$dir"
