#!/usr/bin/env bash
# Signals to a running `dtrun --nproc_per_node=N`, through the real binary:
#   bash tests/integration/launch_signals_test.sh /abs/path/to/dtrun
# Scenarios (worker: tests/integration/workers/signal_worker.sh, which records its pid):
#   term       SIGTERM to dtrun reaches every worker (they trap it and record it); dtrun exits 143
#   int        the same with SIGINT -> 130
#   hup        the same with SIGHUP -> 129
#   quit       the same with SIGQUIT -> 131 (torchrun's default --signals_to_handle has all four)
#   ignore     workers ignoring SIGTERM are SIGKILLed after --shutdown_timeout=1; dtrun exits 143
#              after the grace, not before, and within a few seconds
#   kill9      `kill -9` of dtrun leaves no worker alive within 1 s (PR_SET_PDEATHSIG)
#   int2       workers that survive SIGINT: dtrun waits for the grace (30 s) until a second
#              SIGINT, which kills them at once; dtrun exits 130
# dtrun runs in the background under timeout(1); every process this script started is stopped by
# its PID on exit. Loopback only; one mktemp directory, removed on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" launch_signals_test "$@"
RUN_LIMIT=60  # seconds: timeout(1)'s hard bound on one dtrun run

W=$work/workers
tpid=""  # the subshell running timeout(1), which runs dtrun
dpid=""  # dtrun itself
worker_pids=()

# The PIDs of $1's children (on one line).
children() { tr -s ' ' <"/proc/$1/task/$1/children" 2>/dev/null | sed 's/ $//' || true; }
# True if $1 runs the program whose path starts with $2 (guards against a reused PID).
runs_program() { running "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"; }

stop_ours() {  # dtrun, its timeout(1) and any worker left, each by its PID
  local p
  if [[ -n $dpid ]] && runs_program "$dpid" "$DTRUN"; then kill -KILL "$dpid" 2>/dev/null || true; fi
  if [[ -n $tpid ]]; then
    kill -KILL "$tpid" 2>/dev/null || true
    wait "$tpid" 2>/dev/null || true
  fi
  for p in "${worker_pids[@]}"; do
    if runs_program "$p" "$W/signal_worker.sh"; then kill -KILL "$p" 2>/dev/null || true; fi
  done
}
at_exit stop_ours

