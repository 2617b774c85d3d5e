#!/usr/bin/env bash
# The rest of torchrun's surface, run for real on loopback:
#   devnull   --log_dir=/dev/null: no directory or file anywhere, workers get an empty
#             TORCHELASTIC_ERROR_FILE, -r output stays on the console, the failure still reported
#   errfile   dtrun's own TORCHELASTIC_ERROR_FILE: the root cause in torch's @record format, from
#             the worker's error file (copied, errorCode added) or, without one, naming rank, host
#             and exit; the workers keep their own per-rank files
#   nccl      TORCH_NCCL_ASYNC_ERROR_HANDLING and NCCL_ASYNC_ERROR_HANDLING: both 1, or the user's
#             value of either for both
#   remote    c10d, one node, the endpoint served by `dtrun store` elsewhere (127.0.0.2, is_host=0):
#             workers' MASTER_ADDR:MASTER_PORT is the agent's own store at --local_addr (as
#             torchrun's second store), not that shared one, and they reach it
#   entry     entrypoints that cannot run: one line, exit 127, no banner, nothing made in TMPDIR
#   bash tests/integration/torchrun_surface_test.sh /abs/path/to/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" torchrun_surface_test "$@"
clear_scheduler_env
unset TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING

# The worker: prints what dtrun gave it; rank $FAIL_RANK fails as $FAIL_HOW says.
cat >"$work/w.sh" <<'EOF'
#!/bin/bash
echo "rank=$RANK error_file=[$TORCHELASTIC_ERROR_FILE] async=$TORCH_NCCL_ASYNC_ERROR_HANDLING/$NCCL_ASYNC_ERROR_HANDLING master=$MASTER_ADDR:$MASTER_PORT"
[[ $RANK == "${FAIL_RANK:--1}" ]] || exit 0
case $FAIL_HOW in
  exit3) echo "rank $RANK breaks" >&2; exit 3 ;;
  errfile_kill)
    printf '{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback: boom", "timestamp": "123"}}}' >"$TORCHELASTIC_ERROR_FILE"
    kill -9 $$ ;;
  sleep) exec sleep 60 ;;
esac
EOF
chmod +x "$work/w.sh"

# json_get <file> <python expression over j>: prints the value (the JSON must parse).
json_get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
expect_eq() { [[ $2 == "$3" ]] || note_fail "$1: expected '$2', got '$3'"; }

# run <name> [VAR=value...] -- <dtrun args>: runs dtrun in $work/<name>.cwd, output in
# $work/<name>.{out,err}, exit code in rc.
run() {
  local name=$1
  shift
  local -a vars=()
  while [[ $1 != -- ]]; do
    vars+=("$1")
    shift
  done
  shift
  mkdir -p "$work/$name.cwd"
  rc=0
  (cd "$work/$name.cwd" && env "${vars[@]}" timeout "$LIMIT" "$DTRUN" "$@") \
    >"$work/$name.out" 2>"$work/$name.err" </dev/null || rc=$?
}

# ---- devnull ----
mkdir -p "$work/tmp"
run devnull TMPDIR="$work/tmp" FAIL_RANK=1 FAIL_HOW=exit3 -- --log_dir=/dev/null \
  --nproc_per_node=2 -r 3 --no_python "$work/w.sh"
expect_eq "devnull: exit code" 3 "$rc"
expect_eq "devnull: files under TMPDIR" "" "$(find "$work/tmp" -mindepth 1)"
expect_eq "devnull: files in the working directory" "" "$(find "$work/devnull.cwd" -mindepth 1)"
# Rank 1 printed its line before failing (rank 0 may have been stopped before printing).
grep -qF "rank=1 error_file=[] async=1/1" "$work/devnull.out" ||
  note_fail "devnull: rank 1's line (with an empty error file) is not on stdout"
grep -qF "rank 1 breaks" "$work/devnull.err" || note_fail "devnull: rank 1's stderr is not on the console"
grep -qF "exitcode  : 3" "$work/devnull.err" || note_fail "devnull: no failure report"
grep -qF "error_file: <N/A>" "$work/devnull.err" || note_fail "devnull: the report names an error file"
grep -qF -- "--redirects: --log_dir=/dev/null writes no file" "$work/devnull.err" ||
  note_fail "devnull: no warning that -r has no file"
