#!/usr/bin/env bash
# --hang_timeout with unmodified PyTorch scripts (torch 1.13, gloo, 3 ranks on loopback): dtrun's
# sitecustomize records torch.distributed's operations, so a hang names the rank with no change
# to the script (workers/torch_hang_cases.py):
#   late_init      rank 1 never reaches init_process_group: "has not entered any collective"
#   slow_start     rank 1 keeps a CPU busy for 14 s before it (--hang_timeout=10): still starting,
#                  no hang, the job finishes
#   skip_barrier   rank 1 skips a barrier: it is in all_reduce while the others wait in barrier
#   recv_deadlock  rank 1 waits in recv: named, with its Python stack (faulthandler) in the report
#   flight_recorder  torch >= 2.2's debug-info pipe (served by the worker, as torch's
#                  ProcessGroupNCCL would): written on the hang, each rank's dump named
#   patched        a script that wraps dist.all_reduce itself still runs and finishes
#   no_dist        a script without torch (and the python3 on PATH, which has none) is not harmed,
#                  Debian's own sitecustomize still runs after dtrun's, --python_hook=off adds none
#   bash tests/integration/torch_hang_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" torch_hang_test "$@"
release_in_short_form "dtrun's hang watch and report run here in hang_report_test and hang_liveness_test (C++ workers); the rest is torch and the Python hook"
$PYTHON -c 'import torch.distributed' 2>/dev/null || die "torch is missing for $PYTHON (scripts/setup.sh installs python3-torch)"
WORKER=$HERE/workers/torch_hang_cases.py
export GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=$PYTHON

# check <report> <python expression over `r`, the report> <what it means>
check() {
  $PYTHON - "$1" "$2" <<'PY' || note_fail "$3 ($1)"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}

# hang_case <case> <console line pattern>: runs the case, wants exit 124 and that hang line.
hang_case() {
  local rc=0
  mkdir -p "$work/barrier-$1"
  CASE=$1 HANG_BARRIER_DIR=$work/barrier-$1 timeout "$LIMIT" "$DTRUN" --nproc_per_node=3 --hang_timeout=3 --report="$work/$1.json" \
    --log_dir="$work/logs" --rdzv_id="$1" "$WORKER" >"$work/$1.out" 2>&1 || rc=$?
  if [[ $rc -ne 124 ]]; then
    tail -20 "$work/$1.out" >&2
    note_fail "$1: dtrun exited $rc, want 124 (hang)"
    return
  fi
  grep -Eq "$2" "$work/$1.out" || { grep "hang" "$work/$1.out" >&2; note_fail "$1: no console line like: $2"; }
  check "$work/$1.json" 'r["hang"]["suspects"] == [1]' "$1: rank 1 is the only suspect"
}

hang_case late_init "^dtrun: hang: rank 1 on .* has not entered any collective; ranks 0,2 wait in init_process_group #1 \(group world\)"
check "$work/late_init.json" '"sleep_before_init" in [x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["stack"]' "late_init: rank 1's Python stack names sleep_before_init"
hang_case skip_barrier "^dtrun: hang: rank 1 on .* is in all_reduce #5 \(group world\) since .*; ranks 0,2 wait in barrier #5 \(group world\)"
hang_case recv_deadlock "^dtrun: hang: rank 1 on .* is in recv #7 \(group world\) since .*; ranks 0,2 wait in all_reduce #7 \(group world\)"
check "$work/recv_deadlock.json" '[x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["op"] == "recv"' "recv_deadlock: the report has rank 1 in recv"
check "$work/recv_deadlock.json" '"torch_hang_cases.py" in [x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["stack"]' "recv_deadlock: rank 1's Python stack is in the report"
grep -q "File .*torch_hang_cases.py" "$work/logs/recv_deadlock/attempt_0/1/stack.txt" ||
  note_fail "recv_deadlock: rank 1's stack.txt has no Python frame of the script"
pass "hangs named: late_init, skip_barrier, recv_deadlock"

# Ranks waiting in init_process_group longer than --hang_timeout for one that keeps a CPU busy
# (an import, a data load on a loaded node) wait for a rank still starting: no hang. No barrier
# after the imports here: their skew under load is part of what this case checks. 10 s, not 3:
# after the last operation the ranks' exit (torch's teardown) took over 3 s under the flake
# table's load, and ranks outside any operation that long are a hang of another kind.
rc=0
CASE=slow_start timeout "$LIMIT" "$DTRUN" --nproc_per_node=3 --hang_timeout=10 --log_dir="$work/logs" \
  --rdzv_id=slow_start "$WORKER" >"$work/slow_start.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { tail -20 "$work/slow_start.out" >&2; note_fail "slow_start: dtrun exited $rc, want 0 (a busy rank before its first collective is still starting)"; }
