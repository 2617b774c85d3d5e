#!/usr/bin/env bash
# dtrun --hostfile over real OpenSSH: three "hosts" (network namespaces with their own names and
# /etc/hosts), an sshd in each with a throwaway host key, a throwaway user key in the test's
# ssh_config; the launching dtrun runs on node1 and starts an agent on every host over ssh.
#   parse     hostfile errors: one line naming file:line and the fix, exit 2, nothing started
#   job       3 hosts from one command: ranks by host order and slots, the --export'ed and the
#             default variables (PYTHONPATH) reach the workers, PATH stays each host's, the
#             working directory is the launcher's, every console line has its host in front
#   fail      rank 4 (node3) exits 9: exit code 9, node3 named, nothing left anywhere
#   sigint    SIGINT to the launching dtrun: forwarded, every host stops, exit 130, nothing left
#   sigkill   SIGKILL to the launching dtrun: every remote agent and worker gone within 15 s
#   ghost     a host that does not answer: one line naming it, exit 255, nothing left elsewhere
#   refused   a host whose sshd refuses the key: the same
#   nodir     a --remote_workdir no host has: one line per host with the shell's reason
#   bash tests/integration/ssh_hostfile_test.sh /abs/path/to/build/launcher/dtrun
# Needs root, iproute2, util-linux and OpenSSH (client and server); prints SKIP and exits 0
# without root or sshd. Safety: the blackhole route for the test subnet goes in first, every
# client runs inside a namespace, processes are stopped by PID, and the namespaces, the route and
# the keys are removed on exit.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" ssh_hostfile_test "$@"
sanitizers_in_short_form "the launcher's ssh fan-out"
WORKER=$HERE/workers/ssh_worker.sh
SSHD=/usr/sbin/sshd

# ---------------------------------------------------------------------------------------------
# parse: no host is contacted, so this part needs neither root nor sshd.
parse_case() {  # <name> <expected text> <hostfile text> [dtrun options...]
  local name=$1 expect=$2 text=$3 rc=0
  shift 3
  printf '%b' "$text" >"$work/hf-$name"
  "$DTRUN" --hostfile="$work/hf-$name" "$@" --no_python /bin/true >"$work/$name.out" \
    2>"$work/$name.err" || rc=$?
  [[ $rc -eq 2 ]] || note_fail "parse $name: expected exit 2, got $rc ($(head -c 300 "$work/$name.err"))"
  [[ $(wc -l <"$work/$name.err") -eq 1 ]] ||
    note_fail "parse $name: expected one line on stderr, got: $(cat "$work/$name.err")"
  grep -qF -- "$expect" "$work/$name.err" ||
    note_fail "parse $name: expected '$expect' in: $(cat "$work/$name.err")"
  [[ ! -s $work/$name.out ]] || note_fail "parse $name: expected nothing on stdout"
}
parse_case slots "hf-slots:2: slots expects a whole number" 'node1 slots=2\nnode2 slots=x\n'
parse_case key "hf-key:3: unknown setting 'gpus=4'" '# comment\nnode1\nnode2 gpus=4\n'
parse_case twice "hf-twice:4: host node1 is listed twice (first on line 1)" \
  'node1 slots=1\nnode2\n\nnode1 slots=2\n'
parse_case empty "hf-empty: no host in it" '# only a comment\n\n'
parse_case dash "hf-dash:1: a host name may not start with '-'" '-oProxyCommand=x slots=1\n'
parse_case maxslots "hf-maxslots:1: max_slots=1 is below slots=2" 'node1 slots=2 max_slots=1\n'
parse_case gpus "--include: GPU indices per host ('node1:0,1') are not supported yet" \
  'node1\nnode2\n' --include=node1:0,1@node2
parse_case unknown "--exclude: host node9 is not in the host list (node1, node2)" \
  'node1\nnode2\n' --exclude=node9
