#!/usr/bin/env bash
# Stacks on demand, with real torch 1.13 workers doing gloo all_reduces while rank 3 spends its
# time in load_batch() (a sleep) before each one, so ranks 0-2 wait in all_reduce for it:
#   dtrun stacks ADDR, three times while the job runs: each answer groups the ranks by identical
#     stacks (rank 3 alone in load_batch, the others in all_reduce, `ranks 0-2` as one group),
#     and after each the ranks' operation counts (the endpoint's /status) still rise
#   no token: GET /stacks is 401 and dtrun stacks says what is missing; a bad address exits 2,
#     a closed port 1
#   SIGRTMIN+3 to the agent: one console line naming <run dir>/stacks-<n>.txt, which holds the
#     groups
#   two agents of one c10d job on loopback: the gathering agent's endpoint answers with the
#     stacks of both nodes' ranks
# Every job ends 0 when told to (each rank leaves the loop at the same step: a flag reduced with
# MAX), so the dumps cost them nothing but the dump itself.
#   bash tests/integration/live_stacks_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" live_stacks_test "$@"
sanitizers_in_short_form "the agent's stack requests and their grouping"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
command -v curl >/dev/null || die "curl not found: scripts/setup.sh installs it"
command -v eu-stack >/dev/null || die "eu-stack not found: scripts/setup.sh installs elfutils"
$PYTHON -c 'import torch.distributed' 2>/dev/null || die "torch is missing for $PYTHON (scripts/setup.sh installs python3-torch)"
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=$PYTHON

# All ranks step together until $work/stop exists (at most 240 s); rank 3 loads slowly, and
# while $work/hold exists it stays in load_batch (saying so in $work/held): each dump below is
# taken then, so rank 3 is in load_batch and the others in all_reduce whatever the machine's
# load (a 0.5 s sleep alone left rank 3 in all_reduce at the dump once under load).
cat >"$work/train.py" <<'EOF'
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def load_batch():
    time.sleep(0.5)
    hold = os.path.join(os.path.dirname(sys.argv[1]), "hold")
    if os.path.exists(hold):
        open(hold[:-4] + "held", "w").close()
        end = time.monotonic() + 60
        while os.path.exists(hold) and time.monotonic() < end:
            time.sleep(0.05)


