#!/usr/bin/env bash
# The live view of a running job (--status_port), with real torch 1.13 workers doing gloo
# all_reduces in a loop, read while it runs:
#   /status   JSON: both ranks running, their pids, operation (all_reduce) and count rising,
#             resident memory and CPU; the job's round and restarts
#   /metrics  Prometheus's text format, scraped by Debian's real prometheus server (started on
#             loopback with a scrape config for the agent) and read back through its HTTP query
#             API: dtrun_worker_up and dtrun_rank_operations_total per rank
#   /         the live page (self-contained HTML), opened in headless chromium: a row per rank
#   a store token (DTRUN_STORE_TOKEN): a request without it gets 401, with it 200
#   GPUs from a fake NVML (lib/fake_nvml.cpp, through DTRUN_NVML_LIBRARY) that lists each rank's
#             own pid as a compute process (rank r on GPU r): its GPU, GPU memory and that GPU's
#             utilisation in /status, /metrics, `dtrun top` and the page; then a job whose NVML
#             is absent: no GPU field at all, and NVML tried once (one debug line)
# The job keeps running meanwhile and ends 0 when told to; the endpoint closes with it.
#   bash tests/integration/live_status_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" live_status_test "$@"
sanitizers_in_short_form "the agent's status endpoint and page"
command -v curl >/dev/null || die "curl not found: scripts/setup.sh installs it"
command -v prometheus >/dev/null || die "prometheus not found: scripts/setup.sh installs it"
export OMP_NUM_THREADS=1
CXX=${CXX:-$(command -v g++ || command -v c++)} || die "no C++ compiler to build the fake NVML"
"$CXX" -shared -fPIC -O1 -o "$work/libnvidia-ml.so.1" "$HERE/lib/fake_nvml.cpp" ||
  die "cannot build the fake NVML"
export DTRUN_NVML_LIBRARY=$work/libnvidia-ml.so.1 FAKE_NVML_COUNT=2
export FAKE_NVML_PROCESSES_FILE=$work/gpu_processes FAKE_NVML_UTILIZATION="0:37:12,1:5:1"

# Steps of all_reduce until $work/stop exists (at most 120 s). The ranks agree on the step they
# stop at (a MAX over each one's view): each deciding alone, one went on to an all_reduce while
# the other waited in the final barrier, under load, until gloo's 60 s timeout.
cat >"$work/train.py" <<'EOF'
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
# The fake NVML's GPU r holds this process's memory: 812 MiB for rank 0, 900 for rank 1.
rank = dist.get_rank()
with open(os.environ["FAKE_NVML_PROCESSES_FILE"], "a") as f:
    f.write(f"{rank}:{os.getpid()}:{812 + 88 * rank},")
stop = sys.argv[1]
t = torch.ones(1024)
end = time.monotonic() + 120
while True:
    done = torch.tensor([1.0 if os.path.exists(stop) or time.monotonic() > end else 0.0])
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
    if done.item() > 0:
        break
    dist.all_reduce(t)
    time.sleep(0.02)
dist.barrier()
dist.destroy_process_group()
print("done", flush=True)
EOF

port=$(free_port)
DTRUN_STORE_TOKEN=live-token "$DTRUN" --nproc_per_node=2 --status_port="$port" \
  --log_dir="$work/logs" "$PYTHON" "$work/train.py" "$work/stop" >"$work/job.out" 2>&1 &
job=$!
pids+=("$job")
auth=(-H "Authorization: Bearer live-token")

# fetch <path> <out>: one GET within 5 s; its HTTP code is printed.
fetch() { curl -s -o "$2" -w '%{http_code}' --max-time 5 "${auth[@]}" "http://127.0.0.1:$port$1" || true; }

# The status once both ranks have begun operations (at most $LIMIT s).
ready=0
for _ in $(seq $((LIMIT * 5))); do
  running "$job" || break
  if [[ $(fetch /status "$work/status.json") == 200 ]] &&
    "$PYTHON" - "$work/status.json" <<'EOF'; then
import json, sys
ranks = json.load(open(sys.argv[1]))["nodes"][0]["ranks"]
sys.exit(0 if len(ranks) == 2 and all(r["state"] == "running" and r["ops"] > 2 and "gpu" in r
                                      for r in ranks) else 1)
EOF
    ready=1
    break
  fi
  sleep 0.2
done
((ready)) || { cat "$work/job.out" >&2; die "the status never showed both ranks running with operations and a GPU"; }