parse_case nnodes "--nnodes=3 disagrees with the 2 hosts" 'node1\nnode2\n' --nnodes=3
parse_case rank "--node_rank cannot be given with --hostfile" 'node1\nnode2\n' --node_rank=1
rc=0
"$DTRUN" --hostfile="$work/no-such-file" /bin/true 2>"$work/nofile.err" || rc=$?
if [[ $rc -ne 2 ]] || ! grep -q "cannot read '$work/no-such-file'" "$work/nofile.err"; then
  note_fail "parse nofile: expected exit 2 and 'cannot read', got $rc: $(cat "$work/nofile.err")"
fi
pass "parse: 11 malformed hostfiles and options refused with one line, exit 2"

# ---------------------------------------------------------------------------------------------
if [[ $(id -u) -ne 0 || ! -x $SSHD ]]; then
  echo "ssh_hostfile_test: SKIP: the ssh part needs root and sshd (apt-get install openssh-server)"
  end_test
  exit 0
fi
for tool in ssh ssh-keygen ip nsenter unshare; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh installs it)"
done

tag=dh$(($$ % 10000))
hosts=(node1 node2 node3)

# Any process left in our namespaces when the test ends is killed by PID (before the namespaces
# go: at_exit runs in order of registration).
ns_inodes() {
  local h
  for h in "${hosts[@]}"; do stat -L -c %i "/run/netns/$tag-$h" 2>/dev/null || true; done
}
# ns_procs [<pid to leave out>...]: the processes in our namespaces, one "pid cmdline" a line.
ns_procs() {
  local inodes p ino skip
  inodes=" $(ns_inodes | tr '\n' ' ') "
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    ino=$(stat -L -c %i "/proc/$p/ns/net" 2>/dev/null) || continue
    [[ $inodes == *" $ino "* ]] || continue
    for skip in "$@"; do [[ $p == "$skip" ]] && continue 2; done
    [[ $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1) != Z ]] || continue
    echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | head -c 200)"
  done
}
kill_ns_procs() {
  local line
  while read -r line; do kill -9 "${line%% *}" 2>/dev/null || true; done < <(ns_procs)
}
made_privsep=0
at_exit kill_ns_procs
at_exit '((made_privsep == 0)) || rmdir /run/sshd'

# shellcheck source=lib/netns_hosts.sh
source "$HERE/lib/netns_hosts.sh"
netns_hosts_up 10.217

# Names: node1..3 in every namespace's /etc/hosts, and ghost, an address nobody answers.
{
  echo "127.0.0.1 localhost"
  for i in "${!hosts[@]}"; do echo "$subnet.$((11 + i)) ${hosts[$i]}"; done
  echo "$subnet.99 ghost"
} >"$work/hosts"

# on <host> <pidfile> <cmd...>: cmd in the host's namespace, with its host name and /etc/hosts;
# <pidfile> gets cmd's own PID (every step execs the next).
on() {
  local h=$1 pidfile=$2
  shift 2
  nsenter --net="/run/netns/$tag-$h" -- unshare --uts --mount --propagation private -- \
    /bin/sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && echo $$ >"$3" && shift 3 &&
      exec "$@"' on "$h" "$work/hosts" "$pidfile" "$@"
}
wait_pidfile() {  # <file>: its PID once written (5 s at most)
  for _ in $(seq 50); do [[ -s $1 ]] && { cat "$1"; return; }; sleep 0.1; done
  die "no process started ($1 stayed empty)"
}

# Keys made here, for this run only.
mkdir -m 700 "$work/ssh"
ssh-keygen -q -t ed25519 -N '' -C dtrun-test-host -f "$work/ssh/host_key"
ssh-keygen -q -t ed25519 -N '' -C dtrun-test-user -f "$work/ssh/id"
ssh-keygen -q -t ed25519 -N '' -C dtrun-test-other -f "$work/ssh/other"
cp "$work/ssh/id.pub" "$work/ssh/authorized_keys"
cp "$work/ssh/other.pub" "$work/ssh/refusing_keys"
cat >"$work/ssh/config" <<EOF
Host refuser
  HostName node3
  Port 2222
