#!/usr/bin/env bash
# The worker of the fault-injection campaign: fault_worker.sh <pid dir> <initial nodes>
# Prints its environment and the number of sockets it inherited on one line, and writes
# "<pid> <grandchild pid>" to <pid dir>/<RUN_ID>.<GROUP_RANK>.<LOCAL_RANK>.<attempt>.<pid> so
# that the campaign can pick a victim and check afterwards that nothing of the job survived.
# The grandchild (a sleep in the worker's process group) is there for the agent's group kill to
# reach. In the job's first shape (attempt 0, <initial nodes> nodes) the worker holds until a
# fault changes that (at most 60 s, then exits 3); after a restart or a membership change it
# exits 0 at once.
dir=$1
initial=$2
# Sockets it got from the agent (none should reach a worker: see the campaign's checks).
sockets=0
for fd in /proc/$$/fd/*; do [[ $(readlink "$fd") != socket:* ]] || sockets=$((sockets + 1)); done
echo "ENV RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK" \
  "GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE RESTART=$TORCHELASTIC_RESTART_COUNT PID=$$ SOCKETS=$sockets" \
  "MASTER_PORT=$MASTER_PORT"
if [[ $TORCHELASTIC_RESTART_COUNT -ne 0 || $GROUP_WORLD_SIZE -ne $initial ]]; then
  exit 0
fi
sleep 60 &
grandchild=$!
name=$dir/$TORCHELASTIC_RUN_ID.$GROUP_RANK.$LOCAL_RANK.$TORCHELASTIC_RESTART_COUNT.$$
echo "$$ $grandchild" >"$name.tmp" && mv "$name.tmp" "$name"
for _ in $(seq 600); do sleep 0.1; done
exit 3
