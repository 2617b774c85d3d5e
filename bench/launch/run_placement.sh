#!/usr/bin/env bash
# What placement costs at launch: 16 x /bin/true under dtrun, without a placement and with one,
# medians of REPEATS runs each, the variants alternating within every repeat so background load
# hits them alike. Prints one table; asserts nothing.
#   plain      --nproc_per_node=16
#   gpus       --nproc_per_node=16 --workers_per_gpu=8 on the recorded pair-2n2g machine:
#              the topology read and the plan, CUDA_VISIBLE_DEVICES per rank, no binding
#   bound      the same with --numa-binding=node: sched_setaffinity and set_mempolicy in every
#              worker between fork and exec (ranks 0-7 on CPU 0, 8-15 on CPU 1)
#   split      --cpu_binding=split on this machine's own /sys (only when it has 16 CPUs or more)
#   plan-amd   --dry-run of 8 ranks with --numa-binding=exclusive on the recorded 64-CPU
#              amd-2s8g machine, against a plain --dry-run: the cost of reading a large sysfs
# Usage: bench/launch/run_placement.sh [DTRUN]   (default build/launcher/dtrun)
# Environment: REPEATS=11
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dtrun=${1:-$repo/build/launcher/dtrun}
repeats=${REPEATS:-11}
topologies=$repo/tests/placement/topologies
if [[ ! -x $dtrun ]]; then
  echo "run_placement.sh: $dtrun is not built; run: ninja -C build dtrun" >&2
  exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/placement_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ms <command...>: the command's wall time in milliseconds (it must succeed).
ms() {
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1 || { echo "run_placement.sh: failed: $*" >&2; exit 1; }
  end=$(date +%s%N)
  echo $(((end - start) / 1000))
}
launch() { "$dtrun" --log_dir="$work/logs" --no_python "$@" /bin/true; }
variant() {  # <name>: runs it once
  case $1 in
    plain) launch --nproc_per_node=16 ;;
    gpus) DTRUN_SYSFS_ROOT=$topologies/pair-2n2g launch --nproc_per_node=16 --workers_per_gpu=8 ;;
    bound)
      DTRUN_SYSFS_ROOT=$topologies/pair-2n2g launch --nproc_per_node=16 --workers_per_gpu=8 \
        --numa-binding=node ;;
    split) launch --nproc_per_node=16 --cpu_binding=split ;;
    dry-plain) launch --dry-run --nproc_per_node=8 ;;
    plan-amd)
      DTRUN_SYSFS_ROOT=$topologies/amd-2s8g launch --dry-run --nproc_per_node=8 \
        --numa-binding=exclusive ;;
  esac
}
variants="plain gpus bound dry-plain plan-amd"
[[ $(nproc) -lt 16 ]] || variants+=" split"
for v in $variants; do variant "$v" >/dev/null 2>&1 || {
  echo "run_placement.sh: variant $v fails; run it by hand to see why" >&2
  exit 1
}; done
for _ in $(seq "$repeats"); do
  for v in $variants; do echo "$v $(ms variant "$v")" >>"$work/raw"; done
done
median() { grep "^$1 " "$work/raw" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'placement at launch, 16 x /bin/true (%s runs each, medians, µs of wall time)\n' "$repeats"
printf '%-10s %10s %s\n' variant median "vs its reference"
for v in $variants; do
  ref=plain
  [[ $v != plan-amd && $v != dry-plain ]] || ref=dry-plain
  printf '%-10s %10d %+d µs against %s\n' "$v" "$(median "$v")" $(($(median "$v") - $(median "$ref"))) "$ref"
done
