#!/usr/bin/env bash
# Builds demos/resnet_ddp (with dtrun::ddp) against the libtorch of this machine's python3 (on the
# GPU machine: PyTorch 2.x's wheel), linking the libdtrt that scripts/gpu/pack.sh built on Debian
# (NCCL backend, against /usr/local/cuda) and carried in .gpu/kit. Only the two files that include
# torch are compiled here: the image has no CMake packages for CLI11, spdlog, Boost or Gloo, and
# libdtrt's public header needs none of them.
#   bash scripts/gpu/build_resnet_ddp.sh <gpu dir> <output binary>
# Where torch has CUDA (libtorch_cuda, ATen/cuda/CUDAGraph.h) and the CUDA runtime's headers are
# found (torch's nvidia wheels, CUDA_HOME, /usr/local/cuda), the build defines DTRUN_TORCH_CUDA:
# the compute stream, CUDA events (per-step GPU times, DDP's bucket-ready events) and
# --cuda-graph. If that build fails, its first errors are printed and the demo is built again
# without it, so a mistake there costs --cuda-graph, not the run. The last line says which build
# it produced. Also runs on Debian (torch 1.13, no CUDA: the plain build only).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
gpu=${1:?usage: build_resnet_ddp.sh <gpu dir> <output binary>}
bin=${2:?usage: build_resnet_ddp.sh <gpu dir> <output binary>}
kit=$gpu/kit
py=${PYTHON:-$(command -v python3)}
for f in libdtrt.a libdtrun_rdzv.a libdtrun_common.a include/CLI/CLI.hpp; do
  [[ -e $kit/$f ]] || { echo "build_resnet_ddp: $kit/$f missing: run scripts/gpu/pack.sh on Debian first" >&2; exit 2; }
done
# I: torch's include dirs; L: its library dir; A: the C++ ABI flag torch was built with;
# V: torch.version.cuda as a number (0: no CUDA); C: candidate dirs for the CUDA runtime's headers.
mapfile -t torch_info < <("$py" - <<'EOF'
import glob, os, site, sysconfig
import torch
from torch.utils import cpp_extension
# Python's own headers too, in case a torch header wants them (torch's C++ API should not).
for d in cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]:
    if os.path.isdir(d):
        print("I" + d)
for d in cpp_extension.library_paths():
    print("L" + d)
print("A" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
cuda = torch.version.cuda or ""
major, _, minor = cuda.partition(".")
print("V" + (str(int(major) * 1000 + int(minor.split(".")[0] or 0) * 10) if cuda else "0"))
# The headers that came with torch's own CUDA wheels first (they match its CUDA), then a toolkit.
dirs = []
for root in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(root, "nvidia", "*", "include")))
try:
    dirs += [d for d in cpp_extension.include_paths(device_type="cuda") if "torch" not in d]
except Exception:  # no CUDA_HOME, or an older signature: the fallbacks below
    pass
dirs += [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include"), "/usr/local/cuda/include"]
seen = set()
for d in dirs:
    if os.path.isdir(d) and d not in seen:
        seen.add(d)
        print("C" + d)
EOF
)
flags=(-std=c++20 -O2 -DNDEBUG -pthread -I"$repo/ddp/include" -I"$repo/worker_runtime/include"
  -isystem "$kit/include")
torch_lib=
torch_includes=()
cuda_includes=()
torch_cuda_version=0
for line in "${torch_info[@]}"; do
  case $line in
    I*)
      flags+=(-isystem "${line#I}")
      torch_includes+=("${line#I}")
      ;;
    L*) torch_lib=${line#L} ;;
    A*) flags+=(-D_GLIBCXX_USE_CXX11_ABI="${line#A}") ;;
    V*) torch_cuda_version=${line#V} ;;
    C*) cuda_includes+=(-isystem "${line#C}") ;;
  esac
done

# Why this torch cannot have the CUDA build ("" when it can).
cuda_build_blocker() {
  local d graph=0 runtime=0
  [[ $torch_cuda_version != 0 ]] || { echo "torch has no CUDA (torch.version.cuda is None)"; return; }
  [[ -e $torch_lib/libtorch_cuda.so ]] || { echo "no libtorch_cuda.so in $torch_lib"; return; }
  for d in "${torch_includes[@]}"; do
    [[ ! -e $d/ATen/cuda/CUDAGraph.h ]] || graph=1
  done
  ((graph)) || { echo "no ATen/cuda/CUDAGraph.h in torch's include dirs"; return; }
  for d in "${cuda_includes[@]}"; do
    [[ ! -e $d/cuda_runtime_api.h ]] || runtime=1
  done
  ((runtime)) || echo "no cuda_runtime_api.h (torch's nvidia wheels, CUDA_HOME, /usr/local/cuda)"
}

