#!/usr/bin/env bash
# Store under stress: starts `dtrun store` on a free loopback port and runs stress_bench against
# it, which prints a normal client's p50/p99 latency per phase (baseline, 4096 idle connections,
# + a slow reader, + a 1 byte/s client), then the store's VmRSS and its limit log lines.
# Builds nothing; measures, asserts nothing.
# Usage: bench/store/stress.sh [DTRUN_BINARY] [STRESS_BENCH_BINARY]
#   defaults: build/launcher/dtrun build/bench/store/stress_bench
# Environment: OPS=20000 (round trips per phase)  CONNECTIONS=4096  BACKLOG=1048576 (bytes)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dtrun=${1:-$repo/build/launcher/dtrun}
bench=${2:-$repo/build/bench/store/stress_bench}
for tool in "$dtrun" "$bench"; do
  if [[ ! -x $tool ]]; then
    echo "stress.sh: $tool is not built; run: ninja -C build dtrun stress_bench" >&2
    exit 2
  fi
done
# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/store_stress.XXXXXX")
pid=""
trap 'stop_pid "$pid"; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
timeout 900 "$dtrun" store --host 127.0.0.1 --port 0 --port-file "$work/port" \
  --max-connections $((${CONNECTIONS:-4096} + 64)) --max-reply-backlog "${BACKLOG:-1048576}" \
  >"$work/store.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  [[ -s $work/port ]] && break
  sleep 0.05
done
[[ -s $work/port ]] || { echo "stress.sh: the store wrote no port (log: $(cat "$work/store.log"))" >&2; exit 1; }
echo "store stress bench: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bench" --port "$(cat "$work/port")" --ops "${OPS:-20000}" --connections "${CONNECTIONS:-4096}"
store_pid=$(cat "/proc/$pid/task/$pid/children")  # `timeout`'s child: the store itself
echo "store VmRSS after all phases: $(awk '/VmRSS/ {print $2, $3}' "/proc/${store_pid// /}/status")"
echo "store log lines about limits:"
grep -E 'not reading|refused|dropped' "$work/store.log" | sed 's/^/  /' || true
