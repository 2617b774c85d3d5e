#!/usr/bin/env bash
# Fault-injection campaign: repeated runs of a 3-node job (3 dtrun agents, 1-2 workers each, on
# loopback or in three network namespaces), each hit by one random fault at a random time while
# the job runs; every run is then checked against the outcome its fault must have.
#   bash tests/integration/fault_campaign_test.sh /abs/path/to/build/launcher/dtrun
# Short form (CI: DTRUN_TEST_LONG=0; a sanitizer build by default): 12 runs, which take each fault
# kind once; 20 otherwise (LONG in lib/preamble.sh).
# Long form: FAULT_RUNS=500 bash tests/integration/fault_campaign_test.sh build/launcher/dtrun
# Settings (environment):
#   FAULT_RUNS=N     number of runs
#   FAULT_SEED=S     seed of the campaign (printed; default: from the clock)
#   FAULT_ONLY=I     replay run I of seed S alone (every run draws from S and its own index)
#   FAULT_NET=M      auto (default: netns when root with iproute2 and nsenter, else loopback),
#                    loopback or netns
#   FAULT_BOUND=T    seconds a run may last (default 40, 90 for a sanitizer build)
#   FAULT_KINDS=K,.. draw only these faults (names below; default: all that the hosts allow)
#   FAULT_BACKENDS=B,.. draw the rendezvous from these: static, c10d (dtrun's store on node 0)
#                    and etcd (one etcd member of the campaign's own: on loopback, or for netns
#                    runs in the namespace the hosts' links meet in); default: all three, etcd
#                    where etcd-server is installed
#
# Faults and the outcome each must have (nodes 0..2; node 0's agent hosts the store; "min" is
# the job's minimum node count: 3 for static rendezvous, 2 or 3 for c10d or etcd 2:3 / 3:3).
# With etcd no agent hosts the store: the host-* faults are drawn with static or c10d only, and
# agent-kill, agent-term and agent-pause may hit node 0 too (the keeper is whichever agent leads).
#   worker-restart  a worker dies of a random signal (KILL TERM SEGV ABRT HUP USR1), restarts
#                   left: every agent exits 0, the victim's agent names its rank and pid, the
#                   job's next round is attempt 1 everywhere and its workers see
#                   TORCHELASTIC_RESTART_COUNT=1.
#   worker-final    the same with no restarts left: every agent exits 128+signal, and every
#                   agent's failure report names the victim's rank, local rank, pid and -signal.
#   agent-kill      SIGKILL to node 1 or 2's agent: min 2: the survivors name the node (no
#                   heartbeat), form round 1 of 2 nodes (attempt 0: not charged) and exit 0;
#                   min 3: they exit 1 naming it ("below the 3 required ... lost node N").
#   agent-term      SIGTERM/SIGINT/SIGHUP/SIGQUIT to node 1 or 2's agent: it exits 128+signal
#                   after stopping its workers; the survivors are told "node N ... left the job"
#                   at once, then as for agent-kill.
#   host-kill       SIGKILL to node 0's agent (the store): the others exit 1 naming the store
#                   ("lost the rendezvous store at ADDR:PORT").
#   host-term       SIGTERM/SIGINT/SIGHUP/SIGQUIT to node 0's agent: it exits 128+signal; the
#                   others exit 1 naming the store, or node 0 ("lost node 0"), or the store their
#                   health check before the next round could not reach ("health check store
#                   failed on HOST: ... on ADDR:PORT: ...").
#   host-pause      SIGSTOP to node 0's agent (the store and its keeper) for 2.6 s, longer than a
#                   node may stay silent (2 s), then SIGCONT: nobody is judged by the keeper's
#                   own stall (issue 34, bug 1: it declared every node dead, its own included).
#                   2.5 s after the resume every agent still runs and none printed "lost"; then a
#                   worker is killed, and the job goes on as for worker-restart (max_restarts=1).
#   link-down       (netns only) node N's link goes down: N=1,2: N exits 1 naming the store; the
#                   survivors as for agent-kill. N=0: nodes 1 and 2 exit 1 naming the store;
#                   node 0 exits 1 (its peers are lost: below min, or join_timeout).
#   agent-pause     SIGSTOP to node 1 or 2's agent (its workers run on) for 5 s, past the 2 s of
#                   silence that make it lost, then SIGCONT: the survivors as for agent-kill; the
#                   resumed agent writes nothing into the round it comes back to (the counters
#                   below), stops its workers and exits 1 naming the store that dropped it.
#   one-way         (netns only) node N's outgoing packets dropped (a blackhole qdisc on its
#                   link; what it is sent still arrives): as link-down, one direction only.
#   link-slow       (netns only) every node's link in both directions through a token bucket
#                   (96 kbit/s, 50 ms of queue: 30 KB take 2.8 s, 2 of 3 packets are dropped and
#                   sent again) for 3 s, then a worker dies as in worker-restart: as
#                   worker-restart, and no node is judged lost.
# With etcd (FAULT_BACKENDS): the same outcomes, save that any node may be the victim of
#   agent-kill, agent-term, agent-pause, link-down and one-way (none hosts the store), a lost
#   node is named as "lost: no heartbeat", "lost: its etcd lease ended" or "lost, with the job's
#   keeper" (it ran the keeper: a successor took over), and a node cut off or paused past its
#   lease exits 1 naming etcd ("lost etcd at ADDR:PORT"), writing nothing into the job.
# Checks after every run, whatever the fault:
#   - every agent ended within the run's bound (else: a dump of who was still running and what
#     each was waiting for, then kill -9);
#   - exit codes and report lines as above;
#   - no process of the job is left: every agent gets a marker variable, inherited by its
#     workers and theirs; /proc/*/environ is scanned for it (by PID). After SIGKILL of an agent
#     its workers die with it (PR_SET_PDEATHSIG) and their own children by its guardian process;
#   - no port of the job stays bound (loopback: the store's port, with etcd the workers' store's;
#     netns: any listening socket in the hosts' namespaces), and no worker inherited a socket
#     from its agent;
#   - the store's counters agree: every agent's rounds (number, nodes, world size, attempt)
#     match the keeper's log, workers' TORCHELASTIC_RESTART_COUNT, GROUP_WORLD_SIZE and
#     WORLD_SIZE match their agent's round, world size = the sum of the round's nproc;
#   - with etcd: no key of the job is left in etcd (within 4 s: leases of killed agents lapse).
# Safety: loopback, or namespaces of our own on 10.216.X.0/24 (prefix "dflt") behind a
# blackhole route; every process is stopped by its PID; everything is removed on exit.
set -uo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" fault_campaign "$@"
WORKER=$HERE/workers/fault_worker.sh
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"

