#!/usr/bin/env bash
# Configures and builds one flavour of dtrun: release (default), asan (ASan+UBSan) or tsan.
# Usage: scripts/build.sh [release|asan|tsan] [ninja targets...]   -> build dir printed last
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-release}
shift || true
case $flavour in
  release) dir=$root/build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=$root/build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DDTRUN_SANITIZE=address,undefined) ;;
  tsan) dir=$root/build-tsan; flags=(-DCMAKE_BUILD_TYPE=Debug -DDTRUN_SANITIZE=thread -DDTRUN_BUILD_BENCH=OFF) ;;
  *) echo "build.sh: unknown flavour '$flavour' (expected release, asan or tsan)" >&2; exit 2 ;;
esac
cmake -S "$root" -B "$dir" -G Ninja -DDTRUN_WERROR=ON "${flags[@]}" >/dev/null
ninja -C "$dir" "$@"
echo "$dir"
