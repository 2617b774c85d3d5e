#!/usr/bin/env bash
# libdtrt (dtrun::runtime) end to end: dtrt_check_worker under the real dtrun binary:
#   bash tests/integration/runtime_test.sh /abs/path/to/build/launcher/dtrun
# The worker is build/tests/worker_runtime/dtrt_check_worker (found from the dtrun path). It
# prints one PASS/FAIL/SKIP line per check; this script asserts dtrun's exit code and greps every
# rank's stdout.log (--log_dir) for FAIL and for the lines each scenario must print.
# Scenarios:
#   (ops        every operation x dtype x ReduceOp, p2p with tags, sub-groups for tcp and gloo
#               run in-process: tests/runtime/group_checks_test.cpp, ranks as threads, world
#               sizes 1-4, the same checks; real processes are kept for what needs them below)
#   ops         the same checks for tcp between processes over shared memory (3 ranks) and
#               mixed hosts (4 ranks, DTRUN_HOST_ID=a,a,b,b)
#   (compare    tcp against gloo on seeded random data: tests/runtime/group_checks_test.cpp,
#               compare_checks.h, ranks as threads, world sizes 2 and 3)
#   early-exit  rank 2 of 3 exits 3 after the group formed or before it, or is SIGKILLed during
#               16 MiB all_reduce calls (tcp over shared memory, sockets, mixed and the direct
#               all_reduce; gloo): the others report CommError/TimeoutError naming rank 2 within
#               DTRUN_TIMEOUT + 5 s;
#               dtrun exits 3 (137 for the kill)
#   attempt     --max_restarts=1: attempt 0's rank 0 exits 1, attempt 1 forms fresh groups
#   errors      bad environment and arguments throw ConfigError naming the problem; init()
#               outside dtrun throws ConfigError naming RANK
#   nccl        ops on CUDA memory, one rank per GPU (at most 4); SKIP without a GPU
# Every run is bounded by timeout(1) and DTRUN_TIMEOUT=10 in the workers; loopback only;
# everything lives in one mktemp directory, removed on exit. Failures are collected: every
# scenario runs, then the script exits 1 if any failed.
set -euo pipefail

