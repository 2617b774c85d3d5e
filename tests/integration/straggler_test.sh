#!/usr/bin/env bash
# Stragglers named with no change to the training script, from the entry times of collectives:
#   python  4 real torch 1.13 ranks doing gloo all_reduces, rank 2 sleeping 1 s before each
#           (--status_port, --straggler_threshold=0.5): while the job runs, /status marks
#           rank 2 a straggler and no other, /metrics has dtrun_rank_straggler 1 for it and 0
#           for the others, `dtrun top` names it; at the end the console named it once, within
#           the window, and the event log and the run report record it
#   cpp     3 libdtrt ranks (dtrt_hang_worker --slow=1:0.6), --status_port alone (detection on
#           by default, threshold 0.2 s): rank 1 named on the console and in the report
#   nodes   2 c10d nodes of 2 libdtrt ranks, rank 3 slowed, --straggler_threshold without an
#           endpoint: the store's host (which gathers every node's entry times through the
#           store) names rank 3 on node 1, once
# The thresholds are well above what a loaded machine's scheduling adds to a fast rank's entry.
#   off     the same job without the flag: nobody named
#   bash tests/integration/straggler_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" straggler_test "$@"
sanitizers_in_short_form "the agent's straggler judgement"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
command -v curl >/dev/null || die "curl not found: scripts/setup.sh installs it"
WORKER=$BUILD/tests/worker_runtime/dtrt_hang_worker
[[ -x $WORKER ]] || die "expected $WORKER (ninja -C build dtrt_hang_worker)"
export OMP_NUM_THREADS=1

# `steps` all_reduces; rank `slow` sleeps `pause` seconds in load_batch() before each.
cat >"$work/train.py" <<'EOF'
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def load_batch(rank, slow, pause):
    if rank == slow:
        time.sleep(pause)


steps, slow, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
t = torch.ones(256)
for _ in range(steps):
    load_batch(dist.get_rank(), slow, pause)
    dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
print("done", flush=True)
EOF

# ---- python: 4 ranks, rank 2 late by 1 s at every all_reduce (16 of them) -----------------
port=$(free_port)
"$DTRUN" --nproc_per_node=4 --status_port="$port" --straggler_threshold=0.5 --log_dir="$work/logs" \
  --event_log="$work/events.jsonl" --report="$work/report.json" \
  "$PYTHON" "$work/train.py" 16 2 1.0 >"$work/job.out" 2>&1 &
