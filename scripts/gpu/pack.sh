#!/usr/bin/env bash
# Here (Debian, no GPU): builds dtrun and libdtrt's check worker (NCCL backend, against
# /usr/local/cuda), strips them and copies them with the shared libraries they need that a GPU
# image lacks into .gpu/ (ignored by git: .git/info/exclude), for scripts/gpu-check.sh to run on
# the lent GPU machine:  device run --carry .gpu 'bash scripts/gpu-check.sh'
# CUDA's and NCCL's own libraries are not carried: the GPU machine's (PyTorch's wheels) are used.
# .gpu/kit holds libdtrt and its static dependencies and CLI11's headers, for
# scripts/gpu/build_resnet_ddp.sh to build resnet_ddp there against that machine's libtorch.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$repo/build}
ninja -C "$build" dtrun dtrt_check_worker dtrun_runtime dtrun_rdzv dtrun_common >/dev/null
out=${GPU_DIR:-$repo/.gpu}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
grep -qx '/.gpu/' "$repo/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$(git -C "$repo" rev-parse --git-common-dir)/info/exclude"
for b in "$build/launcher/dtrun" "$build/tests/worker_runtime/dtrt_check_worker"; do
  strip -o "$out/bin/$(basename "$b")" "$b"
  ldd "$b" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libpthread.so*|librt.so*|libdl.so*|libgcc_s.so*|libstdc++.so*) ;;
      libcuda.so*|libcudart.so*|libnccl.so*) ;;  # the GPU machine's own
      libssl.so*|libcrypto.so*) ;;                # OpenSSL 3: every image has it
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
mkdir -p "$out/kit/include"
cp "$build/worker_runtime/libdtrt.a" "$build/rendezvous/libdtrun_rdzv.a" \
  "$build/common/libdtrun_common.a" "$out/kit/"
strip --strip-debug "$out"/kit/*.a  # 130 MB of debug info would not fit in a call
cp -r /usr/include/CLI "$out/kit/include/"
# The Python hook (hang stacks, progress) beside the binary, where an installed dtrun finds it.
mkdir -p "$out/share/dtrun"
cp -r "$repo/python" "$out/share/dtrun/python"
du -sh "$out"
