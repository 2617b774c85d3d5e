#!/usr/bin/env bash
# Collectives benchmark: libdtrt's tcp and gloo backends (collectives_bench) against torch 1.13's
# gloo (torch_collectives.py under Debian's /usr/bin/python3) in one run, on loopback, each
# under dtrun. Prints one table and writes a PNG of all_reduce busbw vs size. Asserts nothing.
#   bench/collectives/run.sh [DTRUN] [COLLECTIVES_BENCH]      (builds nothing: ninja -C build
#                                                              dtrun collectives_bench first)
# Knobs (environment): NPROCS="2 4", IMPLS="tcp gloo torch-gloo", MIN_BYTES=4096,
# MAX_BYTES=67108864, FACTOR=4, OUT=<dir for logs, results.txt, *.dat, allreduce_busbw.png>.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DTRUN=${1:-$root/build/launcher/dtrun}
BENCH=${2:-$root/build/bench/collectives/collectives_bench}
PY=/usr/bin/python3  # Debian's interpreter with torch 1.13; the python3 on PATH has no torch
NPROCS=${NPROCS:-"2 4"}
IMPLS=${IMPLS:-"tcp gloo torch-gloo"}
sizes=(--min-bytes "${MIN_BYTES:-4096}" --max-bytes "${MAX_BYTES:-67108864}" --factor "${FACTOR:-4}")
OUT=${OUT:-$(mktemp -d /tmp/dtrun-collectives.XXXXXX)}
mkdir -p "$OUT"
[[ -x $DTRUN ]] || { echo "run.sh: no dtrun at $DTRUN (ninja -C build dtrun)" >&2; exit 1; }
[[ -x $BENCH ]] || { echo "run.sh: no collectives_bench at $BENCH (ninja -C build collectives_bench)" >&2; exit 1; }

results=$OUT/results.txt
: >"$results"
for n in $NPROCS; do
  for impl in $IMPLS; do
    id=${impl}_$n
    echo "run.sh: $impl with $n ranks ..." >&2
    if [[ $impl == torch-gloo ]]; then
      cmd=(env "PYTHON_EXEC=$PY" GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 "$DTRUN" --nproc_per_node="$n"
        --rdzv_id="$id" --log_dir="$OUT/logs" "$root/bench/collectives/torch_collectives.py" "${sizes[@]}")
    else
      cmd=(env OMP_NUM_THREADS=1 "$DTRUN" --nproc_per_node="$n" --rdzv_id="$id" --log_dir="$OUT/logs"
        --no_python "$BENCH" --backend "$impl" "${sizes[@]}")
    fi
    rc=0
    timeout -k 5 600 "${cmd[@]}" >"$OUT/$id.out" 2>"$OUT/$id.err" || rc=$?
    log=$OUT/logs/$id/attempt_0/0/stdout.log
    if [[ $rc -ne 0 ]]; then
      echo "run.sh: $impl n=$n failed (exit $rc); see $OUT/$id.err and $OUT/logs/$id" >&2
      tail -n 3 "$OUT/logs/$id/attempt_0/"*/stderr.log >&2 2>/dev/null || true
    fi
    grep '^result ' "$log" >>"$results" 2>/dev/null || true
  done
done

python3 "$root/bench/collectives/report.py" "$results" "$OUT"
if command -v gnuplot >/dev/null; then
  gnuplot -e "dir='$OUT'" "$root/bench/collectives/plot.gp" && echo "plot: $OUT/allreduce_busbw.png"
else
  echo "run.sh: gnuplot not installed (apt-get install gnuplot-nox, or scripts/setup.sh): no plot" >&2
fi
echo "results: $results"
