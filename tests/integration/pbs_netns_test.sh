#!/usr/bin/env bash
# A PBS-shaped job on two "hosts" (network namespaces with their own hostnames and /etc/hosts):
# each runs `dtrun --nproc_per_node=2` with only PBS_JOBID and PBS_NODEFILE to go by (PBS has no
# server in Debian, so the test writes the node file as PBS Pro and Torque do):
#   pro      FQDNs repeated per mpiprocs slot, hosts whose hostname is the short name
#   torque   short names repeated per ppn, listed in the reverse order (cn2 first: node 0)
#   stranger a node file without this host: exit 2, naming PBS_NODEFILE and the host
# Every worker's environment is checked: ranks 0..3, GROUP_RANK by the node file's order,
# MASTER_ADDR = the file's first host, MASTER_PORT = 20000 + job number, run id = PBS_JOBID.
#   bash tests/integration/pbs_netns_test.sh /abs/path/to/build/launcher/dtrun
# Needs root, iproute2, nsenter and unshare; prints SKIP and exits 0 without them. Safety: a
# blackhole route for the test subnet goes into the root namespace before anything else, every
# agent runs inside a namespace, and everything (processes by PID, namespaces, the route) is
# removed on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" pbs_netns_test "$@"
WORKER=$HERE/workers/node_worker.sh
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null ||
  ! command -v unshare >/dev/null; then
  echo "pbs_netns_test: SKIP: needs root, iproute2, nsenter and unshare"
  exit 0
fi

tag=dsch$(($$ % 10000))
hosts=(cn1 cn2)
# shellcheck source=lib/netns_hosts.sh
source "$HERE/lib/netns_hosts.sh"

netns_hosts_up 10.218
{
  echo "127.0.0.1 localhost"
  for i in "${!hosts[@]}"; do echo "$subnet.$((11 + i)) ${hosts[$i]}.hpc.test ${hosts[$i]}"; done
} >"$work/hosts"

# on <index> <cmd...>: cmd in host <index>'s network, with its host name and /etc/hosts.
on() {
  local h=${hosts[$1]}
  shift
  nsenter --net="/run/netns/$tag-$h" -- unshare --mount --uts --propagation private -- \
    /bin/sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
    on "$work/hosts" "$h" "$@"
}

# Whatever scheduler this test itself runs under must not leak into the fake job.
clear_scheduler_env

# job <name> <job id> <node file text>: one agent per host with PBS's environment; waits for both.
declare -A rc_of=()
job() {
  local name=$1 id=$2 i
  printf '%s' "$3" >"$work/$name.nodefile"
  local agents=()
  for i in 1 0; do  # the second host first: the node file's order decides, not arrival
    on "$i" env PBS_JOBID="$id" PBS_NODEFILE="$work/$name.nodefile" PBS_O_WORKDIR="$work" \
      OMP_NUM_THREADS=1 "$DTRUN" --nproc_per_node=2 --log_dir="$work/logs/$name/$i" \
      --no_python "$WORKER" env >"$work/$name.$i.out" 2>&1 &
    agents[i]=$!
    pids+=("$!")
  done
  for i in 0 1; do
    wait_agent "${agents[i]}" $((SECONDS + LIMIT))
    rc_of[$name.$i]=$rc
  done
}

# check <name> <job id> <first host> <host of node 0>
check() {
  local name=$1 id=$2 first=$3 node0=$4 i lines ranks
  for i in 0 1; do
    if [[ ${rc_of[$name.$i]} -ne 0 ]]; then
      note_fail "$name: ${hosts[$i]}'s dtrun exited ${rc_of[$name.$i]}, expected 0"
      tail -n 5 "$work/$name.$i.out" | sed 's/^/    | /' >&2
      return
    fi
  done
  lines=$(cat "$work"/logs/"$name"/*/"$id"/attempt_0/*/stdout.log 2>/dev/null | grep '^ENV' || true)
  ranks=$(sed -E 's/.* RANK=([0-9]+) .*/\1/' <<<"$lines" | sort -n | tr '\n' ' ')
  [[ $ranks == "0 1 2 3 " ]] || { note_fail "$name: ranks '$ranks', expected 0..3"; return; }
  [[ $(grep -c "MASTER_ADDR=$first MASTER_PORT=$((20000 + ${id%%.*})) " <<<"$lines") -eq 4 ]] ||
    note_fail "$name: MASTER_ADDR:PORT is not $first:$((20000 + ${id%%.*})) everywhere"
  [[ $(grep -c "RUN_ID=$id " <<<"$lines") -eq 4 ]] || note_fail "$name: TORCHELASTIC_RUN_ID is not $id everywhere"
  [[ $(grep "HOST=$node0\$" <<<"$lines" | grep -c "GROUP_RANK=0 ") -eq 2 ]] ||
    note_fail "$name: $node0 (the node file's first host) is not node 0"
  grep -q "scheduler: pbs job $id: 2 nodes from PBS_NODEFILE=$work/$name.nodefile" "$work/$name.0.out" ||
    note_fail "$name: the banner does not name PBS_NODEFILE"
  echo "pbs_netns_test: $name ok (ranks 0..3, node 0 = $node0, master $first:$((20000 + ${id%%.*})))"
}

job pro 4321.pbs-test "cn1.hpc.test
cn1.hpc.test
cn2.hpc.test
cn2.hpc.test
"
check pro 4321.pbs-test cn1.hpc.test cn1

job torque 587.torque-head "cn2
cn2
cn1
cn1
"
check torque 587.torque-head cn2 cn2

printf 'cn1\n' >"$work/stranger.nodefile"
rc=0
out=$(on 1 env PBS_JOBID=9.x PBS_NODEFILE="$work/stranger.nodefile" "$DTRUN" --no_python true 2>&1) || rc=$?
if [[ $rc -eq 2 && $out == *"PBS_NODEFILE='$work/stranger.nodefile': this host 'cn2' is not among its hosts (cn1)"* ]]; then
  echo "pbs_netns_test: stranger ok (exit 2: $out)"
else
  note_fail "stranger: exit $rc, output '$out'"
fi

end_test
