# Sourced by the multi-node tests, after preamble.sh (for `running`, `note_fail`, `pids`, $work,
# $DTRUN, $LIMIT). wait_agent <pid> <until>:
# waits for a background agent until $SECONDS reaches <until>; sets rc to its exit code, or kills
# it (-9) and sets rc=124. A zombie (pid 1 here may not reap) counts as exited.
wait_agent() {
  local pid=$1 until=$2
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < until)); do sleep 0.1; done
  rc=0
  if running "$pid"; then
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rc=124
    return
  fi
  wait "$pid" || rc=$?
}

# start <name> <dtrun args...>: one agent in the background (its PID is dtrun's own, so that
# kill -9 reaches the agent); output in $work/<name>.out, logs under $work/logs/<name>.
declare -A pid_of=() started_at=()
start() {
  local name=$1
  shift
  "$DTRUN" --log_dir="$work/logs/$name" "$@" >"$work/$name.out" 2>&1 &
  pid_of[$name]=$!
  started_at[$name]=$SECONDS
  pids+=("$!")
}
# finish <name>: waits for the agent, at most $LIMIT s after its start (then kill -9, rc 124).
rc=0
finish() { wait_agent "${pid_of[$1]}" $((started_at[$1] + LIMIT)); }
# expect_rc <name> <code>: finish, then the exit code must be <code> (else its output's tail).
expect_rc() {
  finish "$1"
  if [[ $rc -ne $2 ]]; then
    note_fail "$1: exit code $rc, expected $2"
    tail -n 15 "$work/$1.out" | sed 's/^/    | /' >&2
    return 1
  fi
}
# wait_for <file> <pattern> [<seconds>]: true once <pattern> is in <file>; else, after <seconds>
# (default $WAIT_FOR_S, else 20), a failure naming both.
wait_for() {
  local tenths=$((${3:-${WAIT_FOR_S:-20}} * 10)) i
  for ((i = 0; i < tenths; i++)); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  note_fail "no '$2' in $1"
  return 1
}
