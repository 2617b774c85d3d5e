#!/usr/bin/env bash
# --health_checks: a broken node stays out of the job.
#   bash tests/integration/health_checks_test.sh /abs/path/to/build/launcher/dtrun
# Scenarios: (1) nnodes=2:2 with three agents on loopback, one whose --log_dir is a regular file
# (root can write anywhere, but no one makes a directory where a file is): it never joins, the
# third agent takes its place, the job succeeds; its console, --report and --event_log name the
# check and the host. (2) a node whose entrypoint disappears during attempt 0 leaves before the
# next round and a spare takes its place. (3) a store that accepts and never answers: the store
# check times out within its bound. (4) one node: a failed check ends the job with exit 1, no
# restart loop; before a restart, the failed worker stays the cause. Loopback only; every agent is stopped by its PID; waits are bounded.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" health_checks_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
WORKER=$HERE/workers/node_worker.sh
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=2,read_timeout=5,last_call_timeout=0.5
FAST=$FAST,close_timeout=5
HOST=$(hostname)

start() {  # <name> <dtrun args...>
  local name=$1
  shift
  "$DTRUN" "$@" >"$work/$name.out" 2>&1 &
  pid_of[$name]=$!
  started_at[$name]=$SECONDS
  pids+=("$!")
}
# health <report> <event log>: validates both against their schemas; prints the failed
# checks as "check:outcome" from each (report first).
health() {
  $PYTHON - "$ROOT/docs/report.schema.json" "$ROOT/docs/event_log.schema.json" "$1" "$2" <<'PY'
import json, sys, jsonschema
report_schema, event_schema, report, events = sys.argv[1:]
doc = json.load(open(report))
for err in jsonschema.Draft7Validator(json.load(open(report_schema))).iter_errors(doc):
    sys.exit(f"{report}: INVALID: {err.message[:200]}")
v = jsonschema.Draft7Validator(json.load(open(event_schema)))
lines = [json.loads(line) for line in open(events)]
for e in lines:
    for err in v.iter_errors(e):
        sys.exit(f"{events} ({e.get('event')}): INVALID: {err.message[:200]}")
print("report", doc["outcome"], *[f"{c['check']}:{c['outcome']}" for c in doc.get("health_checks", [])
                                  if c["outcome"] != "passed"])
print("events", *[f"{e['check']}:{e['outcome']}@{e['host']}" for e in lines
                  if e["event"] == "health_check" and e["outcome"] != "passed"])
PY
}

# (1) An unwritable log directory: b never joins, c takes its place.
port=$(free_port)
touch "$work/not_a_dir"
common=(--nnodes=2:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=lg
  --nproc_per_node=1 --no_python)
start a "${common[@]}" --rdzv_conf="$FAST,is_host=1" --log_dir="$work/logs/a" "$WORKER" env
wait_for "$work/a.out" "rendezvous of job" || true
start b "${common[@]}" --rdzv_conf="$FAST,is_host=0" --log_dir="$work/not_a_dir" \
  --report="$work/b.json" --event_log="$work/b.events" "$WORKER" env
expect_rc b 1 || true
start c "${common[@]}" --rdzv_conf="$FAST,is_host=0" --log_dir="$work/logs/c" "$WORKER" env
ok=0
expect_rc a 0 || ok=1
expect_rc c 0 || ok=1
line=$(grep "^dtrun: health check" "$work/b.out" || true)
if [[ $line != "dtrun: health check log_dir failed on $HOST: "*"$work/not_a_dir"* ]]; then
  note_fail "b's console line: '$line'"
  ok=1
fi
if ! grep -rqs "GROUP_WORLD_SIZE=2" "$work/logs/c"; then
  note_fail "c did not run in the 2-node round"
  ok=1
fi
summary=$(health "$work/b.json" "$work/b.events" 2>&1) || { note_fail "$summary"; ok=1; }
if [[ $summary != *"report startup_failed log_dir:failed"* ||
  $summary != *"events log_dir:failed@$HOST"* ]]; then
  note_fail "b's report and event log: $summary"
  ok=1
fi
[[ $ok -eq 0 ]] && pass "log_dir on $HOST: '$line'; the third agent took its place; $(tr '\n' ';' <<<"$summary")"

# (2) The entrypoint disappears during attempt 0 on node b: before round 1 it leaves, the third
# agent (c, started once a and b are in round 0) takes its place, attempt 1 succeeds on a and c.
port=$(free_port)
for n in a b c; do
  cat >"$work/entry_$n.sh" <<EOF
#!/bin/sh
echo "ENV GROUP_WORLD_SIZE=\$GROUP_WORLD_SIZE RESTART=\$TORCHELASTIC_RESTART_COUNT"
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  [ $n = b ] && { rm -f "\$0"; exit 7; }
  sleep 3
fi
exit 0
EOF
  chmod +x "$work/entry_$n.sh"
done
common=(--nnodes=2:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=ep
  --nproc_per_node=1 --max_restarts=2 --no_python)
start ea "${common[@]}" --rdzv_conf="$FAST,is_host=1" --log_dir="$work/logs/ea" "$work/entry_a.sh"
wait_for "$work/ea.out" "rendezvous of job" || true
start eb "${common[@]}" --rdzv_conf="$FAST,is_host=0" --log_dir="$work/logs/eb" \
  --event_log="$work/eb.events" --report="$work/eb.json" "$work/entry_b.sh"
