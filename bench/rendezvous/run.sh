#!/usr/bin/env bash
# Multi-node rendezvous: dtrun's round protocol against torchrun's c10d rendezvous (Debian's
# torch 1.13), on loopback, plus 8 real dtrun agents. Builds rdzv_bench, dtrun and stamp_worker,
# then prints one table. Measures; asserts nothing beyond correctness (rdzv_bench fails a run in
# which a node got a wrong or no assignment; such a size shows FAILED).
#
#   dtrun      rdzv_bench: N threads, each a RoundMember with its own two connections, against an
#              in-process StoreServer + KeeperService; min = max = N, last_call_timeout 0.
#              close time = first join() -> last node has its assignment.
#   torch c10d torch_c10d_rdzv.py: N threads, each a DynamicRendezvousHandler over
#              C10dRendezvousBackend with its own TCPStore client, against a torch TCPStore
#              server; min = max = N. close time = first next_rendezvous() -> last return.
#   8 agents   8 `dtrun --nnodes=8 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT
#              --rdzv_conf=last_call_timeout=0 --nproc_per_node=1 --no_python stamp_worker`
#              processes (the first to bind the port hosts the store and the keeper): launch of
#              the first agent -> the last worker's start stamp (CLOCK_REALTIME).
#
# Usage: bench/rendezvous/run.sh
# Environment:
#   DTRUN_NODES="8 64 512"  REPEATS=3   sizes for rdzv_bench and runs per size (medians)
#   BIG_NODES=4096          BIG_REPEATS=3 runs each (median), each bounded by BIG_TIMEOUT=60 s
#                           ("" skips)
#   HUGE_NODES=16384        HUGE_REPEATS=3: sizes run against a `dtrun store` process (which
#                           hosts the keepers) with one connection per node (rdzv_bench
#                           --connections 1): 16,384 nodes x 2 connections do not fit a hard
#                           RLIMIT_NOFILE of 20,000 in one process ("" skips)
#   TORCH_NODES="8 64"      sizes for torch's c10d rendezvous, each bounded by TORCH_TIMEOUT=40 s;
#                           larger sizes stop at the first that does not finish (256 threads did
#                           not finish within 100 s on 2 cores, so 512 is not tried by default)
#   AGENT_REPEATS=5         8-agent runs (median)     PYTHON=/usr/bin/python3 (must have torch)
#   KEEP=1                  keep the work directory
#   PLOT=bench/rendezvous/rendezvous.png   where the plot goes ("" = none; needs gnuplot)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build
dtrun_nodes=${DTRUN_NODES:-8 64 512}
repeats=${REPEATS:-3}
big_nodes=${BIG_NODES-4096}
big_timeout=${BIG_TIMEOUT:-60}
big_repeats=${BIG_REPEATS:-3}
huge_nodes=${HUGE_NODES-16384}
huge_repeats=${HUGE_REPEATS:-3}
plot=${PLOT-$repo/bench/rendezvous/rendezvous.png}
torch_nodes=${TORCH_NODES:-8 64}
torch_timeout=${TORCH_TIMEOUT:-40}
agent_repeats=${AGENT_REPEATS:-5}
python=${PYTHON:-/usr/bin/python3}

ninja -C "$build" rdzv_bench dtrun stamp_worker >/dev/null
bench=$build/bench/rendezvous/rdzv_bench
dtrun=$build/launcher/dtrun
worker=$build/bench/launch/stamp_worker
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "run.sh: $python cannot import torch (Debian's /usr/bin/python3 has torch 1.13)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rdzv_bench.XXXXXX")
pids=()

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"

cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    stop_pid "$pid" 2
  done
  if [[ -n ${KEEP:-} ]]; then
    echo "run.sh: work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

results=$work/results  # "impl nodes close_ms" (close_ms "-" = failed / timed out)
: >"$results"
started=$(date +%s)
echo "rendezvous bench: $(nproc) CPUs, load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

field() {  # field NAME LINE: the value of NAME=... in a key=value line
  sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"
}

