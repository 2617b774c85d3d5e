#!/usr/bin/env bash
# The Python wheel (scripts/build_wheel.sh), built from this test's build tree and installed
# offline into a fresh venv (with the system's site-packages: torch 1.13 comes from there):
#   bash tests/integration/wheel_test.sh /abs/path/to/build/launcher/dtrun
# Checks: the wheel's name is dtrun-<version>-py3-none-manylinux_2_<N>_x86_64.whl with <version>
# dtrun's and 2.<N> the glibc floor measured from the binaries (scripts/glibc_floor.sh), no newer
# than docs/install.md states; `pip install --no-index` puts bin/dtrun (the binary itself) and
# share/dtrun/python in the venv; a 2-rank torch gloo all_reduce job runs through <venv>/bin/dtrun
# and through `<venv>/bin/python -m dtrun`, each rank loading dtrun's hook from the venv's copy;
# `python -m dtrun` execs the binary (the process becomes dtrun: same pid, SIGTERM gives dtrun's
# 143) and keeps its exit status (a bad flag: 2). A tree built without DTRUN_PORTABLE skips.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" wheel_test "$@"
clear_scheduler_env
export OMP_NUM_THREADS=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1
if ! grep -qx 'DTRUN_PORTABLE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  end_test "skipped: $BUILD is not built with DTRUN_PORTABLE=ON (a sanitizer tree)"
  exit 0
fi
cases=0

# 1. The wheel and its tag.
"$ROOT/scripts/build_wheel.sh" "$BUILD" "$work/dist" >"$work/build.log" 2>&1 ||
  die "build_wheel.sh exited $?: $(tail -n 20 "$work/build.log")"
[[ $("$DTRUN" --version) =~ ^dtrun\ ([0-9.]+)\  ]] || die "dtrun --version: '$("$DTRUN" --version)'"
version=${BASH_REMATCH[1]}
floor=$("$ROOT/scripts/glibc_floor.sh" "$DTRUN" "$BUILD/netcheck/dtrun-netcheck") || die "glibc_floor.sh exited $?"
doc_floor=$(sed -n 's/.*glibc >= \([0-9][0-9.]*\) (the glibc floor).*/\1/p' "$ROOT/docs/install.md" | head -n 1)
[[ -n $doc_floor && $(printf '%s\n%s\n' "$floor" "$doc_floor" | sort -V | tail -n 1) == "$doc_floor" ]] ||
  die "the binaries need GLIBC_$floor, docs/install.md states glibc >= '$doc_floor': update the doc"
whl=$work/dist/dtrun-$version-py3-none-manylinux_2_${floor#2.}_x86_64.whl
[[ -f $whl && $(ls "$work/dist") == "$(basename "$whl")" ]] ||
  die "expected $(basename "$whl") alone, build_wheel.sh made: $(ls "$work/dist")"
pass "$(basename "$whl"): the tag's glibc $floor is the binaries' floor (docs/install.md: >= $doc_floor)"
cases=$((cases + 1))

# 2. Installed offline into a fresh venv.
venv=$work/venv
"$PYTHON" -m venv --system-site-packages "$venv" >"$work/venv.log" 2>&1 || die "python3 -m venv exited $?: $(cat "$work/venv.log")"
"$venv/bin/python" -m pip install -q --no-index "$whl" >"$work/pip.log" 2>&1 ||
  die "pip install --no-index exited $?: $(tail -n 20 "$work/pip.log")"
for f in bin/dtrun bin/dtrun-netcheck; do
  [[ -x $venv/$f ]] || die "the venv has no executable $f: $(ls -l "$venv/bin")"
done
share=$(realpath "$venv/share/dtrun/python")
[[ -f $share/sitecustomize.py && -f $share/dtrun_torch_hook.py ]] || die "the venv has no share/dtrun/python hook"
[[ $("$venv/bin/dtrun" --version) == "$("$DTRUN" --version)" ]] || die "the venv's dtrun --version differs"
for f in share/man/man1/dtrun.1 share/bash-completion/completions/dtrun; do
  [[ -s $venv/$f ]] || die "the venv has no $f (the wheel takes the install's man page and completion)"
done
pass "pip install --no-index: bin/dtrun, bin/dtrun-netcheck, share/dtrun/python, the man page and completion in the venv"
cases=$((cases + 1))

# 3. A 2-rank gloo job through each entry, the hook from the venv's share/dtrun/python.
cat >"$work/rank.py" <<'PY'
import os, runpy, sys
hook = sys.modules.get("dtrun_torch_hook")
print("HOOK rank=%s hook=%s" % (os.environ["RANK"], os.path.realpath(hook.__file__) if hook else None), flush=True)
runpy.run_path(sys.argv[1], run_name="__main__")
PY
job=(--nproc_per_node=2 --python_hook=on --tee=3 "$venv/bin/python" "$work/rank.py" "$HERE/torch_gloo_rank.py")
runs_via() {  # <label> <command...>: the job through that entry, its output checked
  local label=$1 out=$work/run-$cases.out rc=0
  shift
  timeout -k 5 "$LIMIT" "$@" --log_dir="$work/logs-$cases" "${job[@]}" >"$out" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || die "$label: the 2-rank job exited $rc: $(tail -n 20 "$out")"
  for r in 0 1; do
    grep -qxF "[default$r]:HOOK rank=$r hook=$share/dtrun_torch_hook.py" "$out" ||
      die "$label: rank $r did not load the hook from $share: $(tail -n 20 "$out")"
    grep -qxF "[default$r]:torch_gloo_rank: rank $r/2 all_reduce=3.0 ok" "$out" ||
      die "$label: rank $r has no checked all_reduce: $(tail -n 20 "$out")"
  done
  pass "$label: 2 gloo ranks, all_reduce ok, hook from the venv"
  cases=$((cases + 1))
}
runs_via "venv/bin/dtrun" "$venv/bin/dtrun"
runs_via "python -m dtrun" "$venv/bin/python" -m dtrun

# 4. python -m dtrun is dtrun: the exit status kept, the process replaced (signals reach dtrun).
rc=0
"$venv/bin/python" -m dtrun --nproc_per_node=two "$work/rank.py" >"$work/bad.out" 2>&1 || rc=$?
if [[ $rc -ne 2 ]] || ! grep -q "nproc_per_node" "$work/bad.out"; then
  die "python -m dtrun --nproc_per_node=two: exit $rc (want dtrun's 2): $(cat "$work/bad.out")"
fi
"$venv/bin/python" -m dtrun --nproc_per_node=1 --no_python sleep 60 >"$work/sleep.out" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 300); do
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$(realpath "$venv/bin/dtrun")" ]] && pgrep -P "$pid" >/dev/null && break
  sleep 0.1
done
exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
[[ $exe == "$(realpath "$venv/bin/dtrun")" ]] || die "python -m dtrun: pid $pid runs '$exe', not the venv's dtrun (no exec?)"
stopped_by_term "python -m dtrun" "$pid" 20
pass "python -m dtrun: a bad flag exits 2; the process becomes dtrun, which SIGTERM stops with 143 in ${took} s"
cases=$((cases + 1))

end_test "$cases cases"
