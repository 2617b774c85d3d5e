#!/usr/bin/env bash
# Rendezvous through etcd against the same through dtrun's store, on loopback, in one run:
#   rounds     etcd_rdzv_bench: N simulated nodes (threads, each a RoundMember with two
#              connections) and one keeper (runKeeper), over etcd (makeEtcdStore) or over an
#              in-process dtrun StoreServer; close time = first join() -> last assignment.
#   8 agents   8 real dtrun agents, --rdzv_backend=etcd against --rdzv_backend=c10d, each running
#              stamp_worker: launch of the first agent -> the last worker's start stamp.
# etcd: Debian's etcd-server, started here on free loopback ports (MEMBERS=3 members by default,
# as a production cluster; fsync stays on) and stopped by pid. Measures; asserts nothing beyond
# correctness (a run where a node got a wrong or no assignment fails).
#
# Usage: bench/rendezvous/run_etcd.sh
# Environment: NODES=8,64,512  REPEATS=3  AGENT_REPEATS=5  MEMBERS=3  KEEP=1 (keep the work dir)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build
nodes=${NODES:-8,64,512}
repeats=${REPEATS:-3}
agent_repeats=${AGENT_REPEATS:-5}
members=${MEMBERS:-3}
python=${PYTHON:-/usr/bin/python3}
command -v etcd >/dev/null || { echo "run_etcd.sh: etcd is missing (scripts/setup.sh installs etcd-server)" >&2; exit 2; }
ninja -C "$build" etcd_rdzv_bench dtrun stamp_worker >/dev/null

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/etcd_bench.XXXXXX")
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do stop_pid "$pid" 2; done
  [[ -n ${KEEP:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- etcd: MEMBERS members on loopback ------------------------------------------------------
cluster=() clients=()
for i in $(seq "$members"); do
  cp=$(free_port) pp=$(free_port)
  clients+=("127.0.0.1:$cp")
  cluster+=("m$i=http://127.0.0.1:$pp")
  peer[$i]=$pp client[$i]=$cp
done
initial=$(IFS=,; echo "${cluster[*]}")
for i in $(seq "$members"); do
  etcd --name "m$i" --data-dir "$work/etcd$i" --log-level error --logger zap \
    --listen-client-urls "http://127.0.0.1:${client[$i]}" \
    --advertise-client-urls "http://127.0.0.1:${client[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${peer[$i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${peer[$i]}" \
    --initial-cluster "$initial" --initial-cluster-state new \
    --heartbeat-interval 50 --election-timeout 500 >"$work/etcd$i.log" 2>&1 &
  pids+=($!)
done
endpoints=$(IFS=,; echo "${clients[*]}")
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --endpoints="$endpoints" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
echo "etcd: $members member(s) at $endpoints; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# --- rounds ---------------------------------------------------------------------------------
"$build/bench/rendezvous/etcd_rdzv_bench" --etcd "$endpoints" --nodes "$nodes" \
  --repeats "$repeats" | tee "$work/rounds.txt" | grep -v ' rep=' >&2 || true

# --- 8 real agents ----------------------------------------------------------------------------
worker=$build/bench/launch/stamp_worker
agents_run() {  # <backend> <rep>: prints ms from the first launch to the last worker's start
  local backend=$1 rep=$2 dir=$work/$1-$2 port args=() a
  mkdir -p "$dir/stamps"
  port=$(free_port)
  if [[ $backend == etcd ]]; then
    args=(--rdzv_backend=etcd "--rdzv_endpoint=$endpoints" "--rdzv_id=b$rep")
  else
    args=(--rdzv_backend=c10d "--rdzv_endpoint=127.0.0.1:$port" "--rdzv_id=b$rep")
  fi
  local t0=${EPOCHREALTIME/[.,]/} started=()
  for a in 0 1 2 3 4 5 6 7; do
    "$build/launcher/dtrun" --nnodes=8 "${args[@]}" --rdzv_conf=last_call_timeout=0 \
      --nproc_per_node=1 --log_dir "$dir/logs$a" --no_python "$worker" "$dir/stamps" ok \
      >"$dir/agent$a.log" 2>&1 &
    started+=($!)
  done
  local failed=0 pid
  for pid in "${started[@]}"; do
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then stop_pid "$pid" 2; failed=1; elif ! wait "$pid"; then failed=1; fi
  done
  if [[ $failed -ne 0 || $(find "$dir/stamps" -name 'a0.*' | wc -l) -ne 8 ]]; then
    echo "run_etcd.sh: $backend 8-agent run $rep failed; agent 0 log:" >&2
    tail -n 5 "$dir/agent0.log" >&2
    return 1
  fi
  local last
  last=$(cat "$dir"/stamps/a0.* | awk '{print $1}' | sort -n | tail -n1)
  awk -v l="$last" -v t="$t0" 'BEGIN {printf "%.1f\n", (l - t * 1000) / 1e6}'
}
median() { sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "-"}'; }
declare -A agent_ms=()
for backend in c10d etcd; do
  values=()
  for rep in $(seq "$agent_repeats"); do
    if ms=$(agents_run "$backend" "$rep"); then values+=("$ms"); fi
  done
  agent_ms[$backend]=$(printf '%s\n' "${values[@]}" | median)
done

# --- table ------------------------------------------------------------------------------------
printf '\nRendezvous through etcd (%s member(s), loopback) vs dtrun'"'"'s store, medians of %s:\n' \
  "$members" "$repeats"
printf '| simulated nodes | dtrun store close (ms) | etcd close (ms) | etcd / store |\n'
printf '| ---: | ---: | ---: | ---: |\n'
grep -v ' rep=' "$work/rounds.txt" | sed -E 's/.*nodes=([0-9]+) store_close_ms=([0-9.]+) etcd_close_ms=([0-9.]+) etcd_over_store=([0-9.]+).*/| \1 | \2 | \3 | \4x |/'
printf '\n8 real dtrun agents, launch of the first -> last worker started (median of %s):\n' \
  "$agent_repeats"
printf '| backend | ms |\n| --- | ---: |\n| c10d (dtrun store) | %s |\n| etcd | %s |\n' \
  "${agent_ms[c10d]}" "${agent_ms[etcd]}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
