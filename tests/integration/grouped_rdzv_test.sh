#!/usr/bin/env bash
# Grouped joins (--rdzv_conf group_size=N, dtrun/group_relay.h) with real agents on loopback,
# each agent a "node":
#   bash tests/integration/grouped_rdzv_test.sh /abs/path/to/build/launcher/dtrun
# 1. 5 nodes in groups of 2 (the store's host joins at its store; two leaders serve relays): a
#    worker's failure on a grouped node restarts all 5 nodes, and attempt 1 is one consistent world.
# 2. kill -9 of a group's leader: its member loses its store (the relay) and stops with an error
#    naming it; the keeper sees both fall silent and the other 3 nodes go on and finish.
# Loopback only; every agent runs under the suite's limit and is stopped by its PID.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" grouped_rdzv_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
WORKER=$HERE/workers/node_worker.sh
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=$((SANITIZED ? 4 : 2)),read_timeout=3
FAST=$FAST,last_call_timeout=0.5,close_timeout=5,group_size=2

field() { sed -E "s/.* $1=([^ ]*).*/\1/"; }
# world_of <attempt> <agents...>: "ranks | node ranks | restarts" of the attempt's ENV lines.
world_of() {
  local attempt=$1 lines
  shift
  lines=$(for a in "$@"; do find "$work/logs/$a" -path "*/$attempt/*/stdout.log" -exec cat {} + 2>/dev/null; done |
    grep -h '^ENV ' || true)
  echo "$(field RANK <<<"$lines" | sort -n | tr '\n' ' ')|$(field GROUP_RANK <<<"$lines" | sort -nu |
    tr '\n' ' ')|$(field RESTART <<<"$lines" | sort -u | tr '\n' ' ')"
}

# ---------------------------------------------------------------------------------------------
# 1. 5 nodes x 2 workers; rank 5 fails in attempt 0 only.
port=$(free_port)
nodes=(g0 g1 g2 g3 g4)
start g0 --nnodes=5 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=grouped \
  --rdzv_conf="$FAST,is_host=1" --max_restarts=1 --nproc_per_node=2 --no_python "$WORKER" fail 5 1
for i in 1 2 3 4; do
  start "g$i" --nnodes=5 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=grouped \
    --rdzv_conf="$FAST,is_host=0" --max_restarts=1 --nproc_per_node=2 --no_python "$WORKER" fail 5 1
done
ok=0
for n in "${nodes[@]}"; do expect_rc "$n" 0 || ok=1; done
leaders=$(grep -l "leads group" "$work"/g[1-4].out 2>/dev/null | wc -l)
world=$(world_of attempt_1 "${nodes[@]}")
want="0 1 2 3 4 5 6 7 8 9 |0 1 2 3 4 |1 "
if [[ $ok -eq 0 && $leaders -eq 2 && $world == "$want" ]] &&
  ! grep -q "leads group" "$work/g0.out"; then
  pass "5 nodes in groups of 2 (2 leaders): a failure restarted every node, attempt 1 one world"
else
  note_fail "groups of 2: leaders $leaders (want 2, not the store's host), attempt 1 '$world' (want '$want')"
fi

# ---------------------------------------------------------------------------------------------
# 2. kill -9 of a leader: 3:5 nodes; the survivors (the store's host and the other group) finish.
port=$(free_port)
go=$work/k.go
nodes=(k0 k1 k2 k3 k4)
start k0 --nnodes=3:5 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=killed \
  --rdzv_conf="$FAST,is_host=1" --nproc_per_node=1 --no_python "$WORKER" wait "$go"
for i in 1 2 3 4; do
  start "k$i" --nnodes=3:5 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=killed \
    --rdzv_conf="$FAST,is_host=0" --nproc_per_node=1 --no_python "$WORKER" wait "$go"
done
for _ in $(seq 300); do
  [[ $(world_of attempt_0 "${nodes[@]}") == "0 1 2 3 4 |0 1 2 3 4 |0 " ]] && break
  sleep 0.1
done
leader=$(grep -l "leads group 0" "$work"/k[1-4].out 2>/dev/null | head -n 1 | xargs -r basename | sed 's/\.out$//')
[[ -n $leader ]] || die "no agent said it leads group 0"
kill -9 "${pid_of[$leader]}"
finish "$leader"
others=()
for n in k1 k2 k3 k4; do [[ $n == "$leader" ]] || others+=("$n"); done
# Its member is the one that loses its store; the store's host and the other group go on.
member="" survivors=(k0)
for _ in $(seq 200); do
  for n in "${others[@]}"; do grep -q "dtrun: lost" "$work/$n.out" 2>/dev/null && member=$n; done
  [[ -n $member ]] && break
  sleep 0.1
done
[[ -n $member ]] || die "no member of $leader's group said it lost its store"
for n in "${others[@]}"; do [[ $n == "$member" ]] || survivors+=("$n"); done
for _ in $(seq 300); do
  all=1
  for n in "${survivors[@]}"; do grep -q "round 1: node" "$work/$n.out" || all=0; done
  [[ $all -eq 1 ]] && break
  sleep 0.1
done
touch "$go"
ok=0
for n in "${survivors[@]}"; do expect_rc "$n" 0 || ok=1; done
finish "$member"
member_rc=$rc
if [[ $ok -eq 0 && $member_rc -ne 0 ]] && grep -q "lost: no heartbeat" "$work/k0.out"; then
  pass "kill -9 of group 0's leader: its member stopped (exit $member_rc), the other 3 nodes finished"
else
  note_fail "leader killed: survivors ${survivors[*]}, member $member exit $member_rc"
  tail -n 8 "$work/k0.out" | sed 's/^/    | /' >&2
fi
end_test