# --- 1. dtrun's round protocol, simulated nodes --------------------------------------------------
run_rdzv_bench() {  # [EXTRA="rdzv_bench options"] run_rdzv_bench TIMEOUT_S REPEATS NODES...
  local timeout_s=$1 reps=$2 n rc=0 line
  shift 2
  local nodes
  nodes=$(tr ' ' ',' <<<"$*")
  # shellcheck disable=SC2086  # EXTRA is a word list
  timeout $((timeout_s * 3 + 60)) "$bench" --nodes "$nodes" --repeats "$reps" \
    --timeout-s "$timeout_s" ${EXTRA:-} >"$work/rdzv.out" 2>"$work/rdzv.err" || rc=$?
  cat "$work/rdzv.out" >>"$work/rdzv.all"
  for n in "$@"; do
    line=$(grep "^rdzv_bench nodes=$n " "$work/rdzv.out" || true)
    if [[ -z $line ]] || grep -q 'ok=0' <<<"$line"; then
      echo "dtrun $n -" >>"$results"
      echo "run.sh: rdzv_bench nodes=$n failed (exit $rc):" >&2
      grep -v '^\[' "$work/rdzv.err" | cut -c1-400 | head -n 5 >&2 || true
      grep '^\[' "$work/rdzv.err" | cut -c1-300 | sort -u -k4 | head -n 3 >&2 || true
      continue
    fi
    while read -r line; do
      echo "dtrun $n $(field close_ms "$line") $(field ops_per_node "$line")" \
        "$(field nodes_cpu_ms "$line") $(field server_cpu_ms "$line")" >>"$results"
    done < <(grep "^rdzv_bench nodes=$n " "$work/rdzv.out")
  done
}
: >"$work/rdzv.all"
# shellcheck disable=SC2086  # word lists on purpose
run_rdzv_bench 30 "$repeats" $dtrun_nodes
echo "  dtrun {$dtrun_nodes} done ($(($(date +%s) - started)) s)" >&2
for n in $big_nodes; do
  run_rdzv_bench "$big_timeout" "$big_repeats" "$n"
  echo "  dtrun $n done ($(($(date +%s) - started)) s)" >&2
done
for n in $huge_nodes; do
  # The store (and its keepers) in a process of its own: each process then holds one end of
  # one connection per node. --max-connections: the nodes plus the keepers' and the bench's own.
  rm -f "$work/store.port"
  timeout $((big_timeout * 3 + 120)) "$dtrun" store --host 127.0.0.1 --port 0 \
    --port-file "$work/store.port" --max-connections $((n + 256)) --log-level warn \
    >"$work/store.log" 2>&1 &
  store_pid=$!
  pids+=("$store_pid")
  for _ in $(seq 200); do
    [[ ! -s $work/store.port ]] || break
    kill -0 "$store_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [[ ! -s $work/store.port ]]; then
    echo "run.sh: dtrun store did not start (pid $store_pid):" >&2
    tail -n 3 "$work/store.log" >&2 || true
    echo "dtrun $n -" >>"$results"
    continue
  fi
  server_pid=$(cat "/proc/$store_pid/task/$store_pid/children")  # `timeout`'s child
  EXTRA="--connect 127.0.0.1:$(cat "$work/store.port") --connections 1 --server-pid ${server_pid%% *}" \
    run_rdzv_bench "$big_timeout" "$huge_repeats" "$n"
  stop_pid "$store_pid" 2
  echo "  dtrun $n (dtrun store, 1 connection per node) done ($(($(date +%s) - started)) s)" >&2
done

# --- 2. torch 1.13's c10d rendezvous, simulated nodes --------------------------------------------
torch_skipped=""
for n in $torch_nodes; do
  if [[ -n $torch_skipped ]]; then
    echo "torch $n skip" >>"$results"
    continue
  fi
  rc=0
  timeout $((torch_timeout + 20)) "$python" "$repo/bench/rendezvous/torch_c10d_rdzv.py" \
    --nodes "$n" --timeout-s "$torch_timeout" >"$work/torch.out" 2>"$work/torch.err" || rc=$?
  line=$(grep "^torch_c10d nodes=$n " "$work/torch.out" || true)
  if [[ -n $line ]] && grep -q 'ok=1' <<<"$line"; then
    echo "torch $n $(field close_ms "$line")" >>"$results"
  else
    echo "torch $n > $torch_timeout s" >>"$results"
    echo "run.sh: torch c10d nodes=$n did not finish (exit $rc) ${line:+: $line}" >&2
    torch_skipped=$n
  fi
  echo "  torch c10d $n done ($(($(date +%s) - started)) s)" >&2
done

# --- 3. 8 real dtrun agents on loopback ----------------------------------------------------------
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
agent_ms=()
for rep in $(seq "$agent_repeats"); do
  dir=$work/agents$rep
  mkdir -p "$dir/stamps"
  port=$(free_port)
  pids=()
  t0=${EPOCHREALTIME/[.,]/}  # microseconds, no fork
  for a in 0 1 2 3 4 5 6 7; do
    "$dtrun" --nnodes=8 --rdzv_backend=c10d "--rdzv_endpoint=127.0.0.1:$port" --rdzv_id=b \
      --rdzv_conf=last_call_timeout=0 --nproc_per_node=1 --log_dir "$dir/logs$a" \
      --no_python "$worker" "$dir/stamps" ok >"$dir/agent$a.log" 2>&1 &
    pids+=($!)
  done
  # Up to 30 s for all 8 to exit; then stop the rest by pid.
  for _ in $(seq 300); do
    alive=0
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    [[ $alive -eq 1 ]] || break
    sleep 0.1
  done
  failed=0
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      failed=1
      stop_pid "$pid" 2
    elif ! wait "$pid"; then
      failed=1
    fi
  done
  pids=()
  count=$(find "$dir/stamps" -name 'a0.*' | wc -l)
  if [[ $failed -ne 0 || $count -ne 8 ]]; then
    echo "run.sh: 8-agent run $rep failed ($count of 8 worker stamps); agent 0 log:" >&2
    tail -n 5 "$dir/agent0.log" >&2 || true
    KEEP=1
    continue
  fi
  last=$(cat "$dir"/stamps/a0.* | awk '{print $1}' | sort -n | tail -n1)
  agent_ms+=("$(awk -v l="$last" -v t="$t0" 'BEGIN {printf "%.1f", (l - t * 1000) / 1e6}')")
  [[ -n ${KEEP:-} ]] || rm -rf "$dir"
