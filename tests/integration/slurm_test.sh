#!/usr/bin/env bash
# dtrun under a real SLURM cluster of three nodes (scripts/local-slurm.sh: Debian's slurm-wlm and
# munge, every host a network namespace of its own), with 2 workers per node:
#   bash tests/integration/slurm_test.sh /abs/path/to/build/launcher/dtrun
# 1. `sbatch -N2 scripts/slurm/multi_node.sbatch <worker>` and 2. `srun -N2 -w node[2-3]
#    --ntasks-per-node=1 dtrun --nproc_per_node=2 <worker>`: world size 4, node rank = SLURM_NODEID
#    (node rank 0 on the first host of the node list), ranks in that order, MASTER_ADDR that host.
# 3. rank 3 fails with 7: srun exits 7, the sbatch job FAILED with ExitCode 7:0, reports name rank 3.
# 4. multi_node_elastic.sbatch: rank 3 fails twice; both nodes restart and attempt 2 completes.
# 5. scripts/pbs/multi_node.pbs with pbsdsh played by srun and PBS_* made from the allocation.
# 6. scancel of a running job: no process of the job is left and no port stays bound on any node.
# Prints how long the cluster's start, each case and the teardown took. Needs root, iproute2 and
# Debian's package registry the first time (the cluster script installs its packages); prints
# SKIP without root. Every client runs in a namespace; the cluster is torn down on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" slurm_test "$@"
WORKER=$HERE/workers/node_worker.sh
CLUSTER=$ROOT/scripts/local-slurm.sh

# Every example job script at least parses (the PBS ones cannot run here: Debian has no PBS).
for script in "$ROOT"/scripts/slurm/*.sbatch "$ROOT"/scripts/pbs/*.pbs; do
  bash -n "$script" || die "$script does not parse"
done

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  echo "slurm_test: SKIP: needs root, iproute2 and nsenter"
  exit 0
fi

chmod 755 "$work" # munge's socket lives below it
# A cluster of our own: state folder, namespace prefix and subnet (the pid keeps runs apart).
export DTRUN_SLURM_DIR=$work/cluster DTRUN_SLURM_NETNS=dslm$(($$ % 1000))
export DTRUN_SLURM_SUBNET=10.219.$(($$ % 200 + 20)) DTRUN_SLURM_NODES=3
unset DTRUN_SLURM_LOGIN
# Each agent writes its logs into a fresh directory under TMPDIR (mkdtemp), so every node's files
# are apart (with one shared --log_dir the second node's agent would use <run_id>-<host>).
mkdir -p "$work"/logs/{sbatch,srun,fail,sfail,elastic,pbs,cancel}
# Every process of our jobs carries this (srun and sbatch pass the environment on); this script
# does not, so a process found with it is a leftover of a job.
mark=DTRUN_SLURM_TEST=$work
at_exit 'bash "$CLUSTER" down 2>/dev/null'
trap 'exit 143' TERM INT # ctest's timeout: still tear the cluster down

stage_start=$SECONDS
now_ms() { echo $(($(date +%s%N) / 1000000)); }
t=$(now_ms)
# slurm <cmd...>: a client command on the login host, with the jobs' mark.
slurm() { (cd "$work" && bash "$CLUSTER" exec env "$mark" DTRUN="$DTRUN" NPROC_PER_NODE=2 "$@"); }

if ! bash "$CLUSTER" up 2>"$work/up.txt"; then
  sed 's/^/    | /' "$work/up.txt" >&2
  die "the cluster did not start"
fi
sed 's/^/slurm_test: /' "$work/up.txt"
echo "slurm_test: cluster of 3 nodes up after $(($(now_ms) - t)) ms"

# batch <name> <sbatch args...>: submits a job and waits (at most $LIMIT s) until it ends; sets
# job, state and exit_code (scontrol's "code:signal"). Polling scontrol, not `sbatch --wait`,
# which checks only after 2, 10, 42... s.
batch() {
  local name=$1 info=""
  shift
  job=$(slurm sbatch --parsable -o "$work/$name-%j.out" "$@" 2>"$work/$name.err") || job=none
  for _ in $(seq $((LIMIT * 10))); do
    info=$(slurm scontrol -o show job "$job" 2>/dev/null) || break
    [[ $info =~ JobState=(PENDING|RUNNING|CONFIGURING|COMPLETING) ]] || break
    sleep 0.1
  done
  state=$(sed -nE 's/.* JobState=([A-Z_]+) .*/\1/p' <<<"$info")
  exit_code=$(sed -nE 's/.* ExitCode=([0-9]+:[0-9]+) .*/\1/p' <<<"$info")
}

