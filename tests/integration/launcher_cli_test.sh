#!/usr/bin/env bash
# dtrun's command line, run for real: every bad flag or value exits 2 with exactly one line on
# stderr that names the flag (and nothing on stdout); --help exits 0; `dtrun store` still works.
#   bash tests/integration/launcher_cli_test.sh /abs/path/to/dtrun
# No case here reaches the agent: each stops at the command line. Loopback only.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" launcher_cli_test "$@"
# The cases assume torchrun's defaults: drop the torchelastic settings inherited (PET_* are gone).
unset TORCH_ELASTIC_SHUTDOWN_TIMEOUT PYTHON_EXEC

failures=0
cases=0
# expect_usage_error <text the line must contain> <dtrun args...>: exit 2, one stderr line that
# starts with "dtrun: " and contains the text, empty stdout. WANT_RC=127: a program that cannot run.
expect_usage_error() {
  local want=$1 rc=0
  shift
  cases=$((cases + 1))
  timeout 10 "$DTRUN" "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
  local lines
  lines=$(wc -l <"$work/err")
  local problem=""
  [[ $rc -eq ${WANT_RC:-2} ]] || problem+=" exit $rc (want ${WANT_RC:-2});"
  [[ $lines -eq 1 ]] || problem+=" $lines stderr lines (want 1);"
  [[ ! -s $work/out ]] || problem+=" stdout not empty;"
  grep -q "^dtrun: " "$work/err" || problem+=" stderr does not start with 'dtrun: ';"
  grep -qF -- "$want" "$work/err" || problem+=" stderr does not name '$want';"
  if [[ -n $problem ]]; then
    failures=$((failures + 1))
    echo "launcher_cli_test: FAIL: dtrun $*:$problem" >&2
    sed 's/^/    stderr: /' "$work/err" >&2
    sed 's/^/    stdout: /' "$work/out" >&2
  fi
}

# Command-line values, each spelling.
expect_usage_error --nproc_per_node --nproc_per_node=abc train.py
expect_usage_error --nproc_per_node --nproc-per-node abc train.py
expect_usage_error --nproc_per_node --nproc_per_node 0 train.py
expect_usage_error --nproc_per_node --nproc_per_node=-2 train.py
expect_usage_error --nnodes --nnodes=0 train.py
expect_usage_error --nnodes --nnodes=3:2 train.py
expect_usage_error "fixed node count with the static backend" --nnodes 1:4 train.py
expect_usage_error "join_timeout expects a number of seconds" --nnodes=2 --rdzv_conf=join_timeout=x train.py
expect_usage_error --node_rank --node-rank=x train.py
expect_usage_error --node_rank --node_rank=1 train.py
expect_usage_error --master_port --master-port=70000 train.py
expect_usage_error --rdzv_backend --rdzv-backend=etcd-v2 train.py
expect_usage_error --rdzv_endpoint --rdzv_endpoint=::1 train.py
expect_usage_error --rdzv_endpoint --rdzv-endpoint=host:port train.py
expect_usage_error --rdzv_conf --rdzv_conf=novalue train.py
expect_usage_error --max_restarts --max-restarts=-1 train.py
expect_usage_error --monitor_interval --monitor_interval=0 train.py
expect_usage_error --start_method --start-method=thread train.py
expect_usage_error --redirects -r 4 train.py
expect_usage_error --redirects --redirects=0:9 train.py
expect_usage_error --tee -t x train.py
expect_usage_error --tee --tee=1:1,2 train.py
expect_usage_error --local_ranks_filter --local-ranks-filter=a,b train.py
expect_usage_error --shutdown_timeout --shutdown-timeout=-5 train.py
expect_usage_error --signals_to_handle --signals-to-handle=SIGNOPE train.py
expect_usage_error --signals_to_handle --signals_to_handle=SIGKILL train.py
expect_usage_error --role --role= train.py
expect_usage_error --log-level --log-level=loud train.py
expect_usage_error --virtual-local-rank --virtual-local-rank train.py  # no GPU here
expect_usage_error --event_log_handler --event_log_handler=console train.py
expect_usage_error --numa_binding --numa-binding=node train.py
expect_usage_error "--no_python" -m --no_python train
expect_usage_error --standalone --standalone=maybe train.py
# Parse errors CLI11 raises itself, folded to one line.
expect_usage_error --nproc_per_node --nproc_per_node
expect_usage_error --redirects -r
expect_usage_error --bogus --bogus train.py
expect_usage_error --bogus --bogus=1 train.py
expect_usage_error "missing the entrypoint"
expect_usage_error "missing the entrypoint" --nproc_per_node=2
expect_usage_error "missing the entrypoint" --
# The environment forms are named by their variable.
expect_env() {  # <variable=value> <text>: like expect_usage_error with that variable set
  local assignment=$1 want=$2 rc=0
  cases=$((cases + 1))
  env "$assignment" timeout 10 "$DTRUN" train.py >"$work/out" 2>"$work/err" </dev/null || rc=$?
  if [[ $rc -ne 2 || $(wc -l <"$work/err") -ne 1 || -s $work/out ]] || ! grep -qF -- "$want" "$work/err"; then
    failures=$((failures + 1))
    echo "launcher_cli_test: FAIL: $assignment dtrun train.py: exit $rc" >&2
    sed 's/^/    stderr: /' "$work/err" >&2
  fi
}
expect_env PET_NPROC_PER_NODE=abc PET_NPROC_PER_NODE
expect_env PET_NNODES=1:4 PET_NNODES
expect_env PET_STANDALONE=yes PET_STANDALONE
expect_env PET_RDZV_BACKEND=etcd-v2 PET_RDZV_BACKEND
expect_env TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon TORCH_ELASTIC_SHUTDOWN_TIMEOUT
# The store subcommand's usage errors follow the same rule.
expect_usage_error --port store --port abc
expect_usage_error --bogus store --bogus

