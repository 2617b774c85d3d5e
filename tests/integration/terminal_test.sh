#!/usr/bin/env bash
# A worker that reads the terminal, and a stopped worker (issue 34, bug 6):
# (1) dtrun in a pseudo-terminal of the test's own (its session, its foreground), one rank
#     calling input(): the rank gets the terminal, reads the line typed, and the job ends 0;
#     without it the rank hung, stopped by SIGTTIN, and dtrun said nothing.
# (2) a worker stopped by SIGSTOP is named; SIGTERM to dtrun then stops the job at once (the
#     stop signal comes with SIGCONT), not after --shutdown_timeout.
# (3) Ctrl-Z stops the workers with dtrun, SIGCONT resumes them all.
#   bash tests/integration/terminal_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" terminal_test "$@"

"$PYTHON" - "$DTRUN" "$work" <<'PY' || die "input() at a terminal"
import os, pty, select, sys, time
dtrun, work = sys.argv[1:3]
pid, fd = pty.fork()
if pid == 0:
    os.execv(dtrun, [dtrun, "--nproc_per_node=1", "--log_dir=" + work + "/tty", "--no_python",
                     "/usr/bin/python3", "-c", "print('got', input('name? '))"])
out, sent, status = b"", False, None
deadline = time.time() + 30
while time.time() < deadline and status is None:
    if select.select([fd], [], [], 0.1)[0]:
        try:
            out += os.read(fd, 4096)
        except OSError:
            pass
    if not sent and b"name? " in out:
        os.write(fd, b"bob\n")
        sent = True
    done, code = os.waitpid(pid, os.WNOHANG)
    if done:
        status = code
# What dtrun wrote before it exited may still wait in the terminal: read it all (EIO or EOF once
# the last writer is gone; under load "got bob" was still unread when the exit was seen).
while status is not None:
    if not select.select([fd], [], [], 1.0)[0]:
        break
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
if status is None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    sys.exit("dtrun did not end within 30 s; it printed:\n" + out.decode(errors="replace")[-1500:])
text = out.decode(errors="replace")
if os.waitstatus_to_exitcode(status) != 0 or "got bob" not in text or "reads the terminal" not in text:
    sys.exit(f"exit {os.waitstatus_to_exitcode(status)}; printed:\n{text[-1500:]}")
print("terminal_test: input() at a terminal: the rank got the terminal and read 'bob'")
PY

# (3) Ctrl-Z at the terminal stops dtrun and its workers (they run in groups of their own, which
#     the terminal's SIGTSTP does not reach); SIGCONT (the shell's fg) resumes them all.
"$PYTHON" - "$DTRUN" "$work" <<'PY' || die "Ctrl-Z"
import os, pty, select, signal, sys, time
dtrun, work = sys.argv[1:3]
pid, fd = pty.fork()
if pid == 0:
    os.execv(dtrun, [dtrun, "--nproc_per_node=1", "--log_dir=" + work + "/tstp", "--rdzv_id=z",
                     "--no_python", "/bin/sh", "-c",
                     'echo $$ > "$DTRUN_LOG_DIR/pid"; sleep 2; echo finished'])
def state(p):
    with open(f"/proc/{p}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]
out = b""
def pump(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                out += os.read(fd, 4096)
            except OSError:
                return
pidfile = work + "/tstp/z/attempt_0/0/pid"
for _ in range(100):
    if os.path.exists(pidfile) and open(pidfile).read().strip():
        break
    pump(0.1)
worker = int(open(pidfile).read())
os.write(fd, b"\x1a")  # Ctrl-Z
done, status = 0, 0
for _ in range(100):
    done, status = os.waitpid(pid, os.WUNTRACED | os.WNOHANG)
    if done:
        break
    pump(0.05)
if not (done and os.WIFSTOPPED(status)):
    os.kill(pid, 9)
    sys.exit("dtrun did not stop on Ctrl-Z")
time.sleep(0.3)
if state(worker) != "T":
    os.kill(pid, signal.SIGCONT)
    os.kill(pid, 9)
    sys.exit(f"the worker runs on (state {state(worker)}) while dtrun is stopped")
os.kill(pid, signal.SIGCONT)  # fg
code = None
end = time.time() + 30
while time.time() < end and code is None:
    pump(0.1)
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
if code != 0 or b"finished" not in out:
    if code is None:
        os.kill(pid, 9)
    sys.exit(f"after fg: exit {code}; printed:\n{out.decode(errors='replace')[-1500:]}")
print("terminal_test: Ctrl-Z stopped dtrun and its worker; SIGCONT resumed both")
PY

"$DTRUN" --nproc_per_node=2 --shutdown_timeout=20 --log_dir="$work/logs" --rdzv_id=stopped \
  --no_python /bin/sh -c 'echo $$ > "$DTRUN_LOG_DIR/pid"; exec sleep 100' \
  >"$work/stopped.out" 2>&1 </dev/null &
dtrun_pid=$!
pids+=("$dtrun_pid")
for _ in $(seq 100); do [[ -s $work/logs/stopped/attempt_0/1/pid ]] && break; sleep 0.1; done
worker=$(cat "$work/logs/stopped/attempt_0/1/pid" 2>/dev/null) || die "stopped: no worker started"
kill -STOP "$worker"
for _ in $(seq 100); do grep -q "is stopped by SIGSTOP" "$work/stopped.out" && break; sleep 0.1; done
grep -q "rank 1 (pid $worker) is stopped by SIGSTOP" "$work/stopped.out" ||
  die "stopped: the stopped worker was not named: $(tail -n 3 "$work/stopped.out")"
stopped_by_term stopped "$dtrun_pid" 15
pass "a stopped worker is named, and SIGTERM ends the job in $took s"
end_test
