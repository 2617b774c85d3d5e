#!/usr/bin/env bash
# Stack dumps never block the agent's loop (issue 14): a fake `eu-stack` first on PATH takes 20 s
# per worker, so a dump of 2 workers would hold a blocking agent for 40 s.
#   bash tests/integration/hang_liveness_test.sh /abs/path/to/build/launcher/dtrun
#   signal     one node, --hang_timeout=1, a rank deadlocked (dtrt_hang_worker): once the dump has
#              begun, SIGUSR1 (forwarded: the job keeps running) and then SIGTERM reach the
#              agent; it forwards the first at once and exits 143 within a few seconds.
#   heartbeat  two agents (static, 1:2 elastic settings with 1 s liveness): node 1's rank hangs,
#              both nodes dump with the slow tool for longer than a silent node may live; the
#              keeper must not declare either node dead (no "lost" line), and SIGTERM ends both.
# Loopback only; every dtrun runs under timeout(1) and is stopped by its PID.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" hang_liveness_test "$@"
WORKER=$BUILD/tests/worker_runtime/dtrt_hang_worker
[[ -x $WORKER ]] || die "expected $WORKER (ninja -C build dtrt_hang_worker)"
export DTRUN_TIMEOUT=120
mkdir "$work/bin"
printf '#!/bin/sh\nsleep 20\necho "slow stack tool for $*"\n' >"$work/bin/eu-stack"
chmod +x "$work/bin/eu-stack"

# wait_for <file> <pattern> <seconds>
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# --- signal: the agent answers while it dumps ---
PATH="$work/bin:$PATH" timeout 90 "$DTRUN" --nproc_per_node=2 --hang_timeout=1 \
  --log_dir="$work/logs" --rdzv_id=liveness --no_python "$WORKER" >"$work/one.out" 2>&1 &
agent=$!
pids+=("$agent")
wait_for "$work/one.out" "dumping the stacks" 40 || { cat "$work/one.out" >&2; die "signal: no hang found"; }
sleep 1  # the dump thread is now inside the 20 s tool
dtrun_pid=$(pgrep -P "$agent" -x dtrun) || die "signal: no dtrun under timeout pid $agent"
kill -USR1 "$dtrun_pid"  # to dtrun itself: timeout(1) does not pass SIGUSR1 on
wait_for "$work/one.out" "received SIGUSR1: forwarding it" 3 ||
  { cat "$work/one.out" >&2; die "signal: SIGUSR1 was not answered within 3 s of a dump"; }
start=$SECONDS
kill -TERM "$agent"
rc=0
wait "$agent" || rc=$?
elapsed=$((SECONDS - start))
[[ $rc -eq 143 ]] || { tail -20 "$work/one.out" >&2; die "signal: dtrun exited $rc, want 143"; }
((elapsed <= 8)) || die "signal: SIGTERM during a dump took ${elapsed}s (the dump blocked the loop)"
echo "hang_liveness_test: signal ok (SIGUSR1 answered during the dump, SIGTERM -> 143 in ${elapsed}s)"

# --- heartbeat: a node dumping stacks is not declared dead ---
port=$(free_port)
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=2,read_timeout=5,last_call_timeout=0.5
for node in 0 1; do
  PATH="$work/bin:$PATH" timeout 90 "$DTRUN" --nnodes=2 --node_rank=$node \
    --master_addr=127.0.0.1 --master_port="$port" --nproc_per_node=2 --hang_timeout=2 \
    --rdzv_conf="$FAST" --log_dir="$work/logs$node" --rdzv_id=beat --no_python "$WORKER" --stuck=3 \
    >"$work/node$node.out" 2>&1 &
  pids+=("$!")
done
node0=${pids[1]}
node1=${pids[2]}
wait_for "$work/node0.out" "dumping the stacks" 40 || { cat "$work/node0.out" >&2; die "heartbeat: no hang found on node 0"; }
sleep 4  # four times as long as a silent node may live
if grep -E "lost|declared dead|no heartbeat" "$work/node0.out" "$work/node1.out" >&2; then
  die "heartbeat: a node dumping stacks was declared dead"
fi
kill -TERM "$node0" "$node1"
for p in "$node0" "$node1"; do
  rc=0
  wait "$p" || rc=$?
  [[ $rc -eq 143 || $rc -eq 124 ]] || { tail -20 "$work"/node*.out >&2; die "heartbeat: an agent exited $rc, want 143"; }
done
echo "hang_liveness_test: heartbeat ok (no node declared dead during 4 s of dumps)"
echo "hang_liveness_test: PASS"
