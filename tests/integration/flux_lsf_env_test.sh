#!/usr/bin/env bash
# Flux and LSF detection through the real binary, with the environments their documentation
# describes (flux-environment(7) for a task of `flux run -N2 --tasks-per-node=1`; LSF's job
# execution variables for a task of blaunch):
#   bash tests/integration/flux_lsf_env_test.sh /abs/path/to/dtrun
# --dry-run shows what each supplies and from where; refusals exit 2 with one line; then a real
# 2-node run of each on loopback: Flux's two tasks with --master_addr (Flux exports no host), LSF's
# two hosts as two UTS namespaces named after LSB_MCPU_HOSTS (root: unshare --uts), the first one
# "localhost" so that its name reaches the store. Every run is bounded by timeout.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" flux_lsf_env_test "$@"
clear_scheduler_env
preamble_unset_matching '^(OMPI|PMIX|PMI|FLUX|LSB|LSF)_'
export OMP_NUM_THREADS=1
cases=0

# A job number whose derived port (20000 + n mod 10000) is free on loopback now.
job_number() {
  local n port
  for _ in $(seq 50); do
    n=$((RANDOM * 32768 + RANDOM))
    port=$((20000 + n % 10000))
    if "$PYTHON" -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', $port))" 2>/dev/null; then
      echo "$n"
      return
    fi
  done
  die "no free port in 20000-29999"
}
# F58 (RFC 19): the prefix ƒ, then base58 digits, most significant first.
f58() {
  "$PYTHON" -c '
import sys
n, a, out = int(sys.argv[1]), "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", ""
while True:
    out = a[n % 58] + out
    n //= 58
    if n == 0:
        break
print("\u0192" + out)' "$1"
}

# refused <expected stderr line> <env assignments...> -- <dtrun args...>; dtrun runs under the
# command in the array `prefix` (none by default).
prefix=()
refused() {
  local want=$1 rc=0 assignments=()
  shift
  while [[ $1 != -- ]]; do assignments+=("$1"); shift; done
  shift
  env "${assignments[@]}" timeout -k 5 "$LIMIT" "${prefix[@]}" "$DTRUN" "$@" >"$work/out" \
    2>"$work/err" || rc=$?
  [[ $rc -eq 2 ]] || die "expected exit 2 for '$want', got $rc: $(cat "$work/err")"
  [[ $(grep -c . "$work/err") -eq 1 ]] || die "expected one line on stderr for '$want', got: $(cat "$work/err")"
  grep -qF -- "$want" "$work/err" || die "expected '$want' on stderr, got: $(cat "$work/err")"
  cases=$((cases + 1))
}

# workers_ok <out file> <world size> <run id> <port>: every rank once, all agreeing.
workers_ok() {
  local out=$1 world=$2 run_id=$3 port=$4 ranks want r
  ranks=$(sed -n 's/.*ENV RANK=\([0-9]*\) .*/\1/p' "$out" | sort -n | tr '\n' ' ')
  want=$(seq 0 $((world - 1)) | tr '\n' ' ')
  [[ $ranks == "$want" ]] || die "expected ranks '$want', got '$ranks': $(cat "$out")"
  for ((r = 0; r < world; r++)); do
    grep -q "ENV RANK=$r .*WORLD_SIZE=$world LOCAL_WORLD_SIZE=2 GROUP_RANK=$((r / 2)) GROUP_WORLD_SIZE=2 .*MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RESTART=0 RUN_ID=$run_id " \
      "$out" || die "rank $r: wrong environment: $(grep "RANK=$r " "$out")"
  done
}

# ---- Flux ----
flux_n=$(job_number)
flux_id=$(f58 "$flux_n")
flux_port=$((20000 + flux_n % 10000))
flux_task() {  # <task rank>: the variables flux run gives that task
  echo FLUX_JOB_ID="$flux_id" FLUX_JOB_SIZE=2 FLUX_JOB_NNODES=2 FLUX_TASK_RANK="$1" \
    FLUX_TASK_LOCAL_ID=0 FLUX_JOB_TMPDIR="$work" FLUX_URI="local://$work/flux-local" \
    FLUX_KVS_NAMESPACE="job-$flux_n" PMI_RANK="$1" PMI_SIZE=2 PMI_FD=99
}
read -ra task1 <<<"$(flux_task 1)"

