#!/usr/bin/env bash
# dtrun's launch against the floor, in one run: launch_floor (C, no dtrun: each rank's log
# directory and two log files, fork, exec, wait) and dtrun with its default settings (health
# checks on, per-rank logs on the disk under $TMPDIR), both starting N x /bin/true, alternating
# within every repeat; also dtrun with --health_checks=none, to show what the checks cost.
# Prints medians of the wall time (launch_timer: fork of the launcher -> its exit) and dtrun's
# ratio to the floor (issue 32's target: <= 1.5x). BEFORE=path/to/another/dtrun adds that binary
# (defaults) to every repeat: a change's effect, measured in the same runs. Measures; asserts
# nothing.
#
# Usage: bench/launch/run_floor.sh
# Environment: NPROCS="1 4 16"  REPEATS=21  BUILD=build  DTRUN=$BUILD/launcher/dtrun  BEFORE=
# KEEP=1 (keep the work dir)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$repo/build}
nprocs=${NPROCS:-1 4 16}
repeats=${REPEATS:-21}
ninja -C "$build" dtrun launch_timer launch_floor >/dev/null
dtrun=${DTRUN:-$build/launcher/dtrun}
timer=$build/bench/launch/launch_timer
floor=$build/bench/launch/launch_floor

# Every run's logs stay until the end: ext4 without a journal (this machine's /) skips inodes
# deleted in the last seconds when it allocates one, so removing each repeat's files made the
# next runs' file creations scan past them (most of a launch's CPU in `perf`), a cost no job pays.
work=$(mktemp -d "${TMPDIR:-/tmp}/launch_floor.XXXXXX")
cleanup() {
  if [[ -n ${KEEP:-} ]]; then echo "run_floor.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

run=0
wall() {  # wall COMMAND...: the launcher's wall time in ms; exits on a failed run
  local line
  line=$("$timer" --timeout 60 --log "$work/last.log" -- "$@")
  if [[ $line != *" rc=0 "* && $line != "launch_timer rc=0 "* ]]; then
    echo "run_floor.sh: failed: $* -> $line" >&2
    tail -n 5 "$work/last.log" >&2
    exit 1
  fi
  sed -n 's/.* wall_ms=\([^ ]*\).*/\1/p' <<<"$line"
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
before=${BEFORE:-}
printf '| workers | floor (ms) | dtrun (ms) | dtrun / floor | dtrun, --health_checks=none (ms) | / floor |%s\n' \
  "${before:+ before (ms) | / floor |}"
printf '| ---: | ---: | ---: | ---: | ---: | ---: |%s\n' "${before:+ ---: | ---: |}"
for n in $nprocs; do
  : >"$work/floor" && : >"$work/dtrun" && : >"$work/bare" && : >"$work/before"
  for _ in $(seq "$repeats"); do
    if [[ -n $before ]]; then
      run=$((run + 1))
      wall "$before" --nproc_per_node="$n" --log_dir "$work/logs$run" --no_python /bin/true >>"$work/before"
    fi
    run=$((run + 1))
    wall "$floor" "$n" "$work/logs$run" /bin/true >>"$work/floor"
    run=$((run + 1))
    wall "$dtrun" --nproc_per_node="$n" --log_dir "$work/logs$run" --no_python /bin/true >>"$work/dtrun"
    run=$((run + 1))
    wall "$dtrun" --nproc_per_node="$n" --health_checks=none --log_dir "$work/logs$run" \
      --no_python /bin/true >>"$work/bare"
  done
  f=$(median <"$work/floor") d=$(median <"$work/dtrun") b=$(median <"$work/bare")
  o=$(median <"$work/before")
  awk -v n="$n" -v f="$f" -v d="$d" -v b="$b" -v o="$o" \
    'BEGIN {printf "| %d | %.2f | %.2f | %.2fx | %.2f | %.2fx |", n, f, d, d / f, b, b / f
            if (o != "") printf " %.2f | %.2fx |", o, o / f
            printf "\n"}'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
