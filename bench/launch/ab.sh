#!/usr/bin/env bash
# Two dtrun builds side by side (a refactor's before and after): N x /bin/true, launch to exit,
# alternating A and B within every repeat so that a burst of load hits both alike. Prints the
# median and the spread (min..max) of each per N and B's median over A's. Asserts nothing.
#   bench/launch/ab.sh A_DTRUN B_DTRUN [LAUNCH_TIMER]
# Environment: REPEATS=15, NPROCS="1 4 16", LOGS=<dir for both builds' --log_dir> (default: a
# work directory under $TMPDIR, as dtrun's default logs go there).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
a=${1:?usage: ab.sh A_DTRUN B_DTRUN [LAUNCH_TIMER]}
b=${2:?usage: ab.sh A_DTRUN B_DTRUN [LAUNCH_TIMER]}
timer=${3:-$repo/build/bench/launch/launch_timer}
repeats=${REPEATS:-15}
nprocs=${NPROCS:-1 4 16}
for tool in "$a" "$b" "$timer"; do
  [[ -x $tool ]] || { echo "ab.sh: $tool is not an executable (ninja -C build launch_timer)" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/launch_ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
logs=${LOGS:-$work/logs}

one() {  # one <A|B> <dtrun> <n> <i>: appends "<label> <n> <wall_ms>" to $work/raw
  local line
  line=$("$timer" --timeout 60 --log "$work/$1.log" -- "$2" --standalone --monitor_interval=0.1 \
    "--nproc_per_node=$3" --log_dir "$logs/$1-$3-$4" --no_python /bin/true)
  [[ $line == *" rc=0 "* ]] || { echo "ab.sh: $1 ($2) nproc=$3 failed: $line" >&2; exit 1; }
  echo "$1 $3 $(sed -E 's/.* wall_ms=([0-9.]+).*/\1/' <<<"$line")" >>"$work/raw"
}

for n in $nprocs; do  # warm-up: page cache, first exec
  one A "$a" "$n" w
  one B "$b" "$n" w
done
: >"$work/raw"
for ((i = 0; i < repeats; i++)); do
  for n in $nprocs; do
    if ((i % 2 == 0)); then
      one A "$a" "$n" "$i"
      one B "$b" "$n" "$i"
    else
      one B "$b" "$n" "$i"
      one A "$a" "$n" "$i"
    fi
  done
done
echo "A = $a ($("$a" --version))"
echo "B = $b ($("$b" --version))"
echo "launch to exit of N x /bin/true, ms: median (min..max) of $repeats runs each, alternated"
awk '
  { v[$1 " " $2] = v[$1 " " $2] " " $3; ns[$2] = 1 }
  function med(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "%6s  %24s  %24s  %8s\n", "N", "A", "B", "B/A"
    for (n in ns) {
      ma = med(v["A " n]); la = lo; ha = hi
      mb = med(v["B " n]); lb = lo; hb = hi
      printf "%6d  %8.1f (%6.1f..%6.1f)  %8.1f (%6.1f..%6.1f)  %8.2f\n", n, ma, la, ha, mb, lb, hb, mb / ma
    }
  }' "$work/raw" | sort -n