refused "dtrun: flux job with 2 nodes: flux run exports no host (FLUX_JOB_ID, FLUX_TASK_RANK): pass --master_addr=<the host of task 0>" \
  "${task1[@]}" -- --dry-run --no_python true
refused "dtrun: FLUX_JOB_SIZE=4 on FLUX_JOB_NNODES=2: flux run started 2 dtrun processes on this node" \
  "${task1[@]}" FLUX_JOB_SIZE=4 -- --dry-run --no_python true
refused "dtrun: FLUX_JOB_ID='fu0': expected a Flux job id" \
  "${task1[@]}" FLUX_JOB_ID=fu0 -- --dry-run --no_python true

env "${task1[@]}" "$DTRUN" --dry-run --master_addr=127.0.0.1 --nproc_per_node=2 --no_python true \
  >"$work/flux-dry.out" 2>&1 || die "flux --dry-run: exit $?: $(cat "$work/flux-dry.out")"
grep -qF "scheduler           : flux (flux run) job $flux_n: 2 nodes from FLUX_JOB_NNODES=2, this is node 1 (FLUX_TASK_RANK=1); supplies rdzv_id=$flux_n (FLUX_JOB_ID=$flux_id), nnodes=2 (FLUX_JOB_NNODES=2), node_rank=1 (FLUX_TASK_RANK=1), master_port=$flux_port (derived from FLUX_JOB_ID=$flux_id); given explicitly: --master_addr" \
  "$work/flux-dry.out" || die "flux --dry-run: banner: $(grep scheduler "$work/flux-dry.out")"
grep -qF "rdzv_endpoint       : 127.0.0.1:$flux_port" "$work/flux-dry.out" ||
  die "flux --dry-run: expected the store at 127.0.0.1:$flux_port"
grep -q "RANK=3" "$work/flux-dry.out" || die "flux --dry-run: no rank table for node 1 (ranks 2, 3)"
pass "flux --dry-run: job $flux_id = $flux_n, node 1 of 2, port $flux_port"
cases=$((cases + 1))

for t in 0 1; do
  read -ra vars <<<"$(flux_task "$t")"
  env "${vars[@]}" timeout -k 5 "$LIMIT" "$DTRUN" --master_addr=127.0.0.1 --nproc_per_node=2 \
    --tee=3 --log_dir="$work/flux-logs" --no_python "$HERE/workers/node_worker.sh" env \
    >"$work/flux-run$t.out" 2>"$work/flux-run$t.err" &
  pids+=($!)
done
for p in "${pids[@]}"; do
  wait "$p" || die "flux run: a task's dtrun exited $?: $(tail -n 5 "$work"/flux-run*.err)"
  forget "$p"
done
cat "$work"/flux-run0.out "$work"/flux-run1.out >"$work/flux-run.out"
workers_ok "$work/flux-run.out" 4 "$flux_n" "$flux_port"
pass "flux: 2 tasks as 2 nodes, ranks 0-3 in a world of 4, run id $flux_n"
cases=$((cases + 1))

# ---- LSF ----
lsf_n=$(job_number)
lsf_port=$((20000 + lsf_n % 10000))
lsf=(LSB_JOBID="$lsf_n" LSB_MCPU_HOSTS="localhost 2 dtrun-lsf-node2 2 "
  LSB_HOSTS="localhost localhost dtrun-lsf-node2 dtrun-lsf-node2" LSB_QUEUE=normal
  LSB_DJOB_HOSTFILE="$work/lsf-hostfile" LSB_JOBNAME=test)
printf 'localhost\nlocalhost\ndtrun-lsf-node2\ndtrun-lsf-node2\n' >"$work/lsf-hostfile"

# as_host <name> <command...>: the command in a UTS namespace whose host name is <name>.
as_host() {
  local name=$1
  shift
  unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}
as_host dtrun-probe true 2>/dev/null ||
  die "unshare --uts failed: this test needs root (CAP_SYS_ADMIN) for its LSF hosts"