done
echo "  8 agents done ($(($(date +%s) - started)) s)" >&2
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg), $(($(date +%s) - started)) s" >&2

# --- table ----------------------------------------------------------------------------------------
median() {  # median < numbers
  sort -g | awk '{v[NR] = $1} END {
    if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
    else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
cell() {  # cell IMPL N: median close time, or what happened instead
  local impl=$1 n=$2 rows
  rows=$(awk -v i="$impl" -v n="$n" '$1 == i && $2 == n' "$results")
  if [[ -z $rows ]]; then
    echo "not run"
  elif grep -q ' skip$' <<<"$rows"; then
    echo "skipped"
  elif grep -q ' > ' <<<"$rows"; then
    awk '{print $3, $4, $5}' <<<"$rows" | head -n1
  elif awk '$3 == "-"' <<<"$rows" | grep -q .; then
    echo "FAILED"
  else
    awk '{print $3}' <<<"$rows" | median
  fi
}

echo
echo "close time: first join -> every node has its assignment, ms (dtrun: median of $repeats run(s)" \
  "for {$dtrun_nodes}, $big_repeats for {$big_nodes}, $huge_repeats for {$huge_nodes}; torch: 1 run)"
printf '%8s | %16s | %12s | %18s | %10s\n' nodes "dtrun close (ms)" "ops/node" \
  "torch c10d (ms)" "ratio"
printf '%s\n' "---------+------------------+--------------+--------------------+-----------"
: >"$work/plot_dtrun.dat"
: >"$work/plot_torch.dat"
# shellcheck disable=SC2086
for n in $(printf '%s\n' $dtrun_nodes $big_nodes $huge_nodes $torch_nodes | sort -n -u); do
  d=$(cell dtrun "$n")
  t=$(cell torch "$n")
  ops=$(awk -v n="$n" '$1 == "dtrun" && $2 == n && $4 != "" {print $4}' "$results" | head -n1)
  ratio=$(awk -v a="$d" -v b="$t" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.0fx", b / a; else print "-"}')
  printf '%8s | %16s | %12s | %18s | %10s\n' "$n" "$d" "${ops:--}" "$t" "$ratio"
  awk -v n="$n" -v v="$d" 'BEGIN {if (v + 0 > 0) print n, v}' >>"$work/plot_dtrun.dat"
  awk -v n="$n" -v v="$t" 'BEGIN {if (v + 0 > 0) print n, v}' >>"$work/plot_torch.dat"
done
for n in $huge_nodes; do
  d=$(cell dtrun "$n")
  cpu=$(awk -v n="$n" '$1 == "dtrun" && $2 == n && $6 != "" && $6 >= 0 {
      printf "%s%s/%s", (k++ ? ", " : ""), $6, $5 } ' "$results")
  echo
  echo "$n nodes (dtrun store process, 1 connection per node): close $d ms, target < 2000 ms:" \
    "$(awk -v v="$d" 'BEGIN {print (v + 0 > 0 && v + 0 < 2000 ? "met" : "MISSED")}')"
  echo "  CPU-ms of each round, store/nodes (the simulated nodes' process): ${cpu:--}"
done
if [[ -n $plot ]]; then
  if command -v gnuplot >/dev/null; then
    gnuplot -e "dir='$work'; out='$plot'" "$repo/bench/rendezvous/plot.gp" && echo "plot: $plot"
  else
    echo "run.sh: gnuplot not installed (apt-get install gnuplot-nox, or scripts/setup.sh): no plot" >&2
  fi
fi
if [[ ${#agent_ms[@]} -gt 0 ]]; then
  agent_median=$(printf '%s\n' "${agent_ms[@]}" | median)
else
  agent_median="FAILED"
fi
echo
printf '8 real dtrun agents (c10d, loopback): launch of the first agent -> last worker start:\n'
printf '  median %s ms of %d run(s) [%s] (target < 100 ms)\n' "$agent_median" \
  "${#agent_ms[@]}" "${agent_ms[*]}"
cat <<'EOF'

ops/node = store round trips one dtrun node made during join() (counted by rdzv_bench); the
           keeper's own are not included. torch's c10d handler polls the whole rendezvous state
           with compare_set/get and sleeps 1 s between polls (plus 0..0.3 s before a first round),
           so its close time is seconds by design.
ratio    = torch c10d / dtrun. Both sides simulate nodes as threads of one process on this
           machine; torch's also share one Python interpreter (GIL).
EOF