expect_eq() { [[ $2 == "$3" ]] || die "$1: expected '$(oneline "$2")', got '$(oneline "$3")'"; }
oneline() { printf '%s' "$1" | sed ':a;N;$!ba;s/\n/\\n/g'; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

mkdir -p "$W"
cp "$HERE/workers/signal_worker.sh" "$W/"
chmod +x "$W/signal_worker.sh"
unset TORCH_ELASTIC_SHUTDOWN_TIMEOUT PET_SHUTDOWN_TIMEOUT PET_SIGNALS_TO_HANDLE PET_NPROC_PER_NODE

# start <name> <nproc> <mode> [dtrun options...]: dtrun in the background; waits until every
# worker recorded its pid. Sets tpid, dpid, worker_pids, logs (the run's attempt_0 directory).
logs=""
start() {
  local name=$1 n=$2 mode=$3 r i
  shift 3
  mkdir -p "$work/$name"
  : >"$work/$name.marks"
  # The subshell exits with timeout's status instead of dying by dtrun's signal, and its stderr
  # (dtrun's is a file) only ever carries bash's "Killed" notice of the kill9 scenario.
  (
    OMP_NUM_THREADS=1 timeout -s KILL "$RUN_LIMIT" "$DTRUN" --nproc_per_node="$n" --rdzv_id=sig \
      --log_dir="$work/$name/logs" "$@" --no_python "$W/signal_worker.sh" "$mode" "$work/$name.marks" \
      >"$work/$name.out" 2>"$work/$name.err"
    exit $?
  ) 2>/dev/null &
  tpid=$!
  dpid=""
  local timeout_pid=""
  for ((i = 0; i < 100; i++)); do  # subshell -> timeout(1) -> dtrun
    [[ -n $timeout_pid ]] || timeout_pid=$(children "$tpid")
    [[ -n $timeout_pid ]] && dpid=$(children "$timeout_pid")
    [[ -n $dpid ]] && break
    sleep 0.05
  done
  [[ -n $dpid ]] || die "$name: expected dtrun to start under timeout(1), no process after 5 s"
  runs_program "$dpid" "$DTRUN" || die "$name: expected pid $dpid to be dtrun, it is not"
  logs=$work/$name/logs/sig/attempt_0
  worker_pids=()
  for ((r = 0; r < n; r++)); do
    for ((i = 0; i < 200; i++)); do  # 10 s
      [[ -s $logs/$r/pid ]] && break
      running "$tpid" || { cat "$work/$name.err" >&2; die "$name: dtrun exited before rank $r started"; }
      sleep 0.05
    done
    [[ -s $logs/$r/pid ]] || die "$name: expected rank $r to record its pid within 10 s, it did not"
    worker_pids+=("$(<"$logs/$r/pid")")
  done
  for r in "${!worker_pids[@]}"; do
    running "${worker_pids[r]}" || die "$name: expected rank $r (pid ${worker_pids[r]}) running before the signal, it is not"
  done
}

# finish <name> <limit ms>: waits for dtrun to exit; sets rc and took_ms (since the call).
rc=0
took_ms=0
finish() {
  local name=$1 limit=$2 start
  start=$(now_ms)
  while running "$tpid"; do
    if (($(now_ms) - start > limit)); then
      tail -n 20 "$work/$name.err" >&2
      die "$name: expected dtrun to exit within $limit ms, still running"
    fi
    sleep 0.02
  done
  took_ms=$(($(now_ms) - start))
  rc=0
  wait "$tpid" || rc=$?
  tpid="" dpid=""
}

# expect_workers_gone <name>: every recorded worker pid has exited.
expect_workers_gone() {
  local r alive=""
  for r in "${!worker_pids[@]}"; do
    running "${worker_pids[r]}" && alive+=" rank $r (pid ${worker_pids[r]})"
  done
  [[ -z $alive ]] || die "$1: expected no worker alive, still running:$alive"
}

marks() { LC_ALL=C sort "$work/$1.marks"; }

section() { echo "launch_signals_test: $1 ok (${2} ms)"; }

# ---------------------------------------------------------------------------------------------
# Cooperative workers: the signal is forwarded to each, each records it and exits 0.
for spec in term:TERM:143 int:INT:130 hup:HUP:129 quit:QUIT:131; do
  IFS=: read -r mode sig code <<<"$spec"
  start "$mode" 3 "$mode" --shutdown_timeout=20
  kill -s "$sig" "$dpid"
  finish "$mode" 5000
  expect_eq "$mode: dtrun's exit code after SIG$sig" "$code" "$rc"
  got=$(marks "$mode")
  expected=$(printf '%s 0\n%s 1\n%s 2' "$sig" "$sig" "$sig")
  [[ $got == "$expected" ]] ||
    die "$mode: expected every worker to record SIG$sig, got '$(oneline "$got")'"
  expect_workers_gone "$mode"
  ! grep -q "FAILED" "$work/$mode.err" || die "$mode: expected no failure report after SIG$sig, got one"
  section "$mode" "$took_ms"
done

# ---------------------------------------------------------------------------------------------
# Workers ignoring SIGTERM: SIGKILL after the 1 s grace, not before.
start ignore 2 ignore-term --shutdown_timeout=1
kill -TERM "$dpid"
finish ignore 5000
expect_eq "ignore: dtrun's exit code after SIGTERM" 143 "$rc"
[[ $took_ms -ge 900 ]] || die "ignore: expected dtrun to wait the 1 s grace before SIGKILL, it exited after $took_ms ms"
[[ $took_ms -le 4000 ]] || die "ignore: expected dtrun to exit within 4 s, took $took_ms ms"
expect_workers_gone ignore
section ignore "$took_ms"

# ---------------------------------------------------------------------------------------------
# kill -9 of dtrun: PR_SET_PDEATHSIG stops every worker within 1 s.
start kill9 3 plain --shutdown_timeout=20
kill -KILL "$dpid"
t0=$(now_ms)
while true; do
  alive=""
  for r in "${!worker_pids[@]}"; do running "${worker_pids[r]}" && alive+=" rank $r (pid ${worker_pids[r]})"; done
  [[ -z $alive ]] && break
  (($(now_ms) - t0 <= 1000)) || die "kill9: expected no worker alive 1 s after kill -9 of dtrun, still running:$alive"
  sleep 0.02
done
gone_ms=$(($(now_ms) - t0))
finish kill9 5000
section kill9 "$gone_ms"

# ---------------------------------------------------------------------------------------------
# Workers that survive SIGINT: dtrun keeps waiting (30 s grace) until a second SIGINT kills them.
start int2 2 int-stay --shutdown_timeout=30
kill -INT "$dpid"
for ((i = 0; i < 100; i++)); do  # 5 s for both to record the first SIGINT
  [[ $(grep -c . "$work/int2.marks" || true) -ge 2 ]] && break
  sleep 0.05
done
expect_eq "int2: workers that recorded the first SIGINT" "$(printf 'INT 0\nINT 1')" "$(marks int2)"
sleep 0.5
running "$tpid" || die "int2: expected dtrun to wait for the workers after one SIGINT (30 s grace), it exited"
for r in 0 1; do
  running "${worker_pids[r]}" || die "int2: expected rank $r to survive the first SIGINT, it exited"
done
kill -INT "$dpid"
finish int2 2000
expect_eq "int2: dtrun's exit code after the second SIGINT" 130 "$rc"
expect_workers_gone int2
section int2 "$took_ms"

echo "launch_signals_test: PASS (all scenarios, ${SECONDS} s)"