Host *
  User root
  IdentityFile $work/ssh/id
  IdentitiesOnly yes
  UserKnownHostsFile $work/ssh/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking accept-new
  LogLevel ERROR
EOF
if [[ ! -d /run/sshd ]]; then  # sshd's privilege separation directory
  mkdir -m 755 /run/sshd
  made_privsep=1
fi

sshd_pids=()
start_sshd() {  # <host> <port> <authorized keys file>
  local h=$1 port=$2 keys=$3 conf=$work/ssh/sshd-$1-$2.conf
  cat >"$conf" <<EOF
ListenAddress 0.0.0.0:$port
HostKey $work/ssh/host_key
PidFile none
AuthorizedKeysFile $keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
MaxStartups 50
LogLevel ERROR
EOF
  on "$h" "$work/sshd-$h-$port.pid" "$SSHD" -D -e -f "$conf" 2>"$work/sshd-$h-$port.log" &
  pids+=("$!")
  sshd_pids+=("$(wait_pidfile "$work/sshd-$h-$port.pid")")
  pids+=("${sshd_pids[-1]}")
}
for h in "${hosts[@]}"; do start_sshd "$h" 22 "$work/ssh/authorized_keys"; done
start_sshd node3 2222 "$work/ssh/refusing_keys"
for _ in $(seq 50); do  # every sshd answers
  ok=0
  for h in "${hosts[@]}"; do
    on node1 "$work/probe.pid" ssh -F "$work/ssh/config" -o BatchMode=yes "$h" true 2>/dev/null &&
      ok=$((ok + 1))
  done
  ((ok == 3)) && break
  sleep 0.2
done
((ok == 3)) || die "sshd did not answer on every host: $(cat "$work"/sshd-*.log)"
pass "3 hosts with sshd up (node1..3 at $subnet.11-13)"

mkdir -p "$work/job" "$work/tmp"
printf 'node1 slots=2\nnode2 slots=1   # a comment\nnode3 slots=2 max_slots=4\n' >"$work/hostfile"

extra=()  # more dtrun options for the next launch
# launch <name> <hostfile> <worker args...>: the launching dtrun on node1, from $work/job, in the
# background under timeout(1) (which also gives it default SIGINT handling); sets spid (the
# subshell, whose exit code is dtrun's) and lpid (dtrun). Output in $work/<name>.out and .err.
launch() {
  local name=$1 hostfile=$2 tpid
  shift 2
  (
    cd "$work/job"
    PATH=/launcher-only-path:$PATH PYTHONPATH=/from/the/launcher DTRUN_SSH_TEST_VAR=exported-$name \
      on node1 "$work/$name.pid" timeout -s KILL 100 "$DTRUN" --hostfile="$hostfile" \
      --ssh_config="$work/ssh/config" --export=DTRUN_SSH_TEST_VAR,TMPDIR="$work/tmp" \
      --rdzv_id="ssh-$name-$$" --tee=3 --shutdown_timeout=5 "${extra[@]}" --no_python "$WORKER" "$@" \
      >"$work/$name.out" 2>"$work/$name.err"
  ) &
  spid=$!
  pids+=("$spid")
  tpid=$(wait_pidfile "$work/$name.pid")
  lpid=""
  for _ in $(seq 50); do
    lpid=$(pgrep -P "$tpid" || true)
    [[ -n $lpid ]] && break
    sleep 0.1
  done
  [[ -n $lpid ]] || die "$name: the launching dtrun did not start"
}
# finish <seconds>: waits for the launch; sets rc (124 when it had to be killed) and took (s).
finish() {
  local start=$SECONDS until=$((SECONDS + $1))
  while running "$spid" && ((SECONDS < until)); do sleep 0.1; done
  rc=0
  if running "$spid"; then
    kill -9 "$lpid" 2>/dev/null || true
    rc=124
  fi
  wait "$spid" || rc=$?
  forget "$spid"
  took=$((SECONDS - start))
}
# wait_lines <name> <count> <seconds>: until the launcher's stdout has <count> ENV lines.
wait_lines() {
  for _ in $(seq $(($3 * 10))); do
    (($(grep -c 'ENV RANK=' "$work/$1.out" 2>/dev/null || true) >= $2)) && return 0
    sleep 0.1
  done
  note_fail "$1: expected $2 workers to start within $3 s; got: $(tail -n 5 "$work/$1.err")"
  return 1
}
# no_leftovers <name> <seconds>: waits until no process but the sshd listeners is in any of the
# namespaces; notes a failure naming what is left. Sets gone_after (s).
no_leftovers() {
  local start=$SECONDS left
  for _ in $(seq $(($2 * 10))); do
    left=$(ns_procs "${sshd_pids[@]}")
    if [[ -z $left ]]; then
      gone_after=$((SECONDS - start))
      return 0
    fi
    sleep 0.1
  done
  note_fail "$1: processes left on the hosts after $2 s: $(head -n 8 <<<"$left" | tr '\n' ';')"
  kill_ns_procs_but_sshd
  return 1
}
kill_ns_procs_but_sshd() {
  local line
  while read -r line; do kill -9 "${line%% *}" 2>/dev/null || true; done \
    < <(ns_procs "${sshd_pids[@]}")
}
show() { sed 's/^/    | /' "$work/$1.err" | tail -n 15 >&2; }

