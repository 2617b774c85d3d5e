#!/usr/bin/env bash
# --console=collapse on 8 ranks (workers/collapse_lines.py: 10 steps 50 ms apart, each after a file
# barrier; every rank prints "epoch N loss 0.41", even ranks "even step N", rank 3 "rank 3 sees N",
# and one stderr warning at the end). The collapsed console has each rank's line exactly once, in
# each rank's order, the identical ones behind "[ranks 0-7]: " (one line per step when the ranks'
# lines fall within the window: DTRUN_CONSOLE_WINDOW_MS=2000 here, as the default 200 ms split
# groups whenever the loaded machine kept one rank's line back longer), "[ranks 0,2,4,6]: ", and
# rank 3's own behind "[rank 3]: "; per-rank logs keep the exact, unprefixed bytes; the default
# console is unchanged; a bad value is one line and exit 2. Then two agents on loopback as two nodes
# (4 ranks each): node 0's console carries the whole job's lines, collapsed across the nodes.
#   bash tests/integration/console_collapse_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" console_collapse_test "$@"
# shellcheck source=lib/wait_agent.sh
source "$HERE/lib/wait_agent.sh"
WORKER=$HERE/workers/collapse_lines.py
export PYTHON_EXEC=$PYTHON

# check_collapsed <stdout> <stderr> <label>: every rank's lines once, in order; prints how many
# of the 10 steps came out as one "[ranks 0-7]" line.
check_collapsed() {
  $PYTHON - "$1" "$2" <<'PY' || note_fail "$3: the collapsed console is wrong"
import re, sys
out = open(sys.argv[1]).read().splitlines()
err = open(sys.argv[2]).read().splitlines()
def ranks(text):
    got = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        got += range(int(a), int(b or a) + 1)
    return got
per_rank = {r: [] for r in range(8)}
full, problems = 0, []
for line in out:
    m = re.fullmatch(r"\[ranks? ([0-9,-]+)\]: (.*)", line)
    if not m:
        if "epoch" in line or "step" in line or "sees" in line:
            problems.append(f"unprefixed line {line!r}")
        continue
    rs, text = ranks(m.group(1)), m.group(2)
    if m.group(1) == "0-7" and text.startswith("epoch"):
        full += 1
    if len(rs) == 1 and not line.startswith("[rank "):
        problems.append(f"one rank behind 'ranks': {line!r}")
    for r in rs:
        per_rank[r].append(text)
for r in range(8):
    want = []
    for step in range(10):
        want.append(f"epoch {step} loss 0.41")
        if r == 3:
            want.append(f"rank 3 sees {step}")
        if r % 2 == 0:
            want.append(f"even step {step}")
    if per_rank[r] != want:
        problems.append(f"rank {r}: {per_rank[r][:4]}... ({len(per_rank[r])} lines, want {len(want)})")
warn = [l for l in err if l.endswith("warning: the same on every rank")]
warn_ranks = sorted(r for l in warn for r in ranks(re.match(r"\[ranks? ([0-9,-]+)\]", l).group(1)))
if warn_ranks != list(range(8)):
    problems.append(f"stderr warning ranks {warn_ranks}")
if full < 8:
    problems.append(f"only {full} of 10 steps collapsed into one [ranks 0-7] line")
for p in problems[:5]:
    print(p, file=sys.stderr)
print(f"{full}/10 steps as one [ranks 0-7] line, {len(out)} stdout lines, {len(warn)} stderr")
sys.exit(1 if problems else 0)
PY
}

# One node, 8 ranks.
mkdir -p "$work/b1"
rc=0
BARRIER_DIR=$work/b1 DTRUN_CONSOLE_WINDOW_MS=2000 timeout "$LIMIT" "$DTRUN" --nproc_per_node=8 --console=collapse \
  --log_dir="$work/logs" --rdzv_id=one "$WORKER" >"$work/one.out" 2>"$work/one.err" || rc=$?
if [[ $rc -ne 0 ]]; then
  tail -5 "$work/one.err" >&2
  note_fail "one node: dtrun exited $rc"
