#!/usr/bin/env bash
# Few file descriptors (RLIMIT_NOFILE), on a node's agent and on the store's host:
#   health   the default health check refuses a node whose workers may open fewer than 1024
#            files, naming the limit and where to raise it (exit 1);
#   spawn    with that check off (--health_min_open_files=0), limits from 20 to 56 files: dtrun
#            starts the job or refuses it in one line naming what failed (the store, a health
#            check, the rank it could not start), the limit and `ulimit -n`; never a crash (exit 1, not 128+), never "the agent died",
#            no process of the job left;
#   store    the store's host (64 files) flooded with 120 idle connections for 3 s while a 2-node
#            job runs: it says once per spell that it cannot accept (naming ulimit -n), spends under 0.5 s
#            of CPU on the spell (no busy loop), accepts again when the flood ends, and the job
#            finishes on both nodes.
# spawn and store run in the release tree only: out of descriptors, the sanitizers cannot work.
#   bash tests/integration/open_files_test.sh /abs/path/to/build/launcher/dtrun
set -uo pipefail
source "$(dirname "$0")/lib/preamble.sh" open_files_test "$@"
source "$HERE/lib/wait_agent.sh"
command -v prlimit >/dev/null || die "prlimit (util-linux) is missing"
cd "$work" || die "no work directory"

# health: the default check names the limit.
out=$(timeout -k 5 "$LIMIT" prlimit --nofile=200 "$DTRUN" --nproc_per_node=2 --no_python /bin/true 2>&1)
rc=$?
[[ $rc == 1 && $out == *"health check open_files failed on "*"a worker may open 200 files (RLIMIT_NOFILE), below the 1024 needed (--health_min_open_files)"* ]] ||
  note_fail "health: want exit 1 naming the 200-file limit, got $rc: $(tail -n 2 <<<"$out")"

# spawn: one line or a job, whatever the limit. Not in a sanitizer tree: the sanitizers' own
# memory probe opens a pipe, so out of descriptors UBSan reports valid objects as bad (seen:
# "object has invalid vptr ... memory cannot be printed" at 20 files).
refused=0 ran=0
limits=(20 26 32 38 44 50 56)
((SANITIZED == 0)) || { limits=(); pass "spawn: not run in a sanitizer tree (the sanitizers need descriptors of their own)"; }
for n in "${limits[@]}"; do
  mark=nofile-$$-$n
  out=$(DTRUN_NOFILE_MARK=$mark timeout -k 5 "$LIMIT" prlimit --nofile="$n" "$DTRUN" \
    --health_min_open_files=0 --nproc_per_node=4 --no_python /bin/true 2>&1)
  rc=$?
  left=$(grep -lz "^DTRUN_NOFILE_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null | wc -l)
  ((left == 0)) || note_fail "spawn at $n files: $left process(es) of the job left"
  [[ $out != *"the agent died"* ]] || note_fail "spawn at $n files: the agent died: $(grep -m1 died <<<"$out")"
  if ((rc == 0)); then
    ran=$((ran + 1))
    continue
  fi
  errs=$(grep -c '^dtrun: ' <<<"$out")
  if [[ $rc != 1 || $errs != 1 || $out != *"Too many open files (this process may open $n files, RLIMIT_NOFILE: raise it with ulimit -n"* ]]; then
    note_fail "spawn at $n files: want exit 1 and one line naming the limit, got $rc: $(grep '^dtrun: ' <<<"$out")"
  elif [[ $out != *"cannot start the store"* && $out != *"cannot start rank "* && $out != *"dtrun: health check "*" failed on "* ]]; then
    note_fail "spawn at $n files: the line names neither the store, nor the rank, nor a health check: $(grep '^dtrun: ' <<<"$out")"
  fi
  refused=$((refused + 1))
done
if ((${#limits[@]} > 0)); then
  ((refused > 0)) || note_fail "spawn: no limit from 20 to 56 files was too low: the scenario tests nothing"
  pass "spawn: $refused limit(s) refused in one line naming the limit, $ran ran"
fi

# store: the store's host out of descriptors while a job runs. Not in a sanitizer tree either:
# clang's UBSan checks a virtual call's object through that pipe, and a non-recoverable report
# cannot be suppressed (seen: "object has invalid vptr" in Asio's timer queue at 64 files).
if ((SANITIZED)); then
  pass "store: not run in a sanitizer tree (the sanitizers need descriptors of their own)"
  end_test
  exit 0
fi
port=$(free_port)
cat >"$work/sleeper.sh" <<'SH'
#!/bin/sh
sleep 8
SH
chmod +x "$work/sleeper.sh"
declare -a node_pids=()
for n in 0 1; do
  limit=()
  ((n != 0)) || limit=(prlimit --nofile=64)
  "${limit[@]}" "$DTRUN" --nnodes=2 --node_rank="$n" --master_port="$port" --rdzv_id=nofile \
    --health_min_open_files=0 --nproc_per_node=1 --log_dir="$work/logs$n" \
    --no_python "$work/sleeper.sh" >"$work/node$n.out" 2>&1 &
  node_pids+=("$!")
  pids+=("$!")
done
for _ in $(seq $((LIMIT * 10))); do
  (($(find "$work"/logs0 "$work"/logs1 -name stdout.log 2>/dev/null | wc -l) >= 2)) && break
  sleep 0.1
done
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, in clock ticks
before=$(cpu_of "${node_pids[0]}")
"$PYTHON" - "$port" <<'PY'
import socket, sys, time
held = []
for _ in range(120):
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        pass
    held.append(s)
time.sleep(3)
for s in held:
    s.close()
PY
after=$(cpu_of "${node_pids[0]}")
ticks=$(getconf CLK_TCK)
((after - before < ticks / 2)) ||
  note_fail "store: the store's host spent $(((after - before) * 1000 / ticks)) ms of CPU in 3 s out of descriptors (a busy loop?)"
until=$((SECONDS + LIMIT))
for n in 0 1; do
  wait_agent "${node_pids[$n]}" "$until"
  [[ $rc == 0 ]] || note_fail "store: node $n exited $rc: $(tail -n 3 "$work/node$n.out")"
done
# One line per spell, not per retry (30 in 3 s): the flood's end may start a second spell, as the
# store accepts the connections queued meanwhile.
spells=$(grep -c "store: cannot accept connections: Too many open files; retrying every 100 ms (this process's open files are at their limit: raise it with ulimit -n)" "$work/node0.out")
((spells >= 1 && spells <= 3)) ||
  note_fail "store: want a line per spell saying it cannot accept (1 to 3), got $spells: $(grep -m3 'cannot accept' "$work/node0.out")"
[[ $(grep -E "store: (cannot accept|accepting connections again)" "$work/node0.out" | tail -n 1) == *"accepting connections again"* ]] ||
  note_fail "store: its last word on accepting is not that it accepts again"
((fail_count > 0)) || pass "store: out of descriptors for 3 s, said so once per spell ($spells), $(((after - before) * 1000 / ticks)) ms of CPU, the job finished"
end_test
