#!/usr/bin/env bash
# dtrun --dry-run, run for real: the resolved plan, the rank table and each worker's environment
# on stdout, exit 0, and nothing started (no log directory, no store, no worker). A static
# two-node job seen from node 1, an elastic c10d job, node 2 of a SLURM-shaped 3-node step
# (the scheduler's detection fills what the flags leave out); then the bad values of the new
# options.
#   bash tests/integration/dry_run_test.sh /abs/path/to/dtrun
# Nothing here opens a socket.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" dry_run_test "$@"
clear_scheduler_env

# expect_line <file> <fixed text>: the file has a line containing it.
expect_line() { grep -qF -- "$2" "$1" || { sed 's/^/    /' "$1" >&2; die "no line with '$2' in $1"; }; }

# The program exists (a dry run refuses one that cannot run, as a launch does) and leaves a mark
# if anything runs it.
printf '#!/bin/sh\ntouch "%s/ran"\n' "$work" >"$work/never-run"
chmod +x "$work/never-run"

# Node 1 of a static two-node job, two workers per node: ranks 2 and 3 of 4.
rc=0
timeout 20 "$DTRUN" --dry-run --nnodes=2 --node_rank=1 --master_addr=h0.example --master_port=29512 \
  --nproc_per_node=2 --log_dir="$work/logs" --rdzv_id=job7 --hang_timeout=45 \
  --report="$work/report.json" --no_python "$work/never-run" --epochs 3 \
  >"$work/out" 2>"$work/err" </dev/null || rc=$?
[[ $rc -eq 0 ]] || { cat "$work/err" >&2; die "static dry run exited $rc"; }
expect_line "$work/out" "dtrun --dry-run: nothing is started."
expect_line "$work/out" "min_nodes           : 2"
expect_line "$work/out" "rdzv_endpoint       : h0.example:29512"
expect_line "$work/out" "hang_timeout        : 45 s"
expect_line "$work/out" "report              : $work/report.json"
expect_line "$work/out" "Rank table (node 1 of 2, world size 4):"
grep -qE "^  2 +0 +1 +$work/logs/job7/attempt_0/0$" "$work/out" || die "no rank table row for rank 2"
grep -qE "^  3 +1 +1 +$work/logs/job7/attempt_0/1$" "$work/out" || die "no rank table row for rank 3"
expect_line "$work/out" "Worker 3 (local rank 1): $work/never-run --epochs 3"
for entry in RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 GROUP_RANK=1 GROUP_WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 \
  MASTER_ADDR=h0.example MASTER_PORT=29512 TORCHELASTIC_RUN_ID=job7 DTRUN_STORE_ADDR=h0.example:29512 \
  "DTRUN_LOG_DIR=$work/logs/job7/attempt_0/1" "DTRUN_PROGRESS_FILE=$work/logs/job7/attempt_0/progress" DTRUN_PROGRESS_SLOT=1; do
  expect_line "$work/out" "    $entry"
done
[[ ! -e $work/logs ]] || die "a dry run created the log directory $work/logs"
[[ ! -e $work/report.json ]] || die "a dry run wrote the report"

# An elastic c10d job: the node rank comes from the rendezvous; a free-port store says so.
rc=0
timeout 20 "$DTRUN" --dry-run --nnodes=1:3 --rdzv_backend=c10d --rdzv_endpoint=h9.example:29400 \
  --nproc_per_node=3 --no_python "$work/never-run" >"$work/out" 2>"$work/err" </dev/null || rc=$?
[[ $rc -eq 0 ]] || { cat "$work/err" >&2; die "c10d dry run exited $rc"; }
expect_line "$work/out" "(assigned at rendezvous; shown as if this node got it)"
expect_line "$work/out" "Rank table (node 0 of 3, world size 9):"
expect_line "$work/out" "    RANK=2"
expect_line "$work/out" "    MASTER_ADDR=h9.example"

# Node 2 of a 3-node SLURM step: nodes, node rank, master and run id come from SLURM_*.
rc=0
env SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_STEP_NODELIST='node[1-3]' SLURM_STEP_NUM_NODES=3 \
  SLURM_NODEID=2 SLURM_STEP_TASKS_PER_NODE='1(x3)' timeout 20 "$DTRUN" --dry-run \
  --nproc_per_node=2 --log_dir="$work/logs" --no_python "$work/never-run" >"$work/out" 2>"$work/err" \
  </dev/null || rc=$?
[[ $rc -eq 0 ]] || { cat "$work/err" >&2; die "SLURM dry run exited $rc"; }
expect_line "$work/out" "scheduler           : slurm job 4242.0: 3 nodes from SLURM_STEP_NODELIST=node[1-3], this is node 2 (SLURM_NODEID=2)"
expect_line "$work/out" "Rank table (node 2 of 3, world size 6):"
grep -qE "^  5 +1 +2 +$work/logs/4242.0/attempt_0/1$" "$work/out" || die "SLURM: no rank table row for rank 5"
port=$(sed -nE 's/^  rdzv_endpoint +: node1:([0-9]+)$/\1/p' "$work/out")
[[ -n $port ]] || die "SLURM: the store is not on the step's first host node1"
for entry in RANK=5 WORLD_SIZE=6 GROUP_RANK=2 GROUP_WORLD_SIZE=3 MASTER_ADDR=node1 "MASTER_PORT=$port" \
  TORCHELASTIC_RUN_ID=4242.0; do
  expect_line "$work/out" "    $entry"
done
[[ ! -e $work/logs ]] || die "the SLURM dry run created the log directory"

# One node with a free port.
rc=0
timeout 20 "$DTRUN" --dry-run --nproc_per_node=1 --no_python "$work/never-run" >"$work/out" \
  2>"$work/err" </dev/null || rc=$?
[[ $rc -eq 0 ]] || die "single-node dry run exited $rc"
expect_line "$work/out" "    MASTER_PORT=<free port>"

# Bad values of the new options: one line naming the flag, exit 2.
for args in "--hang_timeout=abc" "--hang_timeout=-1" "--report="; do
  rc=0
  timeout 10 "$DTRUN" $args --no_python /bin/true >"$work/out" 2>"$work/err" </dev/null || rc=$?
  [[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 ]] || die "dtrun $args: exit $rc, $(wc -l <"$work/err") lines"
  grep -qF -- "${args%%=*}" "$work/err" || die "dtrun $args: the error does not name ${args%%=*}"
done
[[ ! -e $work/ran ]] || die "a dry run ran the program"
echo "dry_run_test: passed"
