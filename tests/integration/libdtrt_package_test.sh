#!/usr/bin/env bash
# libdtrt for C++ users: the libdtrt-dev install component and its Debian package, used the way a
# user's project uses them:
#   bash tests/integration/libdtrt_package_test.sh /abs/path/to/dtrun
# 1. `cmake --install --component libdtrt-dev` into a prefix: the headers users include (and no
#    other), libdtrt.so with its SONAME and none of rdzv's or common's symbols exported, the CMake
#    package, dtrt.pc.
# 2. tests/data/libdtrt_consumer built out of tree with find_package(dtrun) and with its Makefile
#    through `pkg-config --cflags --libs dtrt`; each runs under dtrun with 2 ranks, loads the
#    prefix's libdtrt.so and prints the all_reduce's sums.
# 3. Where dtrun::ddp was built: tests/data/libdtrt_consumer/ddp (find_package(dtrun COMPONENTS
#    ddp), which finds Torch itself) built and run the same way, the mean gradient checked.
# 4. libdtrt-dev_<version>_<arch>.deb: its control fields and files, unpacked with dpkg -x into a
#    scratch root (never into /), and both consumers built against that root and run.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" libdtrt_package_test "$@"
release_tree_only "it installs and packages what ships and builds users' projects against it (a sanitizer tree's packages never ship)"
clear_scheduler_env
export OMP_NUM_THREADS=1
for tool in cmake cpack dpkg-deb pkg-config make c++ nm ldd; do
  command -v "$tool" >/dev/null ||
    die "$tool not found: scripts/setup.sh installs build-essential, cmake, pkg-config and dpkg-dev"
done
[[ -f $BUILD/CPackConfig.cmake ]] || die "no CPackConfig.cmake in $BUILD"
[[ -e $BUILD/worker_runtime/libdtrt.so ]] ||
  die "$BUILD/worker_runtime/libdtrt.so is not built: ninja -C $BUILD dtrun_runtime"
[[ $("$DTRUN" --version) =~ ^dtrun\ ([0-9]+)\.([0-9]+)\.([0-9]+) ]] ||
  die "dtrun --version: unexpected '$("$DTRUN" --version)'"
version=${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}
major=${BASH_REMATCH[1]}
consumer=$ROOT/tests/data/libdtrt_consumer
# dtrun::ddp is installed where the build found libtorch (its export file is then generated).
with_ddp=0
if compgen -G "$BUILD/CMakeFiles/Export/*/dtrunDdpTargets.cmake" >/dev/null; then
  with_ddp=1
  [[ -e $BUILD/ddp/libdtrun_ddp.a ]] || die "dtrun::ddp is not built: ninja -C $BUILD dtrun_ddp"
fi
cases=0

# runs <label> <program> <expected line without the rank prefix, {r} standing for the rank>:
# two ranks under dtrun with --tee, each rank's line checked whole.
runs() {
  local label=$1 program=$2 want=$3 out=$work/$1.out r
  timeout -k 5 "$LIMIT" "$DTRUN" --nproc_per_node=2 --no_python --tee=3 \
    --log_dir="$work/logs-$label" "$program" >"$out" 2>"$out.err" ||
    die "$label: a 2-rank run of $program exited $?: $(tail -n 20 "$out.err")"
  for r in 0 1; do
    grep -qxF "[default$r]:${want//\{r\}/$r}" "$out" ||
      die "$label: rank $r did not print '${want//\{r\}/$r}': $(cat "$out" "$out.err")"
  done
}
# loads_from <program> <directory>: the dynamic loader takes libdtrt.so.<major> from <directory>
# (the install under test, not the build tree).
loads_from() {
  local line found
  line=$(ldd "$1" | grep "libdtrt\.so\.$major ") || die "$1 does not link libdtrt.so.$major: $(ldd "$1")"
  found=$(awk '{print $3}' <<<"$line")
  [[ -n $found && $(realpath "$(dirname "$found")") == "$(realpath "$2")" ]] ||
    die "$1 loads libdtrt from elsewhere than $2: $line"
}
# A libdtrt built with a sanitizer needs its runtime loaded first: the consumers of a sanitizer
# tree are built with the same -fsanitize (as a user of such a build would).
sanitize=$(sed -n 's/^DTRUN_SANITIZE:STRING=//p' "$BUILD/CMakeCache.txt")
consumer_flags=${sanitize:+-fsanitize=$sanitize}
# cmake_consumer <label> <source dir> <prefix>: configures and builds a consumer project against
# <prefix> alone (no user or system package registry), checking which dtrun package it found.
cmake_consumer() {
  local label=$1 src=$2 prefix=$3 dir=$work/$1
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_CXX_FLAGS="$consumer_flags" >"$dir.log" 2>&1 ||
    die "$label: cmake configure exited $?: $(tail -n 20 "$dir.log")"
  grep -qx "dtrun_DIR:PATH=$prefix/lib/cmake/dtrun" "$dir/CMakeCache.txt" ||
    die "$label: found another dtrun package: $(grep '^dtrun_DIR' "$dir/CMakeCache.txt")"
  cmake --build "$dir" >>"$dir.log" 2>&1 || die "$label: the build exited $?: $(tail -n 20 "$dir.log")"
}
# make_consumer <label> <pkgconfig dir>: the Makefile's build through pkg-config.
make_consumer() {
  mkdir -p "$work/$1"
  PKG_CONFIG_PATH=$2 make -C "$consumer" O="$work/$1" CXXFLAGS="-O2 -Wall $consumer_flags" \
    >"$work/$1.log" 2>&1 ||
    die "$1: make exited $?: $(tail -n 20 "$work/$1.log")"
}
sums='allreduce_sum: rank {r} of 2: 3 30 300'
mean_grad='mean_grad: rank {r} of 2: weight 1.5 1.5 1.5 1.5 bias 1'

