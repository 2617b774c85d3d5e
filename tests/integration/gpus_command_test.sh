#!/usr/bin/env bash
# `dtrun gpus [RUN_DIR] [--json]` on a machine without a GPU: a fake libnvidia-ml.so.1 (built
# here from lib/fake_nvml.cpp, loaded through DTRUN_NVML_LIBRARY) lists, as processes on its two
# GPUs, a running 3-rank job's real processes and one of nobody's (a `sleep` this test started):
#   rank 0: the worker itself (`exec sleep`);
#   rank 1: a child of the worker's shell (as a shell that started python);
#   rank 2: a process whose parent exited (adopted by the agent; it keeps the worker's group).
# Checked: the ranks printed (each rank dir's `pid` record, matched through /proc), the lines
# without RUN_DIR, the JSON's fields and its time beside python's time.time(), a run directory
# that records no pid, the finished run; no NVML and bad directories: one line, exit 2.
#   bash tests/integration/gpus_command_test.sh /abs/path/to/build/launcher/dtrun
set -uo pipefail
# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" gpus_command_test "$@"
CXX=${CXX:-$(command -v g++ || command -v c++)} || die "no C++ compiler to build the fake NVML"

"$CXX" -shared -fPIC -O1 -o "$work/libnvidia-ml.so.1" "$HERE/lib/fake_nvml.cpp" ||
  die "cannot build the fake NVML"
export DTRUN_NVML_LIBRARY=$work/libnvidia-ml.so.1
export FAKE_NVML_COUNT=2

# Each rank writes the pid of its "GPU process" to $work/gpu_pid.<rank>, then stays.
cat >"$work/worker.sh" <<'SH'
#!/usr/bin/env bash
out=$1/gpu_pid.$RANK
case $LOCAL_RANK in
  0) echo $$ >"$out.tmp" && mv "$out.tmp" "$out" && exec sleep 300 ;;
  1) sleep 300 & echo $! >"$out.tmp" && mv "$out.tmp" "$out" && wait ;;
  2) (sleep 300 & echo $! >"$out.tmp") && mv "$out.tmp" "$out" && sleep 300 ;;
esac
SH
chmod +x "$work/worker.sh"

"$DTRUN" --nproc_per_node=3 --log_dir="$work/logs" --no_python "$work/worker.sh" "$work" \
  >"$work/job.out" 2>&1 &
job=$!
pids+=("$job")
sleep 300 &
foreign=$!
pids+=("$foreign")

until [[ -s $work/gpu_pid.0 && -s $work/gpu_pid.1 && -s $work/gpu_pid.2 ]]; do
  running "$job" || die "the job ended early: $(tail -n 5 "$work/job.out")"
  ((SECONDS < LIMIT)) || die "the workers did not start within $LIMIT s"
  sleep 0.1