# ---------------------------------------------------------------------------------------------
# job: ranks 0,1 on node1, 2 on node2, 3,4 on node3 (slots), in hostfile order.
launch job "$work/hostfile" env "tok-job-$$"
finish 60
[[ $rc -eq 0 ]] || { note_fail "job: expected exit 0, got $rc"; show job; }
lines=$(grep 'ENV RANK=' "$work/job.out" || true)
expect_host() {  # <rank> <host> <group rank>
  grep -q "^$2: \[default[0-9]\]:ENV RANK=$1 .*WORLD_SIZE=5 GROUP_RANK=$3 MASTER_ADDR=node1 HOST=$2 " \
    <<<"$lines" || note_fail "job: expected rank $1 on $2 (node $3) with its prefix, got: $lines"
}
expect_host 0 node1 0
expect_host 1 node1 0
expect_host 2 node2 1
expect_host 3 node3 2
expect_host 4 node3 2
[[ $(grep -c . <<<"$lines") -eq 5 ]] || note_fail "job: expected 5 workers, got: $lines"
[[ $(grep -c "CWD=$work/job EXPORTED=exported-job PYTHONPATH=/from/the/launcher" <<<"$lines") -eq 5 ]] ||
  note_fail "job: expected the launcher's directory, --export'ed and default variables on every worker: $lines"
! grep -q launcher-only-path <<<"$lines" || note_fail "job: the launcher's PATH reached a worker"
grep -q "^node2: .*dtrun" "$work/job.err" || note_fail "job: expected node2's agent log with its prefix"
! grep -q "remote agent ready" "$work/job.err" "$work/job.out" ||
  note_fail "job: the remote agents' ready line reached the console"
no_leftovers job 10
pass "job: 3 hosts, 5 ranks by host order and slots, exit 0, prefixed lines, environment as expected"

# ---------------------------------------------------------------------------------------------
# fail: rank 4 (on node3) exits 9.
launch fail "$work/hostfile" fail 4 9 "tok-fail-$$"
finish 60
[[ $rc -eq 9 ]] || { note_fail "fail: expected exit 9 (the rank's code), got $rc"; show fail; }
grep -q "^node3: \[default1\]:rank 4 fails on purpose with 9" "$work/fail.err" ||
  note_fail "fail: expected rank 4's stderr with node3's prefix"
grep -q "dtrun: job ssh-fail-$$ ended with exit code 9 (exit code per host: .*node3 9" "$work/fail.err" ||
  { note_fail "fail: expected the summary naming node3 and code 9"; show fail; }
