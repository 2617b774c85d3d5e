# Sourced first by the integration tests, after `set -euo pipefail`:
#   source "$(dirname "$0")/lib/preamble.sh" <test name> "$@"
# It gives: DTRUN (the dtrun binary, checked), HERE (tests/integration), ROOT (the repository),
# BUILD (the build tree of that dtrun), PYTHON (/usr/bin/python3, the interpreter with torch),
# die "<why>" (one FAIL line naming the test, exit 1), no PET_* variable in the environment (each
# test sets its options itself), tmp (a fresh directory) and agents (pids of background
# processes): on exit every pid in agents is SIGKILLed and reaped, then tmp is removed.
# shellcheck shell=bash
TEST_NAME=$1
shift
DTRUN=${1:?usage: $TEST_NAME.sh /path/to/dtrun}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "$(dirname "$DTRUN")/.." && pwd)
PYTHON=/usr/bin/python3
die() { echo "$TEST_NAME: FAIL: $*" >&2; exit 1; }
[[ -x $DTRUN ]] || die "dtrun binary '$DTRUN' is not executable"
for var in $(compgen -e); do
  [[ $var == PET_* ]] && unset "$var"
done
tmp=$(mktemp -d)
agents=()
preamble_cleanup() {
  local p
  for p in "${agents[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${agents[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap preamble_cleanup EXIT
