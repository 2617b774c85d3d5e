#!/usr/bin/env bash
# The largest rounds this machine can hold, simulated two ways against one `dtrun store` process
# (which hosts the keepers), alternating within every repeat: rdzv_bench (a thread per node, one
# connection each), rdzv_sim (the same requests from nodes on event loops, no thread per node) and
# rdzv_sim --wait-get 0 (the join before WAIT_GET: WAIT, then CHECK+GET, one more round trip).
# Prints each size's median close time and the CPU one round cost the store and the simulator:
# the store's share is the protocol's cost, the simulator's what it took to play the nodes.
# Measures; asserts nothing beyond correctness (a wrong or missing assignment fails a run).
#
# Usage: bench/rendezvous/run_sim.sh
# Environment: NODES="4096 16384 19000" (sizes; rdzv_bench runs those <= THREAD_MAX=16384, as
#              more threads than that do not start here) REPEATS=3  LOOPS=1 (rdzv_sim's event
#              loops)  BUILD=build  TIMEOUT_S=120
#              The store holds one end of every node's connection: a size past its
#              RLIMIT_NOFILE (20,000 per process here) fails at connect.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$repo/build}
nodes=${NODES:-4096 16384 19000}
repeats=${REPEATS:-3}
loops=${LOOPS:-1}
thread_max=${THREAD_MAX:-16384}
timeout_s=${TIMEOUT_S:-120}
ninja -C "$build" rdzv_bench rdzv_sim dtrun >/dev/null
dtrun=$build/launcher/dtrun

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
bench_work rdzv_sim

# The store in a process of its own, so that each process holds one end of each connection.
timeout $((timeout_s * 20)) "$dtrun" store --host 127.0.0.1 --port 0 --port-file "$work/port" \
  --max-connections 19990 --log-level warn >"$work/store.log" 2>&1 &
pids+=("$!")
for _ in $(seq 200); do
  [[ ! -s $work/port ]] || break
  sleep 0.05
done
[[ -s $work/port ]] || { echo "run_sim.sh: dtrun store did not start: $(tail -n 3 "$work/store.log")" >&2; exit 1; }
server=$(cat "/proc/${pids[0]}/task/${pids[0]}/children")  # `timeout`'s child: the store
server=${server%% *}
store=(--connect "127.0.0.1:$(cat "$work/port")" --server-pid "$server" --timeout-s "$timeout_s")
echo "run_sim.sh: $(nproc) CPUs, load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

results=$work/results  # "impl nodes close_ms sim_cpu_ms store_cpu_ms"
: >"$results"
run() {  # run IMPL N: one round, appended to results ("-" when it failed)
  local impl=$1 n=$2 line out=$work/$1.out
  if [[ $impl == threads ]]; then
    "$build/bench/rendezvous/rdzv_bench" --nodes "$n" --connections 1 "${store[@]}" >"$out" 2>"$out.err" || true
    line=$(grep "^rdzv_bench nodes=$n " "$out" || true)
    cpu=$(field nodes_cpu_ms "$line")
  else
    "$build/bench/rendezvous/rdzv_sim" --nodes "$n" --loops "$loops" "${store[@]}" \
      --wait-get "$([[ $impl == events ]] && echo 1 || echo 0)" >"$out" 2>"$out.err" || true
    line=$(grep "^rdzv_sim nodes=$n " "$out" || true)
    cpu=$(field sim_cpu_ms "$line")
  fi
  if [[ -z $line || $(field ok "$line") != 1 ]]; then
    echo "$impl $n - - -" >>"$results"
    echo "run_sim.sh: $impl, $n nodes failed: $(grep -v '^\[' "$out.err" | head -n 2)" >&2
    return
  fi
  echo "$impl $n $(field close_ms "$line") $cpu $(field server_cpu_ms "$line")" >>"$results"
}
for n in $nodes; do
  for ((rep = 0; rep < repeats; rep++)); do
    if ((n <= thread_max)); then run threads "$n"; fi
    run events "$n"
    run events-wait "$n"
  done
  echo "  $n nodes done" >&2
done

col() { awk -v i="$1" -v n="$2" -v c="$3" '$1 == i && $2 == n && $c != "-" {print $c}' "$results" | median; }
echo
echo "One round of N nodes against a \`dtrun store\` process, medians of $repeats (ms; CPU in CPU-ms)"
printf '%7s | %-28s | %9s | %13s | %13s | %12s\n' nodes simulator close "store CPU" "sim CPU" \
  "store us/node"
printf '%s\n' "--------+------------------------------+-----------+---------------+---------------+-------------"
for n in $nodes; do
  for impl in threads events events-wait; do
    [[ $impl != threads ]] || ((n <= thread_max)) || continue
    case $impl in
      threads) name="rdzv_bench (threads)" ;;
      events) name="rdzv_sim" ;;
      *) name="rdzv_sim, WAIT + CHECK+GET" ;;
    esac
    store_cpu=$(col "$impl" "$n" 5)
    per=$(awk -v c="$store_cpu" -v n="$n" 'BEGIN {if (c + 0 > 0) printf "%.0f", c * 1000 / n; else print "-"}')
    printf '%7s | %-28s | %9s | %13s | %13s | %12s\n' "$n" "$name" "$(col "$impl" "$n" 3)" \
      "$store_cpu" "$(col "$impl" "$n" 4)" "$per"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