RUNS=${FAULT_RUNS:-$((LONG ? 20 : 12))}
SEED=${FAULT_SEED:-$(($(date +%s%N) / 1000 % 1000000))}
ONLY=${FAULT_ONLY:-}
BOUND=${FAULT_BOUND:-$((SANITIZED ? 90 : 40))}
NET=${FAULT_NET:-auto}
for v in RUNS SEED BOUND; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "fault_campaign: FAULT_$v must be a number, got '${!v}'" >&2; exit 2; }
done
[[ -z $ONLY || $ONLY =~ ^[0-9]+$ ]] || { echo "fault_campaign: FAULT_ONLY must be a run number" >&2; exit 2; }
all_kinds=(worker-restart worker-final agent-kill agent-term host-kill host-term host-pause link-down
  agent-pause one-way link-slow)
netns_kinds=" link-down one-way link-slow "  # only between namespaces
KINDS=${FAULT_KINDS:-$(IFS=,; echo "${all_kinds[*]}")}
for k in ${KINDS//,/ }; do
  [[ " ${all_kinds[*]} " == *" $k "* ]] ||
    { echo "fault_campaign: FAULT_KINDS: unknown fault '$k' (known: ${all_kinds[*]})" >&2; exit 2; }
done
all_backends=(static c10d)
command -v etcd >/dev/null && command -v etcdctl >/dev/null && all_backends+=(etcd)
BACKENDS=${FAULT_BACKENDS:-$(IFS=,; echo "${all_backends[*]}")}
for b in ${BACKENDS//,/ }; do
  [[ " static c10d etcd " == *" $b "* ]] ||
    { echo "fault_campaign: FAULT_BACKENDS: unknown backend '$b' (known: static, c10d, etcd)" >&2; exit 2; }
  [[ " ${all_backends[*]} " == *" $b "* ]] ||
    { echo "fault_campaign: FAULT_BACKENDS=etcd needs etcd and etcdctl (scripts/setup.sh installs them)" >&2; exit 2; }
done
store_backends=0  # static or c10d drawn: the host-* faults (node 0 hosts the store) can be
[[ ,$BACKENDS, != *,static,* && ,$BACKENDS, != *,c10d,* ]] || store_backends=1
if [[ $store_backends -eq 0 && -z $(tr ',' '\n' <<<"$KINDS" | grep -v '^host-') ]]; then
  echo "fault_campaign: the host-* faults need a store on node 0: FAULT_BACKENDS static or c10d" >&2
  exit 2
fi
case $NET in auto | loopback | netns) ;; *)
  echo "fault_campaign: FAULT_NET must be auto, loopback or netns, got '$NET'" >&2
  exit 2 ;;
esac
# Dead after 2 s of silence, store lost after 4 s: fast, yet far above a loaded machine's jitter. An
# elastic round (2:3) closes at once when all 3 nodes are in; the last call only waits for a late
# one, and 2 s covers a node started late on a loaded machine (seen: 0.55 s under CI load).
CONF=keep_alive_interval=0.5,keep_alive_max_attempt=4,read_timeout=4,last_call_timeout=2
CONF=$CONF,close_timeout=5,join_timeout=15
ulimit -c 0  # workers dying of SIGSEGV/SIGABRT leave no core files

