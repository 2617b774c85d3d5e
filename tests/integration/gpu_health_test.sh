#!/usr/bin/env bash
# The gpus health check with NVML, on a machine without a GPU: a fake libnvidia-ml.so.1 (built
# here from lib/fake_nvml.cpp, loaded through DTRUN_NVML_LIBRARY) describes the GPUs of a recorded
# machine ($DTRUN_SYSFS_ROOT, tests/placement/topologies/pair-2n2g: GPUs 0 and 1), so dtrun's real
# NVML code runs. Scenarios: (1) nnodes=2:2 with three agents on loopback; node b's GPU 1 holds
# another process's memory (a real `sleep`, which the fake lists) past --health_gpu_memory_wait:
# b never joins, the third agent takes its place; b's console, --report and --event_log name the
# GPU and the process. (2) one node: the memory is released (the fake's file removed) while the
# check waits: the job runs and the report says what was waited for. (3) a GPU with a row
# remapping pending fails at once. (4) NVML absent: device existence only, said once. (5) a
# SIGTERM while the check before a restart waits ends dtrun at once (the check is off the loop).
#   bash tests/integration/gpu_health_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" gpu_health_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
WORKER=$HERE/workers/node_worker.sh
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=2,read_timeout=5,last_call_timeout=0.5
FAST=$FAST,close_timeout=5
HOST=$(hostname)
CXX=${CXX:-$(command -v g++ || command -v c++)} || die "no C++ compiler to build the fake NVML"

"$CXX" -shared -fPIC -O1 -o "$work/libnvidia-ml.so.1" "$HERE/lib/fake_nvml.cpp" ||
  die "cannot build the fake NVML"
export DTRUN_NVML_LIBRARY=$work/libnvidia-ml.so.1
export DTRUN_SYSFS_ROOT=$ROOT/tests/placement/topologies/pair-2n2g
export FAKE_NVML_COUNT=2

# Another process on GPU 1, as the fake reports it while $work/busy exists.
sleep 120 &
foreign=$!
pids+=("$foreign")
touch "$work/busy"

start() {  # <name> [VAR=value...] -- <dtrun args...>
  local name=$1
  shift
  local -a vars=()
  while [[ $1 != -- ]]; do
    vars+=("$1")
    shift
  done
  shift
  env "${vars[@]}" "$DTRUN" "$@" >"$work/$name.out" 2>&1 &
  pid_of[$name]=$!
  started_at[$name]=$SECONDS
  pids+=("$!")
}
# gpus_result <report> [<event log>]: validates both against their schemas; prints the gpus
# check's outcome and detail from the report, and the event log's gpus outcomes with the host.
gpus_result() {
  $PYTHON - "$ROOT/docs/report.schema.json" "$ROOT/docs/event_log.schema.json" "$@" <<'PY'
import json, sys, jsonschema
report_schema, event_schema, report = sys.argv[1:4]
doc = json.load(open(report))
for err in jsonschema.Draft7Validator(json.load(open(report_schema))).iter_errors(doc):
    sys.exit(f"{report}: INVALID: {err.message[:200]}")
for c in doc.get("health_checks", []):
    if c["check"] == "gpus":
        print("report", c["outcome"], c["detail"])
if len(sys.argv) > 4:
    v = jsonschema.Draft7Validator(json.load(open(event_schema)))
    lines = [json.loads(line) for line in open(sys.argv[4])]
    for e in lines:
        for err in v.iter_errors(e):
            sys.exit(f"{sys.argv[4]} ({e.get('event')}): INVALID: {err.message[:200]}")
    print("events", *[f"{e['check']}:{e['outcome']}@{e['host']}" for e in lines
                      if e["event"] == "health_check" and e["check"] == "gpus"])
PY
}

# (1) b's GPU 1 stays busy: b never joins, c takes its place.
port=$(free_port)
common=(--nnodes=2:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=gpu
  --nproc_per_node=2 --gpus_per_worker=1 --no_python)
start a -- "${common[@]}" --rdzv_conf="$FAST,is_host=1" --log_dir="$work/logs/a" "$WORKER" env
wait_for "$work/a.out" "rendezvous of job" || true
start b FAKE_NVML_BUSY="1:$foreign:$work/busy" -- "${common[@]}" --rdzv_conf="$FAST,is_host=0" \
  --health_gpu_memory_wait=1 --log_dir="$work/logs/b" --report="$work/b.json" \
  --event_log="$work/b.events" "$WORKER" env
expect_rc b 1 || true
start c -- "${common[@]}" --rdzv_conf="$FAST,is_host=0" --log_dir="$work/logs/c" "$WORKER" env
ok=0
expect_rc a 0 || ok=1
expect_rc c 0 || ok=1
line=$(grep "^dtrun: health check" "$work/b.out" || true)
want="dtrun: health check gpus failed on $HOST: another process's memory on a planned GPU: GPU 1: pid $foreign (sleep) holds 1.0 GiB (still there after 1"
if [[ $line != "$want"*", --health_gpu_memory_wait)" ]]; then
  note_fail "b's console line: '$line'"
  ok=1
fi
if ! grep -rqs "GROUP_WORLD_SIZE=2" "$work/logs/c"; then
  note_fail "c did not run in the 2-node round"
  ok=1
fi
summary=$(gpus_result "$work/b.json" "$work/b.events" 2>&1) || { note_fail "$summary"; ok=1; }
if [[ $summary != *"report failed another process's memory on a planned GPU: GPU 1: pid $foreign"* ||
  $summary != *"events gpus:failed@$HOST"* ]]; then
  note_fail "b's report and event log: $summary"
  ok=1
