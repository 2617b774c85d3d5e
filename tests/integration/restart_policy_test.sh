#!/usr/bin/env bash
# Restarts that watch progress, with real workers:
#   crashloop  an unmodified torch script (torch 1.13, gloo, the Python hook) that fails right
#              after init_process_group every time: with --max_restarts=10 and
#              --max_no_progress_attempts=2 dtrun stops after 2 attempts, exit 86, one line why
#   progress   --progress_file: a checkpoint number that grows in attempts 0 and 1 and not in 2:
#              with --max_no_progress_attempts=1 the job stops after attempt 2, exit 86
#   norestart  a worker exiting with $DTRUN_NO_RESTART_EXIT_CODE (87), and one whose error file
#              says "no_restart": true (exit 3): no restart despite --max_restarts=3
#   backoff    --restart_backoff=0.4: the attempts start at least 0.4 s, then 0.8 s apart
#   nodes      two agents on loopback (static): the keeper stops the job's crash loop, both exit 86
set -uo pipefail
source "$(dirname "$0")/lib/preamble.sh" restart_policy_test "$@"
sanitizers_in_short_form "the agent's restart policies"
source "$HERE/lib/wait_agent.sh"
export GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=$PYTHON

attempts_in() { find "$1" -maxdepth 1 -name 'attempt_*' 2>/dev/null | wc -l; }

# ---- crashloop ----
cat >"$work/crash.py" <<'PY'
import torch.distributed as dist
dist.init_process_group("gloo")
raise SystemExit("cannot load the dataset")
PY
rc=0
timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --python_hook=on --max_restarts=10 \
  --max_no_progress_attempts=2 --log_dir="$work/logs" --rdzv_id=crash "$work/crash.py" \
  >"$work/crash.out" 2>"$work/crash.err" || rc=$?
[[ $rc -eq 86 ]] || note_fail "crashloop: exit $rc, want 86: $(tail -n 3 "$work/crash.err")"
[[ $(attempts_in "$work/logs/crash") -eq 2 ]] ||
  note_fail "crashloop: $(attempts_in "$work/logs/crash") attempts, want 2 of the 11 allowed"
grep -qx "dtrun: not restarting: 2 attempts in a row made no progress (--max_no_progress_attempts=2)" \
  "$work/crash.err" || note_fail "crashloop: no one-line reason on stderr"
[[ $fail_count -ne 0 ]] || pass "crashloop: stopped after 2 attempts without progress, exit 86"

# ---- progress: the user's checkpoint-iteration file ----
before=$fail_count
cat >"$work/ckpt.sh" <<'SH'
#!/bin/bash
# Attempts 0 and 1 each save a checkpoint (iteration 10, 20); attempt 2 fails before saving.
[[ $TORCHELASTIC_RESTART_COUNT -lt 2 ]] && echo $((TORCHELASTIC_RESTART_COUNT * 10 + 10)) >"$CKPT"
exit 1
SH
chmod +x "$work/ckpt.sh"
rc=0
CKPT=$work/iteration timeout "$LIMIT" "$DTRUN" --max_restarts=10 --max_no_progress_attempts=1 \
  --progress_file="$work/iteration" --log_dir="$work/logs" --rdzv_id=ckpt --no_python \
  "$work/ckpt.sh" >"$work/ckpt.out" 2>"$work/ckpt.err" || rc=$?
[[ $rc -eq 86 ]] || note_fail "progress: exit $rc, want 86"
[[ $(attempts_in "$work/logs/ckpt") -eq 3 ]] ||
  note_fail "progress: $(attempts_in "$work/logs/ckpt") attempts, want 3 (two saved a checkpoint)"
[[ $fail_count -ne $before ]] || pass "progress: attempts that saved a checkpoint restart, the first that did not stops the job"