tag=dflt$(($$ % 10000))
subnet= # 10.216.X, claimed below (claim_subnet)
sw=$tag-sw
made=()
route_added=0
agent_pids=()
etcd_pids=()
stop_ours() {  # the agents, whatever carries our mark, etcd, then the namespaces and the route
  local p ns
  for p in "${agent_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${agent_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in $(marked_pids "fault-$SEED-$$-"); do kill -9 "$p" 2>/dev/null || true; done
  for p in "${etcd_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${etcd_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for ns in "${made[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
  [[ $route_added -eq 0 ]] || ip route del blackhole "$subnet.0/24" 2>/dev/null || true
}
at_exit stop_ours

# The PIDs of live (not zombie) processes whose environment has DTRUN_FAULT_MARK=<prefix>...
marked_pids() {
  local f pid
  for f in $(grep -lz "^DTRUN_FAULT_MARK=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [[ $(proc_state "$pid") == Z ]] || echo "$pid"
  done
}

proc_state() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }

# ---- hosts: network namespaces (when possible) -----------------------------------------------
netns=0
if [[ $NET != loopback ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null && command -v nsenter >/dev/null &&
    claim_subnet 10.216; then
    route_added=1
    if ip netns add "$sw" 2>/dev/null; then
      made+=("$sw")
      netns=1
      ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up &&
        ip -n "$sw" link set lo up || netns=0
      for i in 0 1 2; do
        ns=$tag-node$((i + 1))
        ip netns add "$ns" && made+=("$ns") &&
          ip -n "$ns" link set lo up &&
          ip link add eth0 netns "$ns" type veth peer name "v-node$((i + 1))" netns "$sw" &&
          ip -n "$sw" link set "v-node$((i + 1))" master br0 up &&
          ip -n "$ns" addr add "$subnet.$((11 + i))/24" dev eth0 &&
          ip -n "$ns" link set eth0 up || netns=0
      done
    fi
  fi
  only_netns=1
  for k in ${KINDS//,/ }; do [[ $netns_kinds == *" $k "* ]] || only_netns=0; done
  if [[ $netns -eq 0 && ($NET == netns || $only_netns -eq 1) ]]; then
    echo "fault_campaign: FAIL: netns hosts (FAULT_NET=netns, $netns_kinds) need root, iproute2," \
      "nsenter and namespaces" >&2
    exit 1
  fi
fi
[[ $netns -eq 1 ]] && nets="loopback, netns ($subnet.0/24)" || nets="loopback (no network namespaces here)"

# ---- etcd: one member on loopback, one in the switch's namespace (reached over the links) ----
# start_etcd <name> <client addr:port> <peer addr:port> [nsenter ...]: returns once it answers.
start_etcd() {
  local name=$1 client=$2 peer=$3
  shift 3
  "$@" etcd --name "$name" --data-dir "$work/etcd-$name" --logger zap --log-level error \
    --listen-client-urls "http://$client" --advertise-client-urls "http://$client" \
    --listen-peer-urls "http://$peer" --initial-advertise-peer-urls "http://$peer" \
    --initial-cluster "$name=http://$peer" --initial-cluster-state new \
    --heartbeat-interval 50 --election-timeout 500 >"$work/etcd-$name.log" 2>&1 &
  etcd_pids+=("$!")
  local until=$((SECONDS + 20))
  until "$@" env ETCDCTL_API=3 etcdctl --endpoints="$client" --dial-timeout=1s endpoint health \
    >/dev/null 2>&1; do
    if ((SECONDS >= until)); then
      tail -n 5 "$work/etcd-$name.log" >&2
      echo "fault_campaign: FAIL: etcd ($name, $client) did not answer within 20 s" >&2
      exit 1
    fi
    sleep 0.2
  done
}
# etcd_keys <endpoint> <prefix> [nsenter ...]: the keys etcd holds under the prefix, one a line
etcd_keys() {
  local ep=$1 prefix=$2
  shift 2
  "$@" env ETCDCTL_API=3 etcdctl --endpoints="$ep" --dial-timeout=2s get --prefix "$prefix" \
    --keys-only 2>/dev/null | grep . || true
}
etcd_loopback="" etcd_netns=""
if [[ ,$BACKENDS, == *,etcd,* ]]; then
  etcd_loopback=127.0.0.1:$(free_port)
  start_etcd loopback "$etcd_loopback" "127.0.0.1:$(free_port)"
  if [[ $netns -eq 1 ]]; then
    ip -n "$sw" addr add "$subnet.1/24" dev br0
    etcd_netns=$subnet.1:2379
    start_etcd netns "$etcd_netns" 127.0.0.1:2380 nsenter --net="/run/netns/$sw" --
  fi
fi

# An agent's output without its start-up banner (the launch configs, the OMP notice).
without_banner() { awk '/launch configs:/ { skip = 1; next } /^\[/ { skip = 0 } !skip && !/^\*+$|OMP_NUM/'; }

# ---- one run ---------------------------------------------------------------------------------
signal_number() { kill -l "$1"; }
# The run's random numbers: a 63-bit LCG seeded from a hash of (seed, run), so that any run
# replays alone and neighbouring seeds take unrelated paths.
rng=0
seed_rng() {
  rng=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  roll 2
  roll 2
}
roll() {  # roll <n>: a number in 0..n-1, in $rolled
  rng=$(((rng * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff))
  rolled=$(((rng >> 31) % $1))
}
pick() {  # pick <choices...>: one of them, in $picked
  local a=("$@")
  roll ${#a[@]}
  picked=${a[rolled]}
}

declare -A kind_runs=() kind_ok=() kind_bad=()
runs_done=0
faults=0
ok_runs=0
bad_lines=()

# run_one <index>: draws the run's shape and fault from (SEED, index), runs it, checks it.
run_one() {
  local idx=$1
  seed_rng "$SEED:$idx"
  local net=loopback
  pick loopback netns
  [[ $netns -eq 0 ]] || net=$picked
  local kinds=() k
  for k in "${all_kinds[@]}"; do
    [[ ,$KINDS, == *,$k,* ]] || continue
    [[ $k != host-* || $store_backends -eq 1 ]] || continue
    [[ $netns_kinds != *" $k "* ]] && kinds+=("$k") || { [[ $net != netns ]] || kinds+=("$k"); }
  done
  if [[ ${#kinds[@]} -eq 0 ]]; then  # FAULT_KINDS of netns kinds only: every run in netns
    net=netns
    for k in ${KINDS//,/ }; do kinds+=("$k"); done
  fi
  local kind backend min victim signal="" local_rank=0 delay_ms
  pick "${kinds[@]}" && kind=$picked
  # The first runs take every kind these hosts allow in turn (the short CI form meets each one),
  # in namespaces where the kind needs them; then by chance.
  local every=()
  for k in "${all_kinds[@]}"; do
    [[ $k != host-* || $store_backends -eq 1 ]] || continue
    [[ $netns -eq 1 || $netns_kinds != *" $k "* ]] && every+=("$k")
  done
  if [[ -z ${FAULT_KINDS:-} && $idx -lt ${#every[@]} ]]; then
    kind=${every[idx]}
    [[ $netns_kinds != *" $kind "* ]] || net=netns
  fi
  local backends=() b
  for b in ${BACKENDS//,/ }; do [[ $b == etcd && $kind == host-* ]] || backends+=("$b"); done
  pick "${backends[@]}" && backend=$picked
  # ... and the backends in turn, so that the short form meets each of them too.
  [[ -n ${FAULT_KINDS:-} || $idx -ge ${#every[@]} ]] || backend=${backends[idx % ${#backends[@]}]}
  min=3
  [[ $backend == static ]] || { pick 2 3 && min=$picked; }
  # With etcd no agent hosts the store: node 0 is a victim like the others.
  local first=1
  [[ $backend != etcd ]] || first=0
  local nproc=() i
  for i in 0 1 2; do roll 2 && nproc[i]=$((rolled + 1)); done
  roll 1500 && delay_ms=$rolled
  case $kind in
    worker-* | link-slow) roll 3 && victim=$rolled
      roll "${nproc[victim]}" && local_rank=$rolled
      pick KILL TERM SEGV ABRT HUP USR1 && signal=$picked ;;
    host-pause) roll 3 && victim=$rolled  # the worker killed after the pause
      roll "${nproc[victim]}" && local_rank=$rolled
      signal=KILL ;;
    agent-kill) roll $((3 - first)) && victim=$((rolled + first)) && signal=KILL ;;
    agent-term) roll $((3 - first)) && victim=$((rolled + first)) && pick TERM INT HUP QUIT &&
      signal=$picked ;;
    host-kill) victim=0; signal=KILL ;;
    host-term) victim=0; pick TERM INT HUP QUIT && signal=$picked ;;
    link-down | one-way) roll 3 && victim=$rolled ;;
    agent-pause) roll $((3 - first)) && victim=$((rolled + first)) ;;
  esac
  local restarts=0
  [[ $kind != worker-restart ]] || { roll 2 && restarts=$((rolled + 1)); }
  [[ $kind != link-slow ]] || restarts=1
  [[ $kind != host-pause ]] || restarts=1
  local desc="net=$net backend=$backend nnodes=$min:3 nproc=${nproc[0]},${nproc[1]},${nproc[2]}"
  desc+=" max_restarts=$restarts fault=$kind victim=node$victim"
  [[ $kind == worker-* || $kind == host-pause || $kind == link-slow ]] && desc+=" local_rank=$local_rank"
  [[ -n $signal ]] && desc+=" signal=SIG$signal"
  desc+=" delay=${delay_ms}ms"

  local dir=$work/r$idx run_id=f$idx mark=fault-$SEED-$$-$idx
  mkdir -p "$dir/pids"
  local addr=127.0.0.1 port
  if [[ $net == netns ]]; then
    addr=$subnet.11
    port=$((29400 + idx % 1000))
  else
    # Below the kernel's range for connections' own ports: a port the kernel picked (bind to 0)
    # was taken by another test's connection before node 0's store listened on it, once in the
    # flake table ("listen on 0.0.0.0:40299: Address already in use").
    port=$(free_port)
  fi
  local rdzv=()
  if [[ $backend == static ]]; then
    rdzv=(--nnodes=3 --master_addr="$addr" --master_port="$port")
  elif [[ $backend == c10d ]]; then
    rdzv=(--nnodes="$min":3 --rdzv_backend=c10d --rdzv_endpoint="$addr:$port")
  else
    # The store is etcd; the port the run must not leave bound is the workers' store's, which
    # node 0's agent picks (the workers print it).
    addr=$etcd_loopback
    [[ $net != netns ]] || addr=$etcd_netns
    port=${addr#*:}
    addr=${addr%:*}
    rdzv=(--nnodes="$min":3 --rdzv_backend=etcd --rdzv_endpoint="$addr:$port")
  fi
  local pid_of=() start=$SECONDS
  for i in 0 1 2; do
    local conf=$CONF,is_host=$((i == 0 ? 1 : 0))
    # Leases of 2 s find a paused or cut-off agent within the bound; through a slowed link (2 of 3
    # packets dropped and sent again) a keep-alive under the flake table's load came later than
    # that once, and the keeper's agent was dropped after the job had succeeded: 6 s there.
    [[ $backend != etcd ]] || conf=$CONF,lease_ttl=$([[ $kind == link-slow ]] && echo 6 || echo 2)
    local args=(--log_dir="$dir/logs$i" "${rdzv[@]}" --node_rank="$i" --rdzv_id="$run_id"
      --rdzv_conf="$conf" --max_restarts="$restarts"
      --nproc_per_node="${nproc[i]}" --shutdown_timeout=3 --no_python "$WORKER" "$dir/pids" 3)
    if [[ $net == netns ]]; then
      DTRUN_FAULT_MARK=$mark-node$i nsenter --net="/run/netns/$tag-node$((i + 1))" -- \
        unshare --uts -- /bin/sh -c 'hostname "$1" && shift && exec "$@"' on "node$((i + 1))" \
        "$DTRUN" "${args[@]}" >"$dir/$i.out" 2>&1 &
    else
      DTRUN_FAULT_MARK=$mark-node$i "$DTRUN" "${args[@]}" >"$dir/$i.out" 2>&1 &
    fi
    pid_of[i]=$!
    agent_pids+=("$!")
  done

  local reasons=()
  bad() { reasons+=("$*"); }
  # The job runs once every worker of attempt 0 registered; then the fault, after the delay.
  local total=$((nproc[0] + nproc[1] + nproc[2])) n=0
  for _ in $(seq $((BOUND * 10))); do
    n=$(find "$dir/pids" -name "$run_id.*" ! -name '*.tmp' | wc -l)
    [[ $n -ge $total ]] && break
    sleep 0.1
  done
  local victim_pid=""
  if [[ $n -lt $total ]]; then
    bad "the job did not start: $n of $total workers registered within ${BOUND}s"
  else
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    if [[ $kind == host-pause ]]; then
      kill -STOP "${pid_of[0]}"
      sleep 2.6
      kill -CONT "${pid_of[0]}"
      sleep 2.5
      for i in 0 1 2; do
        running "${pid_of[i]}" || bad "node$i's agent ended after node 0's pause"
      done
    fi
    if [[ $kind == link-slow ]]; then
      for i in 1 2 3; do
        tc -n "$tag-node$i" qdisc add dev eth0 root tbf rate 96kbit burst 16kbit latency 50ms
        tc -n "$sw" qdisc add dev "v-node$i" root tbf rate 96kbit burst 16kbit latency 50ms
      done
      sleep 3
    fi
    case $kind in
      worker-* | host-pause | link-slow)
        local f
        f=$(find "$dir/pids" -name "$run_id.$victim.$local_rank.0.*" | head -n 1)
        read -r victim_pid _ <"$f"
        kill -s "$signal" "$victim_pid" ;;
      link-down) ip -n "$sw" link set "v-node$((victim + 1))" down ;;
      one-way) tc -n "$tag-node$((victim + 1))" qdisc add dev eth0 root blackhole ;;
      agent-pause) victim_pid=${pid_of[victim]}
        kill -STOP "$victim_pid"
        sleep 5
        kill -CONT "$victim_pid" ;;
      *) victim_pid=${pid_of[victim]}
        kill -s "$signal" "$victim_pid" ;;
    esac
    faults=$((faults + 1))
  fi

  # ---- every agent ends within the bound (else: who was still running, and on what) ----
  local rcs=() hung=0
  for i in 0 1 2; do
    while running "${pid_of[i]}"; do
      if ((SECONDS >= start + BOUND)); then
        hung=1
        bad "node$i's agent (pid ${pid_of[i]}) still runs after ${BOUND}s" \
          "(state $(proc_state "${pid_of[i]}"))"
        break
      fi
      sleep 0.1
    done
  done
  if [[ $hung -eq 1 ]]; then
    echo "fault_campaign: run $idx hung; still running:" >&2
    local p
    for p in $(marked_pids "$mark-"); do
      echo "    pid $p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-100))" \
        "state $(proc_state "$p")" \
        "waiting in $(cat "/proc/$p/wchan" 2>/dev/null)" >&2
    done
    for i in 0 1 2; do
      echo "    node$i's last lines:" >&2
      without_banner <"$dir/$i.out" | tail -n 4 | sed 's/^/      | /' >&2
    done
  fi
  for i in 0 1 2; do
    wait_agent "${pid_of[i]}" "$SECONDS"
    rcs[i]=$rc
  done
  local took=$((SECONDS - start))
  [[ $kind != link-down ]] || ip -n "$sw" link set "v-node$((victim + 1))" up
  [[ $kind != one-way ]] || tc -n "$tag-node$((victim + 1))" qdisc del dev eth0 root
  if [[ $kind == link-slow ]]; then
    for i in 1 2 3; do
      tc -n "$tag-node$i" qdisc del dev eth0 root 2>/dev/null
      tc -n "$sw" qdisc del dev "v-node$i" root 2>/dev/null
    done
  fi

  # ---- exit codes and report lines ----
  out() { cat "$dir/$1.out" 2>/dev/null; }
  expect_rc() {  # <node> <code...>
    local node=$1 c
    shift
    for c in "$@"; do [[ ${rcs[node]} -eq $c ]] && return 0; done
    bad "node$node exited ${rcs[node]}, expected $*"
  }
  expect_line() {  # <node> <what> <extended regex>
    grep -Eq -- "$3" "$dir/$1.out" || bad "node$1 did not print $2 (/$3/)"
  }
  local sig_no=0 others=() survivors=()
  [[ -z $signal ]] || sig_no=$(signal_number "$signal")
  for i in 0 1 2; do [[ $i -eq $victim ]] || others+=("$i"); done
  local store_re="lost the rendezvous store at ${addr//./\\.}:$port"
  [[ $backend != etcd ]] || store_re="lost etcd at ${addr//./\\.}:$port"
  local rank=-1
  if [[ ($kind == worker-* || $kind == host-pause || $kind == link-slow) && -n $victim_pid ]]; then
    rank=$(sed -n 's/.* RANK=\([0-9]*\) .*PID='"$victim_pid"' .*/\1/p' "$dir"/logs"$victim"/*/attempt_0/*/stdout.log 2>/dev/null | head -n 1)
  fi
  if [[ ${#reasons[@]} -eq 0 ]]; then
    case $kind in
      worker-restart | host-pause | link-slow)
        for i in 0 1 2; do expect_rc "$i" 0; done
        if [[ $kind != worker-restart ]] && grep -q " lost: no heartbeat\|lost node" "$dir"/[0-2].out; then
          bad "a node was judged lost ($kind): $(grep -h -m1 " lost: no heartbeat\|lost node" "$dir"/[0-2].out)"
        fi
        expect_line "$victim" "the victim's failure" "rank $rank \\(pid $victim_pid\\) failed: signal $sig_no"
        survivors=(0 1 2) ;;
      worker-final)
        for i in 0 1 2; do
          expect_rc "$i" $((128 + sig_no))
          expect_line "$i" "the victim's rank in the report" "rank      : $rank \\(local_rank: $local_rank\\)"
          expect_line "$i" "the victim's exit code and pid" "exitcode  : -$sig_no \\(pid: $victim_pid\\)"
          expect_line "$i" "that no restarts were left" "no restarts left \\(max_restarts=0\\)"
        done ;;
      agent-kill | agent-term | link-down | one-way | agent-pause)
        if [[ $kind == agent-kill ]]; then
          expect_rc "$victim" 137
        elif [[ $kind == agent-term ]]; then
          expect_rc "$victim" $((128 + sig_no))
          expect_line "$victim" "that it stops on the signal" "received SIG$signal: forwarding it to every worker"
        elif [[ $victim -ne 0 || $backend == etcd ]]; then
          expect_rc "$victim" 1
          expect_line "$victim" "the lost store" "$store_re"
        fi
        if [[ ($kind == link-down || $kind == one-way) && $victim -eq 0 && $backend != etcd ]]; then
          expect_rc 0 1
          for i in 1 2; do
            expect_rc "$i" 1
            expect_line "$i" "the lost store" "$store_re"
          done
        else
          local why="lost: no heartbeat"
          # Through etcd: its lease ended, or it ran the keeper, whose successor tells.
          [[ $backend != etcd ]] || why="lost(: no heartbeat|: its etcd lease ended|, with the job's keeper)"
          [[ $kind != agent-term ]] || why="left the job"
          for i in "${others[@]}"; do
            expect_line "$i" "node$victim's loss" "node $victim \\([^)]*\\) $why"
            if [[ $min -eq 2 ]]; then
              expect_rc "$i" 0
              # Through etcd a keeper that left (or was lost) in a gathering round has its
              # successor start the next one: round 1 or later.
              local next_round=1
              [[ $backend != etcd ]] || next_round="[1-9][0-9]*"
              expect_line "$i" "round $next_round of 2 nodes" "round $next_round: node [01] of 2, .* attempt 0"
            else
              expect_rc "$i" 1
              expect_line "$i" "the job's end below min" "below the 3 required \\(--nnodes\\): lost node $victim "
            fi
          done
          [[ $min -eq 3 ]] || survivors=("${others[@]}")
        fi ;;
      host-kill | host-term)
        if [[ $kind == host-kill ]]; then
          expect_rc 0 137
        else
          expect_rc 0 $((128 + sig_no))
        fi
        for i in 1 2; do
          expect_rc "$i" 1
          # Told node 0 left, they rejoin; the store may be gone by their health check, which
          # names it "... on ADDR:PORT: ..." or, refused, "connect(ADDR:PORT): ...".
          expect_line "$i" "the lost store or node 0" \
            "$store_re|lost node 0 |health check store failed on .*[ (]${addr//./\\.}:$port[:)]"
        done ;;
    esac
  fi

  # ---- no process of the job left ----
  local left=() p
  for _ in $(seq 30); do
    mapfile -t left < <(marked_pids "$mark-")
    [[ ${#left[@]} -eq 0 ]] && break
    sleep 0.1
  done
  for p in "${left[@]}"; do
    bad "process $p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)) of the job is still running"
    kill -9 "$p" 2>/dev/null || true
  done

  # ---- no port left bound; no socket reached a worker ----
  local envs hexport listening=""
  envs=$(cat "$dir"/logs*/"$run_id"/*/*/stdout.log 2>/dev/null | grep '^ENV ' || true)
  hexport=$(printf ':%04X ' "$port")
  if [[ $backend == etcd ]]; then  # etcd's port stays; the workers' stores must not
    hexport=$(sed -nE 's/.* MASTER_PORT=([0-9]+).*/\1/p' <<<"$envs" | sort -u | xargs -r printf ':%04X \n')
  fi
  if [[ $net == netns ]]; then
    for i in 1 2 3; do
      listening+=$(nsenter --net="/run/netns/$tag-node$i" -- cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk '$4 == "0A" {print $2}')
    done
  else
    listening=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" {print $2 " "}' |
      grep -F "${hexport:-none}" || true)
  fi
  [[ -z $listening ]] || bad "a port is still listening after the run: ${listening//$'\n'/ }"
  if [[ $backend == etcd ]]; then  # what the agents leave in etcd: nothing, once leases expire
    local ns_cmd=() keys=""
    [[ $net != netns ]] || ns_cmd=(nsenter --net="/run/netns/$sw" --)
    for _ in $(seq 40); do
      keys=$(etcd_keys "$addr:$port" "/dtrun/$run_id/" "${ns_cmd[@]}")
      [[ -z $keys ]] && break
      sleep 0.1
    done
    [[ -z $keys ]] || bad "$(wc -l <<<"$keys") key(s) of the job are left in etcd 4 s after the" \
      "run: $(head -n 4 <<<"$keys" | tr '\n' ' ')"
  fi
  if grep -q 'SOCKETS=[1-9]' <<<"$envs"; then
    bad "a worker inherited sockets from its agent: $(grep -m1 'SOCKETS=[1-9]' <<<"$envs")"
  fi

  # ---- counters: rounds, attempts, world sizes and the workers' view agree ----
  local keeper
  local keepers=0  # the nodes whose agent may have kept the job's rounds
  [[ $backend != etcd ]] || keepers="0 1 2"
  # shellcheck disable=SC2086  # a list of nodes
  keeper=$(for i in $keepers; do out "$i"; done | sed -nE "s/.*job '$run_id' round ([0-9]+) \\(attempt ([0-9]+)\\): ([0-9]+) node.*world size ([0-9]+).*/\\1 \\2 \\3 \\4/p")
  declare -A round_nodes=() round_line=() round_world=()
  for i in 0 1 2; do
    local line
    declare -A first_round_of=()  # attempt -> the round it began in (its log dir's name)
    while read -r line; do
      [[ -n $line ]] || continue
      local r node m w a
      read -r r node m w a <<<"$line"
      local key="$r $a $m $w"
      if [[ -n $keeper ]] && ! grep -qx "$key" <<<"$keeper"; then
        bad "node$i's round $r (attempt $a, $m nodes, world size $w) is not the keeper's"
      fi
      if [[ -n ${round_line[$r]:-} && ${round_line[$r]} != "$key" ]]; then
        bad "nodes disagree on round $r: '${round_line[$r]}' vs '$key'"
      fi
      round_line[$r]=$key
      round_nodes[$r]+=" $node"
      round_world[$r]=$((${round_world[$r]:-0} + nproc[i]))
      # This node's workers of that round: the attempt and shape they were told.
      local bad_env sub=attempt_$a
      if [[ -z ${first_round_of[$a]:-} ]]; then first_round_of[$a]=$r; else sub+=-round$r; fi
      bad_env=$(cat "$dir/logs$i/$run_id/$sub"/*/stdout.log 2>/dev/null | grep '^ENV ' |
        grep -v " WORLD_SIZE=$w GROUP_RANK=$node GROUP_WORLD_SIZE=$m RESTART=$a " || true)
      [[ -z $bad_env ]] || bad "node$i's workers of round $r disagree with it: $(head -n 1 <<<"$bad_env")"
    done < <(out "$i" | sed -nE 's/.*\[agent\] \[info\] round ([0-9]+): node ([0-9]+) of ([0-9]+), ranks [0-9]+\.\.[0-9]+ of world size ([0-9]+), attempt ([0-9]+)$/\1 \2 \3 \4 \5/p')
  done
  local r
  for r in "${!round_line[@]}"; do
    local m w nodes
    read -r _ _ m w <<<"${round_line[$r]}"
    nodes=$(tr ' ' '\n' <<<"${round_nodes[$r]}" | sed '/^$/d' | sort -n | tr '\n' ' ')
    # Every node of a completed round logged it: ranks 0..m-1 once each, world = sum of nproc.
    if [[ $(wc -w <<<"$nodes") -eq $m ]]; then
      [[ $nodes == "$(seq 0 $((m - 1)) | tr '\n' ' ')" ]] || bad "round $r: node ranks '$nodes'"
      [[ ${round_world[$r]} -eq $w ]] || bad "round $r: world size $w, its nodes run ${round_world[$r]} workers"
    fi
  done
  if [[ ($kind == worker-restart || $kind == host-pause) && ${#reasons[@]} -eq 0 ]]; then
    local last
    last=$(printf '%s\n' "${!round_line[@]}" | sort -n | tail -n 1)
    [[ ${round_line[$last]} == "$last 1 3 "* ]] ||
      bad "after the restart the last round is '${round_line[$last]}', expected attempt 1 of 3 nodes"
    [[ $(grep -c "RESTART=1 " <<<"$envs") -eq $total ]] ||
      bad "$(grep -c "RESTART=1 " <<<"$envs") workers saw TORCHELASTIC_RESTART_COUNT=1, expected $total"
  fi
  if [[ ${#survivors[@]} -gt 0 && ${#reasons[@]} -eq 0 ]]; then
    for i in "${survivors[@]}"; do
      grep -q "all .* worker(s) succeeded\|this node's .* worker(s) succeeded" "$dir/$i.out" ||
        bad "node$i did not report its workers' success"
    done
  fi

  runs_done=$((runs_done + 1))
  kind_runs[$kind]=$((${kind_runs[$kind]:-0} + 1))
  local verdict
  if [[ ${#reasons[@]} -eq 0 ]]; then
    ok_runs=$((ok_runs + 1))
    kind_ok[$kind]=$((${kind_ok[$kind]:-0} + 1))
    verdict="as expected"
  else
    kind_bad[$kind]=$((${kind_bad[$kind]:-0} + 1))
    verdict="UNEXPECTED"
  fi
  echo "fault_campaign: run $idx: $desc -> exits ${rcs[*]} in ${took}s: $verdict"
  if [[ ${#reasons[@]} -gt 0 ]]; then
    local reason
    for reason in "${reasons[@]}"; do echo "    - $reason" >&2; done
    for i in 0 1 2; do
      echo "    node$i ($(wc -l <"$dir/$i.out") lines):" >&2
      without_banner <"$dir/$i.out" | tail -n 12 | sed 's/^/      | /' >&2
    done
    bad_lines+=("run $idx: $desc: ${reasons[0]}")
  fi
  rm -rf "$dir"
  agent_pids=()
}

# The replay names FAULT_KINDS only when it was given: without it, the first runs take every kind
# in turn, which a replay with FAULT_KINDS would draw instead (another run).
echo "fault_campaign: seed $SEED, $RUNS run(s), faults: $KINDS; hosts: $nets, bound ${BOUND}s" \
  "per run (replay one run: FAULT_SEED=$SEED FAULT_ONLY=<run>${FAULT_KINDS:+ FAULT_KINDS=$KINDS}" \
  "bash $0 $DTRUN)"
if [[ -n $ONLY ]]; then
  run_one "$ONLY"
else
  for idx in $(seq 0 $((RUNS - 1))); do run_one "$idx"; done
fi

echo
echo "fault_campaign: summary (seed $SEED)"
printf '  %-16s %6s %12s %11s\n' fault runs "as expected" unexpected
for kind in "${all_kinds[@]}"; do
  [[ -n ${kind_runs[$kind]:-} ]] || continue
  printf '  %-16s %6d %12d %11d\n' "$kind" "${kind_runs[$kind]}" "${kind_ok[$kind]:-0}" "${kind_bad[$kind]:-0}"
done
printf '  %-16s %6d %12d %11d\n' total "$runs_done" "$ok_runs" $((runs_done - ok_runs))
echo "  faults injected: $faults"
if [[ $ok_runs -ne $runs_done ]]; then
  printf 'fault_campaign: UNEXPECTED: %s\n' "${bad_lines[@]}" >&2
  echo "fault_campaign: FAIL ($((runs_done - ok_runs)) of $runs_done runs unexpected)" >&2
  exit 1
fi
echo "fault_campaign: PASS"
