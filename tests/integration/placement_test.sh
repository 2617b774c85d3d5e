#!/usr/bin/env bash
# Placement with real workers: each worker reports, from inside, the CPUs it may run on
# (sched_getaffinity), CUDA_VISIBLE_DEVICES, LOCAL_RANK, OMP_NUM_THREADS and DTRUN_CPUS, and the
# test checks them against the plan. Cases:
#   split      --cpu_binding=split on this machine: the allowed CPUs divided among 2 ranks
#   numa       --numa-binding=node on the recorded pair-2n2g machine (CPU 0 and 1 on NUMA nodes 0
#              and 1, a GPU on each) with --virtual-local-rank: CPU and GPU per rank, LOCAL_RANK=0
#   gpus       --gpus=1, --gpus_per_worker=2 and a user's OMP_NUM_THREADS
#   report     the run report's placement of each rank
#   refused    more ranks than GPUs with exclusive binding, a GPU that does not exist, a binding
#              without NUMA information, a bad mode: one line each, exit 2
#   far        a recorded machine whose CPUs this one lacks: the start fails naming the CPUs
set -uo pipefail
source "$(dirname "$0")/lib/preamble.sh" placement_test "$@"
TOPOLOGIES=$ROOT/tests/placement/topologies

cat >"$work/w.py" <<'PY'
import os
cpus = sorted(os.sched_getaffinity(0))
print("rank=%s local=%s cpus=%s cvd=%s omp=%s dtrun_cpus=%s numa=%s gpus=%s" % (
    os.environ["RANK"], os.environ["LOCAL_RANK"], ",".join(map(str, cpus)),
    os.environ.get("CUDA_VISIBLE_DEVICES", "-"), os.environ.get("OMP_NUM_THREADS", "-"),
    os.environ.get("DTRUN_CPUS", "-"), os.environ.get("DTRUN_NUMA_NODES", "-"),
    os.environ.get("DTRUN_GPUS", "-")), flush=True)
PY

# run <name> [VAR=value...] -- <dtrun args>: output in $work/<name>.{out,err}, exit code in rc.
run() {
  local name=$1
  shift
  local -a vars=()
  while [[ $1 != -- ]]; do
    vars+=("$1")
    shift
  done
  shift
  rc=0
  env "${vars[@]}" PYTHON_EXEC="$PYTHON" timeout "$LIMIT" "$DTRUN" --log_dir="$work/logs" \
    --rdzv_id="$name" --tee=1 "$@" "$work/w.py" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
}
line_of() { grep -o "rank=$2 .*" "$work/$1.out" | head -n 1; }
expect_line() {  # <case> <rank> <expected fields...>
  local name=$1 rank=$2 got field
  shift 2
  got=$(line_of "$name" "$rank")
  for field in "$@"; do
    [[ " $got " == *" $field "* ]] || note_fail "$name: rank $rank: want $field in '$got'"
  done
}

