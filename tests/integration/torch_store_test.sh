#!/usr/bin/env bash
# Unmodified PyTorch 1.13 clients (Debian's python3-torch, /usr/bin/python3) against `dtrun store`.
#   bash tests/integration/torch_store_test.sh /abs/path/to/dtrun
# Scenarios, each against a fresh server on 127.0.0.1 (port 0, read from --port-file):
#   ops    - torch_store_ops.py: every op of the 1.13 TCPStore Python binding, exact results
#   gloo2  - 2 ranks of torch_gloo_rank.py: init_process_group("gloo", "env://") via the agent store
#   gloo4  - the same with 4 ranks
#   mixed  - torch_mixed_dialect.py: a torch>=2.2-dialect raw client and a 1.13 client share keys
# After each scenario the server must still be alive, and must exit 0 on SIGTERM.
# Every process is started in the background and stopped by its own PID; loopback only.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" torch_store_test "$@"
release_in_short_form "the store's request handling (both torch dialects) runs here in rdzv/'s store and protocol tests and the fuzz_store_request target; the rest is torch's client"
STEP_TIMEOUT=60  # seconds for one client process

# Describes exit status $1 (timeout(1) exits 124 when it had to stop the command).
status_text() { if [[ $1 -eq 124 ]]; then echo "exited 124 (timed out)"; else echo "exited $1"; fi; }

# Prints a file, minus torch's harmless "[W ..." warning lines.
show() { grep -v '^\[W' "$1" || true; }

[[ -x $PYTHON ]] || die "$PYTHON not found (needs Debian's python3-torch)"
$PYTHON -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
  die "$PYTHON cannot import torch.distributed (install python3-torch 1.13)"

server_pid=""
port=""
start_server() {  # $1 = scenario name
  local pf=$work/$1.port log=$work/$1.server.log
  "$DTRUN" store --host 127.0.0.1 --port 0 --port-file "$pf" --log-level warn >"$log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  # The port file is written (atomically) just before the "listening" line is printed.
  for _ in $(seq 100); do  # 10 s
    [[ -s $pf ]] && grep -q "listening on port" "$log" && break
    running "$server_pid" || { show "$log"; die "$1: dtrun store exited before it was listening"; }
    sleep 0.1
  done
  [[ -s $pf ]] || die "$1: no port file from dtrun store after 10 s"
  port=$(<"$pf")
  [[ $port =~ ^[0-9]+$ && $port -gt 0 ]] || die "$1: bad port file content '$port'"
  grep -q "^dtrun store: listening on port $port\$" "$log" ||
    { show "$log"; die "$1: dtrun store did not print 'listening on port $port'"; }
}

stop_server() {  # $1 = scenario name
  running "$server_pid" || { show "$work/$1.server.log"; die "$1: dtrun store died during the scenario"; }
  kill -TERM "$server_pid"
  for _ in $(seq 100); do running "$server_pid" || break; sleep 0.1; done
  running "$server_pid" && die "$1: dtrun store still running 10 s after SIGTERM"
  local rc=0
  wait "$server_pid" || rc=$?
  forget "$server_pid"
  [[ $rc -eq 0 ]] || { show "$work/$1.server.log"; die "$1: dtrun store exited $rc on SIGTERM"; }
}

run_client() {  # $1 = scenario, $2 = script: runs it against $port in the foreground
  local out=$work/$1.client.log rc=0
  timeout "$STEP_TIMEOUT" "$PYTHON" "$HERE/$2" "$port" >"$out" 2>&1 || rc=$?
  show "$out"
  [[ $rc -eq 0 ]] || die "$1: $2 $(status_text "$rc")"
}

run_gloo() {  # $1 = scenario, $2 = world size
  local n=$2 r rank_pids=()
  for ((r = 0; r < n; r++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n \
      LOCAL_WORLD_SIZE=$n TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 \
      GLOO_SOCKET_IFNAME=lo \
      timeout "$STEP_TIMEOUT" "$PYTHON" "$HERE/torch_gloo_rank.py" >"$work/$1.rank$r.log" 2>&1 &
    rank_pids+=($!)
    pids+=($!)
  done
  local failed=""
  for ((r = 0; r < n; r++)); do
    local rc=0
    wait "${rank_pids[r]}" || rc=$?
    forget "${rank_pids[r]}"
    show "$work/$1.rank$r.log"
    [[ $rc -eq 0 ]] || failed+=" rank $r $(status_text "$rc");"
  done
  [[ -z $failed ]] || die "$1: $n-rank gloo job:$failed"
}

scenario() {  # $1 = name, then the command that runs it
  local name=$1 start=$SECONDS
  shift
  start_server "$name"
  "$@"
  stop_server "$name"
  echo "torch_store_test: $name ok ($((SECONDS - start)) s)"
}

scenario ops run_client ops torch_store_ops.py
scenario gloo2 run_gloo gloo2 2
scenario gloo4 run_gloo gloo4 4
scenario mixed run_client mixed torch_mixed_dialect.py
echo "torch_store_test: all scenarios passed"
