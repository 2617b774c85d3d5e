#!/usr/bin/env bash
# Several dtrun agents on loopback acting as one job (each agent is a "node"):
#   bash tests/integration/multinode_test.sh /abs/path/to/build/launcher/dtrun
# Scenarios: static 2 nodes and c10d 3 and 4 nodes with different nproc (every worker's
# environment checked); a c10d port held by a connection, not a store; a failure on node 2
# restarts every node, and the restart budget is the job's; kill -9 of an agent (survivors
# re-rendezvous, or stop when below min); kill -9 of the store host; a late node grows an elastic
# job; a spare fills the hole a dead node left; jobs on a shared `dtrun store` (two at once, with
# torch gloo ranks) get workers' stores of their own; a rerun of a finished job's id is refused.
# Loopback only; every agent runs under timeout(1) and is stopped by its PID; one mktemp
# directory, removed on exit. Failures are collected; exit 1 if any.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" multinode_test "$@"
sanitizers_in_short_form "rendezvous, rounds and restarts across agents (the TSan tree runs it too)"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
WORKER=$HERE/workers/node_worker.sh
# Fast liveness for tests: a silent node is dead after 2 s, a silent store lost after 3 s.
# Not 1 s: under the full suite's load (an ASan tree; the flake table's busy cores) the store
# host's own node went 1 s between heartbeats and was called lost beside the killed one.
FAST=keep_alive_interval=0.5,keep_alive_max_attempt=4,read_timeout=3
FAST=$FAST,last_call_timeout=0.5
FAST=$FAST,close_timeout=5

# env_lines <pattern>: every ENV line of the named agents' workers.
env_lines() { cat "$@" 2>/dev/null | grep -h '^ENV ' || true; }
field() { sed -E "s/.* $1=([^ ]*).*/\1/"; }

# check_world <label> <world size> <nodes> <files...>: the ENV lines of one attempt make a
# consistent world: ranks 0..W-1 once each, one WORLD_SIZE, node ranks 0..N-1, and each worker's
# RANK = its node's first rank + LOCAL_RANK.
check_world() {
  local label=$1 world=$2 nodes=$3
  shift 3
  local lines
  lines=$(env_lines "$@")
  local ranks worlds groups
  ranks=$(field RANK <<<"$lines" | sort -n | tr '\n' ' ')
  worlds=$(field WORLD_SIZE <<<"$lines" | sort -u | tr '\n' ' ')
  groups=$(field GROUP_RANK <<<"$lines" | sort -nu | tr '\n' ' ')
  local want_ranks want_groups
  want_ranks=$(seq 0 $((world - 1)) | tr '\n' ' ')
  want_groups=$(seq 0 $((nodes - 1)) | tr '\n' ' ')
  [[ $ranks == "$want_ranks" ]] || { note_fail "$label: ranks '$ranks', expected '$want_ranks'"; return 1; }
  [[ $worlds == "$world " ]] || { note_fail "$label: WORLD_SIZE '$worlds', expected $world"; return 1; }
  [[ $groups == "$want_groups" ]] || { note_fail "$label: GROUP_RANK '$groups', expected '$want_groups'"; return 1; }
  local gws
  gws=$(field GROUP_WORLD_SIZE <<<"$lines" | sort -u | tr '\n' ' ')
  [[ $gws == "$nodes " ]] || { note_fail "$label: GROUP_WORLD_SIZE '$gws', expected $nodes"; return 1; }
  # RANK - LOCAL_RANK is the same for every worker of a node, and offsets are prefix sums.
  local line bad=0
  declare -A first=()
  while read -r line; do
    local r l g
    r=$(field RANK <<<"$line")
    l=$(field LOCAL_RANK <<<"$line")
    g=$(field GROUP_RANK <<<"$line")
    if [[ -n ${first[$g]:-} && ${first[$g]} -ne $((r - l)) ]]; then bad=1; fi
    first[$g]=$((r - l))
    [[ $(field ROLE_RANK <<<"$line") == "$r" ]] || bad=1
  done <<<"$lines"
  [[ $bad -eq 0 ]] || { note_fail "$label: RANK - LOCAL_RANK differs within a node, or ROLE_RANK != RANK"; return 1; }
}
logs_of() { find "$work/logs/$1" -path "*/$2/*/stdout.log" 2>/dev/null | sort; }