# 1. cmake --install of the libdtrt-dev component.
prefix=$work/prefix
cmake --install "$BUILD" --prefix "$prefix" --component libdtrt-dev >"$work/install.log" 2>&1 ||
  die "cmake --install --component libdtrt-dev exited $?: $(tail -n 5 "$work/install.log")"
lib=$prefix/lib
for f in include/dtrun/runtime.h lib/libdtrt.so lib/libdtrt.so.$major lib/libdtrt.so.$version \
  lib/cmake/dtrun/dtrunConfig.cmake lib/cmake/dtrun/dtrunConfigVersion.cmake \
  lib/cmake/dtrun/dtrunRuntimeTargets.cmake lib/pkgconfig/dtrt.pc; do
  [[ -e $prefix/$f ]] || die "cmake --install: $f is missing: $(cd "$prefix" && find . | sort)"
done
headers=$(find "$prefix/include/dtrun" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')
want_headers="runtime.h "
((with_ddp == 0)) || want_headers="ddp.h runtime.h "
[[ $headers == "$want_headers" ]] || die "include/dtrun holds '$headers', want '$want_headers'"
[[ ! -e $prefix/bin/dtrun ]] || die "the libdtrt-dev component installed bin/dtrun"
soname=$(objdump -p "$lib/libdtrt.so.$version" | awk '$1 == "SONAME" {print $2}')
[[ $soname == "libdtrt.so.$major" ]] || die "libdtrt's SONAME is '$soname', want libdtrt.so.$major"
# rdzv and common are linked in with their symbols hidden (--exclude-libs): of ours, only
# dtrun::runtime's are defined for others (T, D, B, R). Weak ones (W, V) are the inline functions
# and templates of headers, which an unoptimised (sanitizer) build emits wherever they are used:
# any copy is the same, so exporting them leaks nothing of rdzv's or common's code.
exported=$(nm -DC --defined-only "$lib/libdtrt.so")
leaked=$(grep -P '^\S+ [TDBR] (typeinfo for |typeinfo name for |vtable for |guard variable for )?dtrun::(?!runtime::)' <<<"$exported" || true)
[[ -z $leaked ]] || die "libdtrt.so exports symbols of rdzv/common: $(head -n 5 <<<"$leaked")"
grep -qF 'dtrun::runtime::init(dtrun::runtime::InitOptions const&)' <<<"$exported" ||
  die "libdtrt.so does not export dtrun::runtime::init"
[[ $(PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --modversion dtrt) == "$version" ]] ||
  die "pkg-config --modversion dtrt: '$(PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --modversion dtrt)'"
pass "cmake --install --component libdtrt-dev: headers $headers, SONAME $soname, no rdzv/common symbols, dtrt.pc $version"
cases=$((cases + 1))

# 2. The consumer, from CMake and from a Makefile, against the prefix.
cmake_consumer cmake-consumer "$consumer" "$prefix"
! grep -q '^Torch_DIR' "$work/cmake-consumer/CMakeCache.txt" ||
  die "find_package(dtrun) without COMPONENTS ddp looked for Torch"
loads_from "$work/cmake-consumer/allreduce_sum" "$lib"
runs cmake-consumer "$work/cmake-consumer/allreduce_sum" "$sums"
pass "find_package(dtrun CONFIG) + dtrun::runtime: 2 ranks printed '$sums'"
cases=$((cases + 1))

make_consumer make-consumer "$lib/pkgconfig"
loads_from "$work/make-consumer/allreduce_sum" "$lib"
runs make-consumer "$work/make-consumer/allreduce_sum" "$sums"
pass "Makefile + pkg-config dtrt: 2 ranks printed '$sums'"
cases=$((cases + 1))

# 3. dtrun::ddp.
if ((with_ddp == 1)); then
  cmake_consumer ddp-consumer "$consumer/ddp" "$prefix"
  loads_from "$work/ddp-consumer/mean_grad" "$lib"
  runs ddp-consumer "$work/ddp-consumer/mean_grad" "$mean_grad"
  pass "find_package(dtrun CONFIG COMPONENTS ddp) + dtrun::ddp: 2 ranks printed '$mean_grad'"
  cases=$((cases + 1))
else
  # Without libtorch nothing of ddp is installed, and asking for it says why.
  rc=0
  cmake -S "$consumer/ddp" -B "$work/ddp-absent" -DCMAKE_PREFIX_PATH="$prefix" \
    >"$work/ddp-absent.log" 2>&1 || rc=$?
  if ((rc == 0)) || ! grep -q "dtrun::ddp is not installed" "$work/ddp-absent.log"; then
    die "COMPONENTS ddp without dtrun::ddp: exit $rc, $(tail -n 10 "$work/ddp-absent.log")"
  fi
  pass "dtrun::ddp not built (no libtorch): COMPONENTS ddp fails saying so"
  cases=$((cases + 1))
fi

# 4. The Debian package.
cpack --config "$BUILD/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1 ||
  die "cpack exited $?: $(tail -n 20 "$work/cpack.log")"
arch=$(dpkg --print-architecture)
deb=$work/pkg/libdtrt-dev_${version}_${arch}.deb
[[ -f $deb ]] || die "expected $(basename "$deb"), cpack made: $(ls "$work/pkg")"
[[ -f $work/pkg/dtrun_${version}_${arch}.deb ]] || die "cpack no longer makes dtrun_${version}_${arch}.deb: $(ls "$work/pkg")"
dpkg-deb -f "$deb" Package Version Section Depends Recommends >"$work/control"
grep -qx "Package: libdtrt-dev" "$work/control" || die "package name: $(cat "$work/control")"
grep -qx "Version: $version" "$work/control" || die "package version: $(cat "$work/control")"
grep -qx "Section: libdevel" "$work/control" || die "package section: $(cat "$work/control")"
depends=$(sed -n 's/^Depends: //p' "$work/control")
# libdtrt links the shared libstdc++ and Gloo (spdlog, fmt and, in a portable tree, OpenSSL are
# compiled or linked in: cmake/DtrunPortable.cmake).
for dep in libc6 libstdc++6 libgloo0; do
  [[ $depends == *"$dep"* ]] || die "Depends lacks $dep (dpkg-shlibdeps over libdtrt.so): '$depends'"
done
dpkg-deb -c "$deb" | awk '{print $6}' >"$work/files"
for f in ./usr/include/dtrun/runtime.h ./usr/lib/libdtrt.so ./usr/lib/libdtrt.so.$major \
  ./usr/lib/libdtrt.so.$version ./usr/lib/cmake/dtrun/dtrunConfig.cmake \
  ./usr/lib/cmake/dtrun/dtrunConfigVersion.cmake ./usr/lib/cmake/dtrun/dtrunRuntimeTargets.cmake \
  ./usr/lib/pkgconfig/dtrt.pc; do
  grep -qx "$f" "$work/files" || die "the package lacks $f: $(cat "$work/files")"
done
! grep -qE '^\./usr/(bin|share/dtrun)/' "$work/files" || die "libdtrt-dev holds the launcher's files: $(cat "$work/files")"
! dpkg-deb -c "$work/pkg/dtrun_${version}_${arch}.deb" | grep -qE ' \./usr/(lib|include)/' ||
  die "the dtrun package holds libdtrt's files: $(dpkg-deb -c "$work/pkg/dtrun_${version}_${arch}.deb")"
pass "$(basename "$deb"): Depends: $depends; the library, headers, CMake package and dtrt.pc; dtrun's package unchanged apart"
cases=$((cases + 1))

debroot=$work/root
dpkg -x "$deb" "$debroot" || die "dpkg -x exited $?"
cmake_consumer deb-cmake-consumer "$consumer" "$debroot/usr"
loads_from "$work/deb-cmake-consumer/allreduce_sum" "$debroot/usr/lib"
runs deb-cmake-consumer "$work/deb-cmake-consumer/allreduce_sum" "$sums"
make_consumer deb-make-consumer "$debroot/usr/lib/pkgconfig"
loads_from "$work/deb-make-consumer/allreduce_sum" "$debroot/usr/lib"
runs deb-make-consumer "$work/deb-make-consumer/allreduce_sum" "$sums"
pass "dpkg -x into a scratch root: the CMake and Makefile consumers built against its usr/ and ran"
cases=$((cases + 1))

end_test "$cases cases"
