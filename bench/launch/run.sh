#!/usr/bin/env bash
# Launcher overhead: dtrun against torchrun (Debian's torch 1.13, patched for Python 3.11 by
# torchrun_py311.py), in the same run, for --nproc_per_node in {1, 4, 16}. Prints one table of
# medians; builds nothing; measures, asserts nothing (the targets are printed, never enforced).
#
# Both launchers run single-node with the same flags:
#   --standalone --monitor_interval=0.1 --nproc_per_node=N --log_dir D --no_python WORKER...
# (torch 1.13's default monitor interval is 5 s; 0.1 s is today's default; dtrun accepts the flag
# and does not poll.) Three scenarios, dtrun and torchrun alternating within every repeat:
#   true    WORKER = /bin/true                                   -> total wall time
#   stamp   WORKER = stamp_worker DIR ok: each worker writes its start and exit CLOCK_REALTIME
#           -> wall time, launch->first/last worker start, last worker exit->launcher exit
#   fail_early WORKER = stamp_worker DIR fail-first, --max_restarts=1: local rank 0 exits 1 at once
#           on attempt 0, all succeed on attempt 1 -> failing worker's exit stamp -> first start
#           stamp of attempt 1 (the failure lands while the launcher may still be starting workers)
#   fail_late  the same with fail-last: rank 0 fails only once every other worker of attempt 0 has
#           written its stamps, i.e. with the whole group started (a failure in mid-run)
# plus one run per N of `true` under `launch_timer --agent-rss` for the launcher process's own
# peak RSS (VmHWM read at its exit; workers excluded).
#
# Usage: bench/launch/run.sh [DTRUN] [LAUNCH_TIMER] [STAMP_WORKER]
#   defaults: build/launcher/dtrun build/bench/launch/{launch_timer,stamp_worker} (repo-relative)
# Environment:
#   REPEATS=5        runs per (launcher, scenario, N); the table shows medians
#   NPROCS="1 4 16"  SCENARIOS="true stamp fail_early fail_late rss"
#   PYTHON=/usr/bin/python3 (must have torch 1.13)    TIMEOUT=60  per launcher run, seconds
#   LOGS=DIR         base directory for both launchers' --log_dir (default: the work directory
#                    under $TMPDIR); e.g. LOGS=/dev/shm takes the file system out of the figures
#   KEEP=1           keep the work directory (stamps, launcher logs) and print its path
#   RAW=FILE         also append every measurement ("launcher scenario N metric value") to FILE
#   PLOT=bench/launch/launch.png   the plot (dtrun and torchrun per metric and N; "" = none)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dtrun=${1:-$repo/build/launcher/dtrun}
timer=${2:-$repo/build/bench/launch/launch_timer}
worker=${3:-$repo/build/bench/launch/stamp_worker}
repeats=${REPEATS:-5}
nprocs=${NPROCS:-1 4 16}
plot=${PLOT-$repo/bench/launch/launch.png}
scenarios=${SCENARIOS:-true stamp fail_early fail_late rss}
python=${PYTHON:-/usr/bin/python3}
timeout_s=${TIMEOUT:-60}
torchrun_py=$repo/bench/launch/torchrun_py311.py

for tool in "$dtrun" "$timer" "$worker"; do
  if [[ ! -x $tool ]]; then
    echo "run.sh: $tool is not built; run: ninja -C build dtrun launch_timer stamp_worker" >&2
    exit 2
  fi
done
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "run.sh: $python cannot import torch (Debian's /usr/bin/python3 has torch 1.13)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/launch_bench.XXXXXX")
logs=$work/logs
if [[ -n ${LOGS:-} ]]; then
  logs=$(mktemp -d "$LOGS/launch_bench_logs.XXXXXX")
fi
mkdir -p "$logs"
timer_pid=""

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"

