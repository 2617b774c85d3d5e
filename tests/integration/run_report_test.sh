#!/usr/bin/env bash
# dtrun --report=FILE and --verbose, run for real: one JSON document per run, valid against
# docs/report.schema.json (python3-jsonschema), for a success, a failure, a restart and a stop
# by a signal; the console summary at exit says what the report says.
#   bash tests/integration/run_report_test.sh /abs/path/to/build/launcher/dtrun
# Workers: tests/integration/workers/*.sh and dtrt_hang_worker --ok (libdtrt: the timeline's
# store_connected and communicator_ready). Hangs: hang_report_test.sh. Loopback only.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" run_report_test "$@"
workers=$HERE/workers
LIBDTRT_WORKER=$BUILD/tests/worker_runtime/dtrt_hang_worker
[[ -x $LIBDTRT_WORKER ]] || die "expected $LIBDTRT_WORKER (ninja -C build dtrt_hang_worker)"
$PYTHON -c 'import jsonschema' 2>/dev/null || die "python3-jsonschema is missing (scripts/setup.sh installs it)"
export DTRUN_TIMEOUT=30

check() {
  $PYTHON - "$1" "$2" <<'PY' || die "$3 ($1)"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
# run <name> <expected exit code> <dtrun args...>
run() {
  local name=$1 want=$2 rc=0
  shift 2
  timeout 60 "$DTRUN" --report="$work/$name.json" --log_dir="$work/logs" --rdzv_id="$name" "$@" \
    >"$work/$name.out" 2>&1 </dev/null || rc=$?
  [[ $rc -eq $want ]] || { tail -20 "$work/$name.out" >&2; die "$name: dtrun exited $rc, want $want"; }
  [[ -s $work/$name.json ]] || die "$name: no report at $work/$name.json"
}

# Success, with libdtrt workers: every rank's timeline is complete and ordered.
run success 0 --nproc_per_node=3 --verbose --no_python "$LIBDTRT_WORKER" --ok
check "$work/success.json" 'r["outcome"] == "succeeded" and r["exit_code"] == 0 and r["root_cause"] is None and r["hang"] is None' "success: outcome"
check "$work/success.json" '[x["exit_code"] for x in r["attempts"][0]["ranks"]] == [0, 0, 0] and r["world_size"] == 3' "success: every rank exit 0"
check "$work/success.json" 'all(0 <= t["workers_spawned"] <= x["store_connected"] <= x["communicator_ready"] for t in [r["attempts"][0]["timeline"]] for x in t["ranks"])' "success: timeline in order"
grep -q "dtrun: startup timeline of attempt 0" "$work/success.out" || die "success: --verbose printed no timeline"
grep -qE "rank 2 communicator ready +[0-9]+\.[0-9]{3}$" "$work/success.out" || die "success: the timeline lacks rank 2's communicator"
grep -q "dtrun: job 'success' succeeded after 1 attempt(s)" "$work/success.out" || die "success: no summary line"

# Failure: rank 1 exits 5 after 4 stderr lines; the root cause carries them.
run failure 5 --nproc_per_node=2 --shutdown_timeout=5 --no_python "$workers/exit_code.sh" stderr:4
check "$work/failure.json" 'r["outcome"] == "failed" and r["exit_code"] == 5' "failure: outcome"
check "$work/failure.json" 'r["root_cause"]["rank"] == 1 and r["root_cause"]["exit_code"] == 5 and "stderr line 4 of rank 1" in r["root_cause"]["message"]' "failure: root cause with its stderr"
check "$work/failure.json" 'r["attempts"][0]["cause"] == "worker_failed" and r["attempts"][0]["ranks"][0]["signal"] == "SIGTERM"' "failure: rank 0 stopped by SIGTERM"
grep -q "root cause: rank 1 (local rank 1, pid [0-9]*) on .*: exit code 5" "$work/failure.out" || die "failure: the summary lacks the root cause"

# A restart: attempt 0 fails, attempt 1 succeeds.
run restart 0 --nproc_per_node=2 --max_restarts=2 --no_python "$workers/flaky.sh" 1 7 0
check "$work/restart.json" '[a["cause"] for a in r["attempts"]] == ["worker_failed", "succeeded"] and r["outcome"] == "succeeded"' "restart: two attempts"
check "$work/restart.json" 'r["attempts"][0]["ranks"][0]["exit_code"] == 7 and r["attempts"][1]["attempt"] == 1' "restart: attempt 0's exit code"
grep -q "attempt 0: .* worker_failed: rank 0 failed: exit code 7" "$work/restart.out" || die "restart: the summary lacks attempt 0"

# Stopped by SIGTERM: the report is still written, outcome signal, exit 143.
timeout 60 "$DTRUN" --report="$work/signal.json" --log_dir="$work/logs" --rdzv_id=signal \
  --nproc_per_node=2 --no_python "$workers/exit_code.sh" none >"$work/signal.out" 2>&1 </dev/null &
dtrun_pid=$!
pids+=("$dtrun_pid")
for _ in $(seq 1 200); do
  [[ -s $work/logs/signal/attempt_0/1/pid ]] && break
  sleep 0.05
done
[[ -s $work/logs/signal/attempt_0/1/pid ]] || die "signal: the workers did not start within 10 s"
kill -TERM "$dtrun_pid"
rc=0
wait "$dtrun_pid" || rc=$?
[[ $rc -eq 143 ]] || die "signal: dtrun exited $rc, want 143"
check "$work/signal.json" 'r["outcome"] == "signal" and r["attempts"][0]["cause"] == "signal" and r["exit_code"] == 143' "signal: outcome"

# A report path that cannot be written: one line says so; the job's own exit code stays.
run_rc=0
timeout 30 "$DTRUN" --report="$work/missing-dir/r.json" --nproc_per_node=1 --no_python /bin/true \
  >"$work/unwritable.out" 2>&1 </dev/null || run_rc=$?
[[ $run_rc -eq 0 ]] || die "unwritable: dtrun exited $run_rc, want 0"
grep -q "dtrun: cannot write the run report to $work/missing-dir/r.json" "$work/unwritable.out" ||
  die "unwritable: no line names the report path"

$PYTHON "$ROOT/tests/integration/validate_report.py" "$ROOT/docs/report.schema.json" \
  "$work/success.json" "$work/failure.json" "$work/restart.json" "$work/signal.json" ||
  die "a report does not match the schema"
# The validator rejects what the schema forbids: a report without its outcome.
$PYTHON -c 'import json, sys; r = json.load(open(sys.argv[1])); del r["outcome"]; json.dump(r, open(sys.argv[2], "w"))' \
  "$work/success.json" "$work/broken.json"
if $PYTHON "$ROOT/tests/integration/validate_report.py" "$ROOT/docs/report.schema.json" \
  "$work/broken.json" >"$work/broken.out"; then
  die "a report without 'outcome' passed the schema"
fi
grep -q "'outcome' is a required property" "$work/broken.out" || die "the validator did not name 'outcome'"
echo "run_report_test: passed"
