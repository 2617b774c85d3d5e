#!/usr/bin/env bash
# A log directory whose file system fills up while workers write (issue 34, bug 9): the job goes
# on and ends with its workers' code, the console says once that a log is cut short, and the
# report names each rank whose log lost bytes. The log directory is a 1 MiB tmpfs of the test's
# own (root only: says SKIP and passes elsewhere).
#   bash tests/integration/log_disk_full_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" log_disk_full_test "$@"

mkdir "$work/small"
if ! mount -t tmpfs -o size=1m tmpfs "$work/small" 2>/dev/null; then
  echo "log_disk_full_test: SKIP (cannot mount a tmpfs here)"
  exit 0
fi
at_exit "umount '$work/small'"
cat >"$work/flood.sh" <<'SH'
#!/bin/bash
yes "$(printf 'y%.0s' {1..99})" | head -n 20000
exit "$1"
SH
chmod +x "$work/flood.sh"

rc=0
timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --health_checks=none --log_dir="$work/small" \
  --rdzv_id=full --report="$work/full.json" --no_python "$work/flood.sh" 3 \
  >"$work/full.out" 2>&1 </dev/null || rc=$?
[[ $rc -eq 3 ]] || die "full: dtrun exited $rc, want the workers' 3: $(tail -n 5 "$work/full.out")"
[[ $(grep -c "a worker's log file is cut short: .*: No space left on device" "$work/full.out") -eq 1 ]] ||
  die "full: the console does not say once that a log is cut short: $(grep -i 'cut short' "$work/full.out")"
"$PYTHON" - "$work/full.json" <<'PY' || die "full: the report does not name the cut logs"
import json, sys
r = json.load(open(sys.argv[1]))
errors = [x.get("log_error", "") for x in r["attempts"][0]["ranks"]]
sys.exit(0 if r["exit_code"] == 3 and any("No space left on device" in e for e in errors) else 1)
PY
"$PYTHON" "$ROOT/tests/integration/validate_report.py" "$ROOT/docs/report.schema.json" \
  "$work/full.json" >/dev/null || die "full: the report does not match the schema"
pass "a full log disk: exit 3, said once, the report names the cut logs"
end_test