# ---------------------------------------------------------------------------------------------
# static, 2 nodes, nproc 2 and 3.
port=$(free_port)
common=(--nnodes=2 --master_addr=127.0.0.1 --master_port="$port" --rdzv_id=st --no_python)
start st0 "${common[@]}" --node_rank=0 --nproc_per_node=2 "$WORKER" env
start st1 "${common[@]}" --node_rank=1 --nproc_per_node=3 "$WORKER" env
ok=0
expect_rc st0 0 || ok=1
expect_rc st1 0 || ok=1
if [[ $ok -eq 0 ]]; then
  mapfile -t files < <(logs_of st0 attempt_0; logs_of st1 attempt_0)
  if check_world static 5 2 "${files[@]}"; then
    masters=$(env_lines "${files[@]}" | field MASTER_PORT | sort -u)
    [[ $masters == "$port" ]] || note_fail "static: MASTER_PORT '$masters', expected $port"
    n1=$(env_lines $(logs_of st1 attempt_0) | field GROUP_RANK | sort -u)
    [[ $n1 == 1 ]] && pass "static 2 nodes ok (nproc 2+3, node_rank honoured)" ||
      note_fail "static: --node_rank=1 got GROUP_RANK $n1"
  fi
fi

# ---------------------------------------------------------------------------------------------
# c10d, 3 and 4 nodes; every agent guesses is_host from 127.0.0.1: the first to bind hosts.
for n in 3 4; do
  port=$(free_port)
  names=()
  for i in $(seq 0 $((n - 1))); do
    start "c${n}_$i" --nnodes="$n" --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" \
      --rdzv_id="c$n" --rdzv_conf="$FAST" --nproc_per_node=$((i % 2 + 1)) --no_python "$WORKER" env
    names+=("c${n}_$i")
  done
  ok=0
  files=()
  for name in "${names[@]}"; do
    expect_rc "$name" 0 || ok=1
    mapfile -t -O "${#files[@]}" files < <(logs_of "$name" attempt_0)
  done
  world=0
  for i in $(seq 0 $((n - 1))); do world=$((world + i % 2 + 1)); done
  [[ $ok -ne 0 ]] || ! check_world "c10d $n nodes" "$world" "$n" "${files[@]}" ||
    pass "c10d $n nodes ok (world size $world)"
done

# ---------------------------------------------------------------------------------------------
# c10d on a port that a connection holds as its own, with nothing listening (on a busy host the
# kernel hands out free ports as connections' ports too): the agents keep trying to serve the
# store until the connection lets go, instead of all joining a store nobody serves.
port=$(free_port)
"$PYTHON" - "$port" "$work/held" "$work" <<'PY' &
import os, socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
held = socket.socket()
held.bind(("127.0.0.1", int(sys.argv[1])))
held.connect(server.getsockname())
open(sys.argv[2], "w").write("held\n")
# Held until an agent says it found it held (at most 60 s): a fixed 2 s ran out before a slow
# (ASan, loaded) agent looked, which then found the port free and said nothing.
outs = [os.path.join(sys.argv[3], f"held_{i}.out") for i in (0, 1)]
deadline = time.monotonic() + 60
def seen():
    for out in outs:
        try:
            if b"nothing accepts connections there" in open(out, "rb").read():
                return True
        except OSError:
            pass
    return False
while time.monotonic() < deadline and not seen():
    time.sleep(0.1)
time.sleep(0.5)
held.close()
server.close()
PY
pids+=("$!")
if wait_for "$work/held" held 10; then
  for i in 0 1; do
    start "held_$i" --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" \
      --rdzv_id=held --rdzv_conf="$FAST" --nproc_per_node=1 --no_python "$WORKER" env
  done
  ok=0
  for i in 0 1; do expect_rc "held_$i" 0 || ok=1; done
  if [[ $ok -eq 0 ]]; then
    if grep -q "nothing accepts connections there" "$work/held_0.out" "$work/held_1.out"; then
      pass "c10d port held by a connection: the agents waited for it, then one served the store"
    else
      note_fail "held port: no agent said it found the port held with nothing accepting there"
    fi
  fi
fi

