#!/usr/bin/env bash
# dtrun's etcd backend against a real 3-member etcd cluster (Debian's etcd-server) on loopback:
#   bash tests/integration/etcd_rdzv_test.sh /abs/path/to/build/launcher/dtrun
# Scenarios:
#   three    3 agents form a job: unmodified torch 1.13 gloo ranks bootstrap through node 0's
#            workers' store (MASTER_ADDR/MASTER_PORT from the round); every worker's environment
#   member   kill -9 of one etcd member while the job runs: nothing restarts
#   leader   (a fresh cluster) kill -9 of etcd's leader in the middle of a round (two agents
#            joined, the third not yet): the round closes under the next leader, nothing restarts
#   frozen   then, the killed member back, a follower frozen (SIGSTOP) for 5 s, cut off from
#            clients and peers alike, while the job runs; and node 2's only etcd endpoint frozen
#            for 2 s (etcd unreachable from one node): it waits for etcd, keeps its lease, and
#            nothing restarts
#   keeper   kill -9 of the agent that runs the keeper and serves the workers' store, in a
#            --nnodes=2:3 job with --max_restarts=1: the two survivors re-rendezvous with a new
#            keeper and a new workers' store host, and finish; the report says what happened
#   outage   the one etcd member killed and restarted 5 s later: the job waits for it, finishes
#   paused   the keeper's agent frozen past its lease, resumed after another agent took over, then
#            the new keeper killed: the resumed one writes nothing (fenced), the survivors finish
#   elastic  a late node grows a 2:3 job; a spare of a 2:2 job takes a lost node's place
#   tls      TLS with a client certificate (good), a wrong CA (one line, exit 2)
#   auth     user/password (good), a wrong password (one line, exit 2)
# After every scenario: no key of the job is left in etcd. Every agent runs with --local_addr
# 127.0.0.<n> so that the node serving the workers' store shows in MASTER_ADDR.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" etcd_rdzv_test "$@"
sanitizers_in_short_form "the etcd backend's rounds and keepers, dtrun's own code"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
# shellcheck source=lib/etcd_cluster.sh
source "$HERE/lib/etcd_cluster.sh"
WORKER=$HERE/workers/node_worker.sh
# Heartbeats judged after 10 s: a killed etcd leader stalls writes for about 5.5 s (etcd answers
# "request timed out" after 5 s + 2 election timeouts); leases, not heartbeats, find dead agents.
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=20,read_timeout=20,last_call_timeout=1
# Leases of 4 s: with 2 s, one agent's lease ended 3 s into a round under the flake table's load
# (scripts/flake_table.sh), its keep-alives late while etcd's leader had just been replaced.
FAST=$FAST,close_timeout=5,lease_ttl=4

logs_of() { find "$work/logs/$1" -path "*/$2/*/stdout.log" 2>/dev/null | sort; }
env_lines() { cat "$@" 2>/dev/null | grep -h '^ENV ' || true; }
field() { sed -E "s/.* $1=([^ ]*).*/\1/"; }
wait_until() {  # <seconds> <command...>: true once the command succeeds
  local until=$((SECONDS + $1))
  shift
  while ((SECONDS < until)); do "$@" && return 0; sleep 0.1; done
  return 1
}
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }  # <from> <to>, seconds
etcdctl3() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINTS" "${ETCD_CTL_AUTH[@]}" "$@"; }
ETCD_CTL_AUTH=()
# finished_without_restart <agent name prefix> <what passed> <what failed>: agents <prefix>_0..2
# all exit 0 and none ran a second attempt.
finished_without_restart() {
  local ok=0 i restarts
  for i in 0 1 2; do expect_rc "$1_$i" 0 || ok=1; done
  restarts=$(find "$work/logs" -path "*$1_*" -name 'attempt_1*' | wc -l)
  if [[ $ok -eq 0 && $restarts -eq 0 ]]; then
    pass "$2"
  else
    note_fail "$3: agents failed or restarted ($restarts attempt_1 directories)"
  fi
}
no_keys_left() {  # <scenario> <job id>
  local keys
  keys=$(etcdctl3 get --prefix "/dtrun/$2/" --keys-only 2>&1 | grep -c . || true)
  [[ $keys -eq 0 ]] && pass "$1: no key of job '$2' left in etcd" ||
    note_fail "$1: $keys key(s) of job '$2' left in etcd: $(etcdctl3 get --prefix "/dtrun/$2/" --keys-only | head -5 | tr '\n' ' ')"
}

