#!/usr/bin/env bash
# dtrun --hang_timeout, run for real, and the run report of a hang:
#   bash tests/integration/hang_report_test.sh /abs/path/to/build/launcher/dtrun
#   cpp     4 ranks of dtrt_hang_worker: rank 1 deadlocks in an all_reduce on a sub-group that
#           rank 0 never joins, the others wait in the world's all_reduce. dtrun must find it
#           (before libdtrt's own DTRUN_TIMEOUT=120 would end it; the run is bounded by 60 s),
#           exit 124, name rank 1 as the suspect, and the report and hang.txt must hold rank 1's
#           stack with stuckInAllReduce.
#   python  3 ranks of workers/hang_sleep.py (python/dtrun_progress.py): rank 1 sleeps forever
#           in load_batch_forever(); its faulthandler stack (SIGRTMIN+2) names that function.
#   frozen  3 ranks of dtrt_hang_worker --ok, rank 1 stopped by SIGSTOP mid-run: dtrun names rank
#           1 and says its process is stopped (state T), which a deadlock's is not.
#   restart --max_restarts=1: both attempts hang, the report holds two "hang" attempts.
#   nodes   two agents on loopback (static, 2 ranks each): rank 3 on node 1 deadlocks with rank
#           0 on node 0. The agents exchange progress through the store: node 0's diagnosis
#           names rank 3 too, both exit 124, and each dumps its own workers' stacks.
# Every report is validated against docs/report.schema.json (python3-jsonschema). Loopback only.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" hang_report_test "$@"
WORKER=$BUILD/tests/worker_runtime/dtrt_hang_worker
[[ -x $WORKER ]] || die "expected $WORKER (ninja -C build dtrt_hang_worker)"
$PYTHON -c 'import jsonschema' 2>/dev/null || die "python3-jsonschema is missing (scripts/setup.sh installs it)"
command -v eu-stack >/dev/null || command -v gdb >/dev/null ||
  die "neither eu-stack (elfutils) nor gdb is installed (scripts/setup.sh installs elfutils)"
export DTRUN_TIMEOUT=120

# check <report> <python expression over `r`, the report> <what it means>
check() {
  $PYTHON - "$1" "$2" <<'PY' || die "$3 ($1)"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}

# --- C++: a deadlock in all_reduce on rank 1 ---
rc=0
timeout 60 "$DTRUN" --nproc_per_node=4 --hang_timeout=3 --report="$work/cpp.json" \
  --log_dir="$work/logs" --rdzv_id=cpp --no_python "$WORKER" >"$work/cpp.out" 2>&1 || rc=$?
[[ $rc -eq 124 ]] || { tail -30 "$work/cpp.out" >&2; die "cpp: dtrun exited $rc, want 124 (hang)"; }
grep -q "dtrun: hang: rank 1 on .* is in all_reduce #6 (group sub0) since .*; ranks 0,2-3 wait in all_reduce #6 (group world)" "$work/cpp.out" ||
  { grep hang "$work/cpp.out" >&2; die "cpp: the console does not name rank 1 in all_reduce #6 and the others waiting"; }
check "$work/cpp.json" 'r["outcome"] == "hang" and r["exit_code"] == 124' "cpp: outcome hang, exit 124"
check "$work/cpp.json" 'r["hang"]["suspects"] == [1] and r["root_cause"]["rank"] == 1' "cpp: rank 1 is the suspect and the root cause"
check "$work/cpp.json" '[x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["op"] == "all_reduce"' "cpp: rank 1 is in all_reduce"
check "$work/cpp.json" '"stuckInAllReduce" in [x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["stack"]' "cpp: rank 1's stack names stuckInAllReduce"
check "$work/cpp.json" 'all(x["in_op_s"] < 120 for x in r["hang"]["ranks"])' "cpp: found before libdtrt's own timeout"
check "$work/cpp.json" 'all(x["store_connected"] is not None and x["communicator_ready"] is not None for x in r["attempts"][0]["timeline"]["ranks"])' "cpp: libdtrt's timeline for every rank"
grep -q stuckInAllReduce "$work/logs/cpp/attempt_0/hang.txt" || die "cpp: hang.txt lacks stuckInAllReduce"
grep -q stuckInAllReduce "$work/logs/cpp/attempt_0/1/stack.txt" || die "cpp: rank 1's stack.txt lacks stuckInAllReduce"

# --- Python: rank 1 sleeps forever ---
rc=0
mkdir -p "$work/barrier-py"
HANG_BARRIER_DIR=$work/barrier-py PYTHONPATH=$ROOT/python timeout 60 "$DTRUN" --nproc_per_node=3 --hang_timeout=2 \
  --report="$work/py.json" --log_dir="$work/logs" --rdzv_id=py \
  "$ROOT/tests/integration/workers/hang_sleep.py" >"$work/py.out" 2>&1 || rc=$?