# ---- norestart ----
before=$fail_count
cat >"$work/giveup.sh" <<'SH'
#!/bin/bash
[[ $RANK == 1 ]] || exec sleep 30
if [[ $HOW == errfile ]]; then
  printf '{"message": {"message": "bad config", "extraInfo": {"py_callstack": "x", "timestamp": "1"}}, "no_restart": true}' >"$TORCHELASTIC_ERROR_FILE"
  exit 3
fi
exit "$DTRUN_NO_RESTART_EXIT_CODE"
SH
chmod +x "$work/giveup.sh"
for how in code errfile; do
  want=87
  [[ $how == code ]] || want=3
  rc=0
  HOW=$how timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --max_restarts=3 --log_dir="$work/logs" \
    --rdzv_id="give_$how" --no_python "$work/giveup.sh" >"$work/give_$how.out" 2>"$work/give_$how.err" || rc=$?
  [[ $rc -eq $want ]] || note_fail "norestart ($how): exit $rc, want $want"
  [[ $(attempts_in "$work/logs/give_$how") -eq 1 ]] || note_fail "norestart ($how): restarted"
  grep -q "dtrun: not restarting: the failed rank asked not to be restarted" "$work/give_$how.err" ||
    note_fail "norestart ($how): no line saying why"
done
[[ $fail_count -ne $before ]] || pass "norestart: exit 87 or no_restart in the error file ends the job at once"

# ---- backoff ----
before=$fail_count
cat >"$work/stamp.sh" <<'SH'
#!/bin/bash
date +%s%N >>"$STAMPS"
exit 1
SH
chmod +x "$work/stamp.sh"
rc=0
STAMPS=$work/stamps timeout "$LIMIT" "$DTRUN" --max_restarts=2 --restart_backoff=0.4 \
  --log_dir="$work/logs" --rdzv_id=backoff --no_python "$work/stamp.sh" >/dev/null 2>"$work/backoff.err" || rc=$?
[[ $rc -eq 1 ]] || note_fail "backoff: exit $rc, want 1"
mapfile -t stamps <"$work/stamps"
if [[ ${#stamps[@]} -eq 3 ]]; then
  gap1=$(((stamps[1] - stamps[0]) / 1000000))
  gap2=$(((stamps[2] - stamps[1]) / 1000000))
  [[ $gap1 -ge 400 && $gap2 -ge 800 ]] || note_fail "backoff: attempts started ${gap1} ms then ${gap2} ms apart, want >= 400 and >= 800"
  grep -q "restart 1 of 2, in 400 ms" "$work/backoff.err" || note_fail "backoff: the restart line does not give the wait"
else
  note_fail "backoff: ${#stamps[@]} attempts, want 3"
fi
[[ $fail_count -ne $before ]] || pass "backoff: attempts ${gap1} ms then ${gap2} ms apart (0.4 s doubled)"

# ---- nodes: the keeper stops a crash loop ----
before=$fail_count
echo 5 >"$work/never"  # a checkpoint number that never moves
port=$(free_port)
declare -a node_pids=()
for n in 0 1; do
  "$DTRUN" --nnodes=2 --node_rank="$n" --master_port="$port" --rdzv_id=nodes \
    --rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=2,last_call_timeout=0.5 \
    --max_restarts=10 --max_no_progress_attempts=2 --progress_file="$work/never" \
    --log_dir="$work/logs/node$n" --no_python /bin/false >"$work/node$n.out" 2>&1 &
  node_pids+=("$!")
  pids+=("$!")
done
until=$((SECONDS + LIMIT))
for n in 0 1; do
  wait_agent "${node_pids[$n]}" "$until"
  [[ $rc -eq 86 ]] || note_fail "nodes: node $n exited $rc, want 86: $(tail -n 3 "$work/node$n.out")"
  grep -q "2 attempts in a row made no progress (max_no_progress=2)" "$work/node$n.out" ||
    note_fail "nodes: node $n does not say why the job stopped"
done
[[ $fail_count -ne $before ]] || pass "nodes: the keeper ended the job after 2 failed rounds without progress"
end_test
