#!/usr/bin/env bash
# dtrun exits only after its own helper processes are gone (issue 14): run under a child
# subreaper, so that anything dtrun leaves behind is re-parented to the checker (not to init,
# which would hide it), and after dtrun exits the checker must have no child left, running or
# zombie. Runs a successful job, a failing one with a restart, one stopped by SIGTERM, and one
# whose worker leaves a process in a session of its own (setsid), out of its process group: the
# agent, its subreaper, kills it at the end of the attempt and names it (issue 34, bug 10); and,
# after kill -9 of dtrun, the guardian kills it, found by the mark in its environment.
#   bash tests/integration/no_leftover_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" no_leftover_test "$@"

# check <name> <expected exit code> <seconds after the workers start before SIGTERM, or 0> --
#   <dtrun args...>
check() {
  local name=$1 want=$2 term=$3
  shift 4
  work=$work "$PYTHON" - "$name" "$want" "$term" "$DTRUN" "$@" <<'PY' || die "$name"
import ctypes, os, signal, subprocess, sys, time
name, want, term, argv = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit(f"{name}: prctl(PR_SET_CHILD_SUBREAPER) failed")
out = open(os.path.join(os.environ["work"], name + ".out"), "wb")
proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
if term > 0:
    # SIGTERM once the workers run (dtrun handles it from its first lines; a fixed delay raced an
    # ASan dtrun's start on a loaded machine, which the signal's default action then killed).
    log = os.path.join(os.environ["work"], name + ".out")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log, "rb") as f:
            if b"attempt 0: started" in f.read():
                break
        time.sleep(0.05)
    time.sleep(term)
    proc.send_signal(signal.SIGTERM)
rc = proc.wait(timeout=60)
if rc != want:
    sys.exit(f"{name}: dtrun exited {rc}, want {want}")
time.sleep(0.2)  # what dtrun left behind has had time to exit and be re-parented here
left = []
while True:
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:  # a child still running
        left.append("a running process")
        break
    left.append(f"pid {pid}")
if left:
    sys.exit(f"{name}: dtrun left {', '.join(left)} behind")
print(f"no_leftover_test: {name} ok (exit {rc}, nothing left)")
PY
}

check success 0 0 -- --nproc_per_node=4 --log_dir="$work/a" --no_python /bin/true
check failure 1 0 -- --nproc_per_node=2 --max_restarts=1 --log_dir="$work/b" --no_python /bin/false
check sigterm 143 1 -- --nproc_per_node=2 --log_dir="$work/c" --no_python /bin/sleep 30
cat >"$work/escape.sh" <<'SH'
#!/bin/bash
setsid sleep 300 &
echo "escaped $!"
sleep 0.2
SH
chmod +x "$work/escape.sh"
check setsid 0 0 -- --nproc_per_node=2 --tee=3 --log_dir="$work/d" --no_python "$work/escape.sh"
grep -q "killed what the workers left outside their process groups: pid [0-9]* (sleep)" "$work/setsid.out" ||
  die "setsid: no line names the escaped sleep: $(tail -n 5 "$work/setsid.out")"
# kill -9 of dtrun while a worker's setsid child runs: the guardian finds it by the mark in its
# environment (DTRUN_GUARDIAN_MARK) and kills it (issue 34, bug 10: it ran on).
cat >"$work/escape_wait.sh" <<'SH'
#!/bin/bash
setsid sleep 300 &
echo "$!" >"$DTRUN_LOG_DIR/escaped"
exec sleep 300
SH
chmod +x "$work/escape_wait.sh"
"$DTRUN" --nproc_per_node=1 --log_dir="$work/e" --rdzv_id=e --no_python "$work/escape_wait.sh" \
  >"$work/kill9.out" 2>&1 &
dtrun_pid=$!
pids+=("$dtrun_pid")
for _ in $(seq 100); do [[ -s $work/e/e/attempt_0/0/escaped ]] && break; sleep 0.1; done
escaped=$(cat "$work/e/e/attempt_0/0/escaped" 2>/dev/null) || die "kill -9: the worker did not start"
pids+=("$escaped")
kill -9 "$dtrun_pid"
wait "$dtrun_pid" 2>/dev/null || true
forget "$dtrun_pid"
for _ in $(seq 50); do running "$escaped" || break; sleep 0.1; done
running "$escaped" && die "kill -9: the worker's setsid child (pid $escaped) survived dtrun's kill -9"
grep -q "killed 1 process(es) its workers left outside their groups" "$work/kill9.out" ||
  die "kill -9: the guardian did not say it killed the escaped process: $(tail -n 2 "$work/kill9.out")"
echo "no_leftover_test: kill -9: the worker's setsid child died with dtrun"
echo "no_leftover_test: PASS"