# ---- split: this machine's own CPUs, halved ----
mapfile -t allowed < <("$PYTHON" -c 'import os; print("\n".join(map(str, sorted(os.sched_getaffinity(0)))))')
if [[ ${#allowed[@]} -ge 2 ]]; then
  run split -- --nproc_per_node=2 --cpu_binding=split
  [[ $rc -eq 0 ]] || note_fail "split: dtrun exited $rc: $(tail -n 3 "$work/split.err")"
  for r in 0 1; do
    got=$(line_of split "$r" | sed -E 's/.* cpus=([^ ]*) .* omp=([^ ]*) dtrun_cpus=([^ ]*) .*/\1 \2 \3/')
    read -r cpus omp listed <<<"$got"
    count=$(tr ',' '\n' <<<"$cpus" | grep -c .)
    [[ -n $cpus && $omp == "$count" ]] || note_fail "split: rank $r runs on '$cpus' with OMP_NUM_THREADS=$omp"
    [[ $listed != - ]] || note_fail "split: rank $r has no DTRUN_CPUS"
  done
  c0=$(line_of split 0 | sed -E 's/.* cpus=([^ ]*) .*/\1/')
  c1=$(line_of split 1 | sed -E 's/.* cpus=([^ ]*) .*/\1/')
  common=$(comm -12 <(tr ',' '\n' <<<"$c0" | sort) <(tr ',' '\n' <<<"$c1" | sort))
  [[ -z $common ]] || note_fail "split: ranks 0 and 1 share CPUs $common"
  [[ $fail_count -ne 0 ]] || pass "split: 2 ranks on disjoint CPUs ($c0 | $c1), OMP_NUM_THREADS follows"
else
  echo "placement_test: split: SKIP (this process may use ${#allowed[@]} CPU)"
fi

# ---- numa: the recorded pair-2n2g machine, bound next to each rank's GPU ----
before=$fail_count
if [[ " ${allowed[*]} " == *" 0 "* && " ${allowed[*]} " == *" 1 "* ]]; then
  run numa DTRUN_SYSFS_ROOT="$TOPOLOGIES/pair-2n2g" -- --nproc_per_node=gpu --numa-binding=node \
    --virtual-local-rank --verbose --report="$work/numa.json"
  [[ $rc -eq 0 ]] || note_fail "numa: dtrun exited $rc: $(tail -n 3 "$work/numa.err")"
  expect_line numa 0 local=0 cpus=0 cvd=0 omp=1 dtrun_cpus=0 numa=0 gpus=0
  expect_line numa 1 local=0 cpus=1 cvd=1 omp=1 dtrun_cpus=1 numa=1 gpus=1
  grep -q "local rank 1      : GPU 1, CPUs 1 (1), NUMA node 1, CUDA_VISIBLE_DEVICES=1, LOCAL_RANK=0" \
    "$work/numa.err" || note_fail "numa: the banner does not show local rank 1's placement"
  # ---- report ----
  got=$("$PYTHON" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join("%(cpus)s/%(numa_nodes)s/%(gpus)s/%(cuda_visible_devices)s" % k["placement"]
               for k in r["attempts"][0]["ranks"]))' "$work/numa.json" 2>&1)
  [[ $got == "0/0/0/0 1/1/1/1" ]] || note_fail "report: placements '$got'"
  "$PYTHON" "$HERE/validate_report.py" "$ROOT/docs/report.schema.json" "$work/numa.json" >/dev/null 2>&1 ||
    note_fail "report: $work/numa.json does not follow docs/report.schema.json"
  [[ $fail_count -ne $before ]] || pass "numa: node binding with --virtual-local-rank, as planned, in the report"
else
  echo "placement_test: numa: SKIP (this process may not use CPUs 0 and 1)"
fi

# ---- gpus ----
before=$fail_count
run gpus1 DTRUN_SYSFS_ROOT="$TOPOLOGIES/pair-2n2g" -- --nproc_per_node=gpu --gpus=1
[[ $rc -eq 0 ]] || note_fail "gpus1: dtrun exited $rc"
expect_line gpus1 0 local=0 cvd=1 gpus=1
[[ -z $(line_of gpus1 1) ]] || note_fail "gpus1: --gpus=1 with nproc gpu started a second rank"
run pair DTRUN_SYSFS_ROOT="$TOPOLOGIES/pair-2n2g" OMP_NUM_THREADS=3 -- --nproc_per_node=1 \
  --gpus_per_worker=2 --cpu_binding=split
[[ $rc -eq 0 ]] || note_fail "pair: dtrun exited $rc"
expect_line pair 0 local=0 cvd=0,1 omp=3 gpus=0,1
# --nproc_per_node=gpu counts what the workers may use: SLURM's step GPUs when
# CUDA_VISIBLE_DEVICES is unset, CUDA_VISIBLE_DEVICES when set.
for spec in "SLURM_STEP_GPUS=1,3,5 3" "SLURM_JOB_GPUS=6 1" "CUDA_VISIBLE_DEVICES=0,7 2"; do
  read -r setting want <<<"$spec"
  got=$(env "$setting" DTRUN_SYSFS_ROOT="$TOPOLOGIES/amd-2s8g" "$DTRUN" --dry-run \
    --nproc_per_node=gpu "$work/w.py" 2>/dev/null | sed -nE 's/^  nproc_per_node +: ([0-9]+)$/\1/p')
  [[ $got == "$want" ]] || note_fail "gpu count with $setting: nproc_per_node $got, want $want"
done
[[ $fail_count -ne $before ]] || pass "gpus: a chosen GPU, two GPUs for one worker, the user's OMP_NUM_THREADS kept, SLURM's GPUs counted"

# ---- refused ----
before=$fail_count
refused() {  # <case> <expected message start> [VAR=value...] -- <dtrun args>
  local name=$1 want=$2
  shift 2
  run "$name" "$@"
  [[ $rc -eq 2 ]] || note_fail "$name: exit $rc, want 2"
  [[ $(wc -l <"$work/$name.err") -eq 1 ]] || note_fail "$name: want one line, got: $(cat "$work/$name.err")"
  grep -qF -- "$want" "$work/$name.err" || note_fail "$name: want '$want', got: $(cat "$work/$name.err")"
  [[ ! -e $work/logs/$name ]] || note_fail "$name: a refused launch made $work/logs/$name"
}
refused exclusive "dtrun: --numa_binding=exclusive binds each rank next to its GPU, but local rank 2 has none" \
  DTRUN_SYSFS_ROOT="$TOPOLOGIES/pair-2n2g" -- --nproc_per_node=3 --numa-binding=exclusive
refused nogpu "dtrun: --gpus: GPU 7 is not on this machine (2 GPUs: 0,1); name GPUs that exist" \
  DTRUN_SYSFS_ROOT="$TOPOLOGIES/pair-2n2g" -- --gpus=7
refused nonuma "dtrun: --numa_binding=node: this machine reports no NUMA node" \
  DTRUN_SYSFS_ROOT="$TOPOLOGIES/no-numa" -- --numa-binding=node
refused badmode "dtrun: --numa_binding: expected node, socket, exclusive or core-complex, got 'nodes'" \
  -- --numa-binding=nodes
[[ $fail_count -ne $before ]] || pass "refused: one line and exit 2 each, nothing made"

# ---- far: CPUs this machine does not have ----
before=$fail_count
run far DTRUN_SYSFS_ROOT="$TOPOLOGIES/far-1n1g" -- --numa-binding=node
[[ $rc -ne 0 ]] || note_fail "far: binding to CPUs 200-203 succeeded"
grep -q "cannot bind $PYTHON to CPUs 200-203: Invalid argument" "$work/far.err" ||
  note_fail "far: no error naming the CPUs: $(tail -n 3 "$work/far.err")"
[[ $fail_count -ne $before ]] || pass "far: a binding the kernel refuses fails the start and names the CPUs (exit $rc)"
end_test
