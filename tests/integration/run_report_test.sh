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
if not eval(sys.argv[2]):
    # What a failed check looked at most often: the first attempt's timeline and ranks.
    first = (r.get("attempts") or [{}])[0]
    print(json.dumps({k: first.get(k) for k in ("timeline", "ranks")}), file=sys.stderr)
    sys.exit(1)
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
# Each rank's own milestones are in order; against the agent's "every fork returned" a fast rank
# may connect first (seen under a loaded CI: rank 0 reached the store before the third fork
# returned), so only that both are past the agent's start is checked.
check "$work/success.json" 'all(0 <= t["workers_spawned"] and 0 <= x["store_connected"] <= x["communicator_ready"] for t in [r["attempts"][0]["timeline"]] for x in t["ranks"])' "success: timeline in order"
grep -q "dtrun: startup timeline of attempt 0" "$work/success.out" || die "success: --verbose printed no timeline"
grep -qE "rank 2 communicator ready +[0-9]+\.[0-9]{3}$" "$work/success.out" || die "success: the timeline lacks rank 2's communicator"
grep -q "dtrun: job 'success' succeeded after 1 attempt(s)" "$work/success.out" || die "success: no summary line"
# The dtrun that ran the job, as --version names it (a bug report says which build it was).
version=$("$DTRUN" --version)
check "$work/success.json" "r['dtrun_version'] == '$version' and r['dtrun_version'].startswith('dtrun ')" \
  "success: dtrun_version is --version's line ($version)"

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

# A report path that cannot be written is refused before anything starts (issue 34, bug 11):
# one line names it, exit 2, no worker ran. The same for --event_log and TORCHELASTIC_ERROR_FILE.
refused() {  # <name> <what the line must name> <dtrun args...>
  local name=$1 want=$2 rc=0
  shift 2
  timeout 30 "$DTRUN" --log_dir="$work/refused-logs" --nproc_per_node=1 "$@" --no_python \
    /bin/true >"$work/$name.out" 2>&1 </dev/null || rc=$?
  [[ $rc -eq 2 ]] || die "$name: dtrun exited $rc, want 2 before starting"
  [[ $(wc -l <"$work/$name.out") -eq 1 ]] || die "$name: more than one line: $(cat "$work/$name.out")"
  grep -q -- "$want" "$work/$name.out" || die "$name: the line does not name $want: $(cat "$work/$name.out")"
  [[ ! -e $work/refused-logs ]] || die "$name: a worker's log directory was made"
}
refused unwritable "--report=$work/missing-dir/r.json cannot be written: its directory $work/missing-dir does not exist" \
  --report="$work/missing-dir/r.json"
refused report-dir "--report=$work cannot be written: it is a directory" --report="$work"
refused events "--event_log=$work/nodir/e.jsonl cannot be written" --event_log="$work/nodir/e.jsonl"
TORCHELASTIC_ERROR_FILE=$work/nodir/error.json refused errorfile \
  "TORCHELASTIC_ERROR_FILE=$work/nodir/error.json cannot be written"

# Bytes that are not UTF-8 (issue 34, bug 5): a worker's stderr, a multi-byte character cut at
# the 64 KiB tail window, an argument. Every report and error file is written, bad bytes as
# U+FFFD, and dtrun exits with the worker's code.
cat >"$work/latin1.sh" <<'SH'
#!/bin/sh
printf 'caf\351 au lait\n' >&2
[ "$1" = cut ] && /usr/bin/python3 -c 'import sys; sys.stderr.buffer.write("é".encode() * 40000 + b"x")'
exit 7
SH
chmod +x "$work/latin1.sh"
for mode in byte cut; do
  rc=0
  TORCHELASTIC_ERROR_FILE=$work/$mode-error.json timeout 60 "$DTRUN" --report="$work/$mode.json" \
    --log_dir="$work/logs" --rdzv_id="latin1-$mode" --nproc_per_node=1 --no_python \
    "$work/latin1.sh" "$mode" >"$work/$mode.out" 2>&1 </dev/null || rc=$?
  [[ $rc -eq 7 ]] || { tail -5 "$work/$mode.out" >&2; die "latin1 $mode: dtrun exited $rc, want the worker's 7"; }
  ! grep -q "json.exception" "$work/$mode.out" || die "latin1 $mode: the JSON writer threw"
  check "$work/$mode.json" 'r["exit_code"] == 7 and r["root_cause"]["exit_code"] == 7' "latin1 $mode: report"
  [[ -s $work/$mode-error.json ]] || die "latin1 $mode: no TORCHELASTIC_ERROR_FILE written"
  $PYTHON -c 'import json, sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$work/$mode-error.json" ||
    die "latin1 $mode: the error file is not UTF-8 JSON"
done
check "$work/byte.json" '"caf\ufffd au lait" in r["root_cause"]["message"]' "latin1: the bad byte is U+FFFD"
check "$work/cut.json" '"\ufffd" in r["root_cause"]["message"] and "éé" in r["root_cause"]["message"]' "latin1 cut: the cut character is U+FFFD"
run latin1-arg 0 --nproc_per_node=1 --no_python /bin/echo "$(printf 'caf\351')"
check "$work/latin1-arg.json" 'r["outcome"] == "succeeded"' "latin1 argument: outcome"

$PYTHON "$ROOT/tests/integration/validate_report.py" "$ROOT/docs/report.schema.json" \
  "$work/success.json" "$work/failure.json" "$work/restart.json" "$work/signal.json" \
  "$work/byte.json" "$work/cut.json" "$work/latin1-arg.json" ||
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
