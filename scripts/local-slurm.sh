#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for the tests and for trying scripts/slurm/ by hand:
# Debian's slurm-wlm (22.05) and munge, slurmctld on host "ctl" and one slurmd per node
# (node1..nodeN). Every host is a network namespace with its own address and host name, so
# traffic stays inside namespaces made here and each node looks like a machine of its own.
#
#   scripts/local-slurm.sh up           installs the packages (apt, once), starts the cluster
#                                       and waits until every node is idle; a no-op when it is up
#   scripts/local-slurm.sh exec CMD...  runs a client (srun, sbatch, squeue, scancel...) on ctl;
#                                       no CMD: a shell there
#   scripts/local-slurm.sh down         cancels the jobs, stops every daemon and leftover process
#                                       by PID, removes the namespaces, the route and the state
#
# Settings (environment): DTRUN_SLURM_DIR state folder (/run/dtrun-slurm), DTRUN_SLURM_NODES (2),
# DTRUN_SLURM_CPUS per node (4), DTRUN_SLURM_NETNS namespace prefix (dslm), DTRUN_SLURM_SUBNET
# first three octets of the /24 (10.215.0), DTRUN_SLURM_LOGIN host that exec uses (ctl).
# Needs root, iproute2 and util-linux. Every daemon gets DTRUN_SLURM_MARK=<state folder> in its
# environment and the job steps inherit it: `down` finds leftovers by it.
set -euo pipefail

dir=${DTRUN_SLURM_DIR:-/run/dtrun-slurm}
prefix=${DTRUN_SLURM_NETNS:-dslm}
subnet=${DTRUN_SLURM_SUBNET:-10.215.0}
nodes=${DTRUN_SLURM_NODES:-2}
cpus=${DTRUN_SLURM_CPUS:-4}
conf=$dir/etc/slurm.conf
sock=$dir/munge/munge.socket

