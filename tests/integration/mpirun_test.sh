#!/usr/bin/env bash
# Debian's Open MPI mpirun starting 2 dtrun processes as 2 "nodes" on loopback:
#   bash tests/integration/mpirun_test.sh /abs/path/to/dtrun
# mpirun's host file names this host and a second, made-up one; its rsh agent is a stand-in for
# ssh that runs the daemon (orted) here, so mpirun sees two nodes with one process each, and its
# out-of-band traffic stays on lo. Checks: no flag beyond --nproc_per_node gives 4 workers with
# ranks 0..3, WORLD_SIZE 4, the node rank of OMPI_COMM_WORLD_RANK, MASTER_ADDR mpirun's address
# (127.0.0.1) and the job-derived port; two processes on one node are refused (one line each,
# exit 2); rank 0 away from mpirun's host is refused naming --master_addr, and runs with it; a
# failing rank fails the job with its code. Every mpirun runs under timeout.
# As root it runs in a network namespace of its own (its own loopback): the port dtrun derives
# from mpirun's job id (20000 + id % 10000) is then never one another test holds (seen once in
# the loaded flake table: "listen on 0.0.0.0:20241: Address already in use").
set -euo pipefail
if [[ -z ${DTRUN_MPIRUN_TEST_OWN_NET:-} && $(id -u) -eq 0 ]] && command -v unshare >/dev/null &&
  unshare --net true 2>/dev/null; then
  export DTRUN_MPIRUN_TEST_OWN_NET=1
  exec unshare --net -- bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
fi

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" mpirun_test "$@"
clear_scheduler_env
preamble_unset_matching '^(OMPI|PMIX|PMI|FLUX|LSB)_'
command -v mpirun >/dev/null || die "mpirun not found: scripts/setup.sh installs openmpi-bin"

# orted for the made-up host: ssh's options and the host name are dropped, the command runs here.
# Its session directory (/tmp/ompi.<host>.<uid>/jf.<job>) would be mpirun's own or the other
# made-up node's, made already ("File exists"): each made-up host gets a /tmp of its own.
cat >"$work/rsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do
  case \$1 in
    -*) shift ;;
    *) host=\$1; shift; break ;;
  esac
done
mkdir -p "$work/tmp-\$host"
export OMPI_MCA_orte_tmpdir_base="$work/tmp-\$host"
exec /bin/sh -c "\$*"
EOF
chmod +x "$work/rsh"
self=$(hostname)
printf '%s slots=1\ndtrun-mpi-node2 slots=1\n' "$self" >"$work/hosts" # rank 0 beside mpirun
# mpirun on a host outside its host file, as on a login node (mpirun puts its own host first
# when it is in the file): rank 0's daemon is not mpirun.
printf 'dtrun-mpi-node1 slots=1\ndtrun-mpi-node2 slots=1\n' >"$work/hosts-away"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent="$work/rsh"
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo OMPI_NUM_THREADS=1
export OMP_NUM_THREADS=1
# Open MPI 4.1's orted writes the hwloc topology into a shared mapping at a "hole" it guessed in
# its address space; about one daemon start in six segfaults there (hwloc_shmem_topology_write),
# and no rank starts. Without the hole (vmhole=none) each daemon reads the topology itself.
export OMPI_MCA_rtc_hwloc_vmhole=none
cases=0

# mpi <hostfile> <name> <dtrun args...>: mpirun -np 2, one per node. Each rank's stdout and stderr
# go to files of their own (mpirun's forwarding interleaves the ranks' writes), then into
# $work/<name>.out and .err, rank 0's first; mpirun's own output into $work/<name>.mpirun.
mpi() {
  local hosts=$1 name=$2 rc=0
  shift 2
  rm -f "$work/$name".[01].*
  timeout -k 5 "$LIMIT" mpirun --hostfile "$hosts" -np 2 --map-by ppr:1:node sh -c \
    'exec "$@" >"$0.$OMPI_COMM_WORLD_RANK.out" 2>"$0.$OMPI_COMM_WORLD_RANK.err"' \
    "$work/$name" "$DTRUN" "$@" >"$work/$name.mpirun" 2>&1 || rc=$?
  cat "$work/$name".[01].out >"$work/$name.out" 2>/dev/null || true
  cat "$work/$name".[01].err >"$work/$name.err" 2>/dev/null || true
  [[ -f $work/$name.0.err ]] || sed 's/^/    | mpirun: /' "$work/$name.mpirun" | head -n 20 >&2
  return $rc
}

# 1. Two nodes from mpirun's variables alone.
mpi "$work/hosts" run --nproc_per_node=2 --tee=3 --log_dir="$work/logs" --no_python \
  "$HERE/workers/node_worker.sh" env || die "mpirun run: exit $?: $(tail -n 20 "$work/run.err")"
