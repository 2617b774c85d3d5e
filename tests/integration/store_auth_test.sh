#!/usr/bin/env bash
# A store with a token, end to end through real dtrun processes (loopback only):
#   single  - dtrun --rdzv_conf token=...: unmodified PyTorch (gloo) ranks and libdtrt ranks
#             (which present DTRUN_STORE_TOKEN) run as usual
#   nodes   - two c10d agents with DTRUN_STORE_TOKEN_FILE: the job runs across both
#   wrong   - an agent with another token is refused at once, with a line naming the token
#   store   - `dtrun store --token-file`: PyTorch's client on the store's host is served
#   bad     - an unreadable token file, a token with a space: exit 2 and one line
# The refusals of clients without the token, of unknown hosts and of a replayed handshake are
# checked byte by byte in tests/rendezvous/auth_test.cpp.
#   bash tests/integration/store_auth_test.sh /abs/path/to/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" store_auth_test "$@"
sanitizers_in_short_form "the store's token checks"
STEP_TIMEOUT=120
ok() { pass "$* ok"; }

printf 'file-token-%s\n' "$$" >"$work/token"
export PYTHON_EXEC=$PYTHON GLOO_SOCKET_IFNAME=lo

# --- single: PyTorch and libdtrt ranks under an agent whose store has a token -------------------
rc=0
timeout "$STEP_TIMEOUT" "$DTRUN" --nproc_per_node=2 --rdzv_conf token=cli-token-$$ \
  --log_dir "$work/single-py" "$HERE/torch_gloo_rank.py" >"$work/single-py.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { cat "$work/single-py.out"; die "single: PyTorch ranks exited $rc"; }
rc=0
timeout "$STEP_TIMEOUT" "$DTRUN" --nproc_per_node=2 --rdzv_conf token=cli-token-$$ --tee=3 \
  --no_python "$BUILD/demos/p2p/p2p" >"$work/single-cc.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { cat "$work/single-cc.out"; die "single: libdtrt ranks exited $rc"; }
grep -q "Rank 1 has data 2.0 (after wait)" "$work/single-cc.out" ||
  { cat "$work/single-cc.out"; die "single: p2p output missing"; }
ok single

# --- nodes: two agents, token from a file -------------------------------------------------------
port=$(free_port)
agent() {  # agent <job> <name> <extra env...>: one c10d node running the p2p demo
  local job=$1 name=$2
  shift 2
  env "$@" timeout "$STEP_TIMEOUT" "$DTRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="auth-$job-$$" --log_dir "$work/$name" \
    --rdzv_conf=join_timeout=20,last_call_timeout=0 --tee=3 --no_python "$BUILD/demos/p2p/p2p" \
    >"$work/$name.out" 2>&1
}
agent nodes nodes-a DTRUN_STORE_TOKEN_FILE="$work/token" &
first=$!
pids+=("$first")
rc=0
agent nodes nodes-b DTRUN_STORE_TOKEN_FILE="$work/token" || rc=$?
rc1=0
wait "$first" || rc1=$?
[[ $rc -eq 0 && $rc1 -eq 0 ]] ||
  { cat "$work/nodes-a.out" "$work/nodes-b.out"; die "nodes: agents exited $rc1 and $rc"; }
# Both files to grep itself: `cat a b | grep -q` fails under pipefail when grep's early exit
# (a match in a) sends cat SIGPIPE as it writes b (seen in a loaded CI run).
grep -q "Rank 1 has data 2.0 (after wait)" "$work/nodes-a.out" "$work/nodes-b.out" ||
  die "nodes: rank 1's p2p line missing"
ok nodes

# --- wrong: a second agent with another token -----------------------------------------------------
port=$(free_port)
agent wrong wrong-host DTRUN_STORE_TOKEN=right-$$ &
host_pid=$!
pids+=("$host_pid")
for _ in $(seq 100); do
  grep -q "rendezvous" "$work/wrong-host.out" 2>/dev/null && break
  sleep 0.1
done
rc=0
SECONDS=0
agent wrong wrong-client DTRUN_STORE_TOKEN=wrong-$$ || rc=$?
[[ $rc -ne 0 ]] || die "wrong: an agent with another token joined"
grep -q "refused our token" "$work/wrong-client.out" ||
  { cat "$work/wrong-client.out"; die "wrong: no line naming the token"; }
[[ $SECONDS -lt 15 ]] || die "wrong: took ${SECONDS}s to refuse (should be at once)"
kill -TERM "$host_pid" 2>/dev/null || true
wait "$host_pid" 2>/dev/null || true
ok "wrong (refused in ${SECONDS}s: $(grep -m1 -o 'the store refused our token[^;]*' "$work/wrong-client.out"))"

# --- store: dtrun store --token-file; PyTorch's client on the store's host ---------------------
"$DTRUN" store --host 127.0.0.1 --port 0 --port-file "$work/store.port" --token-file "$work/token" \
  --log-level warn >"$work/store.log" 2>&1 &
store_pid=$!
pids+=("$store_pid")
for _ in $(seq 100); do [[ -s $work/store.port ]] && break; sleep 0.1; done
[[ -s $work/store.port ]] || die "store: no port file"
rc=0
timeout 60 $PYTHON "$HERE/torch_store_ops.py" "$(cat "$work/store.port")" >"$work/ops.out" 2>&1 ||
  rc=$?
[[ $rc -eq 0 ]] || { cat "$work/ops.out" "$work/store.log"; die "store: PyTorch client exited $rc"; }
kill -TERM "$store_pid"
wait "$store_pid" || die "store: dtrun store exited $? on SIGTERM"
ok store

# --- bad: token values and files -------------------------------------------------------------------
expect_usage() {  # expect_usage <what> <pattern> <command...>
  local what=$1 pattern=$2 out rc=0
  shift 2
  out=$("$@" 2>&1) || rc=$?
  [[ $rc -eq 2 ]] || die "bad $what: exit $rc, expected 2: $out"
  [[ $(wc -l <<<"$out") -eq 1 ]] || die "bad $what: more than one line: $out"
  grep -q "$pattern" <<<"$out" || die "bad $what: '$out' does not say '$pattern'"
}
expect_usage "token file" "DTRUN_STORE_TOKEN_FILE: cannot read" \
  env DTRUN_STORE_TOKEN_FILE="$work/missing" "$DTRUN" --nproc_per_node=1 --no_python true
expect_usage "token" "without spaces" \
  env DTRUN_STORE_TOKEN="a b" "$DTRUN" --nproc_per_node=1 --no_python true
expect_usage "store token file" "cannot read" "$DTRUN" store --token-file "$work/missing"
ok bad
