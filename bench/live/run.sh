#!/usr/bin/env bash
# What the live view costs (issue 30): a PyTorch job's step time and the agent's CPU, in one run,
# in four configurations of the same 4-rank job (bench/live/step_worker.py: a DDP-like loop on
# CPU over gloo, one dist.all_reduce per gradient tensor from Python):
#   hook      --python_hook=on,  no --status_port (no straggler timing)
#   timed     --python_hook=on,  --straggler_threshold=0.2: entry times recorded and judged
#   live      --python_hook=on,  --status_port=0 (straggler timing on by default), /metrics and
#             /status scraped every second
#   nohook    --python_hook=off, no --status_port
# timed / hook is what the straggler timing costs; live / timed what the endpoint costs while
# served and scraped; hook / nohook what the Python hook costs per collective. The runs
# alternate (hook timed live nohook, then nohook live timed hook, ...) so load from other work on the machine
# hits every configuration alike. Prints one table: the median over REPEATS of the mean step time
# (the mean over ranks of each rank's mean after its warm-up steps), the agent's CPU (utime +
# stime of its /proc/<pid>/stat, read every 0.2 s until it exits) per minute of job, and the
# ratios; then the hook's begin+end per collective with and without entry times
# (bench/live/hook_timing.py). Asserts nothing.
#   bash bench/live/run.sh [DTRUN]        (builds nothing: cmake --build build --target dtrun)
# Knobs (environment): REPEATS=2, NPROC=4, STEPS=200, WARMUP=30, WIDTH=256, LAYERS=4 (2 x LAYERS
# all_reduces per step), BATCH=32, CONFIGS="hook timed live nohook", OUT=<dir for logs; default a temp
# dir, removed unless KEEP=1>.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dtrun=${1:-$root/build/launcher/dtrun}
# shellcheck source=/dev/null
source "$root/bench/lib.sh"
[[ -x $dtrun ]] || { echo "run.sh: no dtrun at $dtrun (cmake --build build --target dtrun)" >&2; exit 2; }
command -v curl >/dev/null || { echo "run.sh: curl not found (apt-get install curl)" >&2; exit 2; }
PY=/usr/bin/python3  # Debian's interpreter with torch 1.13; the python3 on PATH has no torch
REPEATS=${REPEATS:-2}
NPROC=${NPROC:-4}
CONFIGS=${CONFIGS:-"hook timed live nohook"}
export STEPS=${STEPS:-200} WARMUP=${WARMUP:-30} WIDTH=${WIDTH:-256} LAYERS=${LAYERS:-4}
export BATCH=${BATCH:-32}
if [[ -z ${OUT:-} ]]; then
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/dtrun-live-bench.XXXXXX")
  [[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"
tck=$(getconf CLK_TCK)
results=$OUT/results.txt
: >"$results"
job=""
trap '[[ -z $job ]] || stop_pid "$job"; exit 130' INT TERM

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

# run_one <config> <repeat>: one job; appends "<config> <step ms> <agent cpu s> <wall s>
# <scrapes answered>" to $results.
run_one() {
  local config=$1 rep=$2 dir=$OUT/$1_$2
  mkdir -p "$dir"
  local args=(--nproc_per_node="$NPROC" --log_dir="$dir/logs" --rdzv_id="live-$config-$rep")
  case $config in
    hook) args+=(--python_hook=on) ;;
    timed) args+=(--python_hook=on --straggler_threshold=0.2) ;;
    live) args+=(--python_hook=on --status_port=0) ;;
    nohook) args+=(--python_hook=off) ;;
    *) echo "run.sh: unknown configuration '$config'" >&2; exit 2 ;;
  esac
  local start
  start=$(now_ms)
  STEP_BENCH_OUT=$dir PYTHON_EXEC=$PY GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \
    "$dtrun" "${args[@]}" "$root/bench/live/step_worker.py" >"$dir/out" 2>"$dir/err" &
  job=$!
  local ticks=0 port="" scrapes=0 next=0 line rest t codes
  while kill -0 "$job" 2>/dev/null; do
    # The agent's own CPU (not its workers'): utime and stime, fields 14 and 15.
    if read -r line <"/proc/$job/stat" 2>/dev/null; then
      read -ra rest <<<"${line##*) }"
      [[ ${rest[0]} == Z ]] || ticks=$((rest[11] + rest[12]))
    fi
    if [[ $config == live ]]; then
      if [[ -z $port ]]; then
        port=$(sed -n 's|.*live status of this node: http://[^ ]*:\([0-9][0-9]*\)/.*|\1|p' \
          "$dir/err" | head -n 1)
      fi
      t=$(now_ms)
      if [[ -n $port ]] && ((t >= next)); then
        next=$((t + 1000))
        codes=$(curl -s --max-time 2 -o /dev/null -o /dev/null -w '%{http_code} ' \
          "http://127.0.0.1:$port/metrics" "http://127.0.0.1:$port/status" || true)
        [[ $codes != "200 200 " ]] || scrapes=$((scrapes + 1))
      fi
    fi
    sleep 0.2
  done
  local rc=0
  wait "$job" || rc=$?
  job=""
  local wall_ms=$(($(now_ms) - start))
  if [[ $rc -ne 0 ]]; then
    echo "run.sh: $config (repeat $rep) exited $rc:" >&2
    tail -n 5 "$dir/err" >&2
    exit 1
  fi
  local step
  step=$(cat "$dir"/rank_* | sed -n 's/.*mean_ms=//p' |
    awk -v n="$NPROC" '{ s += $1; c++ } END { if (c == n) printf "%.3f", s / c; else print "?" }')
  echo "$config $step $(awk -v t="$ticks" -v hz="$tck" 'BEGIN { printf "%.2f", t / hz }') \
$(awk -v ms="$wall_ms" 'BEGIN { printf "%.2f", ms / 1000 }') $scrapes" >>"$results"
  echo "run.sh: [$rep/$REPEATS] $config: step $step ms, agent CPU $((ticks * 1000 / tck)) ms over $((wall_ms / 1000)) s${port:+, $scrapes scrapes of :$port}" >&2
}