run devnull_ok TMPDIR="$work/tmp" -- --log_dir=/dev/null --nproc_per_node=2 -r 3 --no_python "$work/w.sh"
expect_eq "devnull_ok: exit code" 0 "$rc"
expect_eq "devnull_ok: files under TMPDIR" "" "$(find "$work/tmp" -mindepth 1)"
for r in 0 1; do  # -r 3 has no file to go to: the lines reach the console
  grep -qF "rank=$r error_file=[] async=1/1" "$work/devnull_ok.out" ||
    note_fail "devnull_ok: rank $r's line (with an empty error file) is not on stdout"
done
run devnull_hang -- --log_dir=/dev/null --hang_timeout=5 --no_python "$work/w.sh"
expect_eq "devnull with --hang_timeout: exit code" 2 "$rc"
expect_eq "devnull with --hang_timeout: stderr lines" 1 "$(wc -l <"$work/devnull_hang.err")"
pass "devnull: no file made, failure reported, --hang_timeout refused"

# ---- errfile ----
run errfile_plain TORCHELASTIC_ERROR_FILE="$work/parent1.json" FAIL_RANK=1 FAIL_HOW=exit3 -- \
  --log_dir="$work/logs" --rdzv_id=plain --nproc_per_node=2 --no_python "$work/w.sh"
expect_eq "errfile_plain: exit code" 3 "$rc"
grep -qF "rank=1 error_file=[$work/logs/plain/attempt_0/1/error.json]" "$work/errfile_plain.out" ||
  note_fail "errfile_plain: rank 1 does not get its own error file"
