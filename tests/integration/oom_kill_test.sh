#!/usr/bin/env bash
# A worker killed by the kernel's OOM killer is reported as such, not as a plain SIGKILL (issue
# 34, bug 12): dtrun runs in a memory cgroup of the test's own (100 MiB, 600 under a sanitizer;
# cgroup v1's memory controller or v2), a worker touches 4 times that; dtrun exits 137 and its
# summary and --report name "killed by the kernel: out of memory (cgroup limit 100 MiB)". A SIGKILL sent
# by hand in the same cgroup is still a plain SIGKILL.
#   bash tests/integration/oom_kill_test.sh /abs/path/to/build/launcher/dtrun
# Needs root and a writable memory cgroup; says SKIP (and passes) where the machine has none.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" oom_kill_test "$@"

cgroup=""
if [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then
  parent=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
  grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null &&
    cgroup=$parent/dtrun-oom-test-$$
else
  path=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  [[ -n $path && -d /sys/fs/cgroup/memory$path ]] && cgroup=/sys/fs/cgroup/memory$path/dtrun-oom-test-$$
fi
if [[ -z $cgroup ]] || ! mkdir "$cgroup" 2>/dev/null; then
  echo "oom_kill_test: SKIP (no writable memory cgroup here)"
  exit 0
fi
at_exit "rmdir '$cgroup'"
# A sanitizer build's agent alone holds about 200 MiB (ASan's shadow and quarantine).
limit_mib=$((SANITIZED ? 600 : 100))
if [[ -e $cgroup/memory.max ]]; then
  echo $((limit_mib << 20)) >"$cgroup/memory.max"
  [[ ! -e $cgroup/memory.swap.max ]] || echo 0 >"$cgroup/memory.swap.max"
else
  echo $((limit_mib << 20)) >"$cgroup/memory.limit_in_bytes"
fi

# in_cgroup <name> <dtrun args...>: dtrun run inside the cgroup; its exit code in rc.
in_cgroup() {
  local name=$1
  shift
  rc=0
  timeout "$LIMIT" /bin/sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cgroup" \
    "$DTRUN" --log_dir="$work/logs" --rdzv_id="$name" --report="$work/$name.json" "$@" \
    >"$work/$name.out" 2>&1 </dev/null || rc=$?
}
# The worker offers itself to the OOM killer first (oom_score_adj 1000, allowed to any process):
# a sanitizer build's agent is big enough to be picked otherwise.
in_cgroup oom --nproc_per_node=1 --no_python "$PYTHON" -c \
  "open('/proc/self/oom_score_adj', 'w').write('1000'); x = b'x' * ($limit_mib << 22); print(len(x))"
[[ $rc -eq 137 ]] || die "oom: dtrun exited $rc, want 137: $(tail -n 5 "$work/oom.out")"
want="killed by the kernel: out of memory (cgroup limit $limit_mib MiB)"
grep -qF "root cause: rank 0 (local rank 0, pid" "$work/oom.out" || die "oom: no summary line"
grep -F "root cause: rank 0" "$work/oom.out" | grep -qF "signal 9 (SIGKILL), $want" ||
  die "oom: the summary does not say '$want': $(grep -F 'root cause' "$work/oom.out")"
"$PYTHON" - "$work/oom.json" "$want" <<'PY' || die "oom: the report's root cause does not say it"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if sys.argv[2] in r["root_cause"]["message"] and r["exit_code"] == 137 else 1)
PY
pass "a worker the OOM killer ended is named as such"

# SIGKILL by hand, same cgroup: no OOM kill happened, so none is claimed.
in_cgroup bykill --nproc_per_node=1 --no_python /bin/sh -c 'kill -KILL $$'
[[ $rc -eq 137 ]] || die "bykill: dtrun exited $rc, want 137"
! grep -q "out of memory" "$work/bykill.out" || die "bykill: a plain SIGKILL was called out of memory"
end_test
