#!/usr/bin/env bash
# Heartbeats through etcd members that hold requests without answering them:
#   bash tests/integration/etcd_silent_members_test.sh /abs/path/to/build/launcher/dtrun
# A member frozen (SIGSTOP), cut off or restarting accepts a request and answers nothing; a
# client waits a while for it, then asks the next. Several such members in a row must not hold a
# node's heartbeat past the keeper's dead-after time (10 s here): in the flake table, a killed
# leader's restarting member and a frozen follower held two agents' heartbeats for 10.4 s and the
# keeper called both nodes lost, while etcd served every other request.
# Here, a real 3-member etcd cluster and two "members" that accept connections and never answer
# (a listening socket nobody reads): node 1 lists a follower first, then the two silent ones, then
# the others; node 0 (the keeper's) the leader first. While the round runs, the follower is frozen
# for 12 s, so node 1's heartbeats meet three silent members in a row. With a 6 s try per member
# (the default for a request) that is 18 s; the job must finish, nothing restarted, no node lost.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" etcd_silent_members_test "$@"
sanitizers_in_short_form "the etcd client's deadlines and member failover"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
# shellcheck source=lib/etcd_cluster.sh
source "$HERE/lib/etcd_cluster.sh"
WORKER=$HERE/workers/node_worker.sh
# Dead after 10 s of silence (0.5 s x 20). Only heartbeats are judged here: leases of 60 s, and an
# exit barrier of 30 s, as node 1's other requests (the round's end, read with a request's own
# tries) may each take a try per silent member too.
CONF=keep_alive_interval=0.5,keep_alive_max_attempt=20,read_timeout=30,last_call_timeout=1
CONF=$CONF,close_timeout=30,lease_ttl=60

etcd_cluster_start 3
IFS=, read -r -a members <<<"$ETCD_ENDPOINTS"
leader=$(etcd_leader || true)
[[ $leader =~ ^[0-2]$ ]] || die "no etcd leader found ('$leader')"
frozen=$(((leader + 1) % 3))
other=$(((leader + 2) % 3))

# Accepts connections (the kernel's backlog) and never reads or answers.
silent=()
for _ in 1 2; do
  port=$(free_port)
  "$PYTHON" -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
time.sleep(600)' "$port" &
  pids+=("$!")
  silent+=("127.0.0.1:$port")
done

marker=$work/go
common() {
  echo --rdzv_backend=etcd --rdzv_id=silent --nnodes=2 --rdzv_conf="$CONF" --no_python \
    --nproc_per_node=1
}
# shellcheck disable=SC2046
start node0 $(common) --rdzv_endpoint="${members[leader]},${members[other]},${members[frozen]}" \
  --local_addr=127.0.0.1 "$WORKER" wait "$marker"
wait_for "$work/node0.out" "runs the keeper" || die "node 0 never ran the keeper"
# shellcheck disable=SC2046
start node1 $(common) \
  --rdzv_endpoint="${members[frozen]},${silent[0]},${silent[1]},${members[leader]},${members[other]}" \
  --local_addr=127.0.0.2 "$WORKER" wait "$marker"

running_workers() { cat "$work"/logs/node*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV'; }
until=$((SECONDS + 40))
until [[ $(running_workers) -ge 2 ]]; do
  ((SECONDS < until)) || die "the round did not start within 40 s"
  sleep 0.1
done
sleep 1  # a few heartbeats through the follower, which node 1's client now asks first
kill -STOP "${ETCD_PIDS[$frozen]}"
sleep 12
kill -CONT "${ETCD_PIDS[$frozen]}"
touch "$marker"

ok=0
for n in node0 node1; do expect_rc "$n" 0 || ok=1; done
restarts=$(find "$work/logs" -name 'attempt_1*' | wc -l)
lost=$(grep -h "no heartbeat for" "$work"/node*.out || true)
if [[ $ok -eq 0 && $restarts -eq 0 && -z $lost ]]; then
  pass "a follower frozen for 12 s, then two silent members: node 1's heartbeats went on, nothing restarted"
else
  note_fail "node 1 called lost or the job restarted ($restarts attempt_1 directories): ${lost:-no 'no heartbeat' line}"
fi
end_test
