#!/usr/bin/env bash
# The Python hook's cost per torch.distributed call, against the same call unhooked in the same
# run: bash bench/progress/run_torch_hook.sh [path/to/dtrun]   (BLOCK, REPEATS tune it)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dtrun=${1:-$root/build/launcher/dtrun}
[[ -x $dtrun ]] || { echo "run_torch_hook.sh: no dtrun at $dtrun (bash scripts/build.sh release)" >&2; exit 2; }
# PLOT=bench/progress/progress.png: the per-block times, plain and hooked ("" = no plot).
plot=${PLOT-$root/bench/progress/progress.png}
data=$(mktemp "${TMPDIR:-/tmp}/hook_bench.XXXXXX")
trap 'rm -f "$data"' EXIT
HOOK_BENCH_DATA=$data GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=/usr/bin/python3 "$dtrun" \
  --nproc_per_node=2 --python_hook=off --tee=3 --local_ranks_filter=0 \
  "$root/bench/progress/torch_hook_bench.py" 2>/dev/null | sed -n 's/^\[[a-z]*0\]://p'
if [[ -n $plot && -s $data ]]; then
  if command -v gnuplot >/dev/null; then
    gnuplot -e "data='$data'; out='$plot'" "$root/bench/progress/plot.gp" && echo "plot: $plot"
  else
    echo "run_torch_hook.sh: gnuplot not installed (apt-get install gnuplot-nox): no plot" >&2
  fi
fi