etcd_cluster_start 3
ENDPOINTS=$ETCD_ENDPOINTS
common() {  # <job id> <nnodes>: the options every agent of a job shares
  echo --rdzv_backend=etcd --rdzv_endpoint="$ENDPOINTS" --rdzv_id="$1" --nnodes="$2" \
    --rdzv_conf="$FAST" --no_python
}

# --- three: torch ranks bootstrap through node 0's workers' store ----------------------------
for i in 0 1 2; do
  # shellcheck disable=SC2046
  start "three_$i" $(common three 3) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=$((i % 2 + 1)) \
    "$PYTHON" "$HERE/torch_gloo_rank.py"
done
ok=0
for i in 0 1 2; do expect_rc "three_$i" 0 || ok=1; done
if [[ $ok -eq 0 ]]; then
  pass "three: 3 agents through etcd, 4 unmodified torch gloo ranks bootstrapped and all_reduced"
fi
no_keys_left three three
for i in 0 1 2; do
  start "env_$i" $(common envs 3) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=$((i % 2 + 1)) \
    --node_rank="$i" "$WORKER" env
done
ok=0
for i in 0 1 2; do expect_rc "env_$i" 0 || ok=1; done
if [[ $ok -eq 0 ]]; then
  mapfile -t files < <(for i in 0 1 2; do logs_of "env_$i" attempt_0; done)
  lines=$(env_lines "${files[@]}")
  ranks=$(field RANK <<<"$lines" | sort -n | tr '\n' ' ')
  masters=$(sed -E 's/.* MASTER_ADDR=([^ ]*) MASTER_PORT=([^ ]*).*/\1:\2/' <<<"$lines" | sort -u)
  groups=$(field GROUP_RANK <<<"$lines" | sort -nu | tr '\n' ' ')
  if [[ $ranks == "0 1 2 3 " && $groups == "0 1 2 " && $(wc -l <<<"$masters") -eq 1 &&
    $masters == 127.0.0.1:* ]]; then
    pass "three: ranks 0-3, node ranks 0-2, one MASTER_ADDR:MASTER_PORT ($masters, node 0's)"
  else
    note_fail "three: ranks '$ranks', node ranks '$groups', masters '$masters'"
  fi
fi
no_keys_left envs envs

# --- member: kill -9 of one etcd member while the job runs ----------------------------------
marker=$work/member.go
for i in 0 1 2; do
  start "member_$i" $(common member 3) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" wait "$marker"
done
if wait_until 30 bash -c "[[ \$(cat $work/logs/member_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 3 ]]"; then
  etcd_kill_member 2
  sleep 5  # longer than the lease TTL: a member's loss must not cost any agent its lease
  touch "$marker"
  finished_without_restart member "member: kill -9 of one of 3 etcd members while the job ran: nothing restarted" "member"
else
  note_fail "member: the job never started"
fi
no_keys_left member member
etcd_cluster_stop

# --- leader: kill -9 of etcd's leader in the middle of a round --------------------------------
etcd_cluster_start 3
ENDPOINTS=$ETCD_ENDPOINTS
marker=$work/leader.go
for i in 0 1; do
  start "leader_$i" $(common leader 3) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" wait "$marker"