sleep 1.2  # one more sample: CPU and operations per second need two
fetch /status "$work/status.json" >/dev/null
"$PYTHON" - "$work/status.json" <<'EOF' || die "/status: $(cat "$work/status.json")"
import json, sys
job = json.load(open(sys.argv[1]))
node = job["nodes"][0]
assert node["state"] == "running" and node["restarts"] == 0 and node["max_restarts"] == 0, node
ranks = sorted(node["ranks"], key=lambda r: r["rank"])
assert [r["rank"] for r in ranks] == [0, 1], ranks
for r in ranks:
    assert r["pid"] > 0 and r["op"] == "all_reduce", r
    assert r["rss_bytes"] > 10 << 20, r  # a python with torch
    assert r["cpu_percent"] >= 0 and r["ops_per_second"] > 0, r
    assert r["since_progress_seconds"] < 30, r
    want = (r["rank"], (812 + 88 * r["rank"]) << 20, [37, 5][r["rank"]])
    assert (r["gpu"], r["gpu_memory_bytes"], r["gpu_utilization"]) == want, r
EOF
pass "/status: both ranks running in all_reduce, pids, memory, CPU, rates and GPUs"

code=$(fetch /metrics "$work/metrics.txt")
[[ $code == 200 ]] || die "/metrics answered $code"
grep -q '^# TYPE dtrun_rank_operations_total counter$' "$work/metrics.txt" ||
  die "/metrics has no dtrun_rank_operations_total counter: $(head -c 600 "$work/metrics.txt")"
grep -Eq '^dtrun_worker_up\{run_id="[^"]+",node="0",host="[^"]+",rank="1",local_rank="1"\} 1$' \
  "$work/metrics.txt" || die "/metrics: no dtrun_worker_up sample for rank 1"
grep -Eq '^dtrun_rank_gpu_utilization_ratio\{run_id="[^"]+",node="0",host="[^"]+",rank="0",local_rank="0"\} 0.37$' \
  "$work/metrics.txt" || die "/metrics: no GPU utilisation 0.37 for rank 0: $(grep gpu "$work/metrics.txt")"
grep -Eq '^dtrun_rank_gpu_memory_bytes\{run_id="[^"]+",node="0",host="[^"]+",rank="1",local_rank="1"\} 943718400$' \
  "$work/metrics.txt" || die "/metrics: no GPU memory 900 MiB for rank 1: $(grep gpu "$work/metrics.txt")"
[[ $(fetch / "$work/page.html") == 200 ]] && grep -q '<!doctype html>' "$work/page.html" ||
  die "/ did not serve the live page"
