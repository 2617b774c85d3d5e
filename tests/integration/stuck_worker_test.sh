#!/usr/bin/env bash
# A worker that SIGKILL cannot end (issue 29): it reads a file of tests/integration/fuse_hold.cpp's
# FUSE file system, whose reads are never answered, so once killed it waits in the kernel
# (state D) until the file system goes away, as a worker on a dead NFS server or in a hung
# driver call does. dtrun must not wait for it forever: --kill_wait after SIGKILL it names the
# rank, its pid, its state and the kernel function it waits in, abandons it, and exits 75. One
# node: after rank 1 fails, with restarts left (a stuck worker's node runs no other attempt).
# Two nodes: the stuck node leaves the job with the reason, the other node goes on without it
# (a spare takes its place). The report's rank has "stuck"; nothing is left once the file system
# is gone. Needs root and /dev/fuse; says SKIP (and passes) elsewhere. Loopback only.
#   bash tests/integration/stuck_worker_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" stuck_worker_test "$@"

if [[ $(id -u) -ne 0 || ! -c /dev/fuse ]]; then
  echo "stuck_worker_test: SKIP (needs root and /dev/fuse)"
  exit 0
fi
HOLD=$BUILD/tests/fuse_hold
[[ -x $HOLD ]] || die "no $HOLD (ninja -C $BUILD fuse_hold)"
mnt=$work/mnt
mkdir -p "$mnt"
"$HOLD" "$mnt" >"$work/hold.out" 2>&1 &
hold=$!
pids+=("$hold")
at_exit "umount -l '$mnt' 2>/dev/null || true"
for _ in $(seq 50); do grep -q ready "$work/hold.out" && break; sleep 0.1; done
grep -q ready "$work/hold.out" || die "fuse_hold did not mount: $(cat "$work/hold.out")"

# The worker: rank 0 reads the held file (and never gets past it); rank 1 fails after 1 s.
cat >"$work/worker.sh" <<SH
#!/usr/bin/env bash
if [[ \$RANK == 0 ]]; then exec cat "$mnt/held"; fi
sleep 1
exit 3
SH
chmod +x "$work/worker.sh"

# One node: stop after rank 1 fails; SIGTERM and SIGKILL leave rank 0 in the kernel.
began=$SECONDS
rc=0
timeout -k 5 "$LIMIT" "$DTRUN" --nproc_per_node=2 --max_restarts=3 --shutdown_timeout=1 \
  --kill_wait=2 --report="$work/one.json" --log_dir="$work/logs" --no_python "$work/worker.sh" \
  >"$work/one.out" 2>&1 || rc=$?
took=$((SECONDS - began))
stuck_pid=$(sed -n 's/.*rank 0 (pid \([0-9]*\)).* is still there.*/\1/p' "$work/one.out" | head -n1)
if [[ $rc -ne 75 ]]; then
  note_fail "one node: exit $rc, want 75 (after ${took} s)"
  tail -n 15 "$work/one.out" | sed 's/^/    | /' >&2
elif ! grep -q "rank 0 (pid [0-9]*) on .* is still there 2000 ms after SIGKILL: state D (uninterruptible sleep) in the kernel's [a-z_]*; not waiting for it" "$work/one.out"; then
  note_fail "one node: no line naming rank 0, its state and wait channel: $(grep -m1 'still there' "$work/one.out")"
elif grep -q "attempt 1" "$work/one.out"; then
  note_fail "one node: a second attempt started on a node with a stuck worker"
elif ! grep -q "not restarting: a worker of this node could not be killed (exit code 75)" "$work/one.out"; then
  note_fail "one node: no 'not restarting' line"
else
  pass "one node: exit 75 in ${took} s, '$(grep -m1 -o 'is still there.*' "$work/one.out")'"
fi
"$PYTHON" - "$work/one.json" <<'PY' || note_fail "one node: the report's ranks"
import json, sys
ranks = json.load(open(sys.argv[1]))["attempts"][-1]["ranks"]
stuck = [r for r in ranks if "stuck" in r]
assert len(stuck) == 1 and stuck[0]["rank"] == 0 and "state D" in stuck[0]["stuck"], ranks
PY
"$PYTHON" "$ROOT/tests/integration/validate_report.py" "$ROOT/docs/report.schema.json" \
  "$work/one.json" >/dev/null || note_fail "one node: the report does not match the schema"