grep -q "^node[123]: .*node3" "$work/fail.err" ||
  note_fail "fail: expected the agents' failure report to name host node3"
no_leftovers fail 10
pass "fail: rank 4 on node3 exits 9: dtrun exits 9 and names node3, nothing left"

# ---------------------------------------------------------------------------------------------
# sigint: Ctrl-C of the launching dtrun stops every host.
launch sigint "$work/hostfile" sleep "tok-sigint-$$"
if wait_lines sigint 5 30; then
  kill -INT "$lpid"
  finish 30
  [[ $rc -eq 130 ]] || { note_fail "sigint: expected exit 130, got $rc"; show sigint; }
  grep -q "SIGINT: stopping the job on every host" "$work/sigint.err" ||
    note_fail "sigint: expected the launcher to say it stops every host"
  no_leftovers sigint 10
  pass "sigint: exit 130 after ${took} s, every host clean after ${gone_after:-?} s more"
else
  kill -9 "$lpid" 2>/dev/null || true
  finish 10
  kill_ns_procs_but_sshd
fi

# ---------------------------------------------------------------------------------------------
# sigkill: the launching dtrun killed outright: the sessions end, the remote agents stop.
launch sigkill "$work/hostfile" sleep "tok-sigkill-$$"
if wait_lines sigkill 5 30; then
  kill -9 "$lpid"
  finish 10
  # Bound: the agents' --shutdown_timeout (5 s) + 5 s, when each remote helper kills an agent
  # that has not ended on the session's SIGTERM, + 5 s of slack. Usually ~1 s.
  no_leftovers sigkill 15
  pass "sigkill: every remote agent and worker gone ${gone_after:-?} s after kill -9 of the launcher"
else
  kill -9 "$lpid" 2>/dev/null || true
  finish 10
  kill_ns_procs_but_sshd
fi

# ---------------------------------------------------------------------------------------------
# ghost and refused: a host that cannot be reached, then one that refuses the key, as the last
# host: the first two started their agents, which must stop.
for spec in "ghost:ssh: connect to host ghost port 22" "refuser:Permission denied (publickey)"; do
  bad=${spec%%:*}
  why=${spec#*:}
  printf 'node1 slots=1\nnode2 slots=1\n%s slots=1\n' "$bad" >"$work/hostfile-$bad"
  launch "$bad" "$work/hostfile-$bad" sleep "tok-$bad-$$"
  finish 40
  [[ $rc -eq 255 ]] || { note_fail "$bad: expected exit 255 (ssh's), got $rc"; show "$bad"; }
  host_lines=$(grep -c "^dtrun: host $bad (node 2): ssh failed: .*$why" "$work/$bad.err" || true)
  [[ $host_lines -eq 1 ]] || { note_fail "$bad: expected one line naming $bad and why"; show "$bad"; }
  ! grep -q "^$bad: " "$work/$bad.err" || note_fail "$bad: ssh's own message was printed besides"
  no_leftovers "$bad" 10
  pass "$bad: exit 255 after $took s, one line: $(grep "^dtrun: host $bad" "$work/$bad.err" | head -n 1)"
done

# ---------------------------------------------------------------------------------------------
# nodir: --remote_workdir that no host has: every host is one line naming it and the shell's
# reason; nothing is left.
extra=(--remote_workdir="/nonexistent-$$")
launch nodir "$work/hostfile" env "tok-nodir-$$"
finish 30
extra=()
[[ $rc -ne 0 && $rc -ne 124 ]] || { note_fail "nodir: expected a failure exit code, got $rc"; show nodir; }
for h in "${hosts[@]}"; do
  grep -q "^dtrun: host $h (node [0-2]): dtrun did not start there (exit code $rc): .*/nonexistent-$$" \
    "$work/nodir.err" || { note_fail "nodir: expected one line naming $h and the directory"; show nodir; }
done
no_leftovers nodir 10
pass "nodir: exit $rc, one line per host: $(grep "^dtrun: host node1" "$work/nodir.err" | head -n 1)"

end_test