done
leader=$(etcd_leader || true)
if [[ -n $leader ]] && wait_for "$work/leader_1.out" "rendezvous of job 'leader'" &&
  wait_for "$work/leader_0.out" "rendezvous of job 'leader'"; then
  etcd_kill_member "$leader"
  start leader_2 $(common leader 3) --local_addr=127.0.0.3 --nproc_per_node=1 "$WORKER" wait "$marker"
  if wait_until 40 bash -c "[[ \$(cat $work/logs/leader_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 3 ]]"; then
    pass "leader: the round closed under the next leader (member $leader killed while 2 of 3 agents waited in it)"
  else
    note_fail "leader: the round did not close within 40 s of killing etcd's leader (member $leader)"
  fi
  # frozen: the killed member back; another frozen past the lease TTL while the job runs.
  etcd_restart_member "$leader"
  wait_until 20 etcdctl3 endpoint health --cluster >/dev/null 2>&1 ||
    note_fail "frozen: the restarted member $leader did not rejoin within 20 s"
  # A follower: the cluster keeps its leader and its quorum (a frozen leader is the kill above).
  now_leads=$(etcd_leader || true)
  frozen=$(((leader + 1) % 3))
  [[ $frozen != "$now_leads" ]] || frozen=$(((leader + 2) % 3))
  kill -STOP "${ETCD_PIDS[$frozen]}"
  sleep 5
  kill -CONT "${ETCD_PIDS[$frozen]}"
  touch "$marker"
  finished_without_restart leader "frozen: etcd member $frozen (a follower) frozen for 5 s while the job ran: nothing restarted" "frozen"
else
  note_fail "leader: no leader found ('$leader') or the first two agents never joined"
fi
no_keys_left leader leader

# frozen, from one node: node 2 talks to one member only, frozen for 2 s (half the lease TTL).
marker=$work/onenode.go
IFS=, read -r -a members <<<"$ENDPOINTS"
for i in 0 1 2; do
  endpoint=$ENDPOINTS
  ((i != 2)) || endpoint=${members[2]}
  start "onenode_$i" --rdzv_backend=etcd --rdzv_endpoint="$endpoint" --rdzv_id=onenode --nnodes=3 \
    --rdzv_conf="$FAST" --no_python --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" wait "$marker"
done
if wait_until 30 bash -c "[[ \$(cat $work/logs/onenode_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 3 ]]"; then
  kill -STOP "${ETCD_PIDS[2]}"
  sleep 2
  kill -CONT "${ETCD_PIDS[2]}"
  sleep 1
  touch "$marker"
  finished_without_restart onenode "frozen: node 2's only etcd member frozen for 2 s: it waited, nothing restarted" "frozen (one node)"
else
  note_fail "frozen (one node): the job never started"
fi
no_keys_left onenode onenode
etcd_cluster_stop
etcd_cluster_start 3
ENDPOINTS=$ETCD_ENDPOINTS

# --- keeper: kill -9 of the agent with the keeper and the workers' store -------------------
marker=$work/keeper.go
# --node_rank=0: node 0 holds the workers' store, and ranks otherwise follow arrival, which under
# load may put another agent's join before the first one's.
start keeper_0 $(common keeper 2:3) --local_addr=127.0.0.1 --node_rank=0 --max_restarts=1 \
  --nproc_per_node=1 --report="$work/keeper_0.json" "$WORKER" wait "$marker"
wait_until "$LIMIT" grep -q "runs the keeper" "$work/keeper_0.out" ||
  note_fail "keeper: the first agent did not say it runs the keeper"
for i in 1 2; do
  start "keeper_$i" $(common keeper 2:3) --local_addr=127.0.0.$((i + 1)) --max_restarts=1 \
    --nproc_per_node=1 --report="$work/keeper_$i.json" "$WORKER" wait "$marker"