# ---------------------------------------------------------------------------------------------
# c10d hosted by `dtrun store` (is_host=0 everywhere): the store's keeper runs the job. The store
# listens on 127.0.0.2 alone, so its keepers must connect there, not to 127.0.0.1.
"$DTRUN" store --host 127.0.0.2 --port 0 --port-file "$work/store.port" >"$work/store.out" 2>&1 &
store_pid=$!
pids+=("$store_pid")
for _ in $(seq 100); do [[ -s $work/store.port ]] && break; sleep 0.05; done
port=$(cat "$work/store.port" 2>/dev/null || echo 1)
shared=(--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:"$port" --rdzv_conf="$FAST,is_host=0")
for i in 0 1; do
  start "ds_$i" "${shared[@]}" --rdzv_id=ds --local_addr=127.0.0.$((i + 3)) --nproc_per_node=1 \
    --no_python "$WORKER" env
done
ok=0
for i in 0 1; do expect_rc "ds_$i" 0 || ok=1; done
mapfile -t files < <(logs_of ds_0 attempt_0; logs_of ds_1 attempt_0)
# The store may serve other jobs: the workers' store is node 0's agent's, at its --local_addr.
masters=$(env_lines "${files[@]}" | sed -E 's/.* (MASTER_ADDR=[^ ]* MASTER_PORT=[^ ]*).*/\1/' | sort -u)
if [[ $ok -eq 0 ]] && check_world "dtrun store host" 2 2 "${files[@]}"; then
  if [[ $masters =~ ^MASTER_ADDR=127\.0\.0\.[34]\ MASTER_PORT=([0-9]+)$ && ${BASH_REMATCH[1]} != "$port" ]]; then
    pass "c10d job hosted by \`dtrun store\` ok; its workers' store is node 0's ($masters)"
  else
    note_fail "dtrun store host: workers should share node 0's store, not the store at $port: '$masters'"
  fi
fi

# A rerun under a finished job's id on the long-lived store fails at once, as torchrun's
# RendezvousClosedError (issue 34, bug 7): it used to wait the whole join timeout, then blame
# a "lost" store.
start ds_again "${shared[@]}" --rdzv_id=ds --local_addr=127.0.0.3 --nproc_per_node=1 \
  --no_python "$WORKER" env
if expect_rc ds_again 2; then
  took=$((SECONDS - started_at[ds_again]))
  if ! grep -q "job 'ds' already finished on this store (.*): use a new --rdzv_id" "$work/ds_again.out"; then
    note_fail "rerun of a finished job: no line says it finished and to use a new --rdzv_id"
  elif ((took > 20)); then
    note_fail "rerun of a finished job: refused only after ${took} s"
  else
    pass "rerun under a finished job's id: refused at once, naming --rdzv_id"
  fi
fi

# One node (--nnodes=1, is_host guessed) whose endpoint `dtrun store` serves on this host joins
# it as a client, as --nnodes=1:2 does (issue 34, bug 8: it tried to serve the store itself and
# failed on the taken port, blaming a --master_port nobody gave).
start one_node --nnodes=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:"$port" --rdzv_id=one \
  --rdzv_conf="$FAST" --nproc_per_node=1 --no_python "$WORKER" env
expect_rc one_node 0 && pass "one node on an endpoint \`dtrun store\` serves here: joined as a client"

# Two jobs on the one `dtrun store` at the same time, unmodified torch gloo ranks in both (worlds
# of 3 and 2): each job's workers bootstrap through their own store, so neither reads the
# other's keys (torch's /worker/attempt_0/... carry no run id).
for job in sa sb; do
  for i in 0 1; do
    nproc=$([[ $job == sa && $i -eq 0 ]] && echo 2 || echo 1)
    start "${job}_$i" "${shared[@]}" --rdzv_id="$job" --local_addr=127.0.0.$((i + 3)) \
      --nproc_per_node="$nproc" "$PYTHON" "$HERE/torch_gloo_rank.py"
  done
done
ok=0
for name in sa_0 sa_1 sb_0 sb_1; do expect_rc "$name" 0 || ok=1; done
[[ $ok -ne 0 ]] || pass "two jobs at once on one \`dtrun store\`: both torch jobs bootstrap and all_reduce"
kill -TERM "$store_pid" 2>/dev/null || true
wait "$store_pid" 2>/dev/null || true

