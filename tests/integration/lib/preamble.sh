# Sourced first by every integration test (runtime_test.sh aside), after its `set` line:
#   source "$(dirname "$0")/lib/preamble.sh" <test name> "$@"
# It gives:
#   DTRUN      the dtrun binary ($1, checked); BUILD its build tree; HERE tests/integration;
#              ROOT the repository
#   PYTHON     /usr/bin/python3, the interpreter with torch 1.13 (the python3 on PATH may lack it)
#   SANITIZED  1 when DTRUN comes from an ASan/TSan tree (build-asan/, build-tsan/), else 0
#   LIMIT      seconds one dtrun run or agent may take: 60, or 120 in a sanitizer tree
#   LONG       1 for a slow test's long form, 0 for its short one, which takes each path once:
#              DTRUN_TEST_LONG (0 or 1; scripts/test.sh sets 0) or else long in a release tree,
#              short in a sanitizer tree (3-10x slower)
#   die <why>        one FAIL line naming the test, then exit 1
#   note_fail <why>  one FAIL line, counted in fail_count (the test decides when to give up)
#   pass <what>      one line naming the test
#   end_test [<detail>]  the last line: FAIL and exit 1 if note_fail was called, else PASS
#   claim_subnet A.B  a subnet A.B.C of this run's own (see below), its blackhole route added
#   free_port        a loopback TCP port free right now, below the kernel's range for connections'
#                    own ports (no connection takes it meanwhile); a random one if Python fails
#   running <pid>    true while the process runs (a zombie, exited but not reaped, has stopped)
#   clear_scheduler_env  unsets SLURM_* and PBS_* (for tests that make up a scheduler's job)
#   release_tree_only <why>  in a sanitizer tree: one SKIP line saying why, exit 77 (ctest's
#                    SKIP_RETURN_CODE): for what checks the product as shipped (its packages)
#   release_in_short_form <why>  the same in a sanitizer tree's short form only (LONG=0, as CI
#                    runs): for a script whose instrumented paths (dtrun's own code) the tree's
#                    other scripts and unit tests drive too, most of whose time is uninstrumented
#                    work (torch workers); DTRUN_TEST_LONG=1 runs it in every tree
#   sanitizers_in_short_form <why>  in the release tree's short form: one SKIP line, exit 77:
#                    for a script whose subject is dtrun's own code (rendezvous, restarts, the
#                    live view), which the ASan tree runs instrumented with the same workers, so
#                    that CI runs it once; DTRUN_TEST_LONG=1 (ctest by hand) runs it here too
#   work       a fresh directory; pids: background processes the test started
#   forget <pid>     drops a reaped pid from pids, so the cleanup never signals a reused pid
#   at_exit <command>    runs <command> on exit (in order of registration)
#   stopped_by_term <label> <pid> <seconds>  SIGTERM to a background dtrun, which must exit 143
#                    within <seconds> (else a FAIL naming <label>); `took` gets the seconds taken
# On exit: every pid in pids is SIGKILLed and reaped, then the at_exit commands run, then work is
# removed. No PET_* variable stays in the environment: each test sets its options itself; nor
# KUBERNETES_SERVICE_HOST (a CI runner in a pod): tests that make up a Kubeflow pod set it.
# shellcheck shell=bash disable=SC2034  # its variables are for the test that sources it
TEST_NAME=$1
shift
DTRUN=${1:?usage: $TEST_NAME.sh /path/to/dtrun}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=/usr/bin/python3