done
if wait_until 30 bash -c "[[ \$(cat $work/logs/keeper_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 3 ]]"; then
  before=$(env_lines $(logs_of keeper_1 attempt_0) | sed -E 's/.* MASTER_ADDR=([^ ]*) MASTER_PORT=([^ ]*).*/\1:\2/')
  killed_at=$(date +%s.%N)
  kill -9 "${pid_of[keeper_0]}"
  finish keeper_0
  if wait_until 30 grep -q "runs the keeper" "$work/keeper_1.out" "$work/keeper_2.out" 2>/dev/null; then
    took_over=$(date +%s.%N)
    pass "keeper: a survivor took over the keeper $(since "$killed_at" "$took_over") s after kill -9 (lease TTL 4 s)"
  fi
  # The survivors' next attempt: wait for its workers, then let them finish.
  wait_until 30 bash -c "cat $work/logs/keeper_[12]/*/*/*/stdout.log 2>/dev/null | grep '^ENV' | grep -qv 'MASTER_ADDR=127.0.0.1 '" || true
  restarted_at=$(date +%s.%N)
  touch "$marker"
  ok=0
  for i in 1 2; do expect_rc "keeper_$i" 0 || ok=1; done
  # No line but the old store's is a failure to report below, not an exit here (pipefail).
  after=$(cat "$work"/logs/keeper_[12]/*/*/*/stdout.log 2>/dev/null | grep '^ENV' |
    sed -E 's/.* MASTER_ADDR=([^ ]*) MASTER_PORT=([^ ]*).*/\1:\2/' | grep -v "^$before\$" | sort -u) || true
  if [[ $ok -eq 0 && -n $after && $after != 127.0.0.1:* ]]; then
    pass "keeper: the two survivors re-rendezvoused (workers again $(since "$killed_at" "$restarted_at") s after the kill) with the workers' store moved from $before to $after, and finished"
  else
    note_fail "keeper: survivors exited non-zero or the workers' store did not move (before $before, after '$after'); survivors said: $(tail -n 5 "$work/keeper_1.out" "$work/keeper_2.out" | tr '\n' ' ')"
  fi
  report=$(ls "$work"/keeper_[12].json 2>/dev/null | xargs grep -l node_reports 2>/dev/null | head -1)
  if [[ -n $report ]] && grep -q "lost" "$report"; then
    pass "keeper: the new keeper's node wrote the job's report, which says a node was lost"
  else
    note_fail "keeper: no job report naming the lost node ($(ls "$work"/keeper_*.json 2>/dev/null | tr '\n' ' '))"
  fi
else
  note_fail "keeper: the job never started"
fi
no_keys_left keeper keeper

# --- outage: the one etcd member killed and restarted 5 s later while the job runs ---------
# Issue 34, bug 3: every agent exited 1 within the second ("no etcd endpoint answered
# /v3/watch") though read_timeout (20 s here) promised to wait, and the job's keys stayed.
etcd_cluster_stop
etcd_cluster_start 1
ENDPOINTS=$ETCD_ENDPOINTS
marker=$work/outage.go
for i in 0 1; do
  start "outage_$i" $(common outage 2) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" wait "$marker"
done
if wait_until 30 bash -c "[[ \$(cat $work/logs/outage_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 2 ]]"; then
  etcd_kill_member 0
  sleep 5
  etcd_restart_member 0
  sleep 2
  touch "$marker"
  ok=0
  for i in 0 1; do expect_rc "outage_$i" 0 || ok=1; done
  grep -q "waiting for etcd at\|no endpoint answers" "$work/outage_0.out" "$work/outage_1.out" ||
    { note_fail "outage: no agent said it was waiting for etcd"; ok=1; }
  [[ $ok -eq 0 ]] && pass "outage: etcd killed and restarted 5 s later: the job waited for it and finished"
else
  note_fail "outage: the job never started"
fi
touch "$marker"
no_keys_left outage outage
etcd_cluster_stop
etcd_cluster_start 3
ENDPOINTS=$ETCD_ENDPOINTS

# --- paused: the keeper's agent frozen past its lease, resumed after another took over -------
# Issue 34, bug 2: the resumed keeper wrote a stale round and a closed state over the live
# keeper's; after kill -9 of the new keeper the survivors' workers succeeded but their agents
# waited forever. Its writes are fenced on the leader key it made: it writes nothing, stops,
# and its agent exits on its lost lease; the survivors finish.
marker=$work/paused.go
start paused_0 $(common paused 2:4) --local_addr=127.0.0.1 --nproc_per_node=1 "$WORKER" wait "$marker"
wait_until "$LIMIT" grep -qs "runs the keeper" "$work/paused_0.out" ||
  note_fail "paused: the first agent did not say it runs the keeper"
