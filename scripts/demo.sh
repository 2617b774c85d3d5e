#!/usr/bin/env bash
# The main demo, on a fresh Debian bookworm machine: installs, builds, starts `dtrun store` on a
# free port and runs a 4-rank unmodified PyTorch (gloo) all_reduce that bootstraps through it,
# the way torchrun's agent store is used. Usage: scripts/demo.sh [ranks, default 4]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ranks=${1:-4}
[[ $ranks =~ ^[1-9][0-9]*$ ]] || { echo "demo.sh: ranks must be a positive integer, got '$ranks'" >&2; exit 2; }

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" release dtrun >/dev/null
dtrun=$root/build/launcher/dtrun

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

"$dtrun" store --host 127.0.0.1 --port 0 --port-file "$tmp/port" --log-level warn &
store_pid=$!
pids+=("$store_pid")
for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.1; done
[[ -s $tmp/port ]] || { echo "demo.sh: dtrun store did not report its port within 10 s" >&2; exit 1; }
port=$(cat "$tmp/port")

rank_pids=()
for ((r = 0; r < ranks; r++)); do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r LOCAL_RANK=$r WORLD_SIZE=$ranks \
  TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 GLOO_SOCKET_IFNAME=lo \
    timeout 120 /usr/bin/python3 "$root/demos/python/allreduce_agent_store.py" \
    2> >(grep -v '^\[W' >&2) &
  rank_pids+=($!)
  pids+=($!)
done
failed=0
for p in "${rank_pids[@]}"; do wait "$p" || failed=1; done
kill -TERM "$store_pid"
wait "$store_pid" || failed=1
pids=()
if ((failed)); then
  echo "demo: FAILED" >&2
  exit 1
fi
echo "demo: $ranks PyTorch ranks bootstrapped through dtrun's store on port $port and agreed"
