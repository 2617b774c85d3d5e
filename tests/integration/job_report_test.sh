#!/usr/bin/env bash
# One report for a job of several nodes: three agents on loopback (static, 2 ranks each), rank 4
# fails in attempt 0 and the job succeeds in attempt 1. The store's host (node 0) writes one
# --report with every node's own report under node_reports (all 6 ranks, both attempts, each
# node's host and rank); the other nodes' reports stay their own. Every report follows
# docs/report.schema.json.
set -uo pipefail
source "$(dirname "$0")/lib/preamble.sh" job_report_test "$@"
source "$HERE/lib/wait_agent.sh"
WORKER=$HERE/workers/node_worker.sh
$PYTHON -c 'import jsonschema' 2>/dev/null || die "python3-jsonschema is missing (scripts/setup.sh installs it)"

port=$(free_port)
declare -a node_pids=()
for n in 0 1 2; do
  "$DTRUN" --nnodes=3 --node_rank="$n" --master_port="$port" --rdzv_id=job --max_restarts=1 \
    --rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=2,close_timeout=10 \
    --nproc_per_node=2 --report="$work/report$n.json" --log_dir="$work/logs$n" \
    --no_python "$WORKER" fail 4 1 >"$work/node$n.out" 2>&1 &
  node_pids+=("$!")
  pids+=("$!")
done
until=$((SECONDS + LIMIT))
for n in 0 1 2; do
  wait_agent "${node_pids[$n]}" "$until"
  [[ $rc -eq 0 ]] || note_fail "node $n exited $rc: $(tail -n 3 "$work/node$n.out")"
done
for n in 0 1 2; do
  "$PYTHON" "$HERE/validate_report.py" "$ROOT/docs/report.schema.json" "$work/report$n.json" >/dev/null 2>&1 ||
    note_fail "report$n.json does not follow docs/report.schema.json"
done
got=$("$PYTHON" - "$work/report0.json" <<'PY' 2>&1
import json, sys
r = json.load(open(sys.argv[1]))
nodes = r.get("node_reports", [])
ranks = sorted(k["rank"] for n in nodes for k in n["attempts"][-1]["ranks"])
print(len(nodes), ",".join(map(str, ranks)),
      sorted(n["nodes"]["this_node_rank"] for n in nodes),
      sorted(len(n["attempts"]) for n in nodes),
      sorted(n["outcome"] for n in nodes))
PY
)
[[ $got == "3 0,1,2,3,4,5 [0, 1, 2] [2, 2, 2] ['succeeded', 'succeeded', 'succeeded']" ]] ||
  note_fail "node 0's report: want 3 node reports with ranks 0-5 and 2 attempts each, got: $got"
for n in 1 2; do
  "$PYTHON" -c 'import json,sys; sys.exit("node_reports" in json.load(open(sys.argv[1])))' "$work/report$n.json" ||
    note_fail "node $n's report holds node_reports: only the store's host gathers them"
done
[[ $fail_count -ne 0 ]] || pass "the store's host wrote one report: 3 nodes, ranks 0-5, 2 attempts each"
end_test
