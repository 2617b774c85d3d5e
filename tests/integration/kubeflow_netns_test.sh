#!/usr/bin/env bash
# Kubernetes as users run it: two "pods" (network namespaces, each with its pod's host name and a
# hosts file standing in for the cluster's DNS) get exactly the environment Kubeflow gives each
# pod, and run `dtrun train.py` where the manifest said `torchrun train.py`, with no other change:
#   trainjob  Kubeflow Trainer v2 (TrainJob, torch runtime): PET_NNODES, PET_NPROC_PER_NODE,
#             PET_NODE_RANK, PET_MASTER_ADDR as the JobSet's DNS name, PET_MASTER_PORT=29400
#   pytorchjob  the training operator's PyTorchJob (Master + Worker): MASTER_ADDR is "localhost"
#             in the master pod and the master's service name elsewhere, WORLD_SIZE = pods x
#             nproc, RANK = the pod's index, the same as PET_MASTER_*, PET_NNODES, PET_NODE_RANK
#   legacy    the older pytorch-operator: MASTER_ADDR, MASTER_PORT, WORLD_SIZE = pods, RANK only;
#             the manifest's command was `dtrun --nproc_per_node=2 train.py`
#   elastic   an elastic PyTorchJob (workers only): PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT on
#             worker 0's service, PET_NNODES=1:2, PET_NPROC_PER_NODE, PET_MAX_RESTARTS
# Each job runs real torch 1.13 workers (a gloo all_reduce over both pods); every rank's
# environment is checked: ranks 0..3, node ranks by the pod's index, MASTER_ADDR as the pod sees
# it. Needs root, iproute2, nsenter and unshare; prints SKIP and exits 0 without them. Safety: a
# blackhole route for the test subnet goes into the root namespace first, every agent runs in a
# namespace, and everything (processes by PID, namespaces, the route) is removed on exit.
#   bash tests/integration/kubeflow_netns_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" kubeflow_netns_test "$@"
release_in_short_form "the Kubeflow environment is read by code launcher/'s unit tests drive here, the agents' namespaces by netns_test; the rest is torch workers"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v nsenter >/dev/null ||
  ! command -v unshare >/dev/null; then
  echo "kubeflow_netns_test: SKIP: needs root, iproute2, nsenter and unshare"
  exit 0
fi

tag=dkf$(($$ % 10000))
hosts=(pod0 pod1)
# shellcheck source=lib/netns_hosts.sh
source "$HERE/lib/netns_hosts.sh"
netns_hosts_up 10.215
clear_scheduler_env
preamble_unset_matching '^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|KUBERNETES_.*)$'

# The training script: the rank's environment on one line, then a gloo all_reduce of rank + 1.
cat >"$work/train.py" <<'EOF'
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

e = os.environ
print("ENV RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s GROUP_RANK=%s MASTER_ADDR=%s MASTER_PORT=%s HOST=%s"
      % (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["GROUP_RANK"], e["MASTER_ADDR"],
         e["MASTER_PORT"], socket.gethostname()), flush=True)
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
n = dist.get_world_size()
assert t.item() == n * (n + 1) / 2, t.item()
dist.barrier()
dist.destroy_process_group()
print("SUM %d" % t.item(), flush=True)
EOF

# pod <index> <pod host name> <hosts file> <env assignments...> -- <command...>: the command in
# the pod's network, with its host name and hosts file, in its own working directory.
pod() {
  local i=$1 name=$2 hostsfile=$3
  shift 3
  local assigns=()
  while [[ $1 != -- ]]; do assigns+=("$1"); shift; done
  shift
  mkdir -p "$work/$job/pod$i"
  cp "$work/train.py" "$work/$job/pod$i/"  # the container image's script
  nsenter --net="/run/netns/$tag-${hosts[$i]}" -- unshare --mount --uts --propagation private -- \
    /bin/sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && cd "$3" && shift 3 && exec "$@"' \
    pod "$hostsfile" "$name" "$work/$job/pod$i" \
    env KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 PATH="$(dirname "$DTRUN"):/usr/bin:/bin" "${assigns[@]}" "$@" \
    >"$work/$job.$i.out" 2>&1
}

# hostsfile <names of pod 0> -- <names of pod 1>: the cluster DNS as this test's hosts file.
hostsfile() {
  local f=$work/$job.hosts
  echo "127.0.0.1 localhost" >"$f"
  local ip=$subnet.11
  for name in "$@"; do
    if [[ $name == -- ]]; then ip=$subnet.12; continue; fi
    echo "$ip $name" >>"$f"
  done
  echo "$f"
}

# run_pods: starts both pods (pod 1 first: the pod's index decides, not arrival), waits for both.
declare -A rc_of=()
run_pods() {
  local i agents=()
  for i in 1 0; do
    # shellcheck disable=SC2086  # the variables are lists of words on purpose
    pod "$i" "${podname[$i]}" "$hosts_file" ${podenv[$i]} -- dtrun ${cmdflags:-} train.py &
    agents[i]=$!
    pids+=("$!")
  done
  for i in 0 1; do
    wait_agent "${agents[i]}" $((SECONDS + LIMIT))
    rc_of[$job.$i]=$rc
  done
}

