#!/usr/bin/env bash
# The Python wheel, dtrun-<version>-py3-none-manylinux_2_<N>_x86_64.whl, from a release build:
#   scripts/build_wheel.sh <build dir> [out dir (default: <build dir>/wheel)]
# `cmake --install --strip` stages the build's install in a scratch prefix (stripped, as the .deb
# is: the debug info is most of a RelWithDebInfo binary's size); the wheel carries its
# bin/dtrun, bin/dtrun-netcheck and share/ as data, which pip puts in the environment's bin/ and
# share/: the `dtrun` command is the binary itself (nothing between the shell and dtrun), and it
# finds the Python hook as <bin>/../share/dtrun/python as in any install. The package `dtrun`
# (scripts/wheel/dtrun) gives `python -m dtrun`, which execs that binary. N is the glibc floor
# measured from the binaries (scripts/glibc_floor.sh), so the tag says what they need; a build
# whose binaries need more than the C library (not DTRUN_PORTABLE) is refused. Offline, with
# Debian's python3-build, python3-setuptools and python3-wheel (scripts/setup.sh).
set -euo pipefail

die() { echo "build_wheel: $*" >&2; exit 1; }
(($# >= 1 && $# <= 2)) || { echo "usage: scripts/build_wheel.sh <build dir> [out dir]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" 2>/dev/null && pwd) || die "$1: no such build directory (scripts/build.sh release makes build/)"
out=${2:-$build/wheel}
mkdir -p "$out" && out=$(cd "$out" && pwd) || die "$out: cannot make the output directory"  # absolute: the build runs elsewhere
python=/usr/bin/python3  # Debian's, with setuptools and wheel (the python3 on PATH may lack them)
[[ -f $build/CMakeCache.txt ]] || die "$build has no CMakeCache.txt: name a configured build directory"
"$python" -I -c 'import build.__main__, setuptools, wheel' 2>/dev/null ||
  die "$python lacks build, setuptools or wheel: install python3-build python3-setuptools python3-wheel (scripts/setup.sh)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# The launcher's component only: libdtrt-dev (lib/, include/) is not the wheel's.
cmake --install "$build" --component dtrun --prefix "$stage/prefix" --strip >"$stage/install.log" 2>&1 ||
  die "cmake --install $build exited $?: $(tail -n 5 "$stage/install.log") (build dtrun and dtrun_netcheck first)"
bins=("$stage/prefix/bin/dtrun" "$stage/prefix/bin/dtrun-netcheck")
for bin in "${bins[@]}"; do
  [[ -x $bin ]] || die "the install has no bin/$(basename "$bin")"
  # A manylinux wheel may need only the C library (glibc's own parts included) of its host.
  for lib in $(LC_ALL=C readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case $lib in
      libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-x86-64.so.2) ;;
      *) die "bin/$(basename "$bin") needs $lib: build with -DDTRUN_PORTABLE=ON (the release preset) for a wheel" ;;
    esac
  done
done
floor=$("$here/glibc_floor.sh" "${bins[@]}")
[[ $floor =~ ^2\.([0-9]+)$ ]] || die "glibc floor '$floor' is not 2.<N>"
platform=manylinux_2_${BASH_REMATCH[1]}_$(uname -m)
version_line=$("${bins[0]}" --version) || die "bin/dtrun --version exited $?"
[[ $version_line =~ ^dtrun\ ([0-9]+\.[0-9]+\.[0-9]+)\  ]] || die "bin/dtrun --version: unexpected '$version_line'"
version=${BASH_REMATCH[1]}

cp -r "$here/wheel/." "$stage/"
mkdir -p "$out"
(cd "$stage" && DTRUN_WHEEL_VERSION=$version DTRUN_WHEEL_PLATFORM=$platform \
  "$python" -m build --wheel --no-isolation --outdir "$out" . >"$stage/build.log" 2>&1) ||
  die "python3 -m build exited $?: $(tail -n 20 "$stage/build.log")"
wheel=$out/dtrun-$version-py3-none-$platform.whl
[[ -f $wheel ]] || die "expected $(basename "$wheel"), the build made: $(ls "$out")"
echo "$wheel"