DTRUN=${1:?usage: runtime_test.sh /path/to/dtrun}
# Seconds for one dtrun run (the workers' own timeouts are 10 s); sanitizer trees run slower
# (TSan: a 3-rank scenario takes ~20 s on 2 cores). RUNTIME_TEST_RUN_LIMIT overrides.
RUN_LIMIT=45
# The short form of the ops scenario (mixed hosts, which take the shared memory and the socket
# paths both) as lib/preamble.sh's LONG: DTRUN_TEST_LONG=0 or 1, else short in a sanitizer tree.
LONG=1
[[ $DTRUN != */build-tsan/* && $DTRUN != */build-asan/* ]] || { RUN_LIMIT=180; LONG=0; }
[[ ${DTRUN_TEST_LONG:-} != [01] ]] || LONG=$DTRUN_TEST_LONG
RUN_LIMIT=${RUNTIME_TEST_RUN_LIMIT:-$RUN_LIMIT}
export DTRUN_TIMEOUT=10

fail_count=0
note_fail() { echo "runtime_test: FAIL: $*" >&2; fail_count=$((fail_count + 1)); }
die() { echo "runtime_test: FAIL: $*" >&2; exit 1; }

[[ -x $DTRUN ]] || die "dtrun binary: expected an executable at '$DTRUN'"
WORKER=$(cd "$(dirname "$DTRUN")/.." && pwd)/tests/worker_runtime/dtrt_check_worker
[[ -x $WORKER ]] ||
  die "worker: expected $WORKER (target dtrt_check_worker; build it with ninja -C build dtrt_check_worker)"

work=$(mktemp -d)
# Every dtrun run is in the foreground under timeout(1): no background process is left behind
# (the workers die with dtrun: their process groups are stopped, PDEATHSIG covers the rest).
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
ulimit -c 0
unset OMP_NUM_THREADS PET_NPROC_PER_NODE PET_MAX_RESTARTS PET_TEE PET_REDIRECTS PET_LOG_DIR \
  PET_RDZV_ID PET_NO_PYTHON PET_MODULE TORCH_ELASTIC_SHUTDOWN_TIMEOUT DTRT_LOG_FILE

rc=0
elapsed=0
# run <name> <nproc> [dtrun options...] -- <worker args...>: dtrun's output in $work/<name>.out
# and .err, per-rank logs under $work/<name>/logs/<name>/attempt_<a>/<rank>/; sets rc, elapsed.
run() {
  local name=$1 n=$2
  shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  local start=$SECONDS
  rc=0
  timeout -k 5 "$RUN_LIMIT" "$DTRUN" --nproc_per_node="$n" --rdzv_id="$name" \
    --log_dir="$work/$name/logs" "${opts[@]}" --no_python "$WORKER" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  elapsed=$((SECONDS - start))
}
logdir() { echo "$work/$1/logs/$1/attempt_${2:-0}"; }

# Shows why a run failed: dtrun's stderr tail and every FAIL line of every rank.
show() {  # <name>
  grep -E '^ +(rank|exitcode|traceback) +:|^dtrun' "$work/$1.err" | head -n 6 | sed 's/^/    | /' >&2 || true
  # INFO too: when each rank caught what, e.g. a survivor that saw its error only when another
  # survivor left (gloo's early_exit: 'caught after 10.0 s', naming the rank that left).
  grep -H -E '^(FAIL|INFO)' "$work/$1/logs/$1"/attempt_*/*/stdout.log 2>/dev/null | head -n 40 |
    sed "s|$work/||; s/^/    > /" >&2 || true
  grep -h -v '^\[' "$work/$1/logs/$1"/attempt_*/*/stderr.log 2>/dev/null | head -n 10 |
    sed 's/^/    ! /' >&2 || true
}

# expect_rc <name> <code>
expect_rc() {
  if [[ $rc -ne $2 ]]; then
    local why=$rc
    [[ $rc -ne 124 ]] || why="124 (timed out after $RUN_LIMIT s)"
    note_fail "$1: dtrun exit code: expected $2, got $why"
    show "$1"
    return 1
  fi
}

# expect_clean <name> <attempt> <ranks...>: each rank's stdout.log exists and has no FAIL line.
expect_clean() {
  local name=$1 a=$2 r log ok=0
  shift 2
  for r in "$@"; do
    log=$(logdir "$name" "$a")/$r/stdout.log
    if [[ ! -f $log ]]; then
      note_fail "$name: expected $log, missing"
      ok=1
    elif grep -q '^FAIL' "$log"; then
      note_fail "$name attempt $a rank $r: $(grep -c '^FAIL' "$log") FAIL lines, first: $(grep -m1 '^FAIL' "$log")"
      ok=1
    fi
  done
  return $ok
}

# expect_line <name> <attempt> <rank> <fixed text>: a line of that rank's stdout starts with it.
expect_line() {
  local log
  log=$(logdir "$1" "$2")/$3/stdout.log
  grep -qF -- "$4" "$log" 2>/dev/null ||
    { note_fail "$1 attempt $2 rank $3: expected a line '$4' in stdout.log, not found"; return 1; }
}

skips() { cat "$(logdir "$1")"/*/stdout.log 2>/dev/null | grep -c '^SKIP' || true; }
passes() { cat "$(logdir "$1")"/*/stdout.log 2>/dev/null | grep -c '^PASS' || true; }
ranks() { seq 0 $(($1 - 1)); }
# ranks_of <n>: sets the array rank_list to 0 .. n-1.
rank_list=()
ranks_of() { mapfile -t rank_list < <(ranks "$1"); }

# ---------------------------------------------------------------------------------------------
# early-exit: rank 2 of 3 exits 3 (or is SIGKILLed in the middle of an all_reduce); ranks 0 and 1
# ignore dtrun's SIGTERM long enough (--shutdown_timeout) to report their error; dtrun's exit
# code is the dying rank's (3, or 128 + 9). The tcp backend runs over each transport: shared
# memory (the default: one host), sockets only (DTRUN_TRANSPORT=tcp), and mixed (DTRUN_HOST_ID:
# rank 0 on "host" a, ranks 1 and 2 on b share memory, sockets between the hosts). "direct"
# forces the one-host group-wide segment all_reduce (auto picks it there for 16 MiB too).
for spec in "tcp collective shm" "tcp kill shm" "tcp collective tcp" "tcp kill tcp" \
  "tcp kill mixed" "tcp kill direct" "gloo collective -" "tcp create shm" "gloo create -"; do
  read -r backend phase transport <<<"$spec"
  name=early_${backend}_${phase}_${transport/-/default}
  want_rc=3
  [[ $phase != kill ]] || want_rc=137
  transport_env=()
  case $transport in
    tcp) transport_env=(DTRUN_TRANSPORT=tcp) ;;
    mixed) transport_env=(DTRUN_HOST_ID=a,b,b) ;;
    direct) transport_env=(DTRUN_ALLREDUCE_ALGO=direct) ;;
  esac
  if ((${#transport_env[@]})); then export "${transport_env[@]}"; fi
  run "$name" 3 --shutdown_timeout=30 -- early-exit "$backend" "$phase"
  unset DTRUN_TRANSPORT DTRUN_HOST_ID DTRUN_ALLREDUCE_ALGO
  if expect_rc "$name" "$want_rc"; then
    ok=0
    expect_clean "$name" 0 0 1 || ok=1
    for r in 0 1; do
      for line in "error type" "error names rank 2" "error within DTRUN_TIMEOUT + 5 s"; do
        expect_line "$name" 0 "$r" "PASS early-exit $backend $phase $line" || ok=1
      done
    done
    if [[ $phase == kill ]]; then
      expect_line "$name" 0 2 "INFO rank 2 kills itself during all_reduce" || ok=1
    else
      expect_line "$name" 0 2 "INFO rank 2 exits 3" || ok=1
    fi
    if [[ $ok -eq 0 ]]; then
      echo "runtime_test: $name ok ($elapsed s): rank 0 $(grep -m1 '^INFO rank 0 caught' "$(logdir "$name")/0/stdout.log" | cut -c1-160)"
    else
      show "$name"
    fi
  fi
done

# ---------------------------------------------------------------------------------------------
# ops over real processes: every operation of the tcp backend between processes over shared
# memory (3 ranks, one host) and mixed (4 ranks as two "hosts": rings inside, sockets across,
# hierarchical all_reduce), the transports tests/runtime checks with ranks as threads.
ops_specs=("shm 3" "mixed 4")
[[ $LONG == 1 ]] || ops_specs=("mixed 4")
for spec in "${ops_specs[@]}"; do
  read -r transport n <<<"$spec"
  name=ops_tcp_$transport
  if [[ $transport == mixed ]]; then export DTRUN_HOST_ID=a,a,b,b; fi
  run "$name" "$n" -- ops tcp
  unset DTRUN_HOST_ID
  ranks_of "$n"
  if expect_rc "$name" 0 && expect_clean "$name" 0 "${rank_list[@]}" &&
    expect_line "$name" 0 0 "PASS tcp n=$n all checks ran"; then
    echo "runtime_test: $name ok ($(passes "$name") PASS, $elapsed s)"
  fi
done

# ---------------------------------------------------------------------------------------------
# attempt: a restart forms a new group under attempt_1's store prefix.
for backend in tcp gloo; do
  name=attempt_$backend
  run "$name" 3 --max_restarts=1 -- attempt "$backend"
  if expect_rc "$name" 0; then
    ok=0
    expect_clean "$name" 0 0 1 2 || ok=1
    expect_clean "$name" 1 0 1 2 || ok=1
    expect_line "$name" 0 0 "PASS attempt 0 $backend all_reduce" || ok=1
    expect_line "$name" 0 0 "INFO rank 0 exits 1" || ok=1
    for r in 0 1 2; do
      expect_line "$name" 1 "$r" "PASS attempt 1 $backend Context.storePrefix" || ok=1
      expect_line "$name" 1 "$r" "PASS attempt 1 $backend all checks ran" || ok=1
    done
    [[ ! -e $(logdir "$name" 2) ]] || { note_fail "$name: expected no attempt_2"; ok=1; }
    [[ $ok -ne 0 ]] || echo "runtime_test: $name ok ($elapsed s)"
  fi
done

# ---------------------------------------------------------------------------------------------
# errors: under dtrun (2 ranks), and init() with no dtrun environment at all.
for backend in tcp gloo; do
  name=errors_$backend
  run "$name" 2 -- errors "$backend"
  if expect_rc "$name" 0 && expect_clean "$name" 0 0 1 &&
    expect_line "$name" 0 0 "PASS errors all checks ran" &&
    expect_line "$name" 0 1 "PASS errors all checks ran"; then
    echo "runtime_test: $name ok ($(passes "$name") PASS, $elapsed s)"
  fi
done
rc=0
env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT \
  timeout -k 5 20 "$WORKER" noenv >"$work/noenv.out" 2>"$work/noenv.err" || rc=$?
if [[ $rc -ne 0 ]] || ! grep -qF "PASS noenv init() outside dtrun" "$work/noenv.out"; then
  note_fail "noenv: expected exit 0 and 'PASS noenv init() outside dtrun', got exit $rc: $(cat "$work/noenv.out" "$work/noenv.err" | head -n 5)"
else
  echo "runtime_test: noenv ok"
fi

# ---------------------------------------------------------------------------------------------
# die: an uncaught exception / SIGSEGV in rank 1 writes TORCHELASTIC_ERROR_FILE, which dtrun's
# failure report quotes; rank 0's log lines carry its rank, at DTRT_LOG_LEVEL=info.
for how in throw segv; do
  name=die_$how
  want_rc=134 want_text="std::runtime_error: boom from rank 1"
  if [[ $how == segv ]]; then want_rc=139 want_text="Signal 11 (SIGSEGV) received by rank 1"; fi
  DTRT_LOG_LEVEL=info run "$name" 2 --shutdown_timeout=5 -- die "$how"
  ok=0
  expect_rc "$name" "$want_rc" || ok=1
  if ! grep -qF "$want_text" "$work/$name.err"; then
    note_fail "$name: expected dtrun's report to quote '$want_text'"; show "$name"; ok=1
  fi
  if ! grep -qE "error_file: .*/attempt_0/1/error.json" "$work/$name.err"; then
    note_fail "$name: expected the report to name rank 1's error.json"; ok=1
  fi
  log0=$(logdir "$name")/0/stderr.log
  if ! grep -qF "[rank 0] [info] info line from the worker" "$log0" ||
    ! grep -qF "[rank 0] [warn] warn line from the worker" "$log0" ||
    grep -qF "debug line from the worker" "$log0"; then
    note_fail "$name: expected rank 0's stderr.log to hold its info and warn lines (not debug), got: $(head -c 300 "$log0")"
    ok=1
  fi
  ((ok)) || echo "runtime_test: $name ok ($elapsed s)"
done

# ---------------------------------------------------------------------------------------------
# nccl: only where a GPU is present (one rank per GPU, at most 4).
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
elif [[ -e /dev/nvidia0 ]]; then
  gpus=1
fi
if [[ $gpus -eq 0 ]]; then
  echo "runtime_test: SKIP nccl: no GPU (nvidia-smi -L lists none, no /dev/nvidia0)"
else
  n=$((gpus < 4 ? gpus : 4))
  name=ops_nccl_$n
  run "$name" "$n" -- ops nccl
  ranks_of "$n"
  if expect_rc "$name" 0 && expect_clean "$name" 0 "${rank_list[@]}"; then
    if grep -q '^SKIP nccl' "$(logdir "$name")/0/stdout.log"; then
      echo "runtime_test: SKIP nccl: $(grep -m1 '^SKIP nccl' "$(logdir "$name")/0/stdout.log")"
    elif expect_line "$name" 0 0 "PASS nccl n=$n all checks ran"; then
      echo "runtime_test: $name ok ($(passes "$name") PASS, $(skips "$name") SKIP, $elapsed s)"
    fi
  fi
fi

if [[ $fail_count -ne 0 ]]; then
  echo "runtime_test: FAIL ($fail_count failures, ${SECONDS} s)" >&2
  exit 1
fi
echo "runtime_test: PASS (all scenarios, ${SECONDS} s)"
