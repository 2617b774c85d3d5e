#!/usr/bin/env bash
# The main demo, on a fresh Debian bookworm machine: installs, builds, then
#   dtrun --nproc_per_node=4 --tee=3 demos/python/allreduce.py
# an unmodified PyTorch (gloo) script whose ranks bootstrap through dtrun's own store, exactly as
# under torchrun. Usage: scripts/demo.sh [nproc, default 4]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nproc=${1:-4}
[[ $nproc =~ ^[1-9][0-9]*$ ]] || { echo "demo.sh: nproc must be a positive integer, got '$nproc'" >&2; exit 2; }

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" release dtrun >/dev/null

# Debian's torch 1.13 lives in the system interpreter; the first python3 on PATH may lack it.
export PYTHON_EXEC=/usr/bin/python3 GLOO_SOCKET_IFNAME=lo
set -x
"$root/build/launcher/dtrun" --nproc_per_node="$nproc" --tee=3 "$root/demos/python/allreduce.py"