die() { echo "$TEST_NAME: FAIL: $*" >&2; exit 1; }
fail_count=0
note_fail() { echo "$TEST_NAME: FAIL: $*" >&2; fail_count=$((fail_count + 1)); }
pass() { echo "$TEST_NAME: $*"; }
end_test() {
  if [[ $fail_count -ne 0 ]]; then
    echo "$TEST_NAME: FAIL ($fail_count failures${1:+, $1})" >&2
    exit 1
  fi
  echo "$TEST_NAME: PASS${1:+ ($1)}"
}
# claim_subnet A.B: sets subnet to an A.B.C of this run's own (C from the pid, else the next free
# one) by adding the blackhole route for A.B.C.0/24 in the root namespace: adding it is the claim,
# which fails while a concurrent run (another test, or this one twice) holds that /24. Returns 1
# when no route can be added here (no root).
claim_subnet() {
  local c i
  for ((i = 0; i < 200; i++)); do
    c=$((($$ + i) % 200 + 20))
    if ip route add blackhole "$1.$c.0/24" 2>/dev/null; then
      subnet=$1.$c
      return 0
    fi
    [[ -n $(ip route show "$1.$c.0/24" 2>/dev/null) ]] || return 1 # not taken: no right to add
  done
  return 1
}
free_port() {
  local low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((low > 11000)) || low=32768
  "$PYTHON" - "$low" <<'PY' 2>/dev/null || echo $((10000 + RANDOM % (low - 10000)))
import random, socket, sys
low = int(sys.argv[1])
for _ in range(1000):
    port = random.randrange(10000, low)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    sys.exit(0)
sys.exit(1)
PY
}
running() {
  kill -0 "$1" 2>/dev/null && [[ -r /proc/$1/stat ]] &&
    [[ $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) != Z ]]
}

[[ -x $DTRUN ]] || die "dtrun binary '$DTRUN' is not executable"
BUILD=$(cd "$(dirname "$DTRUN")/.." && pwd)
SANITIZED=0
[[ $DTRUN != */build-tsan/* && $DTRUN != */build-asan/* ]] || SANITIZED=1
LIMIT=$((SANITIZED ? 120 : 60))
LONG=$((SANITIZED == 0))
[[ ${DTRUN_TEST_LONG:-} != [01] ]] || LONG=$DTRUN_TEST_LONG

release_tree_only() {
  ((SANITIZED)) || return 0
  echo "$TEST_NAME: SKIP: the release tree's run checks this: $*"
  exit 77
}
release_in_short_form() {
  ((SANITIZED && !LONG)) || return 0
  echo "$TEST_NAME: SKIP in a sanitizer tree's short form (DTRUN_TEST_LONG=1 runs it): $*"
  exit 77
}

sanitizers_in_short_form() {
  ((!SANITIZED && !LONG)) || return 0
  echo "$TEST_NAME: SKIP in the release tree's short form (the ASan tree runs it; DTRUN_TEST_LONG=1 runs it here): $*"
  exit 77
}

preamble_unset_matching() {  # <extended regex>: unsets every variable whose name matches
  local var
  for var in $(compgen -e); do
    if [[ $var =~ $1 ]]; then unset "$var"; fi
  done
}
clear_scheduler_env() { preamble_unset_matching '^(SLURM|PBS)_'; }
preamble_unset_matching '^(PET_.*|KUBERNETES_SERVICE_HOST)$'

work=$(mktemp -d)
pids=()
forget() {
  local p keep=()
  for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  pids=("${keep[@]}")
}
stopped_by_term() {
  local label=$1 pid=$2 limit=$3 start=$SECONDS status=0
  kill -TERM "$pid"
  while running "$pid" && ((SECONDS - start < limit)); do sleep 0.1; done
  running "$pid" && die "$label: dtrun still runs $((SECONDS - start)) s after SIGTERM"
  wait "$pid" || status=$?
  forget "$pid"
  [[ $status -eq 143 ]] || die "$label: dtrun exited $status after SIGTERM, want 143"
  took=$((SECONDS - start))
}
exit_commands=()
at_exit() { exit_commands+=("$*"); }
preamble_cleanup() {
  local p c
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for c in "${exit_commands[@]}"; do eval "$c" || true; done
  rm -rf "$work"
}
trap preamble_cleanup EXIT