job=$!
pids+=("$job")
fetch() { curl -s -o "$2" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port$1" || true; }

named=0
for _ in $(seq $((LIMIT * 5))); do
  running "$job" || break
  if [[ $(fetch /status "$work/status.json") == 200 ]] &&
    "$PYTHON" - "$work/status.json" <<'EOF'; then
import json, sys
ranks = json.load(open(sys.argv[1]))["nodes"][0]["ranks"]
sys.exit(0 if any(r.get("straggler") for r in ranks) else 1)
EOF
    named=1
    break
  fi
  sleep 0.2
done
((named)) || { cat "$work/job.out" >&2; die "the status never named a straggler while the job ran"; }
"$PYTHON" - "$work/status.json" <<'EOF' || die "/status: $(cat "$work/status.json")"
import json, sys
ranks = {r["rank"]: r for r in json.load(open(sys.argv[1]))["nodes"][0]["ranks"]}
assert sorted(ranks) == [0, 1, 2, 3], ranks
assert ranks[2]["straggler"] is True and ranks[2]["late_seconds"] >= 0.7, ranks[2]
for rank in (0, 1, 3):
    assert not ranks[rank].get("straggler") and ranks[rank]["late_seconds"] < 0.7, ranks[rank]
assert all("entry_times" not in r for r in ranks.values()), "the judgement's input leaked"
EOF
pass "/status: rank 2 a straggler (late by >= 0.7 s), ranks 0, 1, 3 not"

[[ $(fetch /metrics "$work/metrics.txt") == 200 ]] || die "/metrics did not answer"
grep -q '^# TYPE dtrun_rank_straggler gauge$' "$work/metrics.txt" || die "/metrics: no dtrun_rank_straggler"
grep -Eq '^dtrun_rank_straggler\{[^}]*rank="2"[^}]*\} 1$' "$work/metrics.txt" ||
  die "/metrics: rank 2 is not 1: $(grep dtrun_rank_straggler "$work/metrics.txt")"
[[ $(grep -Ec '^dtrun_rank_straggler\{[^}]*\} 0$' "$work/metrics.txt") -eq 3 ]] ||
  die "/metrics: the fast ranks are not 0: $(grep dtrun_rank_straggler "$work/metrics.txt")"
grep -Eq '^dtrun_rank_late_seconds\{[^}]*rank="2"[^}]*\} (0\.[7-9]|1\.)' "$work/metrics.txt" ||
  die "/metrics: rank 2's late seconds: $(grep dtrun_rank_late_seconds "$work/metrics.txt")"
"$DTRUN" top "127.0.0.1:$port" --once >"$work/top.txt" 2>&1 || die "dtrun top: $(cat "$work/top.txt")"
grep -Eq '^straggler: rank 2 on .* reaches collectives (0\.[7-9]|1\.)[0-9]* s after the others$' "$work/top.txt" ||
  die "dtrun top does not name rank 2: $(cat "$work/top.txt")"
[[ $(awk 'header { print $1; exit } /^rank / { header = 1 }' "$work/top.txt") == 2 ]] ||
  die "dtrun top does not list rank 2 first: $(cat "$work/top.txt")"
pass "/metrics: dtrun_rank_straggler 1 for rank 2, 0 for the others; dtrun top names it first"

rc=0
wait "$job" || rc=$?
forget "$job"
[[ $rc -eq 0 ]] || { tail -n 20 "$work/job.out" >&2; die "the job exited $rc, expected 0"; }
[[ $(grep -c '^dtrun: straggler: ' "$work/job.out") -eq 1 ]] ||
  die "expected one straggler line: $(grep 'straggler' "$work/job.out")"
grep -Eq '^dtrun: straggler: rank 2 on [^ ]+ \(node 0\) reaches collectives (0\.[7-9]|1\.)[0-9]+ s after the others, late in [0-9]+ of the last [0-9]+ \(--straggler_threshold=0\.50\)$' \
  "$work/job.out" || die "the straggler line: $(grep 'straggler' "$work/job.out")"
"$PYTHON" - "$work/report.json" "$work/events.jsonl" <<'EOF' || die "the report or event log"
import json, sys
report = json.load(open(sys.argv[1]))
stragglers = report["stragglers"]
assert [s["rank"] for s in stragglers] == [2], stragglers
s = stragglers[0]
# Named within the window (50 collectives), after at least a tenth of it was late.
assert 5 <= s["late_count"] <= s["judged"] <= 50 and s["late_s"] >= 0.7, s
events = [json.loads(line) for line in open(sys.argv[2])]
named = [e for e in events if e["event"] == "straggler"]
assert len(named) == 1 and named[0]["rank"] == 2 and named[0]["late_s"] >= 0.7, named
EOF
grep -q '^  straggler: rank 2 on ' "$work/job.out" || die "the summary at exit has no straggler line"
"$DTRUN" report "$work/report.json" --html "$work/report.html" >/dev/null 2>&1 || die "dtrun report --html"
grep -q '<p class="straggler">straggler: rank 2 on ' "$work/report.html" || die "the HTML report names no straggler"
pass "console (once), event log, report, summary and HTML report name rank 2, within the window"

# ---- cpp: libdtrt workers; --status_port alone turns detection on (0.2 s) ----------------
rc=0
"$DTRUN" --nproc_per_node=3 --status_port=0 --log_dir="$work/logs" \
  --report="$work/cpp.json" --no_python "$WORKER" --ok --steps=16 --slow=1:0.6 \
  >"$work/cpp.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { tail -n 20 "$work/cpp.out" >&2; die "the libdtrt job exited $rc"; }
grep -Eq '^dtrun: straggler: rank 1 on [^ ]+ \(node 0\) reaches collectives 0\.[4-9][0-9] s after .*\(--straggler_threshold=0\.20\)$' \
  "$work/cpp.out" || die "libdtrt's rank 1 not named: $(grep -i straggler "$work/cpp.out" || true)"
[[ $(grep -c '^dtrun: straggler: ' "$work/cpp.out") -eq 1 ]] || die "another rank named: $(grep straggler "$work/cpp.out")"
"$PYTHON" -c '
import json, sys
assert [s["rank"] for s in json.load(open(sys.argv[1]))["stragglers"]] == [1]' "$work/cpp.json" ||
  die "the libdtrt job's report does not name rank 1"
pass "libdtrt workers: rank 1 named from its progress counters, on by default with --status_port"

# ---- nodes: two agents, the judgement on the store's host from both nodes' entry times ------
port=$(free_port)
declare -A pid_of=() started_at=()
for i in 0 1; do
  start "n$i" --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" \
    --straggler_threshold=0.3 --no_python "$WORKER" --ok --steps=16 --slow=3:0.6
done
expect_rc n0 0 || die "node 0 of the two-node job failed"
expect_rc n1 0 || die "node 1 of the two-node job failed"
cat "$work/n0.out" "$work/n1.out" >"$work/nodes.out"
[[ $(grep -c '^dtrun: straggler: ' "$work/nodes.out") -eq 1 ]] ||
  die "expected one straggler line from the two nodes: $(grep straggler "$work/nodes.out" || true)"
grep -Eq '^dtrun: straggler: rank 3 on [^ ]+ \(node 1\) reaches collectives 0\.[4-9]' "$work/nodes.out" ||
  die "rank 3 of node 1 not named: $(grep straggler "$work/nodes.out")"
! grep -q 'live status of this node' "$work/nodes.out" || die "an endpoint was opened without --status_port"
pass "two nodes, no endpoint: the store's host names rank 3 on node 1 from both nodes' entry times"

# ---- off: the same job without the flag (and without --status_port) ---------------------
rc=0
"$DTRUN" --nproc_per_node=3 --log_dir="$work/logs" --report="$work/off.json" --no_python \
  "$WORKER" --ok --steps=6 --slow=1:0.6 >"$work/off.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || die "the job without detection exited $rc"
! grep -qi straggler "$work/off.out" "$work/off.json" || die "a straggler was named with detection off"
end_test "a slowed rank named in every place, the fast ones never; off names nobody"
