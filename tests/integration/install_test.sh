#!/usr/bin/env bash
# Installing dtrun: `cmake --install` into a prefix, and the Debian package that CPack builds from
# the same rules, unpacked into a scratch root with dpkg -x (never into /):
#   bash tests/integration/install_test.sh /abs/path/to/dtrun
# Checks: the package's name (dtrun_<version>_<arch>.deb), its Depends (from dpkg-shlibdeps:
# libc6, alone where the binaries are portable: docs/install.md), its files; `dtrun --version` of each install
# says the build's version and commit; a real 2-rank run of each install whose Python workers load
# dtrun's hook (--python_hook=on) from that install's share/dtrun/python, not the source tree.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" install_test "$@"
release_tree_only "it installs and packages what ships (a sanitizer tree's packages never do)"
clear_scheduler_env
export OMP_NUM_THREADS=1
for tool in cpack dpkg-deb dpkg-shlibdeps file; do
  command -v "$tool" >/dev/null || die "$tool not found: scripts/setup.sh installs cmake, dpkg-dev and file"
done
[[ -f $BUILD/CPackConfig.cmake ]] || die "no CPackConfig.cmake in $BUILD"
cases=0

version_line=$("$DTRUN" --version) || die "dtrun --version exited $?"
[[ $version_line =~ ^dtrun\ ([0-9]+\.[0-9]+\.[0-9]+)\ \(commit\ ([0-9a-f]{12}(-dirty)?|unknown)\)$ ]] ||
  die "dtrun --version: unexpected '$version_line'"
version=${BASH_REMATCH[1]}
commit=${BASH_REMATCH[2]}
if git -C "$ROOT" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  head=$(git -C "$ROOT" rev-parse --short=12 HEAD)
  [[ ${commit%-dirty} == "$head" ]] ||
    note_fail "dtrun --version names commit $commit, the checkout is at $head (rebuild?)"
fi
pass "dtrun --version: $version_line"
cases=$((cases + 1))

# A Python worker reporting whether dtrun's sitecustomize installed the hook before the script
# ran (it imports dtrun_torch_hook and claims the progress file), and from where.
cat >"$work/hook_check.py" <<'EOF'
import os
import sys
hook = sys.modules.get("dtrun_torch_hook")
print("HOOK rank=%s world=%s claimed=%s hook=%s" % (
    os.environ["RANK"], os.environ["WORLD_SIZE"],
    os.environ.get("DTRUN_PROGRESS_PID") == str(os.getpid()),
    os.path.realpath(hook.__file__) if hook else None), flush=True)
EOF

# runs_from <installed dtrun> <its share/dtrun/python>: the version line, then two ranks with the
# hook on, each loading it from that directory.
runs_from() {
  local bin=$1 share out
  share=$(realpath "$2")
  [[ $("$bin" --version) == "$version_line" ]] || die "$bin --version: '$("$bin" --version)', built '$version_line'"
  out=$work/run-$(basename "$(dirname "$(dirname "$bin")")").out
  PYTHON_EXEC=$PYTHON timeout -k 5 "$LIMIT" "$bin" --nproc_per_node=2 --python_hook=on --tee=3 \
    --log_dir="$work/logs" "$work/hook_check.py" >"$out" 2>"$out.err" ||
    die "$bin: a 2-rank run exited $?: $(tail -n 20 "$out.err")"
  for r in 0 1; do
    grep -qxF "[default$r]:HOOK rank=$r world=2 claimed=True hook=$share/dtrun_torch_hook.py" "$out" ||
      die "$bin: rank $r did not load the hook from $share: $(cat "$out")"
  done
}

# 1. cmake --install into a prefix.
# The launcher's component (libdtrt-dev's is libdtrt_package_test.sh's), so that dtrun and
# dtrun-netcheck are all this test needs built.
cmake --install "$BUILD" --component dtrun --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  die "cmake --install exited $?: $(tail -n 5 "$work/install.log")"
for f in bin/dtrun bin/dtrun-netcheck share/dtrun/python/sitecustomize.py \
  share/dtrun/python/dtrun_torch_hook.py share/dtrun/python/dtrun_progress.py \
  share/doc/dtrun/README.md share/doc/dtrun/docs/launching.md share/doc/dtrun/docs/gpu.md \
  share/man/man1/dtrun.1 share/bash-completion/completions/dtrun; do
  [[ -e $work/prefix/$f ]] || die "cmake --install: $f is missing"
done
runs_from "$work/prefix/bin/dtrun" "$work/prefix/share/dtrun/python"
pass "cmake --install: bin/dtrun, share/dtrun/python; 2 ranks loaded the hook from the prefix"
cases=$((cases + 1))

# 2. The Debian package.
cpack --config "$BUILD/CPackConfig.cmake" -B "$work/pkg" -D CPACK_COMPONENTS_ALL=dtrun >"$work/cpack.log" 2>&1 ||
  die "cpack exited $?: $(tail -n 20 "$work/cpack.log")"
arch=$(dpkg --print-architecture)
deb=$work/pkg/dtrun_${version}_${arch}.deb
[[ -f $deb ]] || die "expected $(basename "$deb"), cpack made: $(ls "$work/pkg")"
dpkg-deb -f "$deb" Package Version Architecture Depends >"$work/control"
grep -qx "Package: dtrun" "$work/control" || die "package name: $(cat "$work/control")"
grep -qx "Version: $version" "$work/control" || die "package version: $(cat "$work/control")"
depends=$(sed -n 's/^Depends: //p' "$work/control")
[[ $depends == *libc6* ]] || die "Depends lacks libc6: '$depends'"
portable=0  # the release tree's binaries link the rest in (a sanitizer tree's do not)
if grep -qx 'DTRUN_PORTABLE:BOOL=ON' "$BUILD/CMakeCache.txt"; then portable=1; fi
for lib in libstdc++6 libgcc-s1 libspdlog libfmt libssl3; do
  ((portable == 0)) || [[ $depends != *"$lib"* ]] ||
    die "Depends names $lib, which the portable binaries link in: '$depends'"
done
dpkg-deb -c "$deb" | awk '{print $6}' >"$work/files"
for f in ./usr/bin/dtrun ./usr/bin/dtrun-netcheck ./usr/share/dtrun/python/sitecustomize.py \
  ./usr/share/dtrun/python/dtrun_torch_hook.py ./usr/share/dtrun/python/dtrun_progress.py \
  ./usr/share/man/man1/dtrun.1 ./usr/share/bash-completion/completions/dtrun; do
  grep -qx "$f" "$work/files" || die "the package lacks $f: $(cat "$work/files")"
done
pass "$(basename "$deb"): Depends: $depends"
cases=$((cases + 1))

dpkg -x "$deb" "$work/root" || die "dpkg -x exited $?"
runs_from "$work/root/usr/bin/dtrun" "$work/root/usr/share/dtrun/python"
pass "dpkg -x into a scratch root: 2 ranks loaded the hook from its usr/share/dtrun/python"
cases=$((cases + 1))

# `man dtrun` as it reads the installed package's page (man-db finds it through MANPATH, as it
# finds /usr/share/man once the package is installed).
page=$(MANPATH="$work/root/usr/share/man" MANWIDTH=100 man -P cat dtrun 2>&1) || die "man dtrun exited $?: $page"
[[ $page == *"--nproc_per_node"* && $page == *"EXIT STATUS"* ]] ||
  die "man dtrun shows no options or exit status: $(head -n 5 <<<"$page")"
pass "man dtrun reads the package's page ($(wc -l <<<"$page") lines)"
cases=$((cases + 1))

end_test "$cases cases"
