#!/usr/bin/env bash
# Preemption inside a SLURM-shaped job, through the real binary:
#   bash tests/integration/preemption_signals_test.sh /abs/path/to/dtrun
# Two dtrun agents on loopback get srun's environment for a 2-node step (SLURM_STEP_NODELIST=
# localhost,localhost, SLURM_NODEID 0 and 1) and no flag beyond --nproc_per_node (plus the log
# directory and --no_python): detection alone makes the static launch (master localhost, the
# job's port, ranks 0..3). Worker: tests/integration/workers/preempt_worker.sh.
#   usr    SIGUSR1 then SIGUSR2 to both agents (sbatch --signal=USR1@120 signals every task): every
#          worker records each, keeps running, no restart; then the job finishes and both exit 0
#   term   SIGTERM to both agents (scancel): every worker records it; node 0's exit at once, so the
#          store host's dtrun exits 143 (128 + SIGTERM) early; node 1's keep running (a long
#          checkpoint) until dtrun SIGKILLs them when --shutdown_timeout=3 has passed, and it exits
#          143 too, not 1 for the store that went away meanwhile (heartbeats every 0.5 s notice
#          that within the grace)
# Every process this script started is stopped by its PID on exit; one mktemp directory.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" preemption_signals_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"

agents=()
worker_pids=()
stop_ours() {  # the agents, then any worker left, each by its PID
  local p
  for p in "${agents[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${agents[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in "${worker_pids[@]}"; do
    if running "$p" && grep -qF preempt_worker "/proc/$p/cmdline" 2>/dev/null; then
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
}
at_exit stop_ours

cp "$HERE/workers/preempt_worker.sh" "$work/"
chmod +x "$work/preempt_worker.sh"
# Whatever scheduler this test itself runs under must not leak into the fake job.
clear_scheduler_env
unset TORCH_ELASTIC_SHUTDOWN_TIMEOUT