# One shared library by name, wherever this machine keeps it (wheels: site-packages/nvidia/...).
find_lib() {
  local name=$1 d f
  for d in "$gpu/lib" "$torch_lib" ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /usr/lib/x86_64-linux-gnu /usr/lib; do
    # No `compgen | head`: under pipefail, head's early exit can kill the script with SIGPIPE.
    for f in "$d"/$name; do
      [[ -e $f ]] && { echo "$f"; return; }
    done
  done
}
libs=()
for name in 'libnccl.so*' 'libcudart.so*'; do
  lib=$(find_lib "$name")
  [[ -z $lib ]] || libs+=("$lib")
done
for name in 'libssl.so*' 'libcrypto.so*' 'libspdlog.so*' 'libfmt.so*' 'libgloo.so*'; do
  lib=$(find_lib "$name")
  [[ -n $lib ]] || { echo "build_resnet_ddp: no $name on this machine or in $gpu/lib" >&2; exit 2; }
  libs+=("$lib")
done
# libtorch_cuda registers CUDA with the dispatcher: linked whether or not a symbol is used.
torch_cuda=()
# shellcheck disable=SC2054  # the commas belong to the linker flags
[[ ! -e $torch_lib/libtorch_cuda.so ]] || torch_cuda=(-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed)

obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT
# build <extra compiler flags...>: compiles and links $bin; on failure returns 1 with the
# compiler's and linker's output in $obj/*.log.
build() {
  local ddp_pid rc=0
  rm -f "$obj"/*.log
  # The two translation units in parallel: each parses all of torch's headers.
  g++ "${flags[@]}" "$@" -c "$repo/ddp/src/ddp.cpp" -o "$obj/ddp.o" 2>"$obj/ddp.log" &
  ddp_pid=$!
  g++ "${flags[@]}" "$@" -c "$repo/demos/resnet_ddp/resnet_ddp.cpp" -o "$obj/resnet_ddp.o" \
    2>"$obj/resnet_ddp.log" || rc=1
  wait "$ddp_pid" || rc=1
  ((rc == 0)) || return 1
  g++ -rdynamic -pthread "$obj/resnet_ddp.o" "$obj/ddp.o" -o "$bin" \
    "$kit/libdtrt.a" "$kit/libdtrun_rdzv.a" "$kit/libdtrun_common.a" "${libs[@]}" \
    -L"$torch_lib" "${torch_cuda[@]}" -ltorch -ltorch_cpu -lc10 \
    -Wl,-rpath,"$torch_lib" -Wl,-rpath-link,"$gpu/lib" 2>"$obj/link.log"
}
# The first errors of a failed build, for the log that gpu-check.sh keeps.
first_errors() {
  cat "$obj"/*.log 2>/dev/null | grep -E -m 12 'error|undefined reference' | cut -c1-300 | sed 's/^/  /'
}

blocker=$(cuda_build_blocker)
if [[ -z $blocker ]]; then
  if build -DDTRUN_TORCH_CUDA -DDTRUN_TORCH_CUDA_VERSION="$torch_cuda_version" "${cuda_includes[@]}"; then
    echo "build_resnet_ddp: $bin (CUDA build: DTRUN_TORCH_CUDA, torch CUDA $torch_cuda_version: compute stream, CUDA events, --cuda-graph)"
    exit 0
  fi
  echo "build_resnet_ddp: the CUDA build (DTRUN_TORCH_CUDA) failed; its first errors:" >&2
  first_errors >&2
  blocker="its CUDA build failed (errors above)"
fi
if ! build; then
  echo "build_resnet_ddp: the build failed:" >&2
  first_errors >&2
  tail -n 40 "$obj"/*.log >&2
  exit 1
fi
echo "build_resnet_ddp: $bin (plain build, no DTRUN_TORCH_CUDA: $blocker; --cuda-graph refused)"