dist.init_process_group("gloo", timeout=timedelta(seconds=180))
rank = dist.get_rank()
stop = sys.argv[1]
end = time.monotonic() + 240
while True:
    if rank == 3:
        load_batch()
    flag = torch.tensor([1.0 if os.path.exists(stop) or time.monotonic() > end else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        break
dist.destroy_process_group()
print("done", flush=True)
EOF

auth=(-H "Authorization: Bearer stacks-token")
export DTRUN_STORE_TOKEN=stacks-token

# min_ops <status port>: the fewest operations any running rank began, or -1 when unreadable.
min_ops() {
  curl -s --max-time 5 "${auth[@]}" "http://127.0.0.1:$1/status" | "$PYTHON" -c '
import json, sys
try:
    ranks = [r for n in json.load(sys.stdin)["nodes"] for r in n["ranks"]]
    print(min(r["ops"] for r in ranks) if len(ranks) == 4 and all(r["state"] == "running" for r in ranks) else -1)
except Exception:
    print(-1)' || echo -1
}
# rises_above <status port> <ops>: true once every rank began more than <ops> (at most $LIMIT s).
rises_above() {
  local until_s=$((SECONDS + LIMIT))
  while ((SECONDS < until_s)); do
    (($(min_ops "$1") > $2)) && return 0
    sleep 0.3
  done
  return 1
}

# hold: rank 3 stops in load_batch (at most $LIMIT s to get there); release: it goes on.
hold() {
  rm -f "$work/held"
  touch "$work/hold"
  local until_s=$((SECONDS + LIMIT))
  until [[ -e $work/held ]]; do
    ((SECONDS < until_s)) || die "rank 3 never stopped in load_batch (no $work/held)"
    sleep 0.05
  done
}
release() { rm -f "$work/hold" "$work/held"; }

# ---- one node, four ranks ----
port=$(free_port)
"$DTRUN" --nproc_per_node=4 --status_port="$port" --log_dir="$work/logs" \
  "$PYTHON" "$work/train.py" "$work/stop" >"$work/job.out" 2>&1 &
job=$!
pids+=("$job")
rises_above "$port" 2 || { tail -n 20 "$work/job.out" >&2; die "the status never showed 4 ranks running with operations"; }

grouped=0
for call in 1 2 3; do
  before=$(min_ops "$port")
  ((before >= 0)) || die "call $call: /status unreadable before dtrun stacks"
  hold
  "$DTRUN" stacks "127.0.0.1:$port" >"$work/stacks$call.txt" 2>"$work/stacks$call.err" ||
    die "dtrun stacks #$call exited $?: $(cat "$work/stacks$call.err")"
  release
  head -n 1 "$work/stacks$call.txt" | grep -Eq '^dtrun stacks #[0-9]+ of run [^ ]+: 4 ranks on 1 node, grouped by identical stacks$' ||
    die "dtrun stacks #$call: first line '$(head -n 1 "$work/stacks$call.txt")'"
  grep -Eq '^rank 3: load_batch \(train\.py:[0-9]+\)  \[1 rank on node 0\]$' "$work/stacks$call.txt" ||
    die "dtrun stacks #$call: no group of rank 3 alone in load_batch: $(grep -E '^ranks? ' "$work/stacks$call.txt")"
  grep -Eq '^ranks? [0-9, -]+: all_reduce \(' "$work/stacks$call.txt" ||
    die "dtrun stacks #$call: no group in all_reduce: $(grep -E '^ranks? ' "$work/stacks$call.txt")"
  grep -Eq '^ranks 0-2: all_reduce \(distributed_c10d\.py:[0-9]+\)  \[3 ranks on node 0\]$' "$work/stacks$call.txt" &&
    grouped=$((grouped + 1))
  grep -q 'native, main thread' "$work/stacks$call.txt" || die "dtrun stacks #$call: no native stack"
  rises_above "$port" "$before" || die "after dtrun stacks #$call the ranks' operations stopped at $before"
done
((grouped > 0)) || die "no answer grouped ranks 0-2 as one: $(grep -hE '^ranks? ' "$work"/stacks?.txt)"
pass "dtrun stacks three times: rank 3 alone in load_batch, ranks 0-2 in all_reduce ($grouped of 3 as one group), operations rising after each"

code=$(curl -s -o "$work/refused.txt" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/stacks" || true)
[[ $code == 401 ]] || die "/stacks without the token answered $code, expected 401"
rc=0
out=$(DTRUN_STORE_TOKEN='' "$DTRUN" stacks "127.0.0.1:$port" 2>&1) || rc=$?
[[ $rc -eq 1 && $out == *"needs its store token: pass --token or set DTRUN_STORE_TOKEN"* ]] ||
  die "dtrun stacks without the token: exit $rc, '$out'"
rc=0
out=$("$DTRUN" stacks nonsense 2>&1) || rc=$?
[[ $rc -eq 2 && $out == "dtrun stacks: 'nonsense' is not HOST:PORT"* ]] || die "a bad address: exit $rc, '$out'"
rc=0
out=$("$DTRUN" stacks "127.0.0.1:$(free_port)" 2>&1) || rc=$?
[[ $rc -eq 1 && $out == *"is the job running with --status_port"* ]] || die "no endpoint: exit $rc, '$out'"
pass "no token: 401 and the token named; a bad address exits 2, no endpoint 1"

before=$(min_ops "$port")
hold
kill -s RTMIN+3 "$job"
WAIT_FOR_S=$LIMIT wait_for "$work/job.out" '^dtrun: stacks of every running worker, grouped: ' ||
  die "no console line after SIGRTMIN+3: $(tail -n 5 "$work/job.out")"
release
file=$(grep -m1 '^dtrun: stacks of every running worker, grouped: ' "$work/job.out" | sed 's/.*grouped: //')
[[ $file == "$work/logs/"*/stacks-4.txt && -f $file ]] || die "SIGRTMIN+3 named '$file', not a stacks-4.txt of the run directory"
grep -Eq '^rank 3: load_batch ' "$file" || die "$file: no group of rank 3 in load_batch"
rises_above "$port" "$before" || die "after SIGRTMIN+3 the ranks' operations stopped at $before"
pass "SIGRTMIN+3: the groups in $(basename "$file") of the run directory, the job running on"

touch "$work/stop"
wait_agent "$job" $((SECONDS + LIMIT))
forget "$job"
[[ $rc -eq 0 ]] || { tail -n 20 "$work/job.out" >&2; die "the job exited $rc, expected 0"; }
[[ $(grep -c 'done$' "$work/job.out") -eq 4 ]] || die "not every rank finished its loop"
pass "the job ended 0 after four dumps"

# ---- two nodes: the gathering agent answers for both ----
rm -f "$work/stop"
rport=$(free_port)
declare -A status_of=()
for i in 0 1; do
  status_of[$i]=$(free_port)
  start "n$i" --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$rport" \
    --status_port="${status_of[$i]}" "$PYTHON" "$work/train.py" "$work/stop"
done
# The gatherer: the agent whose /status lists both nodes' 4 running ranks (at most $LIMIT s).
gatherer=""
until_s=$((SECONDS + LIMIT))
while [[ -z $gatherer ]] && ((SECONDS < until_s)); do
  for i in 0 1; do
    if (($(min_ops "${status_of[$i]}") > 1)); then gatherer=$i; break; fi
  done
  sleep 0.3
done
[[ -n $gatherer ]] || { tail -n 5 "$work"/n?.out >&2; die "no agent's /status listed both nodes' 4 ranks running"; }
hold
"$DTRUN" stacks "127.0.0.1:${status_of[$gatherer]}" --output="$work/job_stacks.txt" 2>"$work/job_stacks.err" ||
  die "dtrun stacks on the gathering agent exited $?: $(cat "$work/job_stacks.err")"
release
grep -q "written to $work/job_stacks.txt" "$work/job_stacks.err" || die "--output: $(cat "$work/job_stacks.err")"
head -n 1 "$work/job_stacks.txt" | grep -q ': 4 ranks on 2 nodes, grouped' ||
  die "the gathered stacks: '$(head -n 1 "$work/job_stacks.txt")', expected 4 ranks on 2 nodes"
grep -Eq '^rank 3: load_batch \(train\.py:[0-9]+\)  \[1 rank on node [01]\]$' "$work/job_stacks.txt" ||
  die "the gathered stacks: no group of rank 3 in load_batch: $(grep -E '^ranks? ' "$work/job_stacks.txt")"
grep -Eq '^ranks? [0-9, -]+: all_reduce .*on nodes 0-1\]$' "$work/job_stacks.txt" ||
  die "the gathered stacks: no all_reduce group spanning both nodes: $(grep -E '^ranks? ' "$work/job_stacks.txt")"
pass "agent $gatherer's endpoint gathered the stacks of both nodes"
touch "$work/stop"
for i in 0 1; do expect_rc "n$i" 0 || true; done
end_test
