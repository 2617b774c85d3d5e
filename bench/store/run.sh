#!/usr/bin/env bash
# Store benchmark matrix: {set, get, add, waitset} x {1, 16, 64} client processes against
#   dtrun      - our server (`dtrun store`), and
#   torch-1.13 - torch's own TCPStore server (torch_store_server.py under Debian's torch 1.13),
# both driven by the SAME client program (store_bench, our C++ client in the torch <= 2.0 dialect,
# the only one torch 1.13's server speaks). Prints two tables: ops/s and latency; and the
# server's CPU time per 1000 ops (utime + stime of the server process, /proc/PID/stat, over each
# cell's window; on a 2-core machine ops/s at many clients measures the clients, this measures
# the server), each with the dtrun/torch ratio of this run. Writes the plot bench/store/store.png
# (PLOT=FILE elsewhere, PLOT= none; needs gnuplot). Builds nothing; measures, asserts nothing.
#
# Usage: bench/store/run.sh [DTRUN_BINARY] [STORE_BENCH_BINARY]
#   defaults: build/launcher/dtrun build/bench/store/store_bench (relative to the repo root)
# Environment:
#   DURATION_MS=1500  measured window per cell     WARMUP_MS=200  unmeasured ops before it
#   REPEATS=1         runs per cell; the table shows the run with the median dtrun/torch ops/s
#   OPS="set get add waitset"  CLIENTS="1 16 64"  PYTHON=/usr/bin/python3 (must have torch)
#   RAW=FILE          also append every store_bench result line to FILE
#   PLOT=bench/store/store.png  where the plot goes ("" = no plot)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dtrun=${1:-$repo/build/launcher/dtrun}
bench=${2:-$repo/build/bench/store/store_bench}
duration_ms=${DURATION_MS:-1500}
warmup_ms=${WARMUP_MS:-200}
repeats=${REPEATS:-1}
ops=${OPS:-set get add waitset}
clients_list=${CLIENTS:-1 16 64}
python=${PYTHON:-/usr/bin/python3}
torch_server=$repo/bench/store/torch_store_server.py
plot=${PLOT-$repo/bench/store/store.png}

for tool in "$dtrun" "$bench"; do
  if [[ ! -x $tool ]]; then
    echo "run.sh: $tool is not built; run: ninja -C build dtrun store_bench" >&2
    exit 2
  fi
done
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "run.sh: $python cannot import torch (Debian's /usr/bin/python3 has torch 1.13)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/store_bench.XXXXXX")
dtrun_pid=""
torch_pid=""

# shellcheck source=../lib.sh
source "$repo/bench/lib.sh"

