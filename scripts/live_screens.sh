#!/usr/bin/env bash
# The README's live-view screens, from a real job: 8 torch 1.13 ranks doing gloo all_reduces, rank
# 5 sleeping 0.4 s before each (a straggler). While it runs: `dtrun top --once` (text) and the
# status page in headless chromium (a PNG). Loopback only; the job is stopped by its pid.
#   scripts/live_screens.sh [build/launcher/dtrun] [out dir (default docs/img)]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DTRUN=$(realpath "${1:-$ROOT/build/launcher/dtrun}")
OUT=$(mkdir -p "${2:-$ROOT/docs/img}" && cd "${2:-$ROOT/docs/img}" && pwd)
PYTHON=/usr/bin/python3
browser=$(command -v chromium-headless-shell || command -v chromium || true)
[[ -x $DTRUN ]] || { echo "live_screens: no dtrun at $DTRUN (build first)" >&2; exit 1; }
[[ -n $browser ]] || { echo "live_screens: no headless chromium (scripts/setup.sh installs it)" >&2; exit 1; }
work=$(mktemp -d)
job=
cleanup() {
  [[ -z $job ]] || kill -TERM "$job" 2>/dev/null || true
  [[ -z $job ]] || wait "$job" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/train.py" <<'EOF'
import os, sys, time
from datetime import timedelta
import torch
import torch.distributed as dist


def load_batch(rank):
    time.sleep(0.4 if rank == 5 else 0.05)


dist.init_process_group("gloo", timeout=timedelta(seconds=60))
model = torch.nn.Linear(256, 256)
for step in range(200):
    load_batch(dist.get_rank())
    for p in model.parameters():
        dist.all_reduce(p.data)
    if os.path.exists(sys.argv[1]):
        break
dist.destroy_process_group()
EOF

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
OMP_NUM_THREADS=1 "$DTRUN" --nproc_per_node=8 --rdzv_id=train-8 --status_port="$port" --log_dir="$work/logs" \
  "$PYTHON" "$work/train.py" "$work/stop" >"$work/job.out" 2>&1 &
job=$!
for _ in $(seq 600); do
  grep -q '^dtrun: straggler: ' "$work/job.out" && break
  kill -0 "$job" 2>/dev/null || { cat "$work/job.out" >&2; exit 1; }
  sleep 0.1
done
grep -q '^dtrun: straggler: ' "$work/job.out" || { echo "live_screens: nobody named in 60 s" >&2; exit 1; }
sleep 3  # a few more samples: rates and the window
"$DTRUN" top "127.0.0.1:$port" --once >"$OUT/live-top.txt"
grep "^dtrun: straggler: " "$work/job.out" >"$OUT/live-console.txt"
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$work/profile" --window-size=1060,330 --virtual-time-budget=3000 \
  --screenshot="$OUT/live-page.png" "http://127.0.0.1:$port/" >/dev/null 2>&1
touch "$work/stop"
wait "$job"
job=
echo "live_screens: $OUT/live-top.txt, $OUT/live-console.txt, $OUT/live-page.png"
cat "$OUT/live-console.txt" "$OUT/live-top.txt"
