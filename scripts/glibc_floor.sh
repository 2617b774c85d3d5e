#!/usr/bin/env bash
# The oldest glibc that can run the given ELF files, printed as x.y: the highest GLIBC_x.y among
# the symbol versions they need (readelf's version-needs section, what the dynamic loader checks
# before running them). docs/install.md states it; scripts/build_wheel.sh puts it in the wheel's
# manylinux_2_<y> tag; tests/integration/portable_binary_test.sh checks that the two agree.
#   scripts/glibc_floor.sh build/launcher/dtrun build/netcheck/dtrun-netcheck
set -euo pipefail

(($# > 0)) || { echo "usage: scripts/glibc_floor.sh <ELF file>..." >&2; exit 2; }
command -v readelf >/dev/null || { echo "glibc_floor: readelf not found: install binutils (scripts/setup.sh)" >&2; exit 1; }
highest=
for file in "$@"; do
  [[ -f $file ]] || { echo "glibc_floor: $file: no such file" >&2; exit 1; }
  needs=$(LC_ALL=C readelf --version-info --wide "$file") || { echo "glibc_floor: $file: not an ELF file readelf reads" >&2; exit 1; }
  highest=$(printf '%s\n%s\n' "$highest" "$(sed -n 's/.*Name: GLIBC_\([0-9][0-9.]*\) .*/\1/p' <<<"$needs")" |
    sed '/^$/d' | sort -V | tail -n 1)
done
[[ -n $highest ]] || { echo "glibc_floor: $* need no versioned glibc symbol (statically linked?)" >&2; exit 1; }
echo "$highest"