# A job id whose port (20000 + id mod 10000, step 0) nobody listens on now.
job=""
for _ in $(seq 50); do
  candidate=$((RANDOM % 9000 + 1000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$((20000 + candidate))") 2>/dev/null; then
    job=$candidate
    break
  fi
done
[[ -n $job ]] || die "no free port in 21000-29999 after 50 tries"

# start <scenario> <node 0's worker mode> <node 1's> [dtrun options...]: both agents in the
# background, then every worker's pid.
start() {
  local name=$1 node r i
  local modes=("$2" "$3")
  shift 3
  agents=()
  worker_pids=()
  : >"$work/$name.marks"
  for node in 0 1; do
    env SLURM_JOB_ID="$job" SLURM_JOBID="$job" SLURM_STEP_ID=0 SLURM_STEPID=0 \
      SLURM_JOB_NODELIST="localhost,localhost" SLURM_STEP_NODELIST="localhost,localhost" \
      SLURM_NNODES=2 SLURM_JOB_NUM_NODES=2 SLURM_STEP_NUM_NODES=2 SLURM_NODEID=$node \
      SLURM_PROCID=$node SLURM_LOCALID=0 SLURM_TASKS_PER_NODE="1(x2)" \
      SLURM_STEP_TASKS_PER_NODE="1(x2)" OMP_NUM_THREADS=1 \
      "$DTRUN" --nproc_per_node=2 --log_dir="$work/$name/n$node" "$@" \
      --no_python "$work/preempt_worker.sh" "$work/$name.marks" "$work/$name.go" \
      "${modes[node]}" >"$work/$name.$node.out" 2>&1 &
    agents+=("$!")  # env execs dtrun: this is dtrun's pid (wait_agent bounds its run)
  done
  for node in 0 1; do
    for r in 0 1; do
      local pidfile=$work/$name/n$node/$job.0/attempt_0/$r/pid
      for ((i = 0; i < 300; i++)); do  # 30 s
        [[ -s $pidfile ]] && break
        running "${agents[node]}" || { cat "$work/$name.$node.out" >&2; die "$name: node $node's dtrun exited before local rank $r started"; }
        sleep 0.1
      done
      [[ -s $pidfile ]] || { tail -n 20 "$work/$name.$node.out" >&2; die "$name: node $node local rank $r did not start within 30 s"; }
      worker_pids+=("$(<"$pidfile")")
    done
  done
}

# await_marks <scenario> <signal>: every one of the 4 workers recorded it (10 s at most).
await_marks() {
  local i got
  for ((i = 0; i < 100; i++)); do
    got=$(grep "^$2 " "$work/$1.marks" | sort | tr '\n' ' ' || true)
    [[ $got == "$2 0 $2 1 $2 2 $2 3 " ]] && return
    sleep 0.1
  done
  die "$1: expected ranks 0..3 to record SIG$2, got '$got'"
}

expect_alive() {  # <scenario> <when>
  local p
  for p in "${agents[@]}"; do running "$p" || die "$1: dtrun (pid $p) exited $2"; done
  for p in "${worker_pids[@]}"; do running "$p" || die "$1: worker pid $p exited $2"; done
}

# ---------------------------------------------------------------------------------------------
start usr slow slow
grep -q "scheduler: slurm job $job.0: 2 nodes from SLURM_STEP_NODELIST=localhost,localhost" "$work/usr.0.out" ||
  die "usr: expected the banner's scheduler row, got: $(grep scheduler "$work/usr.0.out" || true)"
grep -q "master_port=$((20000 + job)) (derived from SLURM_JOB_ID+SLURM_STEP_ID)" "$work/usr.1.out" ||
  die "usr: expected node 1 to take the job's port $((20000 + job)) from the job id"
kill -USR1 "${agents[@]}"
await_marks usr USR1
expect_alive usr "after SIGUSR1 (it must only be forwarded)"
kill -USR2 "${agents[@]}"
await_marks usr USR2
expect_alive usr "after SIGUSR2 (it must only be forwarded)"
touch "$work/usr.go"
for node in 0 1; do
  wait_agent "${agents[node]}" $((SECONDS + LIMIT))
  [[ $rc -eq 0 ]] || { tail -n 20 "$work/usr.$node.out" >&2; die "usr: node $node's dtrun exited $rc, expected 0"; }
  grep -q "received SIGUSR1: forwarding it to every worker (the job keeps running)" "$work/usr.$node.out" ||
    die "usr: node $node did not log the forwarded SIGUSR1"
done
[[ ! -e $work/usr/n0/$job.0/attempt_1 ]] || die "usr: the worker group was restarted"
echo "preemption_signals_test: usr ok (SIGUSR1 and SIGUSR2 reached ranks 0..3 on both nodes, job succeeded)"

# ---------------------------------------------------------------------------------------------
start term quick slow --shutdown_timeout=3 --rdzv_conf=keep_alive_interval=0.5
kill -TERM "${agents[@]}"
await_marks term TERM
for node in 0 1; do
  wait_agent "${agents[node]}" $((SECONDS + LIMIT))
  [[ $rc -eq 143 ]] || { tail -n 20 "$work/term.$node.out" >&2; die "term: node $node's dtrun exited $rc, expected 143"; }
  ! grep -q "lost the rendezvous store" "$work/term.$node.out" ||
    die "term: node $node reported a lost store while stopping for SIGTERM"
done
grep -q "workers still running 3000 ms after the stop signal: sending SIGKILL" "$work/term.1.out" ||
  die "term: node 1 did not wait for the grace period before SIGKILL"
for p in "${worker_pids[@]}"; do running "$p" && die "term: worker pid $p survived"; done
echo "preemption_signals_test: term ok (node 0 exited 143 at once, node 1 SIGKILLed its workers after the grace and exited 143)"
echo "preemption_signals_test: PASS"