[[ $rc -eq 124 ]] || { tail -30 "$work/py.out" >&2; die "python: dtrun exited $rc, want 124"; }
check "$work/py.json" 'r["hang"]["suspects"] == [1]' "python: rank 1 is the suspect"
check "$work/py.json" '[x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["op"] == "load_batch"' "python: rank 1 is in load_batch"
check "$work/py.json" '"load_batch_forever" in [x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["stack"]' "python: rank 1's faulthandler stack names load_batch_forever"
check "$work/py.json" '"wait_in_all_reduce" in [x for x in r["hang"]["ranks"] if x["rank"] == 0][0]["stack"]' "python: rank 0's stack names wait_in_all_reduce"

# --- a frozen worker: rank 1 stopped by SIGSTOP while every rank runs all_reduces ---
rc=0
timeout 60 "$DTRUN" --nproc_per_node=3 --hang_timeout=2 --report="$work/frozen.json" \
  --log_dir="$work/logs" --rdzv_id=frozen --no_python "$WORKER" --ok --steps=1000000 \
  >"$work/frozen.out" 2>&1 &
frozen_dtrun=$!
pid_file=$work/logs/frozen/attempt_0/worker_pids
for _ in $(seq 300); do [[ -s $pid_file ]] && break; sleep 0.1; done
frozen_pid=$(awk '$1 == 1 {print $3}' "$pid_file" 2>/dev/null || true)
[[ -n $frozen_pid ]] || die "frozen: no pid of local rank 1 in attempt_0/worker_pids within 30 s"
sleep 1  # some all_reduces first: a frozen rank, not one that never started
kill -STOP "$frozen_pid"
wait "$frozen_dtrun" || rc=$?
[[ $rc -eq 124 ]] || { tail -30 "$work/frozen.out" >&2; die "frozen: dtrun exited $rc, want 124 (hang)"; }
grep -q "dtrun: hang: rank 1 on .*; rank 1's process (pid $frozen_pid) is in state T (stopped)" "$work/frozen.out" ||
  { grep hang "$work/frozen.out" >&2; die "frozen: the console does not name rank 1 as stopped"; }
check "$work/frozen.json" 'r["hang"]["suspects"] == [1] and "state T (stopped)" in r["root_cause"]["message"]' "frozen: rank 1 is the suspect, stopped"

# --- a hang in every attempt: the restart rules apply ---
rc=0
timeout 90 "$DTRUN" --nproc_per_node=2 --hang_timeout=2 --max_restarts=1 --report="$work/restart.json" \
  --log_dir="$work/logs" --rdzv_id=restart --no_python "$WORKER" --steps=2 >"$work/restart.out" 2>&1 || rc=$?
[[ $rc -eq 124 ]] || { tail -30 "$work/restart.out" >&2; die "restart: dtrun exited $rc, want 124"; }
check "$work/restart.json" '[a["cause"] for a in r["attempts"]] == ["hang", "hang"]' "restart: two hang attempts"

# --- two nodes: the suspect runs on the other node ---
port=$(free_port)
for node in 0 1; do
  timeout 60 "$DTRUN" --nnodes=2 --node_rank=$node --master_addr=127.0.0.1 --master_port="$port" \
    --rdzv_id=nodes --rdzv_conf=keep_alive_interval=0.5,close_timeout=5 --nproc_per_node=2 \
    --hang_timeout=3 --report="$work/node$node.json" --log_dir="$work/logs/node$node" \
    --no_python "$WORKER" --stuck=3 >"$work/node$node.out" 2>&1 &
  pids+=("$!")
done
for node in 0 1; do
  rc=0
  wait "${pids[$node]}" || rc=$?
  [[ $rc -eq 124 ]] || { tail -30 "$work/node$node.out" >&2; die "nodes: node $node exited $rc, want 124"; }
done
pids=()
for node in 0 1; do
  check "$work/node$node.json" 'r["hang"] is not None and r["nodes"]["count"] == 2 and r["world_size"] == 4' "nodes: node $node recorded the hang"
  check "$work/node$node.json" '0 <= (t := r["attempts"][0]["timeline"])["rendezvous_joined"] <= t["round_closed"] <= t["workers_spawned"]' "nodes: node $node's timeline has its rendezvous"
done
# Whichever node found it, the job's hang names rank 3 (node 1) as the suspect and rank 0 waiting.
grep -h "dtrun: hang: " "$work/node0.out" "$work/node1.out" | grep "rank 3 on .* is in all_reduce #6 (group sub0)" >/dev/null ||
  { grep -h "hang" "$work/node0.out" "$work/node1.out" >&2; die "nodes: no diagnosis names rank 3 in all_reduce #6 (group sub0)"; }
grep -q stuckInAllReduce "$work/logs/node1/nodes/attempt_0/hang.txt" || die "nodes: node 1's hang.txt lacks stuckInAllReduce"
grep -q "rank 0 (local rank 0" "$work/logs/node0/nodes/attempt_0/hang.txt" || die "nodes: node 0 did not dump its own stacks"

$PYTHON "$ROOT/tests/integration/validate_report.py" "$ROOT/docs/report.schema.json" \
  "$work/cpp.json" "$work/py.json" "$work/frozen.json" "$work/restart.json" "$work/node0.json" "$work/node1.json" ||
  die "a hang report does not match the schema"
echo "hang_report_test: passed"
