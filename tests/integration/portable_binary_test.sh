#!/usr/bin/env bash
# The portable binary (cmake/DtrunPortable.cmake): a release dtrun and its dtrun-netcheck need only
# the C library and the kernel, and no glibc newer than the floor docs/install.md states.
#   bash tests/integration/portable_binary_test.sh /abs/path/to/build/launcher/dtrun
# Checks: ldd of both lists only linux-vdso, libc, libm, ld-linux (libpthread, libdl, librt as
# glibc's parts); the highest GLIBC_x.y they need (scripts/glibc_floor.sh) is at most the floor
# read from docs/install.md, so the doc and the binary cannot drift apart; and the two, copied
# alone into an empty prefix (bin/, with share/dtrun/python as an install has it) and run with an
# empty environment, do a real job: two agents on loopback (c10d), the network check between them
# (the copied dtrun-netcheck), then one torch 1.13 gloo rank each, whose all_reduce is checked and
# which loaded dtrun's hook from the copy. A tree built without DTRUN_PORTABLE (the sanitizer
# presets) skips.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" portable_binary_test "$@"
clear_scheduler_env
NETCHECK=$BUILD/netcheck/dtrun-netcheck
[[ -x $NETCHECK ]] || die "$NETCHECK is missing: ninja -C $BUILD dtrun_netcheck"
if ! grep -qx 'DTRUN_PORTABLE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  end_test "skipped: $BUILD is not built with DTRUN_PORTABLE=ON (a sanitizer tree)"
  exit 0
fi
cases=0

# 1. Nothing but the C library at run time.
for bin in "$DTRUN" "$NETCHECK"; do
  libs=$(ldd "$bin") || die "ldd $bin exited $?"
  others=$(awk '{print $1}' <<<"$libs" | grep -vE '^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|/lib64/ld-linux-x86-64\.so\.2)$' || true)
  [[ -z $others ]] || die "$(basename "$bin") needs more than the C library: $(tr '\n' ' ' <<<"$others")"
  grep -q '^\s*libc\.so\.6 ' <<<"$libs" || die "ldd $(basename "$bin") lists no libc: $libs"
done
pass "ldd: dtrun and dtrun-netcheck need only the C library"
cases=$((cases + 1))

# 2. The glibc floor: measured from the binaries, at most what docs/install.md promises.
doc_floor=$(sed -n 's/.*glibc >= \([0-9][0-9.]*\) (the glibc floor).*/\1/p' "$ROOT/docs/install.md" | head -n 1)
[[ -n $doc_floor ]] || die "docs/install.md states no 'glibc >= X.Y (the glibc floor)'"
floor=$("$ROOT/scripts/glibc_floor.sh" "$DTRUN" "$NETCHECK") || die "glibc_floor.sh exited $?"
[[ $(printf '%s\n%s\n' "$floor" "$doc_floor" | sort -V | tail -n 1) == "$doc_floor" ]] ||
  die "the binaries need GLIBC_$floor, docs/install.md promises glibc >= $doc_floor: update the doc"
pass "glibc: the binaries need GLIBC_$floor, docs/install.md states >= $doc_floor"
cases=$((cases + 1))

# 3. Copied alone into an empty prefix, run with an empty environment: a 2-node job on loopback.
alone=$work/alone
mkdir -p "$alone/bin" "$alone/share/dtrun/python"
cp "$DTRUN" "$NETCHECK" "$alone/bin/"
cp "$ROOT"/python/*.py "$alone/share/dtrun/python/"
share=$(realpath "$alone/share/dtrun/python")
# Each rank says where dtrun's hook came from, then runs the gloo rank (torch_gloo_rank.py).
cat >"$work/rank.py" <<'PY'
import os, runpy, sys
hook = sys.modules.get("dtrun_torch_hook")
print("HOOK rank=%s hook=%s" % (os.environ["RANK"], os.path.realpath(hook.__file__) if hook else None), flush=True)
runpy.run_path(sys.argv[1], run_name="__main__")
PY
port=$(free_port)
job=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port" --rdzv_id=portable
  --health_checks=network --health_check_timeout=20 --python_hook=on --tee=3)
declare -A pid_of=()
for n in 0 1; do
  env -i PATH=/usr/bin:/bin HOME="$work" PYTHON_EXEC="$PYTHON" OMP_NUM_THREADS=1 \
    timeout -k 5 "$LIMIT" "$alone/bin/dtrun" "${job[@]}" --rdzv_conf=is_host=$((n == 0)) \
    --log_dir="$work/logs/$n" --report="$work/$n.json" "$work/rank.py" "$HERE/torch_gloo_rank.py" \
    >"$work/$n.out" 2>&1 &
  pid_of[$n]=$!
  pids+=("$!")
  if ((n == 0)); then  # the store host first, as a launcher script would
    for _ in $(seq 300); do grep -q "rendezvous of job" "$work/0.out" && break; sleep 0.1; done
  fi
done
for n in 0 1; do
  rc=0
  wait "${pid_of[$n]}" || rc=$?
  forget "${pid_of[$n]}"
  [[ $rc -eq 0 ]] || die "the copied dtrun (node $n) exited $rc: $(tail -n 15 "$work/$n.out")"
done
ranks=0
for n in 0 1; do
  grep -q "HOOK rank=[01] hook=$share/dtrun_torch_hook.py$" "$work/$n.out" ||
    die "node $n: the rank did not load the hook from the copy's $share: $(tail -n 15 "$work/$n.out")"
  grep -q "torch_gloo_rank: rank [01]/2 all_reduce=3.0 ok" "$work/$n.out" ||
    die "node $n: no checked all_reduce: $(tail -n 15 "$work/$n.out")"
  ranks=$((ranks + 1))
done
network=$("$PYTHON" -c '
import json, sys
doc = json.load(open(sys.argv[1]))
print(" ".join(c["outcome"] for c in doc.get("health_checks", []) if c["check"] == "network"))' "$work/0.json") ||
  die "the store host's report: cannot read $work/0.json"
[[ $network == passed* ]] || die "the copied dtrun-netcheck: network check '$network', want passed"
pass "copied alone, empty environment: network check $network, $ranks gloo ranks all_reduce ok, hook from the copy"
cases=$((cases + 1))

end_test "$cases cases"
