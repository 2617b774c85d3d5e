#!/usr/bin/env bash
# A whole job stopped and restarted after one worker's failure: 8 agents (one node each, c10d
# rendezvous on loopback, --max_restarts=1), dtrun against torchrun 1.13 in the same run,
# alternating. Workers: stamp_worker hold-fail (bench/launch/stamp_worker.cpp): every rank but 0
# starts and waits for the launcher's SIGTERM (and stamps its arrival); rank 0 fails once all
# others run; every start after the failure exits 0 at once. From the stamps (CLOCK_REALTIME, one
# clock for every process here):
#   down     rank 0's failure -> the last other worker's SIGTERM: the whole job is stopping
#            (workers a launcher killed otherwise leave no stamp: the table counts the stamped)
#   running  rank 0's failure -> the last rank started after it: the job runs again
#   start    a worker's own start, apart from any launcher: the shell's clock before
#            launch_floor (fork+exec of the static stamp_worker) -> the worker's start stamp
# Medians of REPEATS. Measures; asserts nothing beyond each run's success.
#
# Usage: bench/launch/run_restart.sh
# Environment: NODES=8  NPROC=1 (workers per node)  REPEATS=5  LAUNCHERS="dtrun torchrun"
#              PYTHON=/usr/bin/python3 (torch 1.13)  KEEP=1 (keep the work directory)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build
nodes=${NODES:-8}
nproc=${NPROC:-1}
repeats=${REPEATS:-5}
launchers=${LAUNCHERS:-dtrun torchrun}
python=${PYTHON:-/usr/bin/python3}
ninja -C "$build" dtrun stamp_worker launch_floor >/dev/null
worker=$build/bench/launch/stamp_worker

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/restart_bench.XXXXXX")
agents=()
cleanup() {
  local pid
  for pid in "${agents[@]}"; do stop_pid "$pid" 5; done
  if [[ -n ${KEEP:-} ]]; then echo "run_restart.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", (b - a) / 1e6}'; }

run_job() {  # <launcher> <rep>: one job; appends "down running" (ms) to $work/<launcher>
  local launcher=$1 rep=$2 dir=$work/$1-$2 port a cmd
  mkdir -p "$dir/stamps"
  port=$(free_port)
  if [[ $launcher == dtrun ]]; then
    cmd=("$build/launcher/dtrun")
  else
    cmd=("$python" "$repo/bench/launch/torchrun_py311.py")
  fi
  agents=()
  for a in $(seq 0 $((nodes - 1))); do
    "${cmd[@]}" --nnodes="$nodes" --nproc_per_node="$nproc" --rdzv_backend=c10d \
      --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="r$rep" --max_restarts=1 \
      --monitor_interval=0.1 --log_dir "$dir/logs$a" --no_python \
      "$worker" "$dir/stamps" hold-fail >"$dir/agent$a.log" 2>&1 &
    agents+=($!)
  done
  local pid failed=0
  for pid in "${agents[@]}"; do
    for _ in $(seq 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then stop_pid "$pid" 5; failed=1; elif ! wait "$pid"; then failed=1; fi
  done
  agents=()
  local world=$((nodes * nproc))
  local fail_at last_term last_start terms starts
  fail_at=$(cat "$dir"/stamps/a0.r0.* 2>/dev/null | awk '{print $2}' | head -n1)
  terms=$(cat "$dir"/stamps/term.* 2>/dev/null | wc -l)
  starts=$(find "$dir/stamps" -name 'after.r*' -printf '%f\n' | sed 's/\.[0-9]*$//' | sort -u | wc -l)
  if ((failed)) || [[ -z $fail_at || $terms -eq 0 || $starts -ne $world ]]; then
    echo "run_restart.sh: $launcher run $rep: exit failed=$failed, failure stamp '${fail_at}'," \
      "$terms of $((world - 1)) stopped, $starts of $world ranks started after it; agent 0's log:" >&2
    tail -n 5 "$dir/agent0.log" >&2
    return 1
  fi
  last_term=$(cat "$dir"/stamps/term.* | sort -n | tail -n1)
  # Each rank's first start after the failure; the last of those.
  last_start=$(for r in $(seq 0 $((world - 1))); do
    cat "$dir"/stamps/after.r"$r".* | awk '{print $1}' | sort -n | head -n1
  done | sort -n | tail -n1)
  echo "$(ms_between "$fail_at" "$last_term") $(ms_between "$fail_at" "$last_start") $terms" >>"$work/$launcher"
}

median_of() {  # <file> <column>
  awk -v k="$2" '{print $k}' "$1" | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "-"}'
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for launcher in $launchers; do : >"$work/$launcher"; done
for rep in $(seq "$repeats"); do
  for launcher in $launchers; do
    run_job "$launcher" "$rep" || true
  done
done
# A worker's own start, apart from any launcher: stamp_worker under launch_floor.
for rep in $(seq "$repeats"); do
  mkdir -p "$work/floor$rep"
  t0=${EPOCHREALTIME/[.,]/}
  "$build/bench/launch/launch_floor" 1 "$work/floor$rep/logs" "$worker" "$work/floor$rep" ok
  awk -v s="$(awk '{print $1}' "$work"/floor"$rep"/a*)" -v t="$t0" \
    'BEGIN {printf "%.2f\n", (s - t * 1000) / 1e6}' >>"$work/worker_start"
done
printf '\n%d agents (c10d, loopback, %d worker(s) each), one failure, --max_restarts=1; medians of %s:\n' \
  "$nodes" "$nproc" "$repeats"
printf '| launcher | runs | failure -> every other worker signalled (ms) | workers signalled (of %d) | failure -> every rank running again (ms) |\n' $((nodes * nproc - 1))
printf '| --- | ---: | ---: | ---: | ---: |\n'
for launcher in $launchers; do
  printf '| %s | %d | %s | %s | %s |\n' "$launcher" "$(wc -l <"$work/$launcher")" \
    "$(median_of "$work/$launcher" 1)" "$(median_of "$work/$launcher" 3)" "$(median_of "$work/$launcher" 2)"
done
printf 'a worker'"'"'s own start (launch_floor fork+exec of stamp_worker, from the shell): %s ms\n' \
  "$(median_of "$work/worker_start" 1)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