# ---------------------------------------------------------------------------------------------
# A worker failing on node 2 restarts every node; the budget is the job's (max_restarts=1):
# rank 4 fails in attempt 0 only -> success in attempt 1; then rank 4 failing twice ends the
# job with its exit code on every node.
for spec in "1 0" "2 7"; do
  read -r failures want <<<"$spec"
  port=$(free_port)
  for i in 0 1 2; do
    start "f${failures}_$i" --nnodes=3 --node_rank="$i" --master_port="$port" --rdzv_id=f \
      --max_restarts=1 --rdzv_conf="$FAST" --nproc_per_node=2 --no_python "$WORKER" fail 4 "$failures"
  done
  ok=0
  for i in 0 1 2; do expect_rc "f${failures}_$i" "$want" || ok=1; done
  [[ $ok -eq 0 ]] || continue
  if [[ $failures -eq 1 ]]; then
    mapfile -t files < <(for i in 0 1 2; do logs_of "f1_$i" attempt_1; done)
    restarts=$(env_lines "${files[@]}" | field RESTART | sort -u)
    if [[ ${#files[@]} -eq 6 && $restarts == 1 ]] && check_world "restart attempt 1" 6 3 "${files[@]}"; then
      pass "failure on node 2 restarted all 3 nodes (attempt 1 everywhere)"
    else
      note_fail "restart: expected 6 workers in attempt_1 with RESTART=1, got ${#files[@]} ($restarts)"
    fi
  else
    for i in 0 1; do
      grep -q "rank      : 4 (local_rank: 0)" "$work/f2_$i.out" ||
        note_fail "budget: node $i's report does not name rank 4 as the root cause"
    done
    [[ $(grep -c "no restarts left (max_restarts=1)" "$work/f2_0.out") -ge 1 ]] &&
      pass "job-wide budget: second failure ended the job, every node exited 7 and named rank 4" ||
      note_fail "budget: node 0 did not say the restarts were used up"
  fi
done

# ---------------------------------------------------------------------------------------------
# kill -9 of a node's agent: with 2:3 the two survivors re-rendezvous and finish; with 3:3 they
# stop with an error naming the lost node.
for spec in "2 0" "3 1"; do
  read -r min want <<<"$spec"
  port=$(free_port)
  for i in 0 1 2; do
    start "k${min}_$i" --nnodes="$min":3 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" \
      --rdzv_id="k$min" --rdzv_conf="$FAST,is_host=$([[ $i -eq 0 ]] && echo 1 || echo 0)" \
      --node_rank="$i" --nproc_per_node=1 --no_python "$WORKER" grow 9
  done
  # Once all three run (three ENV lines), kill node 2's agent; its worker dies with it.
  for _ in $(seq 200); do
    [[ $(cat $(logs_of "k${min}_0" attempt_0; logs_of "k${min}_1" attempt_0; logs_of "k${min}_2" attempt_0) 2>/dev/null | grep -c '^ENV') -ge 3 ]] && break
    sleep 0.1
  done
  start_kill=$SECONDS
  kill -9 "${pid_of[k${min}_2]}"
  finish "k${min}_2"
  if [[ $min -eq 2 ]]; then
    # The survivors' new round has 2 nodes; "grow 9" never exits, so end it by file: not needed,
    # the test only checks the new round formed, then stops the agents.
    ok=1
    for _ in $(seq 100); do
      if grep -q "round 1: node" "$work/k2_0.out" && grep -q "round 1: node" "$work/k2_1.out"; then ok=0; break; fi
      sleep 0.1
    done
    took=$((SECONDS - start_kill))
    if [[ $ok -eq 0 ]] && grep -q "lost: no heartbeat" "$work/k2_0.out"; then
      pass "kill -9 of node 2 (2:3): survivors noticed (no heartbeat) and formed round 1 within ${took} s"
    else
      note_fail "kill -9 (2:3): survivors did not form round 1"
      tail -n 8 "$work/k2_0.out" | sed 's/^/    | /' >&2
    fi
    kill -TERM "${pid_of[k2_0]}" "${pid_of[k2_1]}" 2>/dev/null || true
    finish k2_0
    finish k2_1
  else
    ok=0
    for i in 0 1; do expect_rc "k3_$i" 1 || ok=1; done
    took=$((SECONDS - start_kill))
    if [[ $ok -eq 0 ]] && grep -q "below the 3 required" "$work/k3_1.out" &&
      grep -q "node 2 (.*) lost" "$work/k3_1.out"; then
      pass "kill -9 of node 2 (3:3): survivors stopped with an error naming node 2 within ${took} s"
    else
      note_fail "kill -9 (3:3): expected exit 1 naming the lost node 2"
      tail -n 5 "$work/k3_1.out" | sed 's/^/    | /' >&2
    fi
  fi
done

# ---------------------------------------------------------------------------------------------
# kill -9 of the store host's agent: the others stop their workers and exit 1 naming the store
# within read_timeout (3 s) + margin.
port=$(free_port)
for i in 0 1; do
  start "h_$i" --nnodes=2 --node_rank="$i" --master_port="$port" --rdzv_id=h --rdzv_conf="$FAST" \
    --nproc_per_node=1 --no_python "$WORKER" grow 9
done
for _ in $(seq 200); do
  [[ $(cat $(logs_of h_0 attempt_0; logs_of h_1 attempt_0) 2>/dev/null | grep -c '^ENV') -ge 2 ]] && break
  sleep 0.1
done
start_kill=$SECONDS
kill -9 "${pid_of[h_0]}"
finish h_0
if expect_rc h_1 1; then
  took=$((SECONDS - start_kill))
  if grep -q "lost the rendezvous store at 127.0.0.1:$port" "$work/h_1.out" && [[ $took -le 10 ]]; then
    pass "kill -9 of the store host: node 1 exited 1 naming the store after ${took} s"
  else
    note_fail "store host killed: node 1 took ${took} s or did not name the store"
    tail -n 5 "$work/h_1.out" | sed 's/^/    | /' >&2
  fi
fi

# ---------------------------------------------------------------------------------------------
# A late node grows an elastic job (1:2): node 0 runs alone, node 1 arrives, both restart with
# GROUP_WORLD_SIZE 2 and succeed. Then a spare: 1:2 with three agents; the third waits, fills
# in when node 1 is killed, and the job succeeds with it.
port=$(free_port)
start g_0 --nnodes=1:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=g \
  --rdzv_conf="$FAST" --nproc_per_node=1 --no_python "$WORKER" grow 2
for _ in $(seq 200); do grep -q "started 1 of 1" "$work/g_0.out" 2>/dev/null && break; sleep 0.1; done
start g_1 --nnodes=1:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=g \
  --rdzv_conf="$FAST" --nproc_per_node=2 --no_python "$WORKER" grow 2
ok=0
expect_rc g_0 0 || ok=1
expect_rc g_1 0 || ok=1
if [[ $ok -eq 0 ]]; then
  lines=$(env_lines $(find "$work/logs/g_0" "$work/logs/g_1" -name stdout.log))
  if grep -q "GROUP_WORLD_SIZE=2" <<<"$lines" && grep -q "WORLD_SIZE=3 " <<<"$lines" &&
    grep -q "joined; rendezvous again" "$work/g_0.out"; then
    pass "a late node grew the job from 1 to 2 nodes (world size 3)"
  else
    note_fail "scale-up: no round with 2 nodes and world size 3"
  fi
fi

port=$(free_port)
go=$work/spare.go
for i in 0 1 2; do
  start "s_$i" --nnodes=1:2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=s \
    --rdzv_conf="$FAST,is_host=$([[ $i -eq 0 ]] && echo 1 || echo 0),last_call_timeout=3" \
    --nproc_per_node=1 --no_python "$WORKER" wait "$go"
  for _ in $(seq 100); do grep -q "rendezvous of job" "$work/s_$i.out" 2>/dev/null && break; sleep 0.1; done
  sleep 0.3
done
for _ in $(seq 200); do grep -q "waiting as a spare" "$work/s_2.out" 2>/dev/null && break; sleep 0.1; done
if grep -q "waiting as a spare" "$work/s_2.out"; then
  kill -9 "${pid_of[s_1]}"
  finish s_1
  # The spare's place first, then the workers' end: with the end first, node 0's worker could
  # finish the job before node 1's death was noticed, and the spare was never needed (the flake
  # table, under load).
  for _ in $(seq 300); do grep -q "round [1-9]: node" "$work/s_2.out" 2>/dev/null && break; sleep 0.1; done
  touch "$go"
  ok=0
  expect_rc s_0 0 || ok=1
  expect_rc s_2 0 || ok=1
  if [[ $ok -eq 0 ]]; then
    if grep -q "round [1-9]: node" "$work/s_2.out"; then
      pass "a spare waited beyond max, then filled the hole of a killed node"
    else
      note_fail "spare: node 2 never got a place"
    fi
  fi
else
  note_fail "spare: the third node did not wait as a spare"
  tail -n 5 "$work/s_2.out" | sed 's/^/    | /' >&2
fi

end_test
