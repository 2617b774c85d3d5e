#!/usr/bin/env bash
# Scheduler detection through the real binary, with SLURM- and PBS-shaped environments:
#   bash tests/integration/scheduler_cli_test.sh /abs/path/to/dtrun
# Refusals exit 2 with one line on stderr naming the variable; a one-node allocation runs as a
# single-node launch under the job's id; --scheduler none ignores a broken allocation. Nothing
# here opens a port beyond loopback; one mktemp directory, removed on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" scheduler_cli_test "$@"
clear_scheduler_env

step=(SLURM_JOB_ID=55 SLURM_STEP_ID=0 SLURM_STEP_NODELIST='n[1-2]' SLURM_STEP_NUM_NODES=2
  SLURM_NODEID=1 SLURM_STEP_TASKS_PER_NODE='1(x2)')
cases=0

# refused <expected stderr substring> <env assignments...> -- <dtrun args...>
refused() {
  local want=$1 rc=0 assignments=()
  shift
  while [[ $1 != -- ]]; do assignments+=("$1"); shift; done
  shift
  env "${assignments[@]}" "$DTRUN" "$@" >"$work/out" 2>"$work/err" || rc=$?
  [[ $rc -eq 2 ]] || die "expected exit 2 for '$want', got $rc: $(cat "$work/err")"
  [[ $(grep -c . "$work/err") -eq 1 ]] || die "expected one line on stderr for '$want', got: $(cat "$work/err")"
  grep -qF -- "$want" "$work/err" || die "expected '$want' on stderr, got: $(cat "$work/err")"
  [[ ! -s $work/out ]] || die "expected nothing on stdout for '$want'"
  cases=$((cases + 1))
}

refused "dtrun: SLURM_STEP_NODELIST='n[1-2': a '[' that is never closed" \
  "${step[@]}" SLURM_STEP_NODELIST='n[1-2' -- --no_python true
refused "dtrun: SLURM_STEP_NODELIST='n[1-2],,n3': an empty entry" \
  "${step[@]}" SLURM_STEP_NODELIST='n[1-2],,n3' -- --no_python true
refused "dtrun: SLURM_NODEID='2': out of range for the 2 host(s)" \
  "${step[@]}" SLURM_NODEID=2 -- --no_python true
refused "srun started 4 dtrun processes on this node" \
  "${step[@]}" SLURM_STEP_TASKS_PER_NODE='4(x2)' -- --no_python true
refused "running in the batch script of a 2-node SLURM job" \
  SLURM_JOB_ID=55 SLURM_JOB_NODELIST='n[1-2]' SLURM_NODEID=0 -- --no_python true
refused "dtrun: PBS_NODEFILE='$work/none' cannot be read" \
  PBS_JOBID=8.srv PBS_NODEFILE="$work/none" -- --no_python true
refused "dtrun: --scheduler: expected auto, slurm, pbs, lsf, flux, mpi, kubeflow or none, got 'sge'" \
  -- --scheduler=sge --no_python true
refused "dtrun: --scheduler slurm: SLURM_JOB_ID is not set" \
  -- --scheduler slurm --no_python true

# A one-node step: a single-node launch whose logs are under the job's id.
env SLURM_JOB_ID=56 SLURM_STEP_ID=2 SLURM_STEP_NODELIST=n1 SLURM_NODEID=0 \
  SLURM_STEP_TASKS_PER_NODE=1 OMP_NUM_THREADS=1 "$DTRUN" --verbose --nproc_per_node=2 \
  --log_dir="$work/logs" --no_python true >"$work/out" 2>"$work/err" ||
  die "one-node step: dtrun exited $?: $(tail -n 5 "$work/err")"
[[ -d $work/logs/56.2/attempt_0/1 ]] || die "one-node step: expected logs under 56.2/, got $(ls "$work/logs")"
grep -q "scheduler           : slurm job 56.2: 1 node from SLURM_STEP_NODELIST=n1" "$work/err" ||
  die "one-node step: the banner lacks the scheduler row"
grep -q "rdzv_endpoint       : 127.0.0.1:0 (a free port)" "$work/err" ||
  die "one-node step: expected a single-node store on a free port"
cases=$((cases + 1))

# --scheduler none: the broken allocation is not read at all.
env "${step[@]}" SLURM_STEP_NODELIST='n[1-2' "$DTRUN" --verbose --scheduler none --log_dir="$work/logs" \
  --no_python true >"$work/out" 2>"$work/err" ||
  die "--scheduler none: dtrun exited $?: $(tail -n 5 "$work/err")"
grep -q "scheduler           : none (--scheduler none)" "$work/err" ||
  die "--scheduler none: the banner does not say so"
cases=$((cases + 1))

echo "scheduler_cli_test: all $cases cases passed"