die() { echo "local-slurm: $*" >&2; exit 1; }
bad_setting() { echo "local-slurm: $*" >&2; exit 2; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
settings() { printf 'prefix=%s\nsubnet=%s\nnodes=%s\ncpus=%s\n' "$prefix" "$subnet" "$nodes" "$cpus"; }
# The running cluster's settings win over the environment's (down and exec must find it again).
load_state() { [[ ! -f $dir/state ]] || source "$dir/state"; }
host_names() { echo ctl; seq -f 'node%g' 1 "$nodes"; }

# A zombie counts as dead: PID 1 here may reap orphans late.
alive() { local s; s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [[ -n $s && $s != Z ]]; }
# The PID in <pid file> if that process is alive and is <command>.
daemon_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) && alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] && echo "$pid"
}
# stop <grace seconds> <pid...>: SIGTERM, then SIGKILL for whoever is left after the grace.
stop() {
  local grace=$1 pid left=()
  shift
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq $((grace * 10))); do
    left=()
    for pid in "$@"; do alive "$pid" && left+=("$pid"); done
    ((${#left[@]} > 0)) || return 0
    sleep 0.1
  done
  kill -KILL "${left[@]}" 2>/dev/null || true
}

# on <host> <cmd...>: runs cmd on that host: its network namespace, its own host name, the
# cluster's /etc/hosts (bind-mounted in a private mount namespace) and SLURM_CONF. Not `ip netns
# exec`: it remounts /sys, and slurmd then fails to find /sys/fs/cgroup.
on_cmd() {
  local host=$1
  shift
  cmd=(nsenter --net="/run/netns/$prefix-$host" -- unshare --mount --uts --propagation private --
    /bin/sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && export HOSTNAME="$2" && shift 2 && exec "$@"'
    on "$dir/hosts" "$host" env SLURM_CONF="$conf" "$@")
}
on() { on_cmd "$@" && "${cmd[@]}"; }

install_packages() {
  local b missing=0 made_policy=0 rc=0 log
  for b in slurmctld slurmd srun sbatch scontrol munged munge; do command -v "$b" >/dev/null || missing=1; done
  ((missing)) || return 0
  # Debian's packages ship init scripts; a policy-rc.d that says 101 keeps apt from starting them.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  log=$(mktemp)
  local install=(apt-get install -y -q --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge)
  export DEBIAN_FRONTEND=noninteractive
  "${install[@]}" >"$log" 2>&1 || { apt-get update -q >>"$log" 2>&1 && "${install[@]}" >>"$log" 2>&1; } || rc=$?
  ((made_policy == 0)) || rm -f /usr/sbin/policy-rc.d
  if ((rc != 0)); then
    tail -n 15 "$log" >&2
    rm -f "$log"
    die "apt-get install slurm-wlm munge failed (exit $rc); is Debian's package registry reachable?"
  fi
  rm -f "$log"
}

# The hosts: namespace <prefix>-sw holds a bridge, every host's eth0 is a veth plugged into it
# (both ends made inside namespaces, nothing in the root one), ctl = .10, node<i> = .(10+i).
hosts_up() {
  ip route replace blackhole "$subnet.0/24" # first: a stray packet for the subnet fails here
  ip netns add "$prefix-sw"
  ip -n "$prefix-sw" link set lo up
  ip -n "$prefix-sw" link add br0 type bridge forward_delay 0 stp_state 0
  ip -n "$prefix-sw" link set br0 up
  local i=0 host
  {
    echo "127.0.0.1 localhost"
    for host in $(host_names); do
      ip netns add "$prefix-$host"
      ip -n "$prefix-$host" link set lo up
      ip link add eth0 netns "$prefix-$host" type veth peer name "v-$host" netns "$prefix-sw"
      ip -n "$prefix-sw" link set "v-$host" master br0 up
      ip -n "$prefix-$host" addr add "$subnet.$((10 + i))/24" dev eth0
      ip -n "$prefix-$host" link set eth0 up
      echo "$subnet.$((10 + i)) $host"
      i=$((i + 1))
    done
  } >"$dir/hosts"
}

write_config() {
  mkdir -p "$dir"/{etc,ctld,log,munge,munge-key}
  chmod 755 "$dir" "$dir/munge" # munge clients in every namespace reach the socket by its path
  chmod 700 "$dir/munge-key"
  head -c 1024 /dev/urandom >"$dir/munge-key/munge.key"
  chmod 400 "$dir/munge-key/munge.key"
  local host
  for host in $(host_names); do mkdir -p "$dir/spool/$host"; done
  # proctrack/linuxproc and task/none: no cgroups needed. config_overrides: nodes may declare
  # more CPUs than the machine has.
  cat >"$conf" <<EOF
ClusterName=dtrunlocal
SlurmctldHost=ctl($subnet.10)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MailProg=/bin/true
EOF
  for i in $(seq 1 "$nodes"); do
    echo "NodeName=node$i NodeHostname=node$i NodeAddr=$subnet.$((10 + i)) CPUs=$cpus State=UNKNOWN" >>"$conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$conf"
}

idle_nodes() { on ctl sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l; }
all_idle() { [[ $(idle_nodes) == "$nodes" ]]; }
# wait_for <what> <seconds> <command...>: polls the command every 50 ms.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq $((seconds * 20))); do "$@" && return 0; sleep 0.05; done
  for log in "$dir"/log/*.log; do [[ ! -f $log ]] || { echo "--- $log" && tail -n 10 "$log"; } >&2; done
  die "$what within $seconds s (logs above)"
}

cmd_up() {
  [[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
    bad_setting "DTRUN_SLURM_NETNS='$prefix': use 1-8 of a-z0-9, starting with a letter"
  [[ $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] ||
    bad_setting "DTRUN_SLURM_SUBNET='$subnet': use three octets, e.g. 10.215.0"
  [[ $nodes =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 50)) ||
    bad_setting "DTRUN_SLURM_NODES='$nodes': use 1..50"
  [[ $cpus =~ ^[0-9]+$ ]] && ((cpus >= 1)) || bad_setting "DTRUN_SLURM_CPUS='$cpus': use a positive number"
  [[ $dir == /* ]] || bad_setting "DTRUN_SLURM_DIR='$dir': use an absolute path"
  if [[ -f $dir/state && $(cat "$dir/state") == "$(settings)" ]] &&
    daemon_pid "$dir/slurmctld.pid" slurmctld >/dev/null && all_idle; then
    echo "local-slurm: already up ($nodes nodes); run clients with: $0 exec srun -N$nodes hostname" >&2
    return 0
  fi
  [[ ! -f $dir/state ]] || (cmd_down)
  local t0 t_apt apt_ms=0
  t0=$(date +%s%N)
  t_apt=$t0
  install_packages
  apt_ms=$(ms_since "$t_apt")
  mkdir -p "$dir"
  settings >"$dir/state" # first, so that `down` can undo whatever follows
  trap 'echo "local-slurm: up failed, tearing down" >&2; (cmd_down)' EXIT
  hosts_up
  write_config

  # munged in the root namespace: its socket is a path, reached from every namespace.
  (cd / && DTRUN_SLURM_MARK=$dir munged --force --socket="$sock" --key-file="$dir/munge-key/munge.key" \
    --seed-file="$dir/munge-key/munged.seed" --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log")
  wait_for "munged did not write its pid file" 10 daemon_pid "$dir/munge/munged.pid" munged >/dev/null
  (cd / && on ctl env DTRUN_SLURM_MARK="$dir" slurmctld -i)
  wait_for "slurmctld did not answer" 20 on ctl scontrol ping >/dev/null 2>&1
  for i in $(seq 1 "$nodes"); do (cd / && on "node$i" env DTRUN_SLURM_MARK="$dir" slurmd -N "node$i"); done
  wait_for "not every node became idle" 30 all_idle
  trap - EXIT
  echo "local-slurm: $nodes nodes up in $(ms_since "$t0") ms (packages: $apt_ms ms);" \
    "run clients with: $0 exec srun -N$nodes hostname" >&2
}

cmd_down() {
  load_state
  local t0 pid pids=() host
  t0=$(date +%s%N)
  if daemon_pid "$dir/slurmctld.pid" slurmctld >/dev/null; then
    local jobs
    jobs=$(on ctl squeue -h -o %A 2>/dev/null | tr '\n' ' ') || true
    if [[ -n ${jobs// /} ]]; then
      on ctl scancel $jobs 2>/dev/null || true
      for _ in $(seq 100); do [[ -z $(on ctl squeue -h -o %A 2>/dev/null) ]] && break; sleep 0.1; done
    fi
  fi
  # slurmd before slurmctld: a slurmd whose controller is gone spends ~10 s saying goodbye.
  for host in $(host_names); do
    pid=$(daemon_pid "$dir/slurmd-$host.pid" slurmd) && pids+=("$pid")
  done
  stop 10 "${pids[@]}"
  pid=$(daemon_pid "$dir/slurmctld.pid" slurmctld) && stop 10 "$pid"
  pid=$(daemon_pid "$dir/munge/munged.pid" munged) && stop 10 "$pid"
  # Leftovers: anything carrying the mark (a slurmstepd after a crash) or still inside one of
  # the namespaces (job tasks). slurmstepd ignores SIGTERM, hence the short grace.
  pids=()
  local file ns
  while read -r file; do
    pid=${file#/proc/} && pid=${pid%/environ} && [[ $pid != "$$" ]] && pids+=("$pid")
  done < <(grep -lzxF "DTRUN_SLURM_MARK=$dir" /proc/[0-9]*/environ 2>/dev/null || true)
  for ns in $(ip netns list | awk -v p="$prefix-" 'index($1, p) == 1 {print $1}'); do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null)
  done
  stop 2 "${pids[@]}"
  for ns in $(ip netns list | awk -v p="$prefix-" 'index($1, p) == 1 {print $1}'); do ip netns del "$ns"; done
  ip route del blackhole "$subnet.0/24" 2>/dev/null || true
  rm -rf "$dir"
  echo "local-slurm: down in $(ms_since "$t0") ms" >&2
}

cmd_exec() {
  [[ -f $dir/state ]] || bad_setting "no cluster at $dir: start one with $0 up"
  load_state
  (($# > 0)) || set -- "${SHELL:-/bin/bash}"
  on_cmd "${DTRUN_SLURM_LOGIN:-ctl}" "$@"
  exec "${cmd[@]}" # the command keeps this PID, so `local-slurm.sh exec srun ... &` gives srun's
}

[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, daemons as root)"
case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  exec) shift && cmd_exec "$@" ;;
  *) echo "usage: $0 up|down|exec [CMD...]   (see the comment at the top of this script)" >&2 && exit 2 ;;
esac
