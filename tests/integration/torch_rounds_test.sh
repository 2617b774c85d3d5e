#!/usr/bin/env bash
# Clean keys across rounds for unmodified torch workers (torch 1.13, gloo, c10d on loopback):
# torch's TCPStore client puts its own "/" before every key, so its bootstrap keys arrive as
# "//worker/attempt_<n>/...". A membership change keeps the attempt number: the keeper must
# clear those keys too, or the next round's gloo bootstrap reads the old round's addresses.
# workers/torch_round.py counts itself in "seen/<rank>" (a count above 1 is a key of an earlier
# round) and checks an all_reduce.
#   scale-up    node 0 runs alone (world 2), node 1 joins: the round of world 4 starts clean
#   scale-down  two nodes (world 4), node 1 is killed (-9): node 0 goes on alone (world 2)
#   bash tests/integration/torch_rounds_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" torch_rounds_test "$@"
sanitizers_in_short_form "the keeper's clearing of torch's keys across rounds"
source "$HERE/lib/wait_agent.sh"
$PYTHON -c 'import torch.distributed' 2>/dev/null || die "torch is missing for $PYTHON (scripts/setup.sh installs python3-torch)"
WORKER=$HERE/workers/torch_round.py
# A node is lost after 1 s without a heartbeat, 2 s in a sanitizer tree: there, under the full
# suite's load with ranks importing torch, a live agent's heartbeats went 1.1 s apart and the
# store host's own node was lost (the job ended).
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=$((SANITIZED ? 4 : 2)),read_timeout=3
FAST=$FAST,last_call_timeout=0.5,close_timeout=5
export GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=$PYTHON

declare -A pid_of=()
start() {  # <name> <finish at world size> <dtrun options...>
  local name=$1 finish_at=$2
  shift 2
  "$DTRUN" --log_dir="$work/logs/$name" --rdzv_backend=c10d --rdzv_conf="$FAST" --nproc_per_node=2 \
    "$@" "$WORKER" "$finish_at" >"$work/$name.out" 2>&1 &
  pid_of[$name]=$!
  pids+=("$!")
}
expect_rc() {  # <name> <code>
  wait_agent "${pid_of[$1]}" $((SECONDS + LIMIT))
  [[ $rc -eq $2 ]] || { tail -n 15 "$work/$1.out" | sed 's/^/    | /' >&2; note_fail "$1: exit code $rc, expected $2"; }
}
rounds() { find "$work/logs/$1" -name stdout.log -exec cat {} + 2>/dev/null | grep -h '^ROUND' || true; }
# check_rounds <label> <node names...>: every round's workers saw no earlier key and summed right.
check_rounds() {
  local label=$1 lines
  shift
  lines=$(for n in "$@"; do rounds "$n"; done)
  [[ -n $lines ]] || { note_fail "$label: no worker reported a round"; return; }
  if grep -v ' seen=1 ' <<<"$lines" | grep -q .; then
    note_fail "$label: a worker saw a key of an earlier round: $(grep -v ' seen=1 ' <<<"$lines" | head -1)"
  fi
  if grep -Ev 'world=([0-9]+) .* sum=\1$' <<<"$lines" | grep -q .; then
    note_fail "$label: an all_reduce did not sum to the world size: $(grep -Ev 'world=([0-9]+) .* sum=\1$' <<<"$lines" | head -1)"
  fi
}
wait_for() {  # <file> <pattern>
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# --- scale-up: 1 node, then 2 ---
port=$(free_port)
start up_0 4 --nnodes=1:2 --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=up
for _ in $(seq 300); do [[ $(rounds up_0 | grep -c 'world=2') -ge 2 ]] && break; sleep 0.1; done
[[ $(rounds up_0 | grep -c 'world=2') -ge 2 ]] || die "scale-up: node 0 never ran its round of world 2"
start up_1 4 --nnodes=1:2 --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=up
expect_rc up_0 0
expect_rc up_1 0
[[ $(rounds up_0; rounds up_1) ]] && [[ $( (rounds up_0; rounds up_1) | grep -c 'world=4 attempt=0 ') -eq 4 ]] ||
  note_fail "scale-up: not every rank of the world-4 round reported (attempt 0)"
check_rounds scale-up up_0 up_1
[[ $fail_count -ne 0 ]] || pass "scale-up: the round of world 4 (attempt 0 again) started without the world-2 round's keys"

# --- scale-down: 2 nodes, then 1 ---
port=$(free_port)
start down_0 2 --nnodes=1:2 --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=down --max_restarts=1
# Node 0 serves the store (the first to bind the endpoint): node 1 is the one that goes.
wait_for "$work/down_0.out" "rendezvous of job" || die "scale-down: node 0 did not start its rendezvous"
start down_1 2 --nnodes=1:2 --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=down --max_restarts=1
for _ in $(seq 300); do [[ $( (rounds down_0; rounds down_1) | grep -c 'world=4') -ge 4 ]] && break; sleep 0.1; done
[[ $( (rounds down_0; rounds down_1) | grep -c 'world=4') -ge 4 ]] || die "scale-down: no round of world 4"
kill -9 "${pid_of[down_1]}"
wait "${pid_of[down_1]}" 2>/dev/null || true
forget "${pid_of[down_1]}"
before=$fail_count
expect_rc down_0 0
[[ $(rounds down_0 | grep -c 'world=2 ') -eq 2 ]] || note_fail "scale-down: node 0's ranks did not finish in a round of world 2"
check_rounds scale-down down_0 down_1
[[ $fail_count -ne $before ]] || pass "scale-down: node 0 went on alone with clean keys"
end_test
