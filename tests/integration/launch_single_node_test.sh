#!/usr/bin/env bash
# shellcheck disable=SC2016  # ${local_rank} in single quotes is for dtrun to replace, not bash
# `dtrun --nproc_per_node=N ...` end to end on one node, through the real binary:
#   bash tests/integration/launch_single_node_test.sh /abs/path/to/dtrun
# Scenarios (workers live in tests/integration/workers/):
#   env       - every rank's torchrun environment for nproc 1, 3 and 8; OMP_NUM_THREADS defaulting
#   python    - .py entrypoints under PYTHON_EXEC=/usr/bin/python3 (torch 1.13): a gloo all_reduce
#               job with 2 and 4 ranks, the seeds' barrier ablation with and without the barrier,
#               -m module entrypoints, the interpreter's command line, ${local_rank} in arguments
#               (the short form: 2 ranks and the barrier only; 4 ranks and no barrier take the
#               same paths of dtrun's, and 8 torch imports of about 2 CPU-seconds each)
#   restarts  - --max_restarts counted through TORCHELASTIC_RESTART_COUNT, then exhausted
#   exits     - exit 3 / SIGSEGV / SIGKILL of a worker -> dtrun's exit code; the report's
#               traceback from stderr, a written error file, or torch's @record
#   logs      - per-rank files, --tee, --redirects (all and per rank), --local_ranks_filter, the
#               fresh log directory without --log_dir, an entrypoint that does not exist
# Every dtrun run is bounded by timeout(1); only loopback is used; everything lives in one mktemp
# directory that is removed on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" launch_single_node_test "$@"
RUN_LIMIT=60  # seconds for one dtrun run
# Every dtrun run here is in the foreground under timeout(1), so no background process is left
# to stop; the workers die with dtrun (their process groups are killed, PDEATHSIG covers the rest).

# expect_eq <what> <expected> <got>
expect_eq() { [[ $2 == "$3" ]] || die "$1: expected '$(oneline "$2")', got '$(oneline "$3")'"; }
# Shows a multi-line text on one line (newlines as \n) for FAIL messages.
oneline() { printf '%s' "$1" | sed ':a;N;$!ba;s/\n/\\n/g'; }
# expect_file <what> <file> <expected content, without the final newline>
expect_file() {
  [[ -f $2 ]] || die "$1: expected file $2 to exist, it does not"
  local got
  got=$(<"$2")
  [[ $got == "$3" ]] || die "$1: expected '$(oneline "$3")', got '$(oneline "$got")'"
}
# expect_line <what> <file> <exact line>: the line occurs in the file.
expect_line() { grep -qxF -- "$3" "$2" || die "$1: expected the line '$3' in $(basename "$2"), not found"; }
expect_no_match() { ! grep -qF -- "$3" "$2" || die "$1: expected no '$3' in $(basename "$2"), found it"; }
# Value of NAME in an `env` dump; "<unset>" when absent.
envval() { local v; v=$(grep -m1 "^$2=" "$1") || { echo "<unset>"; return; }; echo "${v#*=}"; }
now() { echo "${EPOCHREALTIME/./}"; }  # microseconds
status_text() { if [[ $1 -eq 124 ]]; then echo "124 (timed out after $RUN_LIMIT s)"; else echo "$1"; fi; }

[[ -x $PYTHON ]] || die "$PYTHON: expected Debian's python3 with torch 1.13, not found"
$PYTHON -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
  die "$PYTHON: expected to import torch.distributed (python3-torch 1.13), it cannot"