if [[ -s $work/parent1.json ]]; then
  expect_eq "errfile_plain: message" "rank 1 (local_rank 1) on $(hostname) failed: exit code 3" \
    "$(json_get "$work/parent1.json" 'j["message"]["message"].split(" (pid")[0]')"
  expect_eq "errfile_plain: errorCode" 3 "$(json_get "$work/parent1.json" 'j["message"]["errorCode"]')"
  expect_eq "errfile_plain: py_callstack has the stderr tail" True \
    "$(json_get "$work/parent1.json" '"rank 1 breaks" in j["message"]["extraInfo"]["py_callstack"]')"
  expect_eq "errfile_plain: timestamp" True \
    "$(json_get "$work/parent1.json" 'j["message"]["extraInfo"]["timestamp"].isdigit()')"
else
  note_fail "errfile_plain: dtrun wrote no $work/parent1.json"
fi
printf 'stale' >"$work/parent2.json"  # torch overwrites an existing file; so does dtrun
run errfile_copy TORCHELASTIC_ERROR_FILE="$work/parent2.json" FAIL_RANK=0 FAIL_HOW=errfile_kill -- \
  --log_dir="$work/logs" --rdzv_id=copy --nproc_per_node=2 --no_python "$work/w.sh"
expect_eq "errfile_copy: exit code" 137 "$rc"
expect_eq "errfile_copy: message" "RuntimeError: boom" \
  "$(json_get "$work/parent2.json" 'j["message"]["message"]')"
expect_eq "errfile_copy: py_callstack" "Traceback: boom" \
  "$(json_get "$work/parent2.json" 'j["message"]["extraInfo"]["py_callstack"]')"
expect_eq "errfile_copy: errorCode (torch's negative signal)" -9 \
  "$(json_get "$work/parent2.json" 'j["message"]["errorCode"]')"
run errfile_ok TORCHELASTIC_ERROR_FILE="$work/parent3.json" -- --log_dir="$work/logs" \
  --rdzv_id=ok --nproc_per_node=2 --no_python "$work/w.sh"
expect_eq "errfile_ok: exit code" 0 "$rc"
for r in 0 1; do
  grep -qF "rank=$r error_file=[$work/logs/ok/attempt_0/$r/error.json]" "$work/errfile_ok.out" ||
    note_fail "errfile_ok: rank $r does not get its own error file"
done
[[ ! -e $work/parent3.json ]] || note_fail "errfile_ok: a successful job wrote the error file"
# A signal that stops dtrun itself: torchrun's @record writes the SignalException.
mkdir -p "$work/errfile_signal.cwd"
(cd "$work/errfile_signal.cwd" && TORCHELASTIC_ERROR_FILE="$work/parent4.json" FAIL_RANK=0 FAIL_HOW=sleep \
  exec timeout "$LIMIT" "$DTRUN" --log_dir="$work/logs" --rdzv_id=sig --nproc_per_node=2 --no_python \
  "$work/w.sh") >"$work/errfile_signal.out" 2>"$work/errfile_signal.err" </dev/null &
signal_pid=$!
pids+=("$signal_pid")
for _ in $(seq 200); do grep -q "rank=0" "$work/errfile_signal.out" && break; sleep 0.05; done
launcher_pid=$(pgrep -P "$signal_pid" -x dtrun || echo "$signal_pid")
kill -TERM "$launcher_pid"
rc=0
wait "$signal_pid" || rc=$?
forget "$signal_pid"
expect_eq "errfile_signal: exit code" 143 "$rc"
expect_eq "errfile_signal: message" "SignalException: Process $launcher_pid got signal: 15" \
  "$(json_get "$work/parent4.json" 'j["message"]["message"]' 2>&1)"
pass "errfile: root cause written (plain, copied, dtrun signalled), workers keep their own files"

# ---- nccl ----
for setting in "" "NCCL_ASYNC_ERROR_HANDLING=0" "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"; do
  want=1
  [[ -z $setting ]] || want=${setting#*=}
  run nccl ${setting:+"$setting"} -- --log_dir="$work/logs" --no_python "$work/w.sh"
  grep -qF "async=$want/$want" "$work/nccl.out" ||
    note_fail "nccl with '${setting:-nothing set}': expected both $want, got $(grep -o 'async=[^ ]*' "$work/nccl.out")"
done
pass "nccl: both names set, the user's value of either wins for both"

# ---- remote ----
"$DTRUN" store --port 0 --port-file "$work/store.port" --log-level warn >"$work/store.log" 2>&1 &
store_pid=$!
pids+=("$store_pid")
for _ in $(seq 100); do  # 10 s
  [[ -s $work/store.port ]] && break
  running "$store_pid" || die "remote: dtrun store exited: $(cat "$work/store.log")"
  sleep 0.1
done
port=$(cat "$work/store.port")
cat >"$work/reach.sh" <<'EOF'
#!/bin/bash
echo "rank=$RANK master=$MASTER_ADDR:$MASTER_PORT"
exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT" && echo "rank=$RANK reached the store"
EOF
chmod +x "$work/reach.sh"
run remote -- --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.2:$port" \
  --rdzv_conf=is_host=0 --rdzv_id=remote --local_addr=127.0.0.3 --log_dir="$work/logs" \
  --no_python "$work/reach.sh"
expect_eq "remote: exit code" 0 "$rc"
# As torchrun's rank-0 agent serves its workers a second store: the endpoint's store may serve
# other jobs too, and the workers' keys carry no run id.
masters=$(sed -n 's/^rank=[01] master=//p' "$work/remote.out" | sort -u)
[[ $masters =~ ^127\.0\.0\.3:([0-9]+)$ && ${BASH_REMATCH[1]} != "$port" ]] ||
  note_fail "remote: the ranks' MASTER_ADDR:MASTER_PORT should be the agent's own store at --local_addr 127.0.0.3, not the endpoint's ($port): '$masters'"
for r in 0 1; do
  grep -qxF "rank=$r reached the store" "$work/remote.out" || note_fail "remote: rank $r did not reach the store"
done
running "$store_pid" || note_fail "remote: dtrun store is gone"
pass "remote: workers use the agent's own store ($masters), not the endpoint's"

# ---- entry ----
mkdir -p "$work/tmp2" "$work/entry/a_dir"
printf 'echo hi\n' >"$work/entry/no_run_bit.sh"
for args in "--no_python $work/entry/does-not-exist" "--no_python $work/entry/a_dir" \
  "--no_python $work/entry/no_run_bit.sh" "$work/entry/missing.py"; do
  # shellcheck disable=SC2086  # the words of $args are separate arguments
  run entry TMPDIR="$work/tmp2" -- --nproc_per_node=2 $args
  entry=${args##* }
  expect_eq "entry '$args': exit code" 127 "$rc"
  expect_eq "entry '$args': stderr lines" 1 "$(wc -l <"$work/entry.err")"
  grep -qF "dtrun: cannot run $entry" "$work/entry.err" || note_fail "entry '$args': the line does not name $entry"
  expect_eq "entry '$args': files under TMPDIR" "" "$(find "$work/tmp2" -mindepth 1)"
done
pass "entry: one line, exit 127, nothing made"

end_test
