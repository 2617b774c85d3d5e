#!/usr/bin/env bash
# Three "hosts" as network namespaces, one dtrun agent in each (c10d, 2:3 nodes, the store on
# node1's address): every worker's environment is checked, then node3's link goes down (a
# partition): node1 and node2 re-rendezvous without it, and node3's agent stops its workers and
# exits 1 naming the store within read_timeout.
#   bash tests/integration/netns_test.sh /abs/path/to/build/launcher/dtrun
# Needs root and iproute2; prints SKIP and exits 0 without them. Safety: a blackhole route for
# the test subnet goes into the root namespace before anything else, every agent runs inside a
# namespace, and everything (processes by PID, namespaces, the route) is removed on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" netns_test "$@"
WORKER=$HERE/workers/node_worker.sh
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  echo "netns_test: SKIP: needs root, iproute2 and nsenter"
  exit 0
fi

# Names of our own (the pid keeps concurrent runs apart); netns_hosts_up claims the subnet.
tag=dt$(($$ % 10000))
hosts=(node1 node2 node3)
# shellcheck source=lib/netns_hosts.sh
source "$HERE/lib/netns_hosts.sh"

netns_hosts_up 10.213
addr_of() { echo "$subnet.$((11 + $1))"; }

# on <index> <cmd...>: runs cmd in host <index>'s namespace with its own host name.
on() {
  local h=${hosts[$1]}
  shift
  nsenter --net="/run/netns/$tag-$h" -- unshare --uts -- \
    /bin/sh -c 'hostname "$1" && shift && exec "$@"' on "$h" "$@"
}

declare -A pid_of=()
start() {  # <index> <dtrun args...>
  local i=$1
  shift
  on "$i" "$DTRUN" --log_dir="$work/logs/$i" "$@" >"$work/$i.out" 2>&1 &
  pid_of[$i]=$!
  pids+=("$!")
}
rc=0
finish() { wait_agent "${pid_of[$1]}" $((SECONDS + $2)); }  # <index> <seconds>

endpoint=$(addr_of 0):29400
conf=keep_alive_interval=0.5,keep_alive_max_attempt=2,read_timeout=3,last_call_timeout=2
go=$work/go
for i in 0 1 2; do
  start "$i" --nnodes=2:3 --rdzv_backend=c10d --rdzv_endpoint="$endpoint" --rdzv_id=nets \
    --rdzv_conf="$conf" --nproc_per_node=2 --no_python "$WORKER" wait "$go"
done

# Round 0: three hosts, world size 6, MASTER_ADDR the store host's address, node 0 = its host.
lines=""
for _ in $(seq 300); do
  lines=$(cat "$work"/logs/*/nets/attempt_0/*/stdout.log 2>/dev/null | grep '^ENV' || true)
  [[ $(grep -c . <<<"$lines") -ge 6 ]] && break
  sleep 0.1
done
ranks=$(sed -E 's/.* RANK=([0-9]+) .*/\1/' <<<"$lines" | sort -n | tr '\n' ' ')
if [[ $ranks != "0 1 2 3 4 5 " ]]; then
  note_fail "round 0: ranks '$ranks', expected 0..5"
  tail -n 5 "$work"/*.out | sed 's/^/    | /' >&2
else
  grep -q "MASTER_ADDR=$(addr_of 0) " <<<"$lines" || note_fail "round 0: MASTER_ADDR is not $(addr_of 0)"
  [[ $(grep -c "WORLD_SIZE=6 " <<<"$lines") -eq 6 ]] || note_fail "round 0: WORLD_SIZE is not 6 everywhere"
  [[ $(grep "HOST=node1" <<<"$lines" | grep -c "GROUP_RANK=0 ") -eq 2 ]] ||
    note_fail "round 0: node1 (the store host) is not node 0"
  [[ $(sed -E 's/.*HOST=([a-z0-9]+).*/\1/' <<<"$lines" | sort -u | tr '\n' ' ') == "node1 node2 node3 " ]] ||
    note_fail "round 0: workers did not run on three distinct hosts"
  echo "netns_test: 3 hosts formed round 0 (ranks 0..5, MASTER_ADDR=$(addr_of 0), node1 is node 0)"
fi

# Partition node3: its link goes down.
ip -n "$sw" link set v-node3 down
cut=$SECONDS
finish 2 20
took=$((SECONDS - cut))
if [[ $rc -eq 1 ]] && grep -q "lost the rendezvous store at $(addr_of 0)" "$work/2.out"; then
  echo "netns_test: partitioned node3 stopped its workers and exited 1 naming the store after ${took} s"
else
  note_fail "partition: node3 exit code $rc (expected 1 naming the store)"
  tail -n 5 "$work/2.out" | sed 's/^/    | /' >&2
fi
# The survivors noticed the silence and formed a new round of two; then they finish.
ok=1
for _ in $(seq 100); do
  if grep -q "round 1: node" "$work/0.out" && grep -q "round 1: node" "$work/1.out"; then ok=0; break; fi
  sleep 0.1
done
if [[ $ok -eq 0 ]] && grep -q "(node3) lost: no heartbeat" "$work/0.out"; then
  touch "$go"
  finish 0 "$LIMIT"
  rc0=$rc
  finish 1 "$LIMIT"
  if [[ $rc0 -eq 0 && $rc -eq 0 ]]; then
    echo "netns_test: node1 and node2 re-rendezvoused without node3 and succeeded"
  else
    note_fail "survivors exited $rc0 and $rc, expected 0 and 0"
  fi
else
  note_fail "partition: the survivors did not form round 1 without node3"
  tail -n 5 "$work/0.out" | sed 's/^/    | /' >&2
fi

end_test