if grep -q "hang:" "$work/slow_start.out"; then note_fail "slow_start: a hang was reported for a rank still starting"; fi
pass "a rank busy before init_process_group is still starting, not hung"

# torch >= 2.2's flight recorder, its debug-info pipe served by the worker itself (see
# workers/torch_hang_cases.py): dtrun writes the pipe of every rank on a hang and names the dump.
hang_case flight_recorder "^dtrun: hang: rank 1 on .* is in recv #7 \(group world\)"
for r in 0 1 2; do
  dump=$work/logs/flight_recorder/attempt_0/$r/nccl_trace_rank_$r
  [[ -s $dump ]] || note_fail "flight_recorder: rank $r was not asked for its dump ($dump)"
  grep -q "NCCL flight recorder: $dump ([0-9]* bytes" "$work/logs/flight_recorder/attempt_0/$r/stack.txt" ||
    note_fail "flight_recorder: rank $r's stack.txt does not name its dump"
done
check "$work/flight_recorder.json" '"nccl_trace_rank_1" in [x for x in r["hang"]["ranks"] if x["rank"] == 1][0]["stack"]' "flight_recorder: the report names rank 1's dump"
pass "flight recorder: every rank's debug-info pipe written on the hang, the dumps named in the report"

# The hook on without a hang watch (--python_hook=on): with --hang_timeout=5, ranks whose exit
# took over 5 s under load (the flake table, load average 30) were judged hung after their last
# operation ("no rank is inside a collective"), which is not what this case is about.
rc=0
mkdir -p "$work/barrier-patched"
CASE=patched HANG_BARRIER_DIR=$work/barrier-patched timeout "$LIMIT" "$DTRUN" --nproc_per_node=3 --python_hook=on --tee=3 \
  --log_dir="$work/logs" --rdzv_id=patched "$WORKER" >"$work/patched.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { tail -20 "$work/patched.out" >&2; note_fail "patched: dtrun exited $rc, want 0"; }
[[ $(grep -c "patched all_reduce ran 6 times, sum 729" "$work/patched.out") -eq 3 ]] ||
  note_fail "patched: not every rank ran its own wrapper with the right sum"

# A script without torch, under an interpreter without torch: untouched. Debian's python3 has
# a sitecustomize of its own (after dtrun's on sys.path): it must still run.
for python in "$PYTHON" python3; do
  rc=0
  CASE=no_dist PYTHON_EXEC=$python timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --hang_timeout=2 \
    --tee=3 --log_dir="$work/logs" --rdzv_id=nodist "$WORKER" >"$work/nodist.out" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || { tail -20 "$work/nodist.out" >&2; note_fail "no_dist ($python): dtrun exited $rc"; }
  [[ $(grep -c "sitecustomize " "$work/nodist.out") -eq 2 ]] || note_fail "no_dist ($python): not every rank ran"
  if [[ $python == "$PYTHON" && -e /usr/lib/python3.11/sitecustomize.py ]]; then
    [[ $(grep -c "sitecustomize /usr/lib/python3.11/sitecustomize.py" "$work/nodist.out") -eq 2 ]] ||
      note_fail "no_dist: Debian's sitecustomize did not run after dtrun's"
  fi
done

out=$(PYTHONPATH=/mine "$DTRUN" --dry-run --nproc_per_node=1 --hang_timeout=2 "$WORKER" 2>&1)
grep -q "PYTHONPATH=/mine:.*python" <<<"$out" || note_fail "dry run: the hook does not follow the user's PYTHONPATH"
out=$(PYTHONPATH=/mine "$DTRUN" --dry-run --nproc_per_node=1 --hang_timeout=2 --python_hook=off "$WORKER" 2>&1)
if grep -q "PYTHONPATH=\|TORCH_NCCL_DEBUG_INFO" <<<"$out"; then note_fail "--python_hook=off: dtrun still sets PYTHONPATH or the flight recorder"; fi
rc=0
"$DTRUN" --dry-run --python_hook=maybe "$WORKER" >"$work/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 ]] && grep -q "auto, on or off" "$work/bad.out" ||
  note_fail "--python_hook=maybe: want one line naming auto, on or off and exit 2 (got $rc: $(cat "$work/bad.out"))"
pass "scripts without torch, a self-patching script, the hook's switch"
end_test