prefix=(unshare --uts sh -c 'hostname login1 && exec "$@"' sh)
refused "this host 'login1' is not among its hosts (localhost, dtrun-lsf-node2); start dtrun on the job's hosts (blaunch" \
  "${lsf[@]}" -- --dry-run --no_python true
refused "dtrun: LSB_MCPU_HOSTS='localhost 2 dtrun-lsf-node2': expected pairs of a host and its slot count" \
  "${lsf[@]}" LSB_MCPU_HOSTS="localhost 2 dtrun-lsf-node2" -- --dry-run --no_python true
prefix=()

env "${lsf[@]}" timeout -k 5 "$LIMIT" unshare --uts sh -c 'hostname dtrun-lsf-node2 && exec "$@"' sh \
  "$DTRUN" --dry-run --nproc_per_node=2 --no_python true >"$work/lsf-dry.out" 2>&1 ||
  die "lsf --dry-run: exit $?: $(cat "$work/lsf-dry.out")"
grep -qF "scheduler           : lsf job $lsf_n: 2 nodes from LSB_MCPU_HOSTS=localhost 2 dtrun-lsf-node2 2 , this is node 1 (LSB_MCPU_HOSTS position of host dtrun-lsf-node2); supplies rdzv_id=$lsf_n (LSB_JOBID), nnodes=2 (LSB_MCPU_HOSTS=localhost 2 dtrun-lsf-node2 2 ), node_rank=1 (LSB_MCPU_HOSTS position of host dtrun-lsf-node2), master_addr=localhost (the first host of LSB_MCPU_HOSTS), master_port=$lsf_port (derived from LSB_JOBID)" \
  "$work/lsf-dry.out" || die "lsf --dry-run: banner: $(grep scheduler "$work/lsf-dry.out")"
# The host file, where LSB_MCPU_HOSTS is missing.
env "${lsf[@]}" timeout -k 5 "$LIMIT" unshare --uts \
  sh -c 'unset LSB_MCPU_HOSTS; hostname dtrun-lsf-node2 && exec "$@"' sh \
  "$DTRUN" --dry-run --no_python true >"$work/lsf-file.out" 2>&1 ||
  die "lsf --dry-run from the host file: exit $?: $(cat "$work/lsf-file.out")"
grep -qF "lsf job $lsf_n: 2 nodes from LSB_DJOB_HOSTFILE=$work/lsf-hostfile, this is node 1" \
  "$work/lsf-file.out" || die "lsf host file: banner: $(grep scheduler "$work/lsf-file.out")"
pass "lsf --dry-run: node 1 of 2 from LSB_MCPU_HOSTS and from LSB_DJOB_HOSTFILE, master localhost:$lsf_port"
cases=$((cases + 1))

for name in localhost dtrun-lsf-node2; do
  env "${lsf[@]}" timeout -k 5 "$LIMIT" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" \
    "$DTRUN" --nproc_per_node=2 --tee=3 --log_dir="$work/lsf-logs" --no_python \
    "$HERE/workers/node_worker.sh" env >"$work/lsf-$name.out" 2>"$work/lsf-$name.err" &
  pids+=($!)
done
for p in "${pids[@]}"; do
  wait "$p" || die "lsf run: a host's dtrun exited $?: $(tail -n 5 "$work"/lsf-*.err)"
  forget "$p"
done
cat "$work"/lsf-localhost.out "$work"/lsf-dtrun-lsf-node2.out >"$work/lsf-run.out"
sed -i 's/MASTER_ADDR=localhost /MASTER_ADDR=127.0.0.1 /' "$work/lsf-run.out"
workers_ok "$work/lsf-run.out" 4 "$lsf_n" "$lsf_port"
grep -q "HOST=dtrun-lsf-node2" "$work/lsf-dtrun-lsf-node2.out" || die "lsf run: node 2's workers ran elsewhere"
pass "lsf: 2 hosts as 2 nodes, ranks 0-3 in a world of 4, master localhost:$lsf_port"
cases=$((cases + 1))

end_test "$cases cases"