wait_for "$work/eb.out" "RESTART=0" || true  # b is in round 0; c comes after it
start ec "${common[@]}" --rdzv_conf="$FAST,is_host=0" --log_dir="$work/logs/ec" "$work/entry_c.sh"
ok=0
expect_rc eb 1 || ok=1
expect_rc ea 0 || ok=1
expect_rc ec 0 || ok=1
line=$(grep "^dtrun: health check" "$work/eb.out" || true)
if [[ $line != "dtrun: health check entrypoint failed on $HOST: $work/entry_b.sh: No such file"*"; this node leaves the job" ]]; then
  note_fail "eb's console line: '$line'"
  ok=1
fi
keeper=$(grep -o "leaves: health check entrypoint failed on $HOST" "$work/ea.out" || true)
if [[ -z $keeper ]]; then
  note_fail "the store host's console does not name the leaving node's check"
  ok=1
fi
if ! grep -rqs "GROUP_WORLD_SIZE=2 RESTART=1" "$work/logs/ec"; then
  note_fail "the spare did not run attempt 1"
  ok=1
fi
summary=$(health "$work/eb.json" "$work/eb.events" 2>&1) || { note_fail "$summary"; ok=1; }
[[ $summary == *"events entrypoint:failed@$HOST"* ]] || { note_fail "eb: $summary"; ok=1; }
[[ $ok -eq 0 ]] && pass "entrypoint gone after attempt 0: '$line'; store host: '$keeper'; the spare ran attempt 1"

# (3) A store that accepts and never answers: the check times out at its bound (1 s).
port=$(free_port)
$PYTHON -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
held = []
end = time.time() + 60
while time.time() < end:
    c, _ = s.accept(); held.append(c)
' "$port" &
pids+=("$!")
for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
began=$(date +%s.%N)
start st --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=st \
  --rdzv_conf="is_host=0" --health_check_timeout=1 --log_dir="$work/logs/st" \
  --event_log="$work/st.events" --report="$work/st.json" --no_python /bin/true
ok=0
expect_rc st 1 || ok=1
took=$(echo "$(date +%s.%N) - $began" | bc)
line=$(grep "^dtrun: health check" "$work/st.out" || true)
if [[ $line != "dtrun: health check store timed out on $HOST: the store at 127.0.0.1:$port did not answer within 1 s"* ]]; then
  note_fail "silent store's line: '$line'"
  ok=1
fi
if (($(echo "$took > 4" | bc))); then
  note_fail "the silent store's check took ${took}s (bound 1 s)"
  ok=1
fi
summary=$(health "$work/st.json" "$work/st.events" 2>&1) || { note_fail "$summary"; ok=1; }
[[ $summary == *"events store:timed_out@$HOST"* ]] || { note_fail "st: $summary"; ok=1; }
[[ $ok -eq 0 ]] && pass "silent store: exit 1 after ${took}s; '$line'"

# (4) One node: a failed check ends the job with exit 1 and that line, before any worker, and a
# restart does not run on a node whose entrypoint vanished (the job then ends as the failed
# worker's attempt did: its exit code and failure report).
rc=0
"$DTRUN" --nproc_per_node=1 --log_dir="$work/not_a_dir" --no_python /bin/true \
  >"$work/single.out" 2>&1 || rc=$?
line=$(grep "^dtrun: health check" "$work/single.out" || true)
if [[ $rc -eq 1 && $line == "dtrun: health check log_dir failed on $HOST: "* ]]; then
  pass "one node, unwritable log dir: exit 1, '$line'"
else
  note_fail "one node: exit $rc, '$line'"
fi
printf '#!/bin/sh\necho ENV\nrm -f "$0"\nexit 7\n' >"$work/entry_s.sh"
chmod +x "$work/entry_s.sh"
rc=0
"$DTRUN" --nproc_per_node=1 --max_restarts=3 --log_dir="$work/logs/single" --no_python \
  "$work/entry_s.sh" >"$work/single2.out" 2>&1 || rc=$?
attempts=$(grep -c "^ENV" "$work/single2.out" || true)
line=$(grep "^dtrun: health check" "$work/single2.out" || true)
# The job ends with the worker's failure as its cause (issue 34, bug 9: it was exit 1,
# startup_failed, no root cause), and the check's line says why it did not restart.
if [[ $rc -eq 7 && $attempts -eq 1 && $line == *"entrypoint failed"*"; not restarting" ]] &&
  grep -q "exitcode  : 7" "$work/single2.out"; then
  pass "one node, entrypoint gone after attempt 0: the worker's exit 7 and its report after 1 attempt, '$line'"
else
  note_fail "one node restart: exit $rc after $attempts attempt(s), '$line'"
fi

rc=0
"$DTRUN" --health_checks=local,bogus --no_python /bin/true >"$work/bad.out" 2>&1 || rc=$?
if [[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 ]] && grep -q -- "--health_checks" "$work/bad.out"; then
  pass "bad --health_checks: exit 2, '$(cat "$work/bad.out")'"
else
  note_fail "bad --health_checks: exit $rc, '$(cat "$work/bad.out")'"
fi

end_test
