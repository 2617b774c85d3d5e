#!/usr/bin/env bash
# Configures and builds one flavour of dtrun: release (default), asan (ASan+UBSan) or tsan,
# as defined by the presets in CMakePresets.json.
# Usage: scripts/build.sh [release|asan|tsan] [ninja targets...]   -> build dir printed last
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-release}
shift || true
case $flavour in
  release | asan | tsan) ;;
  *) echo "build.sh: unknown flavour '$flavour' (expected release, asan or tsan)" >&2; exit 2 ;;
esac
dir=$root/build
[[ $flavour == release ]] || dir=$root/build-$flavour
# The presets (CMakePresets.json) hold each flavour's settings; this only selects one.
(cd "$root" && cmake --preset "$flavour" >/dev/null)
ninja -C "$dir" "$@"
echo "$dir"