code=$(curl -s -o "$work/refused.txt" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/status" || true)
[[ $code == 401 ]] || die "/status without the token answered $code, expected 401"
pass "/metrics in the text format (GPU figures included), the page, the token"

# dtrun top: plain lines when stdout is not a terminal; --json the endpoint's JSON.
DTRUN_STORE_TOKEN=live-token "$DTRUN" top "127.0.0.1:$port" >"$work/top.txt" 2>&1 ||
  die "dtrun top exited $?: $(cat "$work/top.txt")"
grep -Eq '^dtrun [^ ]+: 1 node\(s\), 2 rank\(s\), round 0, restarts 0/0, running$' "$work/top.txt" ||
  die "dtrun top's first line: $(head -n 1 "$work/top.txt")"
[[ $(grep -Ec '^[01] +0 +[^ ]+ +[0-9]+ +running +all_reduce +[0-9]+' "$work/top.txt") -eq 2 ]] ||
  die "dtrun top's rows: $(cat "$work/top.txt")"
grep -Eq ' gpu +gpu% +gpu_MiB$' "$work/top.txt" && grep -Eq '^0 .* 0 +37 +812$' "$work/top.txt" &&
  grep -Eq '^1 .* 1 +5 +900$' "$work/top.txt" || die "dtrun top's GPU columns: $(cat "$work/top.txt")"
"$DTRUN" status "127.0.0.1:$port" --token=live-token --json | "$PYTHON" -c '
import json, sys
assert len(json.load(sys.stdin)["nodes"][0]["ranks"]) == 2' || die "dtrun status --json"
rc=0
out=$("$DTRUN" top "127.0.0.1:$port" 2>&1) || rc=$?
[[ $rc -eq 1 && $out == *"needs its store token: pass --token or set DTRUN_STORE_TOKEN"* ]] ||
  die "dtrun top without the token: exit $rc, '$out'"
pass "dtrun top: a row per rank, GPU columns; dtrun status --json; the token's absence named"

# The page in a real headless browser: its script reads /status (with the page's token) and draws
# a row per rank. --virtual-time-budget lets the page's timers and fetch run before the DOM dump.
browser=$(command -v chromium-headless-shell || command -v chromium || true)
[[ -n $browser ]] || die "no headless browser: run scripts/setup.sh (chromium-headless-shell)"
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" \
  --virtual-time-budget=3000 --dump-dom "http://127.0.0.1:$port/?token=live-token" \
  >"$work/dom.html" 2>"$work/browser.err" || die "$browser failed: $(tail -3 "$work/browser.err")"
rows=$(grep -o '<tr[^>]*><td>[01]</td><td>0</td>' "$work/dom.html" | wc -l)
[[ $rows -eq 2 ]] || die "the live page shows $rows rank rows, expected 2: $(grep -o '<tbody.*</tbody>' "$work/dom.html" | head -c 800)"
grep -q '<td class="l">all_reduce</td>' "$work/dom.html" || die "the live page shows no all_reduce"
grep -q '<table id="ranks" class="">' "$work/dom.html" &&
  grep -q '<td class="g">37</td><td class="g">812</td>' "$work/dom.html" ||
  die "the live page shows no GPU columns: $(grep -o '<table.*</tbody>' "$work/dom.html" | head -c 1200)"
pass "the live page in headless chromium: a row per rank, each in all_reduce, with its GPU"

# A real Prometheus scrapes the agent (every second) and answers queries about it.
pport=$(free_port)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dtrun
    authorization:
      credentials: live-token
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
prometheus --config.file="$work/prometheus.yml" --web.listen-address="127.0.0.1:$pport" \
  --storage.tsdb.path="$work/tsdb" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=("$!")
query() {  # <promql>: the JSON answer of Prometheus's query API
  curl -s --max-time 5 -G "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" || true
}
scraped=0
for _ in $(seq $((LIMIT * 2))); do
  if query 'dtrun_worker_up == 1' | "$PYTHON" -c '
import json, sys
try:
    result = json.load(sys.stdin)["data"]["result"]
except Exception:
    sys.exit(1)
sys.exit(0 if sorted(r["metric"]["rank"] for r in result) == ["0", "1"] else 1)'; then
    scraped=1
    break
  fi
  sleep 0.5
done
((scraped)) || { tail -n 20 "$work/prometheus.log" >&2; die "Prometheus never had dtrun_worker_up == 1 for ranks 0 and 1"; }
query 'dtrun_rank_operations_total > 0' | "$PYTHON" -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
assert len(result) == 2 and all(r["metric"]["job"] == "dtrun" for r in result), result' ||
  die "Prometheus: dtrun_rank_operations_total is not above 0 for both ranks"
pass "Prometheus scraped the agent: dtrun_worker_up and dtrun_rank_operations_total per rank"

touch "$work/stop"
wait_until=$((SECONDS + LIMIT))
while running "$job" && ((SECONDS < wait_until)); do sleep 0.1; done
rc=0
wait "$job" || rc=$?
forget "$job"
[[ $rc -eq 0 ]] || { tail -n 20 "$work/job.out" >&2; die "the job exited $rc, expected 0"; }
[[ $(grep -c '^.*done$' "$work/job.out") -eq 2 ]] || die "not both ranks finished their loop"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${auth[@]}" "http://127.0.0.1:$port/status" || true)
[[ $code == 000 ]] || die "the endpoint still answers ($code) after the job ended"
pass "the job ran on under the live view and ended 0"

# NVML absent (the library named is not there): no GPU field, no GPU family; NVML is tried once,
# said in one debug line, however many samples follow.
port=$(free_port)
DTRUN_NVML_LIBRARY=$work/absent/libnvidia-ml.so.1 "$DTRUN" --nproc_per_node=1 \
  --status_port="$port" --log_level=debug --log_dir="$work/logs2" --no_python sleep 300 \
  >"$work/nonvml.out" 2>&1 &
job=$!
pids+=("$job")
auth=()
# Five samples after the rank first showed as running (at most $LIMIT s).
first="" uptime=""
for _ in $(seq $((LIMIT * 5))); do
  running "$job" || break
  if [[ $(fetch /status "$work/status.json") == 200 ]]; then
    uptime=$("$PYTHON" - "$work/status.json" <<'EOF'
import json, sys
node = json.load(open(sys.argv[1]))["nodes"][0]
print(int(node["uptime_seconds"]) if node["ranks"] and node["ranks"][0]["state"] == "running" else "")
EOF
    )
    [[ -z $first ]] && first=$uptime
    [[ -n $first && -n $uptime ]] && ((uptime >= first + 5)) && break
  fi
  sleep 0.2
done
[[ -n $first && -n $uptime ]] && ((uptime >= first + 5)) ||
  die "the job without NVML never ran 5 s: $(tail -n 5 "$work/nonvml.out")"
"$PYTHON" - "$work/status.json" <<'EOF' || die "/status without NVML: $(cat "$work/status.json")"
import json, sys
rank = json.load(open(sys.argv[1]))["nodes"][0]["ranks"][0]
assert not any(k.startswith("gpu") for k in rank), rank
EOF
[[ $(fetch /metrics "$work/metrics.txt") == 200 ]] && ! grep -q gpu "$work/metrics.txt" ||
  die "/metrics without NVML: $(grep gpu "$work/metrics.txt")"
said=$(grep -c "the live view shows no GPU: cannot open $work/absent/libnvidia-ml.so.1" \
  "$work/nonvml.out" || true)
[[ $said == 1 ]] || die "without NVML, the agent said so $said times: $(grep -i gpu "$work/nonvml.out")"
stopped_by_term "the job without NVML" "$job" "$LIMIT"
end_test "without NVML: no GPU field, NVML tried once"
