#!/usr/bin/env bash
# The grouped round (--rdzv_conf group_size, dtrun/group_relay.h) at sizes one store process
# cannot hold flat: N simulated nodes (rdzv_sim, event loops, split over PROCS processes) join
# through N / GROUP relays (the product's GroupRelay, run by group_relays processes as the groups'
# leaders would), which speak for them at one `dtrun store` (the keeper's). Each size also runs
# flat against the same store where one process can hold it (N <= FLAT_MAX), alternating within
# every repeat. Prints each size's median close time (first join started -> last node has its
# assignment, over all processes, on the machine's monotonic clock) and the CPU one round cost
# the job's store, the relays and the simulated nodes. Every node must get a distinct node rank
# in 0..N-1 (checked by the sum and the sum of squares over all processes), or the run fails.
# Measures; asserts no timing.
#
# Usage: bench/rendezvous/run_groups.sh
# Environment: NODES="16384 65536"  GROUP=256 (nodes per relay)  PROCS=4 (simulator processes,
#              and as many relay processes)  REPEATS=3  FLAT_MAX=16384  BUILD=build  TIMEOUT_S=120
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$repo/build}
nodes=${NODES:-16384 65536}
group=${GROUP:-256}
procs=${PROCS:-4}
repeats=${REPEATS:-3}
flat_max=${FLAT_MAX:-16384}
timeout_s=${TIMEOUT_S:-120}
ninja -C "$build" rdzv_sim group_relays dtrun >/dev/null
dtrun=$build/launcher/dtrun
sim=$build/bench/rendezvous/rdzv_sim
relays_bin=$build/bench/rendezvous/group_relays

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
bench_work run_groups
cpu_ms() {  # cpu_ms PID...: their user+system CPU so far, in ms
  local pid total=0 t
  for pid in "$@"; do
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    total=$((total + t))
  done
  echo $((total * 1000 / $(getconf CLK_TCK)))
}
# wait_file FILE PATTERN: until FILE holds PATTERN, at most TIMEOUT_S.
wait_file() {
  local i
  for ((i = 0; i < timeout_s * 20; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "run_groups.sh: no '$2' in $1 after ${timeout_s} s: $(tail -n 2 "$1" 2>/dev/null)" >&2
  return 1
}

timeout $((timeout_s * 40)) "$dtrun" store --host 127.0.0.1 --port 0 --port-file "$work/port" \
  --max-connections 19990 --log-level warn >"$work/store.log" 2>&1 &
pids+=("$!")
wait_file "$work/port" . || exit 1
server=$(cat "/proc/${pids[0]}/task/${pids[0]}/children")  # `timeout`'s child: the store
server=${server%% *}
endpoint=127.0.0.1:$(cat "$work/port")
echo "run_groups.sh: $(nproc) CPUs, load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

results=$work/results  # "mode nodes close_ms store_cpu_ms relays_cpu_ms sim_cpu_ms"
: >"$results"
run_flat() {  # one round of N nodes straight at the store, one simulator process
  local n=$1 out=$work/flat.out line
  "$sim" --nodes "$n" --connect "$endpoint" --server-pid "$server" --timeout-s "$timeout_s" \
    >"$out" 2>"$out.err" || true
  line=$(grep "^rdzv_sim nodes=$n " "$out" || true)
  if [[ -z $line || $(field ok "$line") != 1 ]]; then
    echo "flat $n - - - -" >>"$results"
    echo "run_groups.sh: flat, $n nodes failed: $(grep -v '^\[' "$out.err" | head -n 2)" >&2
    return
  fi
  echo "flat $n $(field close_ms "$line") $(field server_cpu_ms "$line") 0 $(field sim_cpu_ms "$line")" >>"$results"
}
run_grouped() {  # one round of N nodes through N / GROUP relays
  local n=$1 rep=$2 job relays per_proc nodes_per p count relay_pids=() sim_pids=() ok=1
  job="grouped-$n-$rep-$$"
  relays=$(((n + group - 1) / group))
  per_proc=$(((relays + procs - 1) / procs))
  rm -f "$work"/ports.* "$work"/sim.*.out "$work/go"
  for ((p = 0; p * per_proc < relays; p++)); do
    count=$((relays - p * per_proc < per_proc ? relays - p * per_proc : per_proc))
    "$relays_bin" --connect "$endpoint" --job "$job" --nodes "$n" --relays "$count" \
      --ports-file "$work/ports.$p" --timeout-s $((timeout_s * 2)) >"$work/relays.$p.log" 2>&1 &
    relay_pids+=("$!")
    pids+=("$!")
  done
  for ((p = 0; p < ${#relay_pids[@]}; p++)); do wait_file "$work/ports.$p" . || ok=0; done
  if [[ $ok -eq 1 ]]; then
    for ((p = 0; p < ${#relay_pids[@]}; p++)); do cat "$work/ports.$p"; done >"$work/relays"
    nodes_per=$(((n + procs - 1) / procs))
    for ((p = 0; p * nodes_per < n; p++)); do
      count=$((n - p * nodes_per < nodes_per ? n - p * nodes_per : nodes_per))
      "$sim" --nodes "$n" --relays "$work/relays" --group-size "$group" --job "$job" \
        --first-node $((p * nodes_per)) --count "$count" --go-file "$work/go" \
        --timeout-s "$timeout_s" >"$work/sim.$p.out" 2>"$work/sim.$p.err" &
      sim_pids+=("$!")
      pids+=("$!")
    done
    for ((p = 0; p < ${#sim_pids[@]}; p++)); do wait_file "$work/sim.$p.out" "connected" || ok=0; done
  fi
  local store0 relays0
  store0=$(cpu_ms "$server")
  relays0=$(cpu_ms "${relay_pids[@]}")
  [[ $ok -eq 0 ]] || touch "$work/go"
  local first="" last="" f l sum=0 squares=0 line store_cpu relays_cpu sims_cpu=0 pid
  store_cpu=0
  for ((p = 0; p < ${#sim_pids[@]}; p++)); do
    pid=${sim_pids[p]}
    wait "$pid" || ok=0
    line=$(grep "^rdzv_sim nodes=$n " "$work/sim.$p.out" || true)
    if [[ -z $line || $(field ok "$line") != 1 ]]; then
      ok=0
      echo "run_groups.sh: grouped, $n nodes: simulator $p failed: $(grep -v '^\[' "$work/sim.$p.err" | head -n 2)" >&2
      continue
    fi
    f=$(field first_join_ns "$line")
    l=$(field last_assign_ns "$line")
    [[ -n $first && $first -le $f ]] || first=$f
    [[ -n $last && $last -ge $l ]] || last=$l
    sum=$((sum + $(field rank_sum "$line")))
    sims_cpu=$((sims_cpu + $(field sim_cpu_ms "$line")))  # its CPU from the start on
    squares=$((squares + $(field rank_squares "$line")))
  done
  store_cpu=$(($(cpu_ms "$server") - store0))
  relays_cpu=$(($(cpu_ms "${relay_pids[@]}") - relays0))
  for pid in "${relay_pids[@]}"; do stop_pid "$pid" 2; done
  if [[ $ok -eq 1 && $sum -ne $((n * (n - 1) / 2)) || $ok -eq 1 && $squares -ne $(((n - 1) * n * (2 * n - 1) / 6)) ]]; then
    ok=0
    echo "run_groups.sh: grouped, $n nodes: the node ranks are not 0..$((n - 1)) once each" >&2
  fi
  if [[ $ok -eq 1 ]]; then
    echo "grouped $n $(awk -v a="$first" -v b="$last" 'BEGIN {printf "%.1f", (b - a) / 1e6}') $store_cpu $relays_cpu $sims_cpu" >>"$results"
  else
    echo "grouped $n - - - -" >>"$results"
  fi
}
for n in $nodes; do
  for ((rep = 0; rep < repeats; rep++)); do
    if ((n <= flat_max)); then run_flat "$n"; fi
    run_grouped "$n" "$rep"
  done
  echo "  $n nodes done" >&2
done

col() { awk -v m="$1" -v n="$2" -v c="$3" '$1 == m && $2 == n && $c != "-" {print $c}' "$results" | median; }
echo
echo "One round of N nodes, flat (every node at the store) and grouped ($group nodes a relay), medians of $repeats"
printf '%7s | %-8s | %10s | %15s | %15s | %13s | %12s\n' nodes mode "close (ms)" "store CPU (ms)" \
  "relays CPU (ms)" "nodes CPU (ms)" "store us/node"
printf '%s\n' "--------+----------+------------+-----------------+-----------------+---------------+-------------"
for n in $nodes; do
  for mode in flat grouped; do
    [[ $mode == grouped ]] || ((n <= flat_max)) || continue
    store_cpu=$(col "$mode" "$n" 4)
    per=$(awk -v c="$store_cpu" -v n="$n" 'BEGIN {if (c + 0 > 0) printf "%.1f", c * 1000 / n; else print "-"}')
    printf '%7s | %-8s | %10s | %15s | %15s | %13s | %12s\n' "$n" "$mode" "$(col "$mode" "$n" 3)" \
      "$store_cpu" "$(col "$mode" "$n" 5)" "$(col "$mode" "$n" 6)" "$per"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