echo "run.sh: $NPROC ranks x $STEPS steps (after $WARMUP), MLP $LAYERS x $WIDTH, batch $BATCH; \
REPEATS=$REPEATS; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
read -ra order <<<"$CONFIGS"
for rep in $(seq 1 "$REPEATS"); do
  if ((rep % 2 == 1)); then
    list=("${order[@]}")
  else
    list=()
    for ((i = ${#order[@]} - 1; i >= 0; i--)); do list+=("${order[i]}"); done
  fi
  for config in "${list[@]}"; do
    run_one "$config" "$rep"
  done
done

"$PY" - "$results" "$((2 * LAYERS))" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
calls = int(sys.argv[2])
by = {}
for config, step, cpu, wall, scrapes in rows:
    by.setdefault(config, []).append((float(step), float(cpu), float(wall), int(scrapes)))
label = {"hook": "hook on, endpoint off", "timed": "hook on + straggler timing",
         "live": "hook + timing, endpoint on + scraped 1/s",
         "nohook": "hook off, endpoint off"}
med = {}
print(f"{'configuration':38} {'step ms':>9} {'(min-max)':>17} {'agent CPU s/min':>16} {'(min-max)':>13}")
for config, runs in by.items():
    steps = [r[0] for r in runs]
    per_min = [60 * r[1] / r[2] for r in runs]
    med[config] = (statistics.median(steps), statistics.median(per_min))
    scraped = sum(r[3] for r in runs)
    note = f"  {scraped} scrapes answered" if config == "live" else ""
    print(f"{label.get(config, config):38} {med[config][0]:9.3f} "
          f"({min(steps):7.3f}-{max(steps):7.3f}) {med[config][1]:16.3f} "
          f"({min(per_min):5.3f}-{max(per_min):5.3f}){note}")
if "timed" in med and "hook" in med:
    (s1, c1), (s0, c0) = med["timed"], med["hook"]
    print(f"straggler timing on / off: step {s1 / s0:.3f}x ({1000 * (s1 - s0):+.0f} us per step, "
          f"{1000 * (s1 - s0) / calls:+.1f} us per all_reduce), agent CPU {c1 / c0:.2f}x")
base = "timed" if "timed" in med else "hook"
if "live" in med and base in med:
    (s1, c1), (s0, c0) = med["live"], med[base]
    print(f"endpoint on + scraped / off: step {s1 / s0:.3f}x ({1000 * (s1 - s0):+.0f} us), "
          f"agent CPU {c1 / c0:.2f}x ({c1 - c0:+.3f} CPU-s per minute)")
if "hook" in med and "nohook" in med:
    (s1, _), (s0, _) = med["hook"], med["nohook"]
    print(f"hook on / off: step {s1 / s0:.3f}x ({1000 * (s1 - s0):+.0f} us per step, "
          f"{1000 * (s1 - s0) / calls:+.1f} us per all_reduce, {calls} per step)")
EOF
# The hook's own cost per collective with and without entry times, resolvable where step times
# are not (a step's spread on a loaded machine is milliseconds; the timing costs nanoseconds).
"$PY" "$root/bench/live/hook_timing.py"
echo "run.sh: load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