for i in 1 2 3; do
  start "paused_$i" $(common paused 2:4) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" wait "$marker"
done
if wait_until 30 bash -c "[[ \$(cat $work/logs/paused_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 4 ]]"; then
  kill -STOP "${pid_of[paused_0]}"
  frozen_at=$SECONDS
  new_keeper=""
  for _ in $(seq 150); do  # the lease (4 s) lapses, another agent takes over
    for i in 1 2 3; do
      grep -q "runs the keeper" "$work/paused_$i.out" && new_keeper=$i && break 2
    done
    sleep 0.1
  done
  # Frozen longer than a node may stay silent (10 s): its keeper's clock, on resume, would find
  # every node silent, the stale judgement it must not write.
  while ((SECONDS - frozen_at < 12)); do sleep 0.2; done
  kill -CONT "${pid_of[paused_0]}"
  if [[ -z $new_keeper ]]; then
    note_fail "paused: no other agent took over the keeper while the first was frozen"
  else
    sleep 3  # the resumed keeper runs into its fence (or its lost lease) meanwhile
    kill -9 "${pid_of[paused_$new_keeper]}"
    finish "paused_$new_keeper"
    wait_until 30 bash -c "cat $work/logs/paused_[123]/*/*/*/stdout.log 2>/dev/null | grep '^ENV' | grep -q 'GROUP_WORLD_SIZE=2 '" || true
    touch "$marker"
    ok=0
    for i in 1 2 3; do
      [[ $i -eq $new_keeper ]] || expect_rc "paused_$i" 0 || ok=1
    done
    finish paused_0
    [[ $rc -ne 0 ]] || { note_fail "paused: the resumed agent exited 0 though its lease was gone"; ok=1; }
    if grep -q "no longer leads\|no longer runs the keeper\|lease is gone\|lease expired" "$work/paused_0.out"; then
      :
    else
      note_fail "paused: the resumed agent did not say it lost the keeper or its lease"
      ok=1
    fi
    [[ $ok -eq 0 ]] &&
      pass "paused: the frozen keeper's agent, resumed after a takeover, wrote nothing; after kill -9 of the new keeper the survivors finished"
  fi
else
  note_fail "paused: the job never started"
fi
touch "$marker"
no_keys_left paused paused

# --- elastic: a late node grows the job; a spare replaces a lost node ------------------------
for i in 0 1; do
  start "grow_$i" $(common grow 2:3) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" grow 3
done
wait_until 30 bash -c "[[ \$(cat $work/logs/grow_*/*/attempt_0/*/stdout.log 2>/dev/null | grep -c '^ENV') -ge 2 ]]" || true
start grow_2 $(common grow 2:3) --local_addr=127.0.0.3 --nproc_per_node=1 "$WORKER" grow 3
ok=0
for i in 0 1 2; do expect_rc "grow_$i" 0 || ok=1; done
[[ $ok -eq 0 ]] && pass "elastic: a late third node grew a 2:3 job, which finished with 3 nodes"
no_keys_left elastic grow

marker=$work/spare.go
for i in 0 1 2; do
  start "spare_$i" $(common spare 2) --local_addr=127.0.0.$((i + 1)) --nproc_per_node=1 \
    "$WORKER" wait "$marker"
  sleep 0.3
done
# The spare is whichever node joined third: under load (ASan agents beside a CPU-bound suite) the
# one started last is not always last to reach etcd.
spare_node() {
  local i
  for i in 0 1 2; do grep -q "waiting as a spare" "$work/spare_$i.out" 2>/dev/null && echo "$i" && return 0; done
  return 1
}
if wait_until 30 spare_node >/dev/null; then
  spare=$(spare_node)
  members=()
  for i in 0 1 2; do [[ $i == "$spare" ]] || members+=("$i"); done
  kill -9 "${pid_of[spare_${members[1]}]}"
  finish "spare_${members[1]}"
  wait_until 30 bash -c "compgen -G '$work/logs/spare_$spare/*/attempt_0/*/stdout.log' >/dev/null" || true
  touch "$marker"
  ok=0
  for i in "${members[0]}" "$spare"; do expect_rc "spare_$i" 0 || ok=1; done
  [[ $ok -eq 0 && -n $(logs_of "spare_$spare" attempt_0) ]] &&
    pass "elastic: the spare (node $spare) took the place of a killed node" ||
    note_fail "elastic: the spare (node $spare) did not take over"