# check <master address in pod 0> <master address in pod 1> <the launch line's scheduler, - none>
check() {
  local i lines ranks
  for i in 0 1; do
    if [[ ${rc_of[$job.$i]} -ne 0 ]]; then
      note_fail "$job: pod $i's dtrun exited ${rc_of[$job.$i]}, expected 0"
      tail -n 8 "$work/$job.$i.out" | sed 's/^/    | /' >&2
      return
    fi
  done
  lines=$(cat "$work/$job".*.out | grep '^\[.*ENV\|^ENV' | sed 's/^.*ENV /ENV /' || true)
  ranks=$(sed -E 's/.* RANK=([0-9]+) .*/\1/;s/^ENV RANK=([0-9]+) .*/\1/' <<<"$lines" | sort -n | tr '\n' ' ')
  [[ $ranks == "0 1 2 3 " ]] || { note_fail "$job: ranks '$ranks', expected 0..3"; return; }
  [[ $(grep -c "WORLD_SIZE=4 " <<<"$lines") -eq 4 ]] || note_fail "$job: WORLD_SIZE is not 4 everywhere"
  # Static rendezvous: the pod's index is its node rank; elastic (c10d): the order of arrival.
  local node0=0 node1=1
  if [[ $job == elastic ]] && grep "HOST=${podname[0]}\$" <<<"$lines" | grep -q "GROUP_RANK=1 "; then
    node0=1 node1=0
  fi
  [[ $(grep "HOST=${podname[0]}\$" <<<"$lines" | grep -c "GROUP_RANK=$node0 ") -eq 2 ]] ||
    note_fail "$job: pod 0 (${podname[0]}) is not node $node0"
  [[ $(grep "HOST=${podname[1]}\$" <<<"$lines" | grep -c "GROUP_RANK=$node1 ") -eq 2 ]] ||
    note_fail "$job: pod 1 (${podname[1]}) is not node $node1"
  [[ $(grep "HOST=${podname[0]}\$" <<<"$lines" | grep -c "MASTER_ADDR=$1 ") -eq 2 ]] ||
    note_fail "$job: MASTER_ADDR in pod 0 is not $1"
  [[ $(grep "HOST=${podname[1]}\$" <<<"$lines" | grep -c "MASTER_ADDR=$2 ") -eq 2 ]] ||
    note_fail "$job: MASTER_ADDR in pod 1 is not $2"
  [[ $(cat "$work/$job".*.out | grep -c 'SUM 10$') -eq 4 ]] ||
    note_fail "$job: not every rank's all_reduce gave 10"
  if [[ $3 == - ]]; then
    ! grep -q "scheduler: " "$work/$job.0.out" || note_fail "$job: the launch line names a scheduler"
  else
    grep -qF "scheduler: $3" "$work/$job.0.out" ||
      note_fail "$job: the launch line does not say 'scheduler: $3'"
  fi
  pass "$job ok (ranks 0..3 over both pods, node ranks, master $1 / $2, scheduler: $3)"
}

job=trainjob
podname=(tj-node-0-0 tj-node-0-1)
hosts_file=$(hostsfile tj-node-0-0.tj tj-node-0-0 -- tj-node-0-1.tj tj-node-0-1)
common="PET_NNODES=2 PET_NPROC_PER_NODE=2 PET_MASTER_ADDR=tj-node-0-0.tj PET_MASTER_PORT=29400"
podenv=("$common PET_NODE_RANK=0" "$common PET_NODE_RANK=1")
run_pods
check tj-node-0-0.tj tj-node-0-0.tj "kubeflow: 2 nodes from PET_NNODES=2"

job=pytorchjob
podname=(pj-master-0 pj-worker-0)
hosts_file=$(hostsfile pj-master-0 -- pj-worker-0)
common="MASTER_PORT=23456 PET_MASTER_PORT=23456 WORLD_SIZE=4 PET_NPROC_PER_NODE=2 PET_NNODES=2"
podenv=("$common MASTER_ADDR=localhost PET_MASTER_ADDR=localhost RANK=0 PET_NODE_RANK=0"
  "$common MASTER_ADDR=pj-master-0 PET_MASTER_ADDR=pj-master-0 RANK=1 PET_NODE_RANK=1")
run_pods
check localhost pj-master-0 "kubeflow: 2 nodes from PET_NNODES=2"

job=legacy
podname=(lg-master-0 lg-worker-0)
hosts_file=$(hostsfile lg-master-0 -- lg-worker-0)
common="MASTER_PORT=23456 WORLD_SIZE=2"
podenv=("$common MASTER_ADDR=lg-master-0 RANK=0" "$common MASTER_ADDR=lg-master-0 RANK=1")
cmdflags=--nproc_per_node=2
run_pods
cmdflags=
check lg-master-0 lg-master-0 "kubeflow: 2 nodes from WORLD_SIZE=2 (pods)"

job=elastic
podname=(el-worker-0 el-worker-1)
hosts_file=$(hostsfile el-worker-0 -- el-worker-1)
common="PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=el-worker-0:23456 PET_NNODES=1:2"
common+=" PET_NPROC_PER_NODE=2 PET_MAX_RESTARTS=3 PET_RDZV_CONF=last_call_timeout=10"
podenv=("$common" "$common")
run_pods
# No node rank and no master: the PET_* options alone (c10d) make the job, as for torchrun.
check el-worker-0 el-worker-0 -

end_test