cleanup() {
  stop_pid "$dtrun_pid"
  stop_pid "$torch_pid"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits (10 s at most) for a server's port file; prints the port.
wait_port() {
  local file=$1 pid=$2
  for _ in $(seq 200); do
    if [[ -s $file ]]; then
      cat "$file"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "run.sh: no port in $file (server pid $pid)" >&2
  return 1
}

start_servers() {
  rm -f "$work/dtrun.port" "$work/torch.port"
  # `timeout` bounds the server's life if this script is SIGKILLed; it passes SIGTERM on.
  timeout 900 "$dtrun" store --host 127.0.0.1 --port 0 --port-file "$work/dtrun.port" \
    --log-level warn >"$work/dtrun.log" 2>&1 &
  dtrun_pid=$!
  "$python" "$torch_server" "$work/torch.port" --max-seconds 900 >"$work/torch.log" 2>&1 &
  torch_pid=$!
  dtrun_port=$(wait_port "$work/dtrun.port" "$dtrun_pid")
  torch_port=$(wait_port "$work/torch.port" "$torch_pid")
  # The server's own process: `timeout`'s child (torch's TCPStore server is a thread of python).
  dtrun_server_pid=$(cat "/proc/$dtrun_pid/task/$dtrun_pid/children")
  dtrun_server_pid=${dtrun_server_pid%% *}
}

stop_servers() {
  stop_pid "$dtrun_pid"
  stop_pid "$torch_pid"
  dtrun_pid=""
  torch_pid=""
}

# field NAME LINE: the value of NAME=... in a store_bench result line.
field() {
  local name=$1 line=$2
  sed -n "s/.* $name=\([^ ]*\).*/\1/p" <<<"$line"
}

results=$work/results  # server op clients rep ops_per_s p50_us p99_us cpu_s_per_kop
: >"$results"

echo "store bench: ops {$ops} x clients {$clients_list} x {dtrun, torch-1.13}," \
  "${duration_ms} ms per cell, $repeats run(s) each, $(nproc) CPUs," \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for op in $ops; do
  # Fresh servers per op, so no op runs against another's keys.
  start_servers
  for clients in $clients_list; do
    for rep in $(seq "$repeats"); do
      # Interleaved, so background noise lands on both servers alike.
      for server in dtrun torch-1.13; do
        port=$dtrun_port
        pid=$dtrun_server_pid
        [[ $server == dtrun ]] || { port=$torch_port; pid=$torch_pid; }
        line=$("$bench" --port "$port" --clients "$clients" --op "$op" \
          --duration-ms "$duration_ms" --warmup-ms "$warmup_ms" --label "$server" \
          --server-pid "$pid") || {
          echo "run.sh: store_bench failed: $server $op $clients clients: $line" >&2
          exit 1
        }
        [[ -z ${RAW:-} ]] || echo "$line" >>"$RAW"
        echo "  $line" >&2
        echo "$server $op $clients $rep $(field ops_per_s "$line") $(field p50_us "$line")" \
          "$(field p99_us "$line") $(field server_cpu_s_per_kop "$line")" >>"$results"
      done
    done
  done
  stop_servers
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# The run with the median ops/s of one (server, op, clients) cell: "ops_per_s p50 p99".
median_run() {
  awk -v s="$1" -v o="$2" -v c="$3" '$1 == s && $2 == o && $3 == c {print $5, $6, $7}' \
    "$results" | sort -n | awk '{row[NR] = $0} END {print row[int((NR + 1) / 2)]}'
}

echo
printf '%-8s %7s | %10s %17s | %10s %17s | %11s\n' op clients "dtrun op/s" "dtrun p50/p99 µs" \
  "torch op/s" "torch p50/p99 µs" "dtrun/torch"
printf '%s\n' "-------------------------------------------------------------------------------------------------"
for op in $ops; do
  for clients in $clients_list; do
    read -r d_ops d_p50 d_p99 <<<"$(median_run dtrun "$op" "$clients")"
    read -r t_ops t_p50 t_p99 <<<"$(median_run torch-1.13 "$op" "$clients")"
    ratio=$(awk -v a="$d_ops" -v b="$t_ops" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "-"}')
    printf '%-8s %7s | %10s %17s | %10s %17s | %11s\n' "$op" "$clients" "$d_ops" \
      "$d_p50/$d_p99" "$t_ops" "$t_p50/$t_p99" "$ratio"
  done
done
# Median of one (server, op, clients) cell's server CPU per 1000 ops.
median_cpu() {
  awk -v s="$1" -v o="$2" -v c="$3" '$1 == s && $2 == o && $3 == c && $8 != "" {print $8}' \
    "$results" | sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
      else printf "%.5f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
echo
echo "server CPU per 1000 ops (utime + stime of the server process over the window, CPU-seconds;"
echo "median of $repeats run(s)); ratio = dtrun / torch, target <= 0.33"
printf '%-8s %7s | %15s | %15s | %11s\n' op clients "dtrun CPU-s/kop" "torch CPU-s/kop" "dtrun/torch"
printf '%s\n' "----------------------------------------------------------------------"
plot_data=$work/store_cpu.dat  # label dtrun torch (CPU-ms per 1000 ops)
: >"$plot_data"
worst=""
for op in $ops; do
  for clients in $clients_list; do
    d_cpu=$(median_cpu dtrun "$op" "$clients")
    t_cpu=$(median_cpu torch-1.13 "$op" "$clients")
    ratio=$(awk -v a="$d_cpu" -v b="$t_cpu" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-"}')
    printf '%-8s %7s | %15s | %15s | %11s\n' "$op" "$clients" "$d_cpu" "$t_cpu" "$ratio"
    [[ $ratio == - ]] || worst=$(awk -v w="${worst:-0}" -v r="$ratio" 'BEGIN {print (r > w ? r : w)}')
    awk -v l="$op/$clients" -v a="$d_cpu" -v b="$t_cpu" \
      'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%s %.4f %.4f\n", l, a * 1000, b * 1000}' >>"$plot_data"
  done
done
echo "largest dtrun/torch server CPU ratio over these cells: ${worst:--} (target <= 0.33:" \
  "$(awk -v w="${worst:-9}" 'BEGIN {print (w <= 0.3334 ? "met" : "MISSED")}'))"
if [[ -n $plot ]]; then
  if command -v gnuplot >/dev/null; then
    gnuplot -e "data='$plot_data'; out='$plot'" "$repo/bench/store/plot.gp" && echo "plot: $plot"
  else
    echo "run.sh: gnuplot not installed (apt-get install gnuplot-nox, or scripts/setup.sh): no plot" >&2
  fi
fi
cat <<'EOF'

set: fire-and-forget on the wire (no reply); op/s counts the window plus one round trip after it
     (so the server has applied every set), latency is the client's call (bytes handed to the kernel).
get: Store::get = WAIT then GET, two round trips per op, as torch's own client does.
add: one counter key shared by all clients (the hot-key path).
waitset: one pair = set(ws/<client>/<i>) + wait on it; op/s are pairs/s, latency per pair.
server CPU: the server process's utime + stime (clock ticks of 10 ms) from the window's start to
     the last client's report, divided by the window's ops; get counts as one op (two requests).
EOF