done
runs=("$work"/logs/*/)
run=${runs[0]%/}
g0=$(cat "$work/gpu_pid.0")
g1=$(cat "$work/gpu_pid.1")
g2=$(cat "$work/gpu_pid.2")
# Until each has exec'd sleep (a child is bash for a moment after its fork) and every pid record
# is there (written once all were started).
pids=$run/attempt_0/worker_pids
until [[ $(cat "/proc/$g0/comm" "/proc/$g1/comm" "/proc/$g2/comm" "/proc/$foreign/comm" 2>&1) == \
  $'sleep\nsleep\nsleep\nsleep' && $(wc -l <"$pids" 2>/dev/null) == 3 ]]; do
  ((SECONDS < LIMIT)) || die "the workers' processes did not become sleep within $LIMIT s"
  sleep 0.1
done
# Each rank's line: local rank, rank, its worker's pid and start time (/proc/<pid>/stat's 22nd field).
for r in 0 1 2; do
  read -r local rank pid start < <(awk -v r="$r" '$1 == r' "$pids") ||
    note_fail "attempt_0/worker_pids: no line for local rank $r"
  [[ $local == "$r" && $rank == "$r" ]] || note_fail "attempt_0/worker_pids: local rank $local, rank $rank"
  want=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f20)
  [[ $start == "$want" ]] || note_fail "attempt_0/worker_pids: rank $r's start $start, /proc says $want"
done
[[ $(ps -o ppid= -p "$g2" | tr -d ' ') != "$(awk '$1 == 2 {print $3}' "$pids")" ]] ||
  note_fail "rank 2's process is still its worker's child: the orphan case is not tried"

export FAKE_NVML_PROCESSES="0:$g0:812,0:$foreign:100,1:$g1:900,1:$g2:700"
export FAKE_NVML_UTILIZATION="0:37:12,1:5:1"

# With the run directory: every process named.
out=$("$DTRUN" gpus "$run" 2>&1)
code=$?
want="GPU 0 Fake GPU: utilisation 37 %, memory 912 of 81559 MiB
  rank 0 (local 0) pid $g0 sleep 812 MiB
  not this run's: pid $foreign sleep 100 MiB
GPU 1 Fake GPU: utilisation 5 %, memory 1600 of 81559 MiB
  rank 1 (local 1) pid $g1 sleep 900 MiB
  rank 2 (local 2) pid $g2 sleep 700 MiB"
if [[ $code == 0 && $out == "$want" ]]; then
  pass "dtrun gpus RUN_DIR: ranks 0 (the worker), 1 (its child), 2 (adopted, in its group), and one process of nobody's"
else
  note_fail "dtrun gpus RUN_DIR: exit $code, got:
$out
want:
$want"
fi

# Without: the same GPUs, no rank.
out=$("$DTRUN" gpus 2>&1)
code=$?
want="GPU 0 Fake GPU: utilisation 37 %, memory 912 of 81559 MiB
  pid $g0 sleep 812 MiB
  pid $foreign sleep 100 MiB
GPU 1 Fake GPU: utilisation 5 %, memory 1600 of 81559 MiB
  pid $g1 sleep 900 MiB
  pid $g2 sleep 700 MiB"
if [[ $code == 0 && $out == "$want" ]]; then
  pass "dtrun gpus: every GPU, no rank"
else
  note_fail "dtrun gpus: exit $code, got:
$out"
fi

# --json, with the memory NVML reports set apart from its processes' sum on GPU 1.
FAKE_NVML_MEMORY="1:2048:40960" "$DTRUN" gpus "$run" --json >"$work/gpus.json" 2>"$work/gpus.err"
code=$?
got=$("$PYTHON" - "$work/gpus.json" "$run" "$(hostname)" "$g0" "$g1" "$g2" "$foreign" <<'PY' 2>&1
import json, sys, time
now = time.time()
path, run, host, g0, g1, g2, foreign = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
text = open(path).read()
assert text.count("\n") == 1, f"want one line, got {text!r}"
doc = json.loads(text)
assert list(doc) == ["time", "host", "run_dir", "gpus"], list(doc)
assert isinstance(doc["time"], float) and 0 <= now - doc["time"] < 5, (doc["time"], now)
assert round(doc["time"], 3) == doc["time"], f"time {doc['time']}: more than ms"
assert doc["host"] == host and doc["run_dir"] == run, (doc["host"], doc["run_dir"])
g = doc["gpus"]
assert [x["index"] for x in g] == [0, 1]
fields = ["index", "name", "uuid", "utilization_gpu_percent", "utilization_memory_percent",
          "memory_used_mib", "memory_total_mib", "processes"]
assert all(list(x) == fields for x in g), [list(x) for x in g]
assert (g[0]["name"], g[0]["uuid"], g[1]["uuid"]) == ("Fake GPU", "GPU-fake-0", "GPU-fake-1")
assert (g[0]["utilization_gpu_percent"], g[0]["utilization_memory_percent"]) == (37, 12)
assert (g[0]["memory_used_mib"], g[0]["memory_total_mib"]) == (912, 81559), g[0]
assert (g[1]["memory_used_mib"], g[1]["memory_total_mib"]) == (2048, 40960), g[1]
procs = [(p["pid"], p["name"], p["used_memory_mib"], p["rank"], p["local_rank"])
         for x in g for p in x["processes"]]
assert procs == [(g0, "sleep", 812, 0, 0), (foreign, "sleep", 100, None, None),
                 (g1, "sleep", 900, 1, 1), (g2, "sleep", 700, 2, 2)], procs
print("ok", doc["time"])
PY
)
if [[ $code == 0 && $got == ok* && ! -s $work/gpus.err ]]; then
  pass "--json: one object, time ${got#ok } (CLOCK_REALTIME, ms), every field"
else
  note_fail "--json: exit $code, $got; stderr: $(cat "$work/gpus.err")"
fi

# A run directory that records no pid (a dtrun before the record): said once, nobody named.
mkdir -p "$work/old/attempt_0/0"
cp "$run/run.json" "$work/old/"
cp "$run/attempt_0/environment" "$work/old/attempt_0/"
"$DTRUN" gpus "$work/old" >"$work/old.out" 2>"$work/old.err"
code=$?
if [[ $code == 0 && $(wc -l <"$work/old.err") == 1 ]] && grep -q "records no worker's pid" "$work/old.err" &&
  grep -qxF "  not this run's: pid $g0 sleep 812 MiB" "$work/old.out"; then
  pass "no pid record: '$(cat "$work/old.err")'"
else
  note_fail "no pid record: exit $code, $(cat "$work/old.err" "$work/old.out")"
fi

# The job ended: its processes are gone; the ones the fake still lists are nobody's.
stopped_by_term "the job" "$job" 20
out=$("$DTRUN" gpus "$run" 2>&1)
code=$?
if [[ $code == 0 && $out == *"  not this run's: pid $g0 (not visible here) 812 MiB"* &&
  $out == *"  not this run's: pid $foreign sleep 100 MiB"* && $out != *"rank "* ]]; then
  pass "the finished run: no process named by a rank"
else
  note_fail "the finished run: exit $code, got:
$out"
fi

# Refusals: one line, exit 2.
expect_refusal() {  # <what> <text the line must hold> <dtrun gpus args...>
  local what=$1 want=$2 out code
  shift 2
  out=$("$DTRUN" gpus "$@" 2>&1)
  code=$?
  if [[ $code == 2 && $(wc -l <<<"$out") == 1 && $out == *"$want"* ]]; then
    pass "$what: '$out'"
  else
    note_fail "$what: want exit 2 and one line holding '$want', got $code: $out"
  fi
}
DTRUN_NVML_LIBRARY=$work/absent/libnvidia-ml.so.1 expect_refusal "no NVML" \
  "set DTRUN_NVML_LIBRARY to its libnvidia-ml.so.1"
DTRUN_NVML_LIBRARY=$work/absent/libnvidia-ml.so.1 expect_refusal "no NVML, with a run" \
  "no NVML here: cannot open $work/absent/libnvidia-ml.so.1" "$run"
expect_refusal "a missing directory" "$work/nope is not a directory: give a run's" "$work/nope"
expect_refusal "a directory without a run" "$work/logs holds no dtrun run" "$work/logs"

end_test "ranks named through pid records and /proc; JSON; refusals in one line"