lines=$(grep -c '^\[default[01]\]:ENV ' "$work/run.out" || true)
[[ $lines -eq 4 ]] || die "expected 4 worker lines, got $lines: $(cat "$work/run.out")"
ranks=$(sed -n 's/.*ENV RANK=\([0-9]*\) .*/\1/p' "$work/run.out" | sort -n | tr '\n' ' ')
[[ $ranks == "0 1 2 3 " ]] || die "expected ranks 0 1 2 3, got '$ranks'"
for r in 0 1 2 3; do
  grep -q "ENV RANK=$r .*WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=$((r / 2)) GROUP_WORLD_SIZE=2 " \
    "$work/run.out" || die "rank $r: wrong sizes or group rank: $(grep "RANK=$r " "$work/run.out")"
done
run_id=$(sed -n 's/.* RUN_ID=\([^ ]*\) .*/\1/p' "$work/run.out" | sort -u)
[[ $run_id =~ ^[0-9]+$ ]] || die "expected one numeric run id (mpirun's job), got '$run_id'"
port=$((20000 + run_id % 10000))
[[ $(grep -c "MASTER_ADDR=127.0.0.1 MASTER_PORT=$port " "$work/run.out") -eq 4 ]] ||
  die "expected MASTER_ADDR=127.0.0.1 MASTER_PORT=$port on every worker: $(cat "$work/run.out")"
for node in 0 1; do
  grep -q "scheduler: mpi (mpirun) job $run_id: 2 nodes from OMPI_COMM_WORLD_SIZE=2, this is node $node (OMPI_COMM_WORLD_RANK=$node)" \
    "$work/run.err" || die "no banner line for node $node: $(grep scheduler "$work/run.err")"
done
grep -q "master_addr=127.0.0.1 (mpirun's address in OMPI_MCA_orte_hnp_uri" "$work/run.err" ||
  die "the banner does not say where the master came from"
[[ -d $work/logs/$run_id/attempt_0/1 ]] || die "no log directory under the job's id $run_id"
pass "2 nodes under mpirun: ranks 0-3, WORLD_SIZE 4, master 127.0.0.1:$port, run id $run_id"
cases=$((cases + 1))

# 2. Two dtrun processes on one node: refused by each, one line, exit 2.
printf '%s slots=2\n' "$self" >"$work/one-host"
rc=0
timeout -k 5 "$LIMIT" mpirun --hostfile "$work/one-host" -np 2 sh -c \
  'exec "$0" --no_python true 2>"$1.$OMPI_COMM_WORLD_RANK"' "$DTRUN" "$work/two.err" \
  >"$work/two.mpirun" 2>&1 || rc=$?
[[ $rc -ne 0 ]] || die "two processes on one node: mpirun exited 0"
want="dtrun: OMPI_COMM_WORLD_LOCAL_SIZE=2: mpirun started 2 dtrun processes on this node, but dtrun starts the workers itself: run one per node (mpirun --map-by ppr:1:node dtrun --nproc_per_node=N ...), or pass --scheduler none"
for r in 0 1; do
  [[ $(cat "$work/two.err.$r") == "$want" ]] ||
    die "two processes on one node: rank $r: expected '$want', got: $(cat "$work/two.err.$r")"
done
pass "two dtrun on one node refused (mpirun exit $rc)"
cases=$((cases + 1))

# 3. Rank 0 away from mpirun's host: refused naming the fix; runs with the flag.
rc=0
mpi "$work/hosts-away" away --no_python true || rc=$?
[[ $rc -ne 0 ]] || die "rank 0 away from mpirun: mpirun exited 0"
grep -q "^dtrun: mpi job with 2 nodes: rank 0 does not run on mpirun's host .*pass --master_addr=<the host of rank 0>" \
  "$work/away.0.err" || die "rank 0 away from mpirun: no refusal naming --master_addr: $(cat "$work/away.err")"
mpi "$work/hosts-away" flag --master_addr=127.0.0.1 --tee=3 --no_python \
  "$HERE/workers/node_worker.sh" env || die "with --master_addr: exit $?: $(tail -n 20 "$work/flag.err")"
[[ $(grep -c 'ENV RANK=.* WORLD_SIZE=2 ' "$work/flag.out") -eq 2 ]] ||
  die "with --master_addr: expected 2 workers of a world of 2: $(cat "$work/flag.out")"
grep -q "given explicitly: --master_addr" "$work/flag.err" || die "the banner does not name --master_addr"
pass "rank 0 away from mpirun: refused (exit $rc), then runs with --master_addr"
cases=$((cases + 1))

# 4. A failing rank on the second node fails the job on both, with its code.
rc=0
mpi "$work/hosts" fail --nproc_per_node=2 --log_dir="$work/logs" --no_python \
  "$HERE/workers/node_worker.sh" fail 3 1 || rc=$?
[[ $rc -eq 7 ]] || die "a failing rank: expected mpirun to exit 7, got $rc: $(tail -n 20 "$work/fail.err")"
grep -q "rank 3 fails on purpose" "$work/fail.err" || die "a failing rank: its stderr is missing"
pass "rank 3 exiting 7 ends the job with 7"
cases=$((cases + 1))

end_test "$cases cases"
