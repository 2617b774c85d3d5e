#!/usr/bin/env bash
# --event_log: every line valid against docs/event_log.schema.json, and the events in order.
# A restart (rank 1 fails once, --max_restarts=1): attempt 0 ends worker_failed, "restart" 1,
# attempt 1 succeeded, job_ended succeeded. A scale-up (1:2 nodes on loopback, as
# multinode_test.sh's late node): node 0's log shows round 0 closed with 1 node, then a round
# with 2 nodes and world size 3. An unwritable path: one line, and the job still runs.
#   bash tests/integration/event_log_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" event_log_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
SCHEMA=$ROOT/docs/event_log.schema.json

# events <file>: validates every line, prints "event[:detail]" per line.
events() {
  $PYTHON - "$SCHEMA" "$1" <<'PY'
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(schema)
v = jsonschema.Draft7Validator(schema)
for n, line in enumerate(open(sys.argv[2]), 1):
    e = json.loads(line)
    for err in v.iter_errors(e):
        sys.exit(f"line {n} ({e.get('event')}): INVALID: {err.message[:200]}")
    detail = {"attempt_ended": e.get("cause"), "restart": e.get("restart"),
              "round_closed": f"{e.get('node_count')}/{e.get('world_size')}" if "node_count" in e else None,
              "job_ended": e.get("outcome")}.get(e["event"])
    if e["event"] != "health_check":  # health_checks_test.sh covers them
        print(e["event"] + (f":{detail}" if detail is not None else ""))
PY
}

# A restart.
rc=0
timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --max_restarts=1 --event_log="$work/restart.jsonl" \
  --log_dir="$work/logs" --no_python "$HERE/workers/flaky.sh" 1 3 1 >"$work/r.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || die "the restarted job exited $rc"
got=$(events "$work/restart.jsonl" | grep -v worker_exited | tr '\n' ' ') || die "restart: $got"
want="agent_started attempt_started attempt_ended:worker_failed restart:1 attempt_started attempt_ended:succeeded job_ended:succeeded "
[[ $got == "$want" ]] && pass "restart: $got" || note_fail "restart: events '$got', expected '$want'"

# A scale-up: node 0 alone (1:2), node 1 arrives, both restart as one job of 2 nodes.
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=2,read_timeout=3,last_call_timeout=0.5,close_timeout=5
port=$(free_port)
"$DTRUN" --nnodes=1:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=g \
  --rdzv_conf="$FAST" --nproc_per_node=1 --event_log="$work/grow.jsonl" --log_dir="$work/g0" \
  --no_python "$HERE/workers/node_worker.sh" grow 2 >"$work/g0.out" 2>&1 &
g0=$!
pids+=("$g0")
start=$SECONDS
until grep -q attempt_started "$work/grow.jsonl" 2>/dev/null || ((SECONDS > start + 20)); do sleep 0.1; done
sleep 1  # node 0 runs alone a while
"$DTRUN" --nnodes=1:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=g \
  --rdzv_conf="$FAST" --nproc_per_node=2 --log_dir="$work/g1" \
  --no_python "$HERE/workers/node_worker.sh" grow 2 >"$work/g1.out" 2>&1 &
g1=$!
pids+=("$g1")
wait_agent "$g0" $((start + LIMIT))
rc0=$rc
wait_agent "$g1" $((start + LIMIT))
[[ $rc0 -eq 0 && $rc -eq 0 ]] || { tail -n 4 "$work/g0.out" "$work/g1.out" >&2; note_fail "scale-up: exit codes $rc0 and $rc"; }
got=$(events "$work/grow.jsonl" | grep -E 'round_closed|attempt_ended|job_ended' | tr '\n' ' ') ||
  note_fail "scale-up: $got"
if [[ $got == "round_closed:1/1 attempt_ended:round_ended round_closed:2/3 "*"job_ended:succeeded " ]]; then
  pass "scale-up: $got"
else
  note_fail "scale-up: events '$got'"
fi

# An event log that cannot be written is refused before anything starts (issue 34, bug 11): one
# line naming it, exit 2, no worker ran.
rc=0
"$DTRUN" --nproc_per_node=1 --event_log=/proc/nonexistent/x.jsonl --log_dir="$work/bad-logs" \
  --no_python /bin/true >"$work/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 && ! -e $work/bad-logs ]] &&
  grep -q -- '--event_log=/proc/nonexistent/x.jsonl cannot be written' "$work/bad.out" ||
  note_fail "an unwritable event log: rc $rc, '$(head -c 300 "$work/bad.out")'"
end_test