fi
[[ $ok -eq 0 ]] && pass "busy GPU 1 on b: '$line'; the third agent took its place"

# (2) One node: the memory goes away while the check waits; the job runs. The memory goes once
# the agent says it waits (a fixed delay raced a slow start: under ASan on a loaded machine the
# check began after it, found nothing and did not wait).
rc=0
(for _ in $(seq $((LIMIT * 10))); do
  grep -qs "gpus check: waiting up to" "$work/single.out" && break
  sleep 0.1
done
sleep 0.5 && rm -f "$work/busy") &
pids+=("$!")
FAKE_NVML_BUSY="1:$foreign:$work/busy" timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --gpus_per_worker=1 \
  --health_gpu_memory_wait=30 --log_dir="$work/logs/single" --report="$work/single.json" \
  --no_python "$WORKER" env >"$work/single.out" 2>&1 || rc=$?
summary=$(gpus_result "$work/single.json" 2>&1) || { note_fail "$summary"; rc=99; }
ranks=$(grep -c "^.*ENV RANK=" "$work/single.out" || true)
if [[ $rc -eq 0 && $ranks -eq 2 &&
  $summary == "report passed 2 planned GPU(s) healthy and free of other processes (NVML) after waiting "*" s for GPU 1: pid $foreign (sleep) holds 1.0 GiB" ]]; then
  pass "memory released during the wait: exit 0, 2 ranks ran; $summary"
else
  note_fail "released memory: exit $rc, $ranks rank(s), '$summary'"
  tail -n 10 "$work/single.out" | sed 's/^/    | /' >&2
fi

# (3) A row remapping pending on GPU 0: the check fails at once, the job does not start.
rc=0
FAKE_NVML_PENDING=0 timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --gpus_per_worker=1 --log_dir="$work/logs/pend" \
  --no_python "$WORKER" env >"$work/pending.out" 2>&1 || rc=$?
line=$(grep "^dtrun: health check" "$work/pending.out" || true)
if [[ $rc -eq 1 && $line == "dtrun: health check gpus failed on $HOST: GPU 0: row remapping pending: the GPU needs a reset" ]]; then
  pass "row remapping pending: exit 1, '$line'"
else
  note_fail "pending remap: exit $rc, '$line'"
fi

# (4) NVML absent (the library named is not there): the device nodes decide, as without a
# driver; the recorded machine's /dev/nvidia1 is not on this one.
rc=0
DTRUN_NVML_LIBRARY=$work/absent/libnvidia-ml.so.1 timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --gpus_per_worker=1 \
  --log_dir="$work/logs/absent" --no_python --report="$work/absent.json" "$WORKER" env \
  >"$work/absent.out" 2>&1 || rc=$?
summary=$(gpus_result "$work/absent.json" 2>&1) || true
if [[ -e /dev/nvidia0 ]]; then
  pass "NVML absent: skipped, this machine has /dev/nvidia0"
elif [[ $rc -eq 1 && $summary == "report failed planned GPU(s) missing: /dev/nvidia0, /dev/nvidia1" ]]; then
  pass "NVML absent: device existence only: exit 1, $summary"
else
  note_fail "NVML absent: exit $rc, '$summary'"
fi

# (5) The checks between attempts run off the agent's loop: attempt 0's worker leaves a process
# on GPU 1 and fails, the check before the restart waits (up to 60 s) for its memory, and a
# SIGTERM meanwhile ends dtrun at once, with the signal's exit code.
cat >"$work/leaves_busy.sh" <<EOF
#!/bin/sh
echo "ATTEMPT \$TORCHELASTIC_RESTART_COUNT"
[ "\$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "\$LOCAL_RANK" = 1 ] && { touch "$work/busy2"; exit 3; }
exit 0
EOF
chmod +x "$work/leaves_busy.sh"
rm -f "$work/busy2"
FAKE_NVML_BUSY="1:$foreign:$work/busy2" "$DTRUN" --nproc_per_node=2 --gpus_per_worker=1 \
  --max_restarts=1 --health_gpu_memory_wait=60 --log_dir="$work/logs/sig" --no_python \
  "$work/leaves_busy.sh" >"$work/sig.out" 2>&1 &
sig_pid=$!
pids+=("$sig_pid")
if wait_for "$work/sig.out" "gpus check: waiting up to 60 s"; then
  sleep 0.5  # well inside the wait
  sent=$(date +%s.%N)
  kill -TERM "$sig_pid"
  wait_agent "$sig_pid" $((SECONDS + 20))
  took=$(echo "$(date +%s.%N) - $sent" | bc)
  if [[ $rc -eq 143 ]] && (($(echo "$took < 5" | bc))); then
    pass "SIGTERM during the check before a restart: exit $rc after ${took}s (the check's wait was 60 s)"
  else
    note_fail "SIGTERM during the check before a restart: exit $rc after ${took}s"
    tail -n 10 "$work/sig.out" | sed 's/^/    | /' >&2
  fi
fi
rm -f "$work/busy2"

rc=0
"$DTRUN" --health_gpu_memory_wait=-1 --no_python /bin/true >"$work/bad.out" 2>&1 || rc=$?
if [[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 ]] && grep -q -- "--health_gpu_memory_wait" "$work/bad.out"; then
  pass "bad --health_gpu_memory_wait: exit 2, '$(cat "$work/bad.out")'"
else
  note_fail "bad --health_gpu_memory_wait: exit $rc, '$(cat "$work/bad.out")'"
fi

end_test