elif figures=$(check_collapsed "$work/one.out" "$work/one.err" "one node"); then
  pass "one node, 8 ranks: $figures"
  grep -m3 'ranks' "$work/one.out" | sed 's/^/    | /'
else
  note_fail "one node: $figures"
fi
# The per-rank logs stay exact: rank 3's stdout is its own 20 lines, no prefix.
expected=$(for s in $(seq 0 9); do echo "epoch $s loss 0.41"; echo "rank 3 sees $s"; done)
[[ $(cat "$work/logs/one/attempt_0/3/stdout.log") == "$expected" ]] ||
  note_fail "rank 3's stdout.log is not its exact output"
[[ $(cat "$work/logs/one/attempt_0/5/stderr.log") == "warning: the same on every rank" ]] ||
  note_fail "rank 5's stderr.log is not its exact output"

# The default console is unchanged: every rank's line, unprefixed.
mkdir -p "$work/b2"
rc=0
BARRIER_DIR=$work/b2 timeout "$LIMIT" "$DTRUN" --nproc_per_node=8 --log_dir="$work/logs" \
  --rdzv_id=plain "$WORKER" >"$work/plain.out" 2>"$work/plain.err" || rc=$?
n=$(grep -c '^epoch 3 loss 0.41$' "$work/plain.out" || true)
[[ $rc -eq 0 && $n -eq 8 ]] || note_fail "--console=ranks (default): rc $rc, $n copies of a line (8 expected)"

# Two agents on loopback as two nodes, 4 ranks each: node 0 hosts the store and prints the
# whole job's console, collapsed across both nodes; node 1's console stays empty of lines.
port=$(free_port)
mkdir -p "$work/b3"
declare -A agent_pid=()
for n in 0 1; do
  BARRIER_DIR=$work/b3 DTRUN_CONSOLE_WINDOW_MS=2000 "$DTRUN" --nnodes=2 --node_rank=$n --nproc_per_node=4 --console=collapse \
    --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=two \
    --log_dir="$work/logs/n$n" "$WORKER" >"$work/n$n.out" 2>"$work/n$n.err" &
  agent_pid[$n]=$!
  pids+=("$!")
  # Node 0 must host the store (whoever binds the endpoint's port first does): node 1 starts once
  # it listens. A fixed 0.5 s was not enough under CI's load in the ASan tree: node 1 bound the
  # port first, hosted the store and printed the job's console itself.
  if ((n == 0)); then wait_for "$work/n0.err" "store listening on" || true; fi
done
two_ok=1
for n in 0 1; do
  wait_agent "${agent_pid[$n]}" $((SECONDS + LIMIT))
  [[ $rc -eq 0 ]] || { two_ok=0; tail -5 "$work/n$n.err" >&2; note_fail "two nodes: node $n exited $rc"; }
done
if ((two_ok)); then
  if figures=$(check_collapsed "$work/n0.out" "$work/n0.err" "two nodes"); then
    pass "two nodes x 4 ranks, node 0's console: $figures"
  else
    note_fail "two nodes: $figures"
  fi
  [[ $(grep -c 'epoch' "$work/n1.out" || true) -eq 0 ]] || note_fail "two nodes: node 1 printed lines itself"
fi

# A bad value: one line naming the option and the fix, exit 2.
rc=0
"$DTRUN" --console=fold --nproc_per_node=2 /bin/true >"$work/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 ]] && grep -q -- '--console.*ranks or collapse' "$work/bad.out" ||
  note_fail "--console=fold: rc $rc, '$(head -c 200 "$work/bad.out")'"
rc=0
DTRUN_CONSOLE_WINDOW_MS=soon "$DTRUN" --console=collapse --nproc_per_node=2 /bin/true >"$work/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 ]] && grep -q "DTRUN_CONSOLE_WINDOW_MS='soon': expected milliseconds" "$work/bad.out" ||
  note_fail "DTRUN_CONSOLE_WINDOW_MS=soon: rc $rc, '$(head -c 200 "$work/bad.out")'"

end_test