[[ -n $stuck_pid ]] && [[ $(awk '{print $3}' "/proc/$stuck_pid/stat" 2>/dev/null) == D ]] ||
  note_fail "one node: the stuck worker (pid '$stuck_pid') is not in state D any more"

# Two nodes and a spare: the stuck node (b) leaves, the spare takes its place, the job succeeds.
# Node b's first workers only (its --log_dir is in their error file's path): a spare that joins
# ends round 0 to scale up, and the next round must not find a stuck worker again.
cat >"$work/node.sh" <<SH
#!/usr/bin/env bash
if [[ \$TORCHELASTIC_ERROR_FILE == "$work/b/"* ]]; then
  [[ \$LOCAL_RANK == 0 ]] && exec cat "$mnt/held"
  sleep 1
  exit 3
fi
sleep 4  # the job outlasts b's stop (1 s + --kill_wait), so the store's host hears b leave
exit 0
SH
chmod +x "$work/node.sh"
port=$(free_port)
common=(--nnodes=2:3 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port"
  --rdzv_id=stuck --max_restarts=2 --shutdown_timeout=1 --kill_wait=2 --no_python)
fast=keep_alive_interval=0.5,keep_alive_max_attempt=4,read_timeout=10,last_call_timeout=1
"$DTRUN" "${common[@]}" --rdzv_conf="$fast,is_host=1" --log_dir="$work/a" "$work/node.sh" \
  >"$work/a.out" 2>&1 &
a=$!
pids+=("$a")
for _ in $(seq 100); do grep -q "rendezvous of job" "$work/a.out" && break; sleep 0.1; done
"$DTRUN" "${common[@]}" --rdzv_conf="$fast,is_host=0" --log_dir="$work/b" "$work/node.sh" \
  >"$work/b.out" 2>&1 &
b=$!
pids+=("$b")
for _ in $(seq 100); do grep -q "round 0: node" "$work/b.out" && break; sleep 0.1; done
# The spare, once round 0 formed: it takes the stuck node's place in round 1 (attempt 1, where
# no worker fails).
"$DTRUN" "${common[@]}" --rdzv_conf="$fast,is_host=0" --log_dir="$work/c" "$work/node.sh" \
  >"$work/c.out" 2>&1 &
c=$!
pids+=("$c")
rc_a=0 rc_b=0 rc_c=0
wait_pid_limit() { timeout "$LIMIT" tail --pid="$1" -f /dev/null || true; }
wait_pid_limit "$a"; wait "$a" || rc_a=$?
wait_pid_limit "$b"; wait "$b" || rc_b=$?
wait_pid_limit "$c"; wait "$c" || rc_c=$?
stuck_node=""
for n in a b; do grep -q "is still there 2000 ms after SIGKILL" "$work/$n.out" && stuck_node=$n; done
other=$([[ $stuck_node == a ]] && echo b || echo a)
if [[ -z $stuck_node ]]; then
  note_fail "two nodes: no node named a stuck worker (a=$rc_a b=$rc_b c=$rc_c)"
  tail -n 10 "$work/b.out" | sed 's/^/    | /' >&2
elif [[ $(eval echo "\$rc_$stuck_node") -ne 75 || $(eval echo "\$rc_$other") -ne 0 || $rc_c -ne 0 ]]; then
  note_fail "two nodes: exit codes a=$rc_a b=$rc_b c=$rc_c (want 75 on $stuck_node, 0 elsewhere)"
  tail -n 10 "$work/$stuck_node.out" | sed 's/^/    | /' >&2
elif ! grep -q "could not be killed (stuck in the kernel)" "$work/a.out"; then
  note_fail "two nodes: the store's host did not log the stuck node's leave reason"
else
  pass "two nodes: node $stuck_node left with 75, the spare took its place, the job succeeded"
fi

# The file system goes: the held reads end, and no worker is left behind.
kill "$hold"
wait "$hold" || true
for _ in $(seq 50); do
  [[ -z $stuck_pid || ! -e /proc/$stuck_pid ]] || [[ $(awk '{print $3}' "/proc/$stuck_pid/stat") == Z ]] || { sleep 0.1; continue; }
  break
done
if [[ -n $stuck_pid && -e /proc/$stuck_pid && $(awk '{print $3}' "/proc/$stuck_pid/stat") != Z ]]; then
  note_fail "the stuck worker $stuck_pid outlived its file system"
fi
end_test
