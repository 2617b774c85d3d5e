# Shared by the benchmarks' run.sh scripts (source it).

# stop_pid PID [GRACE_SECONDS=5]: SIGTERM, wait up to the grace, then SIGKILL; reaps the process.
# Processes are only ever stopped by their pid, never by name.
stop_pid() {
  local pid=$1 grace=${2:-5}
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq $((grace * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# field NAME LINE: the value of NAME=... in a benchmark's key=value line ("" when absent).
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

# median < numbers, one per line: their median (one decimal when it falls between two), "-" for
# none.
median() {
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
    else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# bench_work NAME: a fresh $work directory and a $pids list; on exit every pid in it is stopped
# (stop_pid) and $work removed; INT and TERM exit with 130 and 143.
bench_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  trap 'for pid in "${pids[@]}"; do stop_pid "$pid" 2; done; rm -rf "$work"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
