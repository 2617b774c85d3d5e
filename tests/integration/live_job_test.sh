#!/usr/bin/env bash
# The whole job's live view: three agents of one c10d job on loopback, each with --status_port.
# The agent that hosts the store gathers every node's status through the store, so its /status
# lists all 3 nodes and 6 ranks (each other agent shows its own node). Then one node dies
# (SIGKILL to its agent): it drops out of the gathered view, which shows the nodes that remain.
#   bash tests/integration/live_job_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" live_job_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
command -v curl >/dev/null || die "curl not found: scripts/setup.sh installs it"

port=$(free_port)
declare -A status_of=()
for i in 0 1 2; do
  status_of[$i]=$(free_port)
  start "n$i" --nnodes=2:3 --nproc_per_node=2 --max_restarts=3 --rdzv_backend=c10d \
    --rdzv_endpoint=127.0.0.1:"$port" --rdzv_conf=last_call_timeout=5 \
    --status_port="${status_of[$i]}" --no_python sleep 300
done

# nodes_at <agent>: "<nodes> <ranks> <pids...>" of that agent's /status, or "" when unreadable.
nodes_at() {
  curl -s --max-time 3 "http://127.0.0.1:${status_of[$1]}/status" | "$PYTHON" -c '
import json, sys
try:
    nodes = json.load(sys.stdin)["nodes"]
except Exception:
    sys.exit(0)
ranks = [r for n in nodes for r in n["ranks"] if r["state"] == "running"]
print(len(nodes), len(ranks), " ".join(str(r["pid"]) for r in ranks))' || true
}

# The gathering agent: the one whose view lists all three nodes (at most $LIMIT s).
gatherer=""
until_s=$((SECONDS + LIMIT))
while [[ -z $gatherer ]] && ((SECONDS < until_s)); do
  for i in 0 1 2; do
    read -r nodes ranks _ <<<"$(nodes_at "$i")" || true
    if [[ ${nodes:-0} == 3 && ${ranks:-0} == 6 ]]; then gatherer=$i; break; fi
  done
  sleep 0.3
done
[[ -n $gatherer ]] || { tail -n 5 "$work"/n*.out >&2; die "no agent's /status listed 3 nodes and 6 running ranks"; }
pass "agent $gatherer (the store's host) lists all 3 nodes and 6 ranks"
others=()
for i in 0 1 2; do [[ $i == "$gatherer" ]] || others+=("$i"); done
read -r nodes ranks _ <<<"$(nodes_at "${others[0]}")"
[[ $nodes == 1 && $ranks == 2 ]] || note_fail "agent ${others[0]} shows $nodes nodes and $ranks ranks, expected its own 1 and 2"

# One node dies: its agent is killed outright (its workers follow it: the guardian).
victim=${others[1]}
victim_pids=$(pgrep -P "${pid_of[n$victim]}" | tr '\n' ' ' || true)
kill -9 "${pid_of[n$victim]}"
wait "${pid_of[n$victim]}" 2>/dev/null || true
forget "${pid_of[n$victim]}"
dropped=0
until_s=$((SECONDS + LIMIT))
while ((SECONDS < until_s)); do
  read -r nodes ranks pids <<<"$(nodes_at "$gatherer")" || true
  if [[ ${nodes:-0} == 2 ]]; then
    dropped=1
    for p in $victim_pids; do [[ " $pids " == *" $p "* ]] && dropped=0; done
    ((dropped)) && break
  fi
  sleep 0.3
done
((dropped)) || die "after node $victim died, agent $gatherer's view still shows ${nodes:-?} nodes"
pass "the dead node dropped out: agent $gatherer shows 2 nodes"

for i in "$gatherer" "${others[0]}"; do kill -TERM "${pid_of[n$i]}" 2>/dev/null || true; done
for i in "$gatherer" "${others[0]}"; do finish "n$i"; done
end_test
