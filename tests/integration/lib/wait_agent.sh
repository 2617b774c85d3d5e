# Sourced by the multi-node tests, after preamble.sh (for `running`). wait_agent <pid> <until>:
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