# Workers are copied so that their exec bits do not depend on the checkout.
W=$work/workers
mkdir -p "$W"
cp "$HERE"/workers/* "$W"/
chmod +x "$W"/*.sh
ulimit -c 0  # the SIGSEGV scenario must not leave core files
unset OMP_NUM_THREADS PET_NPROC_PER_NODE PET_MAX_RESTARTS PET_TEE PET_REDIRECTS PET_LOG_DIR \
  PET_RDZV_ID PET_NO_PYTHON PET_MODULE TORCH_ELASTIC_SHUTDOWN_TIMEOUT PYTHON_EXEC

# run <name> [VAR=value...] -- <dtrun args...>: runs dtrun in $work/<name> with stdout and stderr
# in $work/<name>.out/.err; sets rc and elapsed_ms. "@LOGS@" in an argument becomes the absolute
# $work/<name>/logs.
rc=0
elapsed_ms=0
run() {
  local name=$1 envs=()
  shift
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$work/$name"
  local args=() a
  for a in "$@"; do args+=("${a//@LOGS@/$work/$name/logs}"); done
  local start
  start=$(now)
  rc=0
  (cd "$work/$name" && env "${envs[@]}" timeout -k 5 "$RUN_LIMIT" "$DTRUN" "${args[@]}") \
    >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  elapsed_ms=$((($(now) - start) / 1000))
}
# expect_rc <name> <code>
expect_rc() {
  [[ $rc -eq $2 ]] || {
    sed 's/^/    | /' "$work/$1.err" | tail -n 30 >&2
    die "$1: dtrun exit code: expected $2, got $(status_text "$rc")"
  }
}

section_start=0
begin() { section_start=$SECONDS; echo "launch_single_node_test: $1 ..."; }
done_section() { echo "launch_single_node_test: $1 ok ($((SECONDS - section_start)) s)"; }

# ---------------------------------------------------------------------------------------------
# env: RANK/LOCAL_RANK/... for nproc 1, 3 and 8.
begin env
check_env() {  # <name> <nproc> <run id> <role> <max restarts> <expected OMP or <unset>>
  local name=$1 n=$2 id=$3 role=$4 maxr=$5 omp=$6 port="" r
  local attempt=$work/$name/logs/$id/attempt_0
  local count
  count=$(find "$attempt" -mindepth 1 -maxdepth 1 -type d | wc -l)
  expect_eq "$name: rank directories in attempt_0" "$n" "$count"
  [[ ! -e $work/$name/logs/$id/attempt_1 ]] || die "$name: expected no attempt_1 after a clean run, found one"
  for ((r = 0; r < n; r++)); do
    local f=$attempt/$r/env what="$name rank $r"
    [[ -f $f ]] || die "$what: expected $f written by the worker, missing"
    expect_eq "$what RANK" "$r" "$(envval "$f" RANK)"
    expect_eq "$what LOCAL_RANK" "$r" "$(envval "$f" LOCAL_RANK)"
    expect_eq "$what WORLD_SIZE" "$n" "$(envval "$f" WORLD_SIZE)"
    expect_eq "$what LOCAL_WORLD_SIZE" "$n" "$(envval "$f" LOCAL_WORLD_SIZE)"
    expect_eq "$what GROUP_RANK" 0 "$(envval "$f" GROUP_RANK)"
    expect_eq "$what GROUP_WORLD_SIZE" 1 "$(envval "$f" GROUP_WORLD_SIZE)"
    expect_eq "$what ROLE_NAME" "$role" "$(envval "$f" ROLE_NAME)"
    expect_eq "$what ROLE_RANK" "$r" "$(envval "$f" ROLE_RANK)"
    expect_eq "$what ROLE_WORLD_SIZE" "$n" "$(envval "$f" ROLE_WORLD_SIZE)"
    expect_eq "$what MASTER_ADDR" 127.0.0.1 "$(envval "$f" MASTER_ADDR)"
    local p
    p=$(envval "$f" MASTER_PORT)
    [[ $p =~ ^[1-9][0-9]*$ && $p -le 65535 ]] || die "$what MASTER_PORT: expected a port 1-65535, got '$p'"
    [[ -n $port ]] || port=$p
    expect_eq "$what MASTER_PORT (same for every rank)" "$port" "$p"
    expect_file "$what: the store at MASTER_ADDR:MASTER_PORT while workers run" "$attempt/$r/store" reachable
    expect_eq "$what TORCHELASTIC_RESTART_COUNT" 0 "$(envval "$f" TORCHELASTIC_RESTART_COUNT)"
    expect_eq "$what TORCHELASTIC_MAX_RESTARTS" "$maxr" "$(envval "$f" TORCHELASTIC_MAX_RESTARTS)"
    expect_eq "$what TORCHELASTIC_RUN_ID" "$id" "$(envval "$f" TORCHELASTIC_RUN_ID)"
    expect_eq "$what TORCHELASTIC_USE_AGENT_STORE" True "$(envval "$f" TORCHELASTIC_USE_AGENT_STORE)"
    expect_eq "$what TORCHELASTIC_ERROR_FILE" "$attempt/$r/error.json" "$(envval "$f" TORCHELASTIC_ERROR_FILE)"
    expect_eq "$what DTRUN_LOG_DIR" "$attempt/$r" "$(envval "$f" DTRUN_LOG_DIR)"
    expect_eq "$what OMP_NUM_THREADS" "$omp" "$(envval "$f" OMP_NUM_THREADS)"
    expect_eq "$what inherited DTRUN_TEST_MARK" "kept-$name" "$(envval "$f" DTRUN_TEST_MARK)"
  done
}
omp_notice_count() { grep -c "Setting OMP_NUM_THREADS environment variable" "$work/$1.err" || true; }

run env1 DTRUN_TEST_MARK=kept-env1 -- --nproc_per_node=1 --rdzv_id=job-one --log_dir=@LOGS@ \
  --no_python "$W/env_dump.sh"
expect_rc env1 0
check_env env1 1 job-one default 0 "<unset>"
expect_eq "env1: OMP_NUM_THREADS notice count (nproc 1)" 0 "$(omp_notice_count env1)"

run env3 DTRUN_TEST_MARK=kept-env3 -- --nproc_per_node=3 --rdzv_id=job-three --log_dir=@LOGS@ \
  --no_python "$W/env_dump.sh"
expect_rc env3 0
check_env env3 3 job-three default 0 1
expect_eq "env3: OMP_NUM_THREADS notice count (nproc 3, unset)" 1 "$(omp_notice_count env3)"

run env8 DTRUN_TEST_MARK=kept-env8 -- --nproc-per-node=8 --rdzv-id=job-eight --log-dir=@LOGS@ \
  --role=trainer --max-restarts=5 --no-python "$W/env_dump.sh"
expect_rc env8 0
check_env env8 8 job-eight trainer 5 1
expect_eq "env8: OMP_NUM_THREADS notice count (nproc 8, unset)" 1 "$(omp_notice_count env8)"

run env_omp DTRUN_TEST_MARK=kept-env_omp OMP_NUM_THREADS=4 -- --nproc_per_node=3 \
  --rdzv_id=job-omp --log_dir=@LOGS@ --no_python "$W/env_dump.sh"
expect_rc env_omp 0
check_env env_omp 3 job-omp default 0 4
expect_eq "env_omp: OMP_NUM_THREADS notice count (user set 4)" 0 "$(omp_notice_count env_omp)"
done_section env

# ---------------------------------------------------------------------------------------------
begin python
# An unmodified gloo job: init_process_group("gloo", "env://") through the agent's store.
check_gloo() {  # <name> <nproc>
  local name=$1 n=$2 r sum=0 gather
  for ((r = 0; r < n; r++)); do sum=$((sum + r + 1)); done
  gather=$(seq -s ', ' 0 10 $(((n - 1) * 10)))
  for ((r = 0; r < n; r++)); do
    expect_file "$name rank $r stdout.log" "$work/$name/logs/gloo/attempt_0/$r/stdout.log" \
      "rank $r/$n: all_reduce sum = $sum
rank $r/$n: all_gather = [$gather]"
  done
}
run gloo2 PYTHON_EXEC=$PYTHON GLOO_SOCKET_IFNAME=lo -- --nproc_per_node=2 --rdzv_id=gloo \
  --log_dir=@LOGS@ "$W/gloo_allreduce.py"
expect_rc gloo2 0
check_gloo gloo2 2
if ((LONG)); then
  run gloo4 PYTHON_EXEC=$PYTHON GLOO_SOCKET_IFNAME=lo -- --nproc_per_node=4 --rdzv_id=gloo \
    --log_dir=@LOGS@ "$W/gloo_allreduce.py"
  expect_rc gloo4 0
  check_gloo gloo4 4
fi

# The seeds' barrier ablation, 4 ranks, with the barrier: every rank's "waiting" line precedes
# every rank's "Results" line (time stamps compared across the per-rank stdout.log files).
seed_args=(--nnodes=1 --nproc_per_node=4 --node_rank=0 --world_size=4 --backend=gloo
  --init_method=env://)
run barrier PYTHON_EXEC=$PYTHON GLOO_SOCKET_IFNAME=lo -- --nproc_per_node=4 --rdzv_id=seed \
  --log_dir=@LOGS@ "$W/barrier_seed.py" "${seed_args[@]}"
expect_rc barrier 0
latest_wait="" earliest_result=""
for r in 0 1 2 3; do
  log=$work/barrier/logs/seed/attempt_0/$r/stdout.log
  [[ -f $log ]] || die "barrier rank $r: expected $log, missing"
  wait_line=$(grep -E '^[0-9-]+ [0-9:.]+ \[INFO\]: I HAVE BARRIER DUDE! WAITING FOR ALL PROCESSES TO SYNCHRONIZE\.\.\.$' "$log" || true)
  result_line=$(grep -E '^[0-9-]+ [0-9:.]+ \[INFO\]: Results: \[\[1, 2, 3\]\]$' "$log" || true)
  expect_eq "barrier rank $r: 'waiting' lines" 1 "$(printf '%s' "$wait_line" | grep -c . || true)"
  expect_eq "barrier rank $r: 'Results' lines" 1 "$(printf '%s' "$result_line" | grep -c . || true)"
  expect_line "barrier rank $r: its global rank in the process info" "$log" "    \"global_rank\": $r,"
  expect_line "barrier rank $r: its local rank in the process info" "$log" "    \"local_rank\": $r,"
  expect_no_match "barrier rank $r: no no-barrier line" "$log" "I HAVE NO BARRIER"
  tw=${wait_line:0:26} tr=${result_line:0:26}  # "YYYY-MM-DD HH:MM:SS.ffffff" sorts as time
  if [[ -z $latest_wait || $tw > $latest_wait ]]; then latest_wait=$tw; fi
  if [[ -z $earliest_result || $tr < $earliest_result ]]; then earliest_result=$tr; fi
done
[[ $latest_wait < $earliest_result ]] ||
  die "barrier: expected every 'waiting' line before every 'Results' line, got the last wait at $latest_wait and the first result at $earliest_result"

# Without the barrier it just completes, with both lines on every rank.
if ((LONG)); then
  run nobarrier PYTHON_EXEC=$PYTHON GLOO_SOCKET_IFNAME=lo -- --nproc_per_node=4 --rdzv_id=seed \
    --log_dir=@LOGS@ "$W/barrier_seed.py" "${seed_args[@]}" --run_with_no_barrier
  expect_rc nobarrier 0
  for r in 0 1 2 3; do
    log=$work/nobarrier/logs/seed/attempt_0/$r/stdout.log
    [[ -f $log ]] || die "nobarrier rank $r: expected $log, missing"
    grep -qE '\[INFO\]: I HAVE NO BARRIER DUDE!$' "$log" || die "nobarrier rank $r: expected the no-barrier line, missing"
    grep -qE '\[INFO\]: Results: \[\[1, 2, 3\]\]$' "$log" || die "nobarrier rank $r: expected the Results line, missing"
    expect_no_match "nobarrier rank $r: no barrier line" "$log" "I HAVE BARRIER DUDE"
  done
fi

# -m: a module from a temporary PYTHONPATH entry, with ${local_rank} in its arguments; the
# worker's command line must be exactly PYTHON_EXEC -u -m <module> <args>.
mkdir -p "$work/pymod/dtrun_itest_mod"
: >"$work/pymod/dtrun_itest_mod/__init__.py"
cp "$W/pyargs.py" "$work/pymod/dtrun_itest_mod/show.py"
run module PYTHON_EXEC=$PYTHON PYTHONPATH="$work/pymod" -- --nproc_per_node=2 --rdzv_id=mod \
  --log_dir=@LOGS@ -m dtrun_itest_mod.show '--tag=rank${local_rank}' plain '${local_rank}'
expect_rc module 0
for r in 0 1; do
  expect_file "module rank $r: interpreter command line" "$work/module/logs/mod/attempt_0/$r/argv" \
    "[\"$PYTHON\", \"-u\", \"-m\", \"dtrun_itest_mod.show\", \"--tag=rank$r\", \"plain\", \"$r\"]"
done

# A .py script: PYTHON_EXEC -u <script> <args>, ${local_rank} substituted, other text untouched.
run pyscript PYTHON_EXEC=$PYTHON -- --nproc_per_node=3 --rdzv_id=py --log_dir=@LOGS@ \
  "$W/pyargs.py" 'a-${local_rank}-b-${local_rank}' '${LOCAL_RANK}' '$local_rank' '${local_rank'
expect_rc pyscript 0
for r in 0 1 2; do
  expect_file "pyscript rank $r: interpreter command line" "$work/pyscript/logs/py/attempt_0/$r/argv" \
    "[\"$PYTHON\", \"-u\", \"$W/pyargs.py\", \"a-$r-b-$r\", \"\${LOCAL_RANK}\", \"\$local_rank\", \"\${local_rank\"]"
done

# --no_python: the program itself gets the substituted arguments.
run noprog -- --nproc_per_node=2 --rdzv_id=np --log_dir=@LOGS@ --no_python "$W/echo_args.sh" \
  'x${local_rank}' '--local-rank=${local_rank}'
expect_rc noprog 0
for r in 0 1; do
  expect_file "noprog rank $r: arguments" "$work/noprog/logs/np/attempt_0/$r/args" "x$r
--local-rank=$r"
done
done_section python

# ---------------------------------------------------------------------------------------------
begin restarts
# Rank 2 of 3 exits 7 while TORCHELASTIC_RESTART_COUNT < 2: attempts 0 and 1 fail, 2 succeeds.
run restart_ok -- --nproc_per_node=3 --max_restarts=2 --rdzv_id=rs --log_dir=@LOGS@ \
  --no_python "$W/flaky.sh" 2 7 2
expect_rc restart_ok 0
base=$work/restart_ok/logs/rs
for a in 0 1 2; do
  [[ -d $base/attempt_$a ]] || die "restart_ok: expected attempt_$a to be kept, missing"
  expect_file "restart_ok attempt $a rank 2 stdout" "$base/attempt_$a/2/stdout.log" "attempt $a rank 2"
done
for a in 0 1; do
  expect_file "restart_ok attempt $a rank 2 stderr" "$base/attempt_$a/2/stderr.log" "failing in attempt $a"
done
for r in 0 1 2; do
  expect_file "restart_ok attempt 2 rank $r stdout" "$base/attempt_2/$r/stdout.log" "attempt 2 rank $r"
done
[[ ! -e $base/attempt_3 ]] || die "restart_ok: expected no attempt_3, found one"
expect_no_match "restart_ok: no failure report on success" "$work/restart_ok.err" "FAILED"

# Only one restart: attempt 1 fails too, dtrun exits 7 with the report naming rank 2.
run restart_out -- --nproc_per_node=3 --max_restarts=1 --rdzv_id=rs --log_dir=@LOGS@ \
  --no_python "$W/flaky.sh" 2 7 2
expect_rc restart_out 7
base=$work/restart_out/logs/rs
[[ -d $base/attempt_1 ]] || die "restart_out: expected attempt_1, missing"
[[ ! -e $base/attempt_2 ]] || die "restart_out: expected no attempt_2 after the budget ran out, found one"
pid=$(<"$base/attempt_1/2/pid")
err=$work/restart_out.err
expect_line "restart_out report" "$err" "$W/flaky.sh FAILED"
expect_line "restart_out report" "$err" "Root Cause (first observed failure):"
expect_line "restart_out report" "$err" "  rank      : 2 (local_rank: 2)"
expect_line "restart_out report" "$err" "  exitcode  : 7 (pid: $pid)"
expect_line "restart_out report" "$err" "  error_file: <N/A>"
expect_line "restart_out report" "$err" "  traceback : failing in attempt 1"
expect_eq "restart_out: failure reports printed" 1 "$(grep -c "FAILED\$" "$err" || true)"
done_section restarts

# ---------------------------------------------------------------------------------------------
begin exits
# Rank 1 of 3 ends as told; the others run until stopped, so a quick exit proves they were stopped.
check_exit() {  # <name> <mode> <dtrun code> <report exitcode> [traceback line]
  local name=$1
  run "$name" -- --nproc_per_node=3 --rdzv_id=ex --log_dir=@LOGS@ --shutdown_timeout=5 \
    --no_python "$W/exit_code.sh" "$2"
  expect_rc "$name" "$3"
  [[ $elapsed_ms -lt 4000 ]] || die "$name: expected dtrun to stop the other ranks at once, took $elapsed_ms ms"
  local pid
  pid=$(<"$work/$name/logs/ex/attempt_0/1/pid")
  expect_line "$name report" "$work/$name.err" "$W/exit_code.sh FAILED"
  expect_line "$name report" "$work/$name.err" "  rank      : 1 (local_rank: 1)"
  expect_line "$name report" "$work/$name.err" "  exitcode  : $4 (pid: $pid)"
  if [[ $# -ge 5 ]]; then
    expect_line "$name report" "$work/$name.err" "  traceback : ${5//@PID@/$pid}"
  fi
}
check_exit exit3 exit:3 3 3
check_exit segv signal:SEGV 139 -11 "Signal 11 (SIGSEGV) received by PID @PID@"
check_exit sigkill signal:KILL 137 -9 "Signal 9 (SIGKILL) received by PID @PID@"

run success -- --nproc_per_node=3 --rdzv_id=ok --log_dir=@LOGS@ --no_python "$W/out_err.sh"
expect_rc success 0
expect_no_match "success: no failure report" "$work/success.err" "FAILED"

# No error file: the traceback is the tail of the failed rank's stderr, line by line.
check_exit stderr3 stderr:3 5 5 "stderr line 1 of rank 1"
expect_line "stderr3 report" "$work/stderr3.err" "    stderr line 2 of rank 1"
expect_line "stderr3 report" "$work/stderr3.err" "    stderr line 3 of rank 1"
expect_line "stderr3 report" "$work/stderr3.err" "  error_file: <N/A>"
grep -A2 -xF "  traceback : stderr line 1 of rank 1" "$work/stderr3.err" >"$work/stderr3.tb"
expect_file "stderr3: the traceback's lines in order" "$work/stderr3.tb" "  traceback : stderr line 1 of rank 1
    stderr line 2 of rank 1
    stderr line 3 of rank 1"
# A long stderr: the tail (last line kept), not the head.
check_exit stderr40 stderr:40 5 5
first=$(sed -n 's/^  traceback : stderr line \([0-9]*\) of rank 1$/\1/p' "$work/stderr40.err")
[[ $first =~ ^[0-9]+$ && $first -gt 1 ]] ||
  die "stderr40 report: expected the traceback to start after stderr line 1 (a tail), got first line '$first'"
grep -A$((40 - first)) -xF "  traceback : stderr line $first of rank 1" "$work/stderr40.err" >"$work/stderr40.tb"
expect_file "stderr40: the traceback is stderr lines $first..40 in order" "$work/stderr40.tb" \
  "$(echo "  traceback : stderr line $first of rank 1"; for ((i = first + 1; i <= 40; i++)); do echo "    stderr line $i of rank 1"; done)"

# A written error file (torchelastic's form): its py_callstack is the traceback.
check_exit errfile errorfile 1 1 "Traceback (most recent call last):"
expect_line "errfile report" "$work/errfile.err" \
  "  error_file: $work/errfile/logs/ex/attempt_0/1/error.json"
expect_line "errfile report" "$work/errfile.err" "    ValueError: bad shard 17 on rank 1"
expect_no_match "errfile report: stderr is not the traceback" "$work/errfile.err" \
  "  traceback : this stderr line"
# The legacy form {"message": "...", "timestamp": N}.
check_exit legacy legacyfile 1 1 "legacy failure on rank 1"
expect_line "legacy report" "$work/legacy.err" \
  "  error_file: $work/legacy/logs/ex/attempt_0/1/error.json"

# torch's own @record writes the error file; the report quotes the exception.
run record PYTHON_EXEC=$PYTHON -- --nproc_per_node=2 --rdzv_id=rec --log_dir=@LOGS@ "$W/record_fail.py"
expect_rc record 1
expect_line "record report" "$work/record.err" "  rank      : 1 (local_rank: 1)"
expect_line "record report" "$work/record.err" "  error_file: $work/record/logs/rec/attempt_0/1/error.json"
expect_line "record report" "$work/record.err" "  traceback : Traceback (most recent call last):"
expect_line "record report" "$work/record.err" "    RuntimeError: boom on rank 1"
done_section exits

# ---------------------------------------------------------------------------------------------
begin logs
# out_err.sh prints "out-<r> first", "err-<r> only" (stderr), "out-<r> second".
check_files() {  # <name> <nproc>: every rank's streams are in its files, whatever the console got
  local name=$1 r d
  for ((r = 0; r < $2; r++)); do
    d=$work/$name/logs/lg/attempt_0/$r
    expect_file "$name rank $r stdout.log" "$d/stdout.log" "out-$r first
out-$r second"
    expect_file "$name rank $r stderr.log" "$d/stderr.log" "err-$r only"
  done
}
# The worker lines that reached one console stream, sorted (dtrun's own lines left out).
console() { grep -E '(out|err)-[0-9]' "$work/$1.$2" | LC_ALL=C sort || true; }
logrun() {  # <name> <dtrun options...>
  local name=$1
  shift
  run "$name" OMP_NUM_THREADS=1 -- --nproc_per_node=3 --rdzv_id=lg --log_dir=@LOGS@ "$@" \
    --no_python "$W/out_err.sh"
  expect_rc "$name" 0
  check_files "$name" 3
}
expect_console() {  # <name> <out|err> <expected sorted lines>
  local got
  got=$(console "$1" "$2")
  [[ $got == "$3" ]] || die "$1: console std$2: expected '$(oneline "$3")', got '$(oneline "$got")'"
}

logrun plain
expect_console plain out "out-0 first
out-0 second
out-1 first
out-1 second
out-2 first
out-2 second"
expect_console plain err "err-0 only
err-1 only
err-2 only"

logrun tee --tee=3
expect_console tee out "[default0]:out-0 first
[default0]:out-0 second
[default1]:out-1 first
[default1]:out-1 second
[default2]:out-2 first
[default2]:out-2 second"
expect_console tee err "[default0]:err-0 only
[default1]:err-1 only
[default2]:err-2 only"
for r in 0 1 2; do  # each rank's lines keep their order
  expect_eq "tee rank $r console order" "[default$r]:out-$r first
[default$r]:out-$r second" "$(grep -F "[default$r]:" "$work/tee.out")"
done

logrun redirect --redirects=3
expect_console redirect out ""
expect_console redirect err ""

# Per rank: 0 -> stdout to files only, 1 -> stderr to files only, 2 (not listed) -> console.
logrun perrank -r 0:1,1:2
expect_console perrank out "out-1 first
out-1 second
out-2 first
out-2 second"
expect_console perrank err "err-0 only
err-2 only"

logrun filter --local_ranks_filter=1
expect_console filter out "out-1 first
out-1 second"
expect_console filter err "err-1 only"

logrun teefilter -t 3 --local_ranks_filter=0,2
expect_console teefilter out "[default0]:out-0 first
[default0]:out-0 second
[default2]:out-2 first
[default2]:out-2 second"
expect_console teefilter err "[default0]:err-0 only
[default2]:err-2 only"

# No --log_dir: a fresh directory under $TMPDIR, logged once, with the files in it.
mkdir -p "$work/tmpdir"
run nologdir OMP_NUM_THREADS=1 TMPDIR="$work/tmpdir" -- --nproc_per_node=2 --rdzv_id=fresh \
  --no_python "$W/out_err.sh"
expect_rc nologdir 0
made=$(find "$work/tmpdir" -mindepth 1 -maxdepth 1)
[[ $(printf '%s\n' "$made" | grep -c .) -eq 1 ]] ||
  die "nologdir: expected exactly one new directory under TMPDIR, got '$(oneline "$made")'"
expect_eq "nologdir: lines naming the log directory $made/fresh" 1 \
  "$(grep -cF "$made/fresh" "$work/nologdir.err" || true)"
for r in 0 1; do
  expect_file "nologdir rank $r stdout.log" "$made/fresh/attempt_0/$r/stdout.log" "out-$r first
out-$r second"
  expect_file "nologdir rank $r stderr.log" "$made/fresh/attempt_0/$r/stderr.log" "err-$r only"
done

# A program that does not exist: exit 127 at once, one line naming it, no worker report.
run missing OMP_NUM_THREADS=1 -- --nproc_per_node=2 --log_dir=@LOGS@ --log-level=warn \
  --no_python ./trian
expect_rc missing 127
[[ $elapsed_ms -lt 2000 ]] || die "missing: expected to fail at once, took $elapsed_ms ms"
expect_file "missing: dtrun's stderr" "$work/missing.err" "dtrun: cannot run ./trian: No such file or directory"
expect_file "missing: dtrun's stdout" "$work/missing.out" ""
run missing_info OMP_NUM_THREADS=1 -- --nproc_per_node=2 --log_dir=@LOGS@ --no_python ./trian
expect_rc missing_info 127
expect_eq "missing_info: error lines naming ./trian" 1 \
  "$(grep -c '^dtrun: .*\./trian' "$work/missing_info.err" || true)"
expect_no_match "missing_info: no failure report" "$work/missing_info.err" "FAILED"
done_section logs

echo "launch_single_node_test: PASS (all scenarios, ${SECONDS} s)"