cleanup() {
  stop_pid "$timer_pid" 10
  if [[ -n ${KEEP:-} ]]; then
    echo "run.sh: work directory kept: $work" >&2
  else
    rm -rf "$work"
    [[ $logs == "$work"/* ]] || rm -rf "$logs"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

results=$work/results  # launcher scenario nproc metric value
: >"$results"
run_id=0

record() {  # record LAUNCHER SCENARIO N METRIC VALUE
  echo "$*" >>"$results"
  [[ -z ${RAW:-} ]] || echo "$*" >>"$RAW"
}

field() {  # field NAME LINE: the value of NAME=... in a launch_timer line
  sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"
}

ms() {  # ms NANOSECONDS: as milliseconds, 3 decimals (bash does the 64-bit subtraction first)
  awk -v ns="$1" 'BEGIN {printf "%.3f", ns / 1e6}'
}

# Column K (1-based) of the stamp files matching GLOB in DIR, sorted numerically.
stamps() {
  local dir=$1 glob=$2 column=$3
  # shellcheck disable=SC2086  # GLOB is a pattern on purpose
  (cd "$dir" && cat $glob 2>/dev/null) | awk -v k="$column" '{print $k}' | sort -n
}

# run_one LAUNCHER SCENARIO N: one launcher run; records its metrics.
run_one() {
  local launcher=$1 scenario=$2 n=$3
  run_id=$((run_id + 1))
  local dir=$work/run$run_id
  mkdir -p "$dir/stamps"
  local -a cmd opts entry timer_opts=()
  if [[ $launcher == dtrun ]]; then
    cmd=("$dtrun")
  else
    cmd=("$python" "$torchrun_py")
  fi
  opts=(--standalone --monitor_interval=0.1 "--nproc_per_node=$n" --log_dir "$logs/run$run_id")
  case $scenario in
    true) entry=(/bin/true) ;;
    rss) entry=(/bin/true); timer_opts=(--agent-rss) ;;
    stamp) entry=("$worker" "$dir/stamps" ok) ;;
    fail_early) opts+=(--max_restarts=1); entry=("$worker" "$dir/stamps" fail-first) ;;
    fail_late) opts+=(--max_restarts=1); entry=("$worker" "$dir/stamps" fail-last) ;;
  esac
  local rc=0
  "$timer" --timeout "$timeout_s" --log "$dir/launcher.log" "${timer_opts[@]}" -- \
    "${cmd[@]}" "${opts[@]}" --no_python "${entry[@]}" >"$dir/timer" &
  timer_pid=$!
  wait "$timer_pid" || rc=$?
  timer_pid=""
  local line
  line=$(cat "$dir/timer")
  if [[ $rc -ne 0 || $(field rc "$line") != 0 ]]; then
    echo "run.sh: $launcher $scenario nproc=$n failed (launch_timer exit $rc): $line" >&2
    tail -n 20 "$dir/launcher.log" >&2 || true
    KEEP=1
    exit 1
  fi
  local exec_ns end_ns
  exec_ns=$(field exec_ns "$line")
  end_ns=$(field end_ns "$line")
  case $scenario in
    true)
      record "$launcher" "$scenario" "$n" wall_ms "$(field wall_ms "$line")"
      ;;
    rss)
      record "$launcher" "$scenario" "$n" agent_hwm_mib \
        "$(awk -v kb="$(field agent_hwm_kb "$line")" 'BEGIN {printf "%.1f", kb / 1024}')"
      record "$launcher" "$scenario" "$n" wait4_maxrss_mib \
        "$(awk -v kb="$(field wait4_maxrss_kb "$line")" 'BEGIN {printf "%.1f", kb / 1024}')"
      ;;
    stamp)
      local count first_start last_start last_end worker_rss
      count=$(stamps "$dir/stamps" 'a0.*' 1 | wc -l)
      if [[ $count -ne $n ]]; then
        echo "run.sh: $launcher stamp nproc=$n: $count stamp files, expected $n" >&2
        KEEP=1
        exit 1
      fi
      first_start=$(stamps "$dir/stamps" 'a0.*' 1 | head -n1)
      last_start=$(stamps "$dir/stamps" 'a0.*' 1 | tail -n1)
      last_end=$(stamps "$dir/stamps" 'a0.*' 2 | tail -n1)
      worker_rss=$(stamps "$dir/stamps" 'a0.*' 3 | tail -n1)
      record "$launcher" "$scenario" "$n" wall_ms "$(field wall_ms "$line")"
      record "$launcher" "$scenario" "$n" first_start_ms "$(ms $((first_start - exec_ns)))"
      record "$launcher" "$scenario" "$n" last_start_ms "$(ms $((last_start - exec_ns)))"
      record "$launcher" "$scenario" "$n" exit_lag_ms "$(ms $((end_ns - last_end)))"
      record "$launcher" "$scenario" "$n" worker_rss_mib \
        "$(awk -v kb="$worker_rss" 'BEGIN {printf "%.1f", kb / 1024}')"
      ;;
    fail_early | fail_late)
      local count fail_end restart_start
      count=$(stamps "$dir/stamps" 'a1.*' 1 | wc -l)
      fail_end=$(stamps "$dir/stamps" 'a0.r0.*' 2 | head -n1)
      if [[ $count -ne $n || -z $fail_end ]]; then
        echo "run.sh: $launcher $scenario nproc=$n: $count attempt-1 stamps (expected $n)," \
          "attempt-0 rank-0 exit stamp '${fail_end}'" >&2
        KEEP=1
        exit 1
      fi
      restart_start=$(stamps "$dir/stamps" 'a1.*' 1 | head -n1)
      record "$launcher" "$scenario" "$n" restart_ms "$(ms $((restart_start - fail_end)))"
      record "$launcher" "$scenario" "$n" restart_wall_ms "$(field wall_ms "$line")"
      ;;
  esac
  [[ -n ${KEEP:-} ]] || rm -rf "$dir" "$logs/run$run_id"
}

started=$(date +%s)
echo "launch bench: nproc {$nprocs} x scenarios {$scenarios} x {dtrun, torchrun-1.13}," \
  "$repeats repeat(s), $(nproc) CPUs, worker logs under $(df --output=fstype "$logs" | tail -n1)," \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# Warm-up (page cache, python bytecode): one unmeasured run of each launcher.
for launcher in dtrun torchrun; do
  run_one "$launcher" true 1
done
: >"$results"
for n in $nprocs; do
  for scenario in $scenarios; do
    reps=$repeats
    [[ $scenario != rss ]] || reps=1
    for _ in $(seq "$reps"); do
      for launcher in dtrun torchrun; do  # alternating, so background noise hits both alike
        run_one "$launcher" "$scenario" "$n"
      done
    done
    echo "  nproc=$n $scenario done ($(($(date +%s) - started)) s)" >&2
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg), $(($(date +%s) - started)) s" >&2

median() {  # median LAUNCHER SCENARIO N METRIC
  awk -v l="$1" -v s="$2" -v n="$3" -v m="$4" '$1 == l && $2 == s && $3 == n && $4 == m {print $5}' \
    "$results" | sort -g | awk '{v[NR] = $1} END {
      if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
      else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# row LABEL SCENARIO METRIC UNIT TARGET_N TARGET_MAX: one line per N; a target (dtrun < MAX) is
# shown on the rows whose N matches TARGET_N ("all" for every N, "-" for none).
row() {
  local label=$1 scenario=$2 metric=$3 target_n=$4 target_max=$5 n d t ratio target verdict
  for n in $nprocs; do
    [[ " $scenarios " == *" $scenario "* ]] || return 0
    d=$(median dtrun "$scenario" "$n" "$metric")
    t=$(median torchrun "$scenario" "$n" "$metric")
    ratio=$(awk -v a="$d" -v b="$t" 'BEGIN {if (a > 0 && b != "-") printf "%.1fx", b / a; else print "-"}')
    target="" verdict=""
    if [[ $target_n == all || $target_n == "$n" ]]; then
      target="< $target_max"
      verdict=$(awk -v a="$d" -v m="$target_max" 'BEGIN {print (a < m) ? "meets" : "MISSES"}')
    fi
    printf '%-40s %5s | %10s | %10s | %11s | %-8s %s\n' "$label" "$n" "$d" "$t" "$ratio" \
      "$target" "$verdict"
    if [[ -n ${plot_key:-} ]]; then
      awk -v k="$plot_key" -v n="$n" -v a="$d" -v b="$t" \
        'BEGIN {if (a > 0 && b + 0 > 0) printf "%s/%s %s %s\n", k, n, a, b}' >>"$work/plot.dat"
    fi
  done
}

: >"$work/plot.dat"  # "metric/N dtrun torchrun" (ms) of the rows given a plot_key
echo
echo "median of $repeats run(s) (RSS: one run); times in ms, memory in MiB; ratio = torchrun / dtrun"
printf '%-40s %5s | %10s | %10s | %11s | %s\n' metric nproc dtrun torchrun ratio "target (dtrun)"
printf '%s\n' "------------------------------------------------------------------------------------------------------"
plot_key=wall row "wall time, /bin/true (ms)" true wall_ms 16 50
row "wall time, stamp worker (ms)" stamp wall_ms - -
row "launch -> first worker start (ms)" stamp first_start_ms - -
plot_key=last-start row "launch -> last worker start (ms)" stamp last_start_ms - -
plot_key="exit" row "last worker exit -> launcher exit (ms)" stamp exit_lag_ms all 5
row "fail at once -> restart (ms)" fail_early restart_ms all 20
plot_key=restart row "fail in mid-run -> restart (ms)" fail_late restart_ms all 20
row "wall time, fail at once + restart (ms)" fail_early restart_wall_ms - -
row "agent peak RSS, VmHWM (MiB)" rss agent_hwm_mib all 10
row "wait4 ru_maxrss, agent+workers (MiB)" rss wait4_maxrss_mib - -
row "worker peak RSS, ru_maxrss (MiB)" stamp worker_rss_mib - -
cat <<'EOF'

launch     = CLOCK_REALTIME in launch_timer's child just before execve(launcher); worker start/exit =
             stamp_worker's first and last CLOCK_REALTIME reads; launcher exit = just after wait4().
failure -> restart = attempt 0's failing worker (local rank 0, exit 1) exit stamp -> earliest start
             stamp of attempt 1, in ms (--max_restarts=1; the other workers exit 0, or are stopped).
             "at once": rank 0 fails on start, maybe while the launcher is still starting workers;
             "in mid-run": rank 0 fails once all the others have started (and exited 0).
agent peak RSS = VmHWM of the launcher process alone (torchrun: the python agent, which also hosts
             the store; dtrun: its one process), read while it is stopped at exit (ptrace).
wait4 ru_maxrss = what wait4()/`time -f %M` report: Linux takes the max of the launcher and the
             children it reaped, so it is a bound, not the agent alone.
worker peak RSS includes the pre-exec image each worker forked from its launcher (a fork copies the
             launcher's mapped anonymous memory until execve).
Nothing here is asserted; "MISSES" marks a figure over its target on this machine.
EOF
if [[ -n $plot ]]; then
  if command -v gnuplot >/dev/null; then
    gnuplot -e "data='$work/plot.dat'; out='$plot'" "$repo/bench/launch/plot.gp" && echo "plot: $plot"
  else
    echo "run.sh: gnuplot not installed (apt-get install gnuplot-nox, or scripts/setup.sh): no plot" >&2
  fi
fi
