#!/usr/bin/env bash
# A console that is not read never stalls the job (issue 34, bug 4): dtrun's stdout is a FIFO
# whose reader holds it open and never reads. Two ranks each print 8 MB: the job still ends
# (exit 0), every byte is in the log files, and stderr says once that stdout is not read. With
# workers that print and then sleep, SIGTERM to dtrun still stops the job at once.
#   bash tests/integration/console_stall_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" console_stall_test "$@"

cat >"$work/flood.sh" <<'SH'
#!/bin/bash
yes "$(printf 'x%.0s' {1..99})" | head -n 80000
[[ $1 == sleep ]] && exec sleep 100
exit 0
SH
chmod +x "$work/flood.sh"
bytes=8000000

# stalled <name>: a FIFO whose reader never reads, opened as dtrun's stdout by the caller.
stalled() {
  mkfifo "$work/$1.fifo"
  sleep 300 <"$work/$1.fifo" &  # holds the read end open; reads nothing
  pids+=("$!")
}

stalled flood
start=$SECONDS
rc=0
timeout -k 5 "$LIMIT" "$DTRUN" --nproc_per_node=2 --tee=3 --log_dir="$work/logs" --rdzv_id=flood \
  --no_python "$work/flood.sh" >"$work/flood.fifo" 2>"$work/flood.err" </dev/null || rc=$?
[[ $rc -eq 0 ]] || die "flood: dtrun exited $rc, want 0 (124: it stalled on the unread console)"
for r in 0 1; do
  size=$(wc -c <"$work/logs/flood/attempt_0/$r/stdout.log")
  [[ $size -eq $bytes ]] || die "flood: rank $r's log holds $size bytes, want $bytes"
done
[[ $(grep -c "stdout is not being read" "$work/flood.err") -eq 1 ]] ||
  die "flood: stderr does not say once that stdout is not read: $(head -c 2000 "$work/flood.err")"
pass "an unread console: the job ended in $((SECONDS - start)) s, logs complete, said once"

stalled term
"$DTRUN" --nproc_per_node=2 --tee=3 --log_dir="$work/logs" --rdzv_id=term \
  --no_python "$work/flood.sh" sleep >"$work/term.fifo" 2>"$work/term.err" </dev/null &
dtrun_pid=$!
pids+=("$dtrun_pid")
for _ in $(seq 200); do  # both ranks printed everything (their logs are complete)
  done_ranks=0
  for r in 0 1; do
    [[ $(wc -c 2>/dev/null <"$work/logs/term/attempt_0/$r/stdout.log" || echo 0) -eq $bytes ]] &&
      done_ranks=$((done_ranks + 1))
  done
  [[ $done_ranks -eq 2 ]] && break
  sleep 0.1
done
[[ $done_ranks -eq 2 ]] || die "term: the ranks' output did not reach their logs within 20 s"
stopped_by_term term "$dtrun_pid" 20
pass "SIGTERM with an unread console: stopped in $took s"
end_test