else
  note_fail "elastic: the third node of a 2-node job did not wait as a spare"
fi
no_keys_left spare spare
etcd_cluster_stop

# --- tls: client certificates; a wrong CA -----------------------------------------------------
etcd_cluster_start 3 --tls
ENDPOINTS=$ETCD_ENDPOINTS
ETCD_CTL_AUTH=(--cacert="$ETCD_CA" --cert="$ETCD_CERT" --key="$ETCD_KEY")
FAST_TLS=$FAST,cacert=$ETCD_CA,cert=$ETCD_CERT,key=$ETCD_KEY
for i in 0 1; do
  start "tls_$i" --rdzv_backend=etcd --rdzv_endpoint="$ENDPOINTS" --rdzv_id=tls --nnodes=2 \
    --rdzv_conf="$FAST_TLS" --no_python --local_addr=127.0.0.$((i + 1)) "$WORKER" env
done
ok=0
for i in 0 1; do expect_rc "tls_$i" 0 || ok=1; done
[[ $ok -eq 0 ]] && pass "tls: 2 agents through etcd over TLS with client certificates"
no_keys_left tls tls
start tls_bad --rdzv_backend=etcd --rdzv_endpoint="$ENDPOINTS" --rdzv_id=tlsbad --nnodes=2 \
  --rdzv_conf="$FAST,cacert=$ETCD_WRONG_CA,cert=$ETCD_CERT,key=$ETCD_KEY" --no_python "$WORKER" env
if expect_rc tls_bad 2; then
  lines=$(grep -c '^dtrun: ' "$work/tls_bad.out" || true)
  [[ $lines -eq 1 ]] && pass "tls: a wrong CA is one line and exit 2: $(grep '^dtrun: ' "$work/tls_bad.out")" ||
    note_fail "tls: a wrong CA gave $lines dtrun: lines: $(cat "$work/tls_bad.out")"
fi
etcd_cluster_stop

# --- auth: user and password ------------------------------------------------------------------
etcd_cluster_start 3 --auth
ENDPOINTS=$ETCD_ENDPOINTS
ETCD_CTL_AUTH=(--user="$ETCD_USER:$ETCD_PASSWORD")
for i in 0 1; do
  DTRUN_ETCD_PASSWORD=$ETCD_PASSWORD start "auth_$i" --rdzv_backend=etcd \
    --rdzv_endpoint="$ENDPOINTS" --rdzv_id=auth --nnodes=2 --rdzv_conf="$FAST,user=$ETCD_USER" \
    --no_python --local_addr=127.0.0.$((i + 1)) "$WORKER" env
done
ok=0
for i in 0 1; do expect_rc "auth_$i" 0 || ok=1; done
[[ $ok -eq 0 ]] && pass "auth: 2 agents through etcd with user/password auth"
no_keys_left auth auth
start auth_bad --rdzv_backend=etcd --rdzv_endpoint="$ENDPOINTS" --rdzv_id=authbad --nnodes=2 \
  --rdzv_conf="$FAST,user=$ETCD_USER,password=wrong-$$" --no_python "$WORKER" env
if expect_rc auth_bad 2; then
  lines=$(grep -c '^dtrun: ' "$work/auth_bad.out" || true)
  [[ $lines -eq 1 ]] && pass "auth: a wrong password is one line and exit 2: $(grep '^dtrun: ' "$work/auth_bad.out")" ||
    note_fail "auth: a wrong password gave $lines dtrun: lines: $(cat "$work/auth_bad.out")"
fi
etcd_cluster_stop

end_test