# --help: exit 0, the options on stdout, both spellings listed.
cases=$((cases + 1))
rc=0
"$DTRUN" --help >"$work/help" 2>"$work/err" || rc=$?
if [[ $rc -ne 0 ]] || ! grep -q -- "--nproc_per_node,--nproc-per-node" "$work/help" ||
  ! grep -q -- "-m,--module" "$work/help"; then
  failures=$((failures + 1))
  echo "launcher_cli_test: FAIL: dtrun --help exited $rc or lacks the options" >&2
fi
cases=$((cases + 1))
rc=0
"$DTRUN" store --help >"$work/help" 2>"$work/err" || rc=$?
if [[ $rc -ne 0 ]] || ! grep -q -- "--port-file" "$work/help"; then
  failures=$((failures + 1))
  echo "launcher_cli_test: FAIL: dtrun store --help exited $rc or lacks its options" >&2
fi

# `dtrun store --port 0` serves on a free port and exits 0 on SIGTERM (two cases).
cases=$((cases + 2))
"$DTRUN" store --host 127.0.0.1 --port 0 --port-file "$work/port" --log-level warn \
  >"$work/store.log" 2>&1 &
store_pid=$!
pids+=("$store_pid")
for _ in $(seq 100); do
  grep -q "listening on port" "$work/store.log" 2>/dev/null && break
  sleep 0.1
done
port=$(cat "$work/port" 2>/dev/null || true)
if [[ ! $port =~ ^[0-9]+$ || $port -eq 0 ]] || ! grep -q "^dtrun store: listening on port $port\$" "$work/store.log"; then
  failures=$((failures + 1))
  echo "launcher_cli_test: FAIL: dtrun store --port 0 did not report a port" >&2
  sed 's/^/    /' "$work/store.log" >&2
fi
kill -TERM "$store_pid" 2>/dev/null || true
rc=0
wait "$store_pid" || rc=$?
forget "$store_pid"
if [[ $rc -ne 0 ]]; then
  failures=$((failures + 1))
  echo "launcher_cli_test: FAIL: dtrun store exited $rc on SIGTERM" >&2
fi

# Entrypoints that cannot run: one line naming the file and the fix, exit 127 (as a shell's "cannot
# run"), before the banner, before any port is bound or directory made (the log directory stays
# absent).
mkdir -p "$work/entry/a_dir"
printf 'echo hi\n' >"$work/entry/no_run_bit.sh"
for entry in "$work/entry/does-not-exist" "$work/entry/a_dir" "$work/entry/no_run_bit.sh"; do
  WANT_RC=127 expect_usage_error "cannot run $entry" --log_dir="$work/entry/logs" --no_python "$entry"
done
WANT_RC=127 expect_usage_error "chmod +x $work/entry/no_run_bit.sh" --no_python "$work/entry/no_run_bit.sh"
WANT_RC=127 expect_usage_error "is a directory" --no_python "$work/entry/a_dir"
# Issue 34: a directory named without --no_python (it was "No such file or directory"), and a
# PYTHON_EXEC that does not exist (it exited 1 after the banner with health checks, 127 without).
pushd "$work/entry" >/dev/null
WANT_RC=127 expect_usage_error "cannot run a_dir: it is a directory" a_dir
popd >/dev/null
printf 'print(1)\n' >"$work/entry/ok.py"
PYTHON_EXEC=$work/entry/no-python WANT_RC=127 expect_usage_error \
  "cannot run $work/entry/no-python (PYTHON_EXEC): No such file or directory" "$work/entry/ok.py"
cases=$((cases + 1))
if [[ -e $work/entry/logs ]]; then
  failures=$((failures + 1))
  echo "launcher_cli_test: FAIL: a refused entrypoint made the log directory" >&2
fi

[[ $failures -eq 0 ]] || die "$failures of $cases cases failed"
echo "launcher_cli_test: all $cases cases passed"
