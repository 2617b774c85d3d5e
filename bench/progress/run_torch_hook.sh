#!/usr/bin/env bash
# The Python hook's cost per torch.distributed call, against the same call unhooked in the same
# run: bash bench/progress/run_torch_hook.sh [path/to/dtrun]   (BLOCK, REPEATS tune it)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dtrun=${1:-$root/build/launcher/dtrun}
[[ -x $dtrun ]] || { echo "run_torch_hook.sh: no dtrun at $dtrun (bash scripts/build.sh release)" >&2; exit 2; }
GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=/usr/bin/python3 "$dtrun" --nproc_per_node=2 --python_hook=off \
  --tee=3 --local_ranks_filter=0 "$root/bench/progress/torch_hook_bench.py" 2>/dev/null |
  sed -n 's/^\[[a-z]*0\]://p'