# check_world <label> <first host> <second host> <log dir>: the 4 workers' ENV lines.
check_world() {
  local label=$1 first=$2 second=$3 lines
  lines=$(find "$4" -path '*/attempt_0/*/stdout.log' -exec cat {} + 2>/dev/null | grep '^ENV ' || true)
  # one line per worker, by rank: host, node rank, rank, local rank, world size, node count, master
  local got=() line
  field() { sed -E "s/.* $1=([^ ]*).*/\\1/" <<<"$line"; }
  mapfile -t got < <(while read -r line; do
    echo "$(field HOST) $(field GROUP_RANK) $(field RANK) $(field LOCAL_RANK) $(field WORLD_SIZE)" \
      "$(field GROUP_WORLD_SIZE) $(field MASTER_ADDR)"
  done <<<"$lines" | sort -k3n)
  local want=("$first 0 0 0 4 2" "$first 0 1 1 4 2" "$second 1 2 0 4 2" "$second 1 3 1 4 2")
  local i ok=1
  ((${#got[@]} == 4)) || ok=0
  for i in 0 1 2 3; do
    [[ $ok -eq 1 && ${got[$i]% *} == "${want[$i]}" ]] || ok=0
    # MASTER_ADDR: the first host, by name or by its address in the cluster's hosts file
    local master=${got[$i]##* }
    [[ $ok -eq 1 ]] && { [[ $master == "$first" ]] || grep -qx "$master $first" "$DTRUN_SLURM_DIR/hosts"; } || ok=0
  done
  if [[ $ok -eq 1 ]]; then
    echo "slurm_test: $label: world size 4, ranks 0-1 on $first (node rank 0, the master), 2-3 on $second"
  else
    note_fail "$label: expected (host group rank local world nodes) ${want[*]/%/;} with MASTER_ADDR=$first, got:"
    printf '    | %s\n' "${got[@]}" "(no more lines)" >&2
    find "$work" -maxdepth 1 \( -name '*.out' -o -name '*.err' \) -exec tail -n 5 {} + | sed 's/^/    | /' >&2
  fi
}

# 1. sbatch of the example script: the batch step runs on node1, srun starts one dtrun per node.
t=$(now_ms)
TMPDIR=$work/logs/sbatch batch sbatch -N2 "$ROOT/scripts/slurm/multi_node.sbatch" "$WORKER" env
[[ $state == COMPLETED ]] || note_fail "sbatch -N2 multi_node.sbatch: job $job $state, ExitCode '$exit_code'"
check_world "sbatch -N2 scripts/slurm/multi_node.sbatch" node1 node2 "$work/logs/sbatch"
echo "slurm_test: (sbatch case: $(($(now_ms) - t)) ms)"

# 2. srun from the login host onto node2 and node3: the first host is node2.
t=$(now_ms)
rc=0
slurm env TMPDIR="$work/logs/srun" timeout "$LIMIT" srun -N2 -w 'node[2-3]' --ntasks-per-node=1 \
  "$DTRUN" --nproc_per_node=2 "$WORKER" env >"$work/srun.err" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || note_fail "srun -N2 dtrun exited $rc: $(tail -n 3 "$work/srun.err")"
check_world "srun -N2 -w node[2-3] --ntasks-per-node=1 dtrun --nproc_per_node=2" node2 node3 "$work/logs/srun"
echo "slurm_test: (srun case: $(($(now_ms) - t)) ms)"

# 3. Rank 3 (node 1's second worker) exits 7: every dtrun ends with the root cause's code, and so
#    does srun, and the sbatch job FAILs with ExitCode 7:0.
t=$(now_ms)
rc=0
slurm env TMPDIR="$work/logs/fail" timeout "$LIMIT" srun -N2 --ntasks-per-node=1 "$DTRUN" \
  --nproc_per_node=2 "$WORKER" fail 3 1 >"$work/fail.err" 2>&1 || rc=$?
if [[ $rc -eq 7 ]] && grep -q "rank      : 3 (local_rank: 1)" "$work/fail.err"; then
  echo "slurm_test: rank 3 failing with 7: srun exited 7 and the report names rank 3"
else
  note_fail "rank 3 failing: srun exited $rc (expected 7 and a report naming rank 3)"
  tail -n 15 "$work/fail.err" | sed 's/^/    | /' >&2
fi
TMPDIR=$work/logs/sfail batch sfail -N2 "$ROOT/scripts/slurm/multi_node.sbatch" "$WORKER" fail 3 1
if [[ $state == FAILED && $exit_code == 7:0 ]] && grep -q "rank      : 3 (local_rank: 1)" "$work/sfail-$job.out"; then
  echo "slurm_test: the same under sbatch: job $job FAILED with ExitCode=7:0, its output names rank 3"
else
  note_fail "rank 3 failing under sbatch: job $job $state, ExitCode '$exit_code' (expected FAILED, 7:0, rank 3 named)"
  cat "$work/sfail.err" "$work/sfail-$job.out" 2>/dev/null | tail -n 15 | sed 's/^/    | /' >&2
fi
echo "slurm_test: (failure cases: $(($(now_ms) - t)) ms)"

# 4. The elastic example (c10d on the first node, up to 3 restarts): rank 3 fails in attempts 0
#    and 1, every node restarts twice, and the job completes.
t=$(now_ms)
TMPDIR=$work/logs/elastic batch elastic -N2 "$ROOT/scripts/slurm/multi_node_elastic.sbatch" "$WORKER" fail 3 2
third=$(find "$work/logs/elastic" -path '*/attempt_2/*/stdout.log' -exec cat {} + 2>/dev/null | grep -c '^ENV .* WORLD_SIZE=4 ' || true)
if [[ $state == COMPLETED && $third -eq 4 ]]; then
  echo "slurm_test: multi_node_elastic.sbatch: rank 3 failed twice, both nodes restarted, attempt 2 (world size 4) completed"
else
  note_fail "elastic: job $job $state, ExitCode '$exit_code', $third of 4 workers in attempt 2 (expected COMPLETED, 4)"
  tail -n 15 "$work/elastic-$job.out" 2>/dev/null | sed 's/^/    | /' >&2
fi
echo "slurm_test: (elastic case: $(($(now_ms) - t)) ms)"

# 5. scripts/pbs/multi_node.pbs, with PBS played by SLURM (Debian has no PBS): a pbsdsh that
#    starts its command once per node as an srun step, and PBS_NODEFILE (two slots per host),
#    PBS_JOBID and PBS_O_WORKDIR made from the allocation. This checks the script's own commands.
t=$(now_ms)
mkdir -p "$work/pbs"
cat >"$work/pbs/pbsdsh" <<'EOF'
#!/bin/bash
# pbsdsh -u CMD...: CMD once on every node of the job
shift
exec srun --ntasks-per-node=1 "$@"
EOF
cat >"$work/pbs/as_pbs.sh" <<'EOF'
#!/bin/bash
# as_pbs.sh SCRIPT ARGS...: a PBS job script in a SLURM batch job, with PBS's variables
export PBS_NODEFILE=$PWD/nodefile.$SLURM_JOB_ID PBS_JOBID=$SLURM_JOB_ID.local PBS_O_WORKDIR=$PWD
scontrol show hostnames "$SLURM_JOB_NODELIST" | sed p >"$PBS_NODEFILE"
exec bash "$@"
EOF
chmod +x "$work/pbs/pbsdsh" "$work/pbs/as_pbs.sh"
PATH=$work/pbs:$PATH TMPDIR=$work/logs/pbs batch pbs -N2 "$work/pbs/as_pbs.sh" "$ROOT/scripts/pbs/multi_node.pbs" "$WORKER" env
[[ $state == COMPLETED ]] || note_fail "multi_node.pbs: job $job $state, ExitCode '$exit_code'"
check_world "scripts/pbs/multi_node.pbs (pbsdsh played by srun)" node1 node2 "$work/logs/pbs"
echo "slurm_test: (PBS case: $(($(now_ms) - t)) ms)"

# 6. scancel of a running job (workers wait for a file that never comes).
t=$(now_ms)
job_procs() { grep -lzxF "$mark" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | tr '\n' ' ' || true; }
# slurmstepd carries the cluster's mark (from slurmd); the daemons and slurmctld's helper stay.
step_procs() {
  local pid comm
  while read -r pid; do
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    [[ $comm == slurmd || $comm == slurmctld || $comm == slurmscriptd || $comm == munged ]] || echo -n "$pid($comm) "
  done < <(grep -lzxF "DTRUN_SLURM_MARK=$DTRUN_SLURM_DIR" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
}
# Ports bound on any host other than slurmctld's and slurmd's.
bound_ports() {
  local host
  for host in ctl node1 node2 node3; do
    nsenter --net="/run/netns/$DTRUN_SLURM_NETNS-$host" ss -Htlnu 2>/dev/null |
      awk -v h="$host" '$5 !~ /:681[78]$/ {printf "%s:%s ", h, $5}'
  done
}
job=$(slurm env TMPDIR="$work/logs/cancel" sbatch --parsable -N2 -o "$work/cancel-%j.out" \
  "$ROOT/scripts/slurm/multi_node.sbatch" "$WORKER" wait "$work/never")
started=0
for _ in $(seq $((LIMIT * 10))); do
  started=$(find "$work/logs/cancel" -name stdout.log -exec cat {} + 2>/dev/null | grep -c '^ENV ' || true)
  ((started < 4)) || break
  sleep 0.1
done
if ((started < 4)); then
  note_fail "scancel: only $started of 4 workers started"
else
  # The checks below see the running job: its processes, its slurmstepd, its store's port.
  before=$(job_procs)
  steps_before=$(step_procs)
  ports_before=$(bound_ports)
  [[ -n $steps_before && -n $ports_before ]] ||
    note_fail "scancel: the running job shows no slurmstepd ('$steps_before') or no bound port ('$ports_before')"
  t_cancel=$(now_ms)
  slurm scancel "$job"
  left="x"
  for _ in $(seq 200); do
    left="$(job_procs)$(step_procs)$(bound_ports)"
    [[ -n $left ]] || break
    sleep 0.1
  done
  if [[ -z $left ]]; then
    echo "slurm_test: scancel of job $job: its $(wc -w <<<"$before") processes, $(wc -w <<<"$steps_before") slurmstepd" \
      "and ports $ports_before are gone after $(($(now_ms) - t_cancel)) ms"
  else
    note_fail "scancel: left behind 20 s later: $left"
    ps -o pid,ppid,stat,args -p "$(tr -cs '0-9' ',' <<<"$left" | sed 's/^,//; s/,$//')" 2>/dev/null | sed 's/^/    | /' >&2 || true
  fi
fi
echo "slurm_test: (scancel case: $(($(now_ms) - t)) ms)"

t=$(now_ms)
bash "$CLUSTER" down 2>/dev/null
echo "slurm_test: cluster down after $(($(now_ms) - t)) ms"
echo "slurm_test: the SLURM stage took $((SECONDS - stage_start)) s"

end_test
