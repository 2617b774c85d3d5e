#!/usr/bin/env bash
# Builds demos/resnet_ddp (with dtrun::ddp) against the libtorch of this machine's python3 (on the
# GPU machine: PyTorch 2.x's wheel), linking the libdtrt that scripts/gpu/pack.sh built on Debian
# (NCCL backend, against /usr/local/cuda) and carried in .gpu/kit. Only the two files that include
# torch are compiled here: the image has no CMake packages for CLI11, spdlog, Boost or Gloo, and
# libdtrt's public header needs none of them.
#   bash scripts/gpu/build_resnet_ddp.sh <gpu dir> <output binary>
# Also runs on Debian (torch 1.13, no CUDA: libtorch_cuda is linked only where it exists).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
gpu=${1:?usage: build_resnet_ddp.sh <gpu dir> <output binary>}
bin=${2:?usage: build_resnet_ddp.sh <gpu dir> <output binary>}
kit=$gpu/kit
py=${PYTHON:-$(command -v python3)}
for f in libdtrt.a libdtrun_rdzv.a libdtrun_common.a include/CLI/CLI.hpp; do
  [[ -e $kit/$f ]] || { echo "build_resnet_ddp: $kit/$f missing: run scripts/gpu/pack.sh on Debian first" >&2; exit 2; }
done
# include dirs (one per line), then the library dir, then the C++ ABI flag torch was built with
mapfile -t torch_info < <("$py" - <<'EOF'
import os, sysconfig
import torch
from torch.utils import cpp_extension
# Python's own headers too, in case a torch header wants them (torch's C++ API should not).
for d in cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]:
    if os.path.isdir(d):
        print("I" + d)
for d in cpp_extension.library_paths():
    print("L" + d)
print("A" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
EOF
)
flags=(-std=c++20 -O2 -DNDEBUG -pthread -I"$repo/ddp/include" -I"$repo/worker_runtime/include"
  -isystem "$kit/include")
torch_lib=
for line in "${torch_info[@]}"; do
  case $line in
    I*) flags+=(-isystem "${line#I}") ;;
    L*) torch_lib=${line#L} ;;
    A*) flags+=(-D_GLIBCXX_USE_CXX11_ABI="${line#A}") ;;
  esac
done
obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT
# The two translation units in parallel: each parses all of torch's headers.
g++ "${flags[@]}" -c "$repo/ddp/src/ddp.cpp" -o "$obj/ddp.o" &
ddp_pid=$!
g++ "${flags[@]}" -c "$repo/demos/resnet_ddp/resnet_ddp.cpp" -o "$obj/resnet_ddp.o"
wait "$ddp_pid"
# One shared library by name, wherever this machine keeps it (wheels: site-packages/nvidia/...).
find_lib() {
  local name=$1 d
  for d in "$gpu/lib" "$torch_lib" ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /usr/lib/x86_64-linux-gnu /usr/lib; do
    compgen -G "$d/$name" >/dev/null && { compgen -G "$d/$name" | head -n1; return; }
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
[[ ! -e $torch_lib/libtorch_cuda.so ]] || torch_cuda=(-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed)
g++ -rdynamic -pthread "$obj/resnet_ddp.o" "$obj/ddp.o" -o "$bin" \
  "$kit/libdtrt.a" "$kit/libdtrun_rdzv.a" "$kit/libdtrun_common.a" "${libs[@]}" \
  -L"$torch_lib" "${torch_cuda[@]}" -ltorch -ltorch_cpu -lc10 \
  -Wl,-rpath,"$torch_lib" -Wl,-rpath-link,"$gpu/lib"
echo "build_resnet_ddp: $bin"
