#!/usr/bin/env bash
# Collectives benchmark: libdtrt's tcp backend over shared memory ("shm", its default between
# ranks of one host) and over sockets only ("tcp", DTRUN_TRANSPORT=tcp), optionally libdtrt's gloo
# backend, against torch 1.13's gloo (torch_collectives.py under Debian's /usr/bin/python3), in
# one run, each under dtrun. Every implementation runs REPEATS times, interleaved (a burst of load
# hits all of them alike); the table takes the median over repeats of each run's median. Prints
# all_reduce busbw per size and rank count with the ratio to torch-gloo, barrier, send/recv
# latency and bandwidth; then (SWEEP=1) the all_reduce and all_gather algorithm sweeps that set
# the tcp backend's thresholds; writes a PNG of all_reduce busbw vs size. Asserts nothing.
#   bench/collectives/run.sh [DTRUN] [COLLECTIVES_BENCH]      (builds nothing: ninja -C build
#                                                              dtrun collectives_bench memcpy_bw)
# Knobs (environment): NPROCS="2 4", IMPLS="shm tcp torch-gloo" (also: gloo, and shm-1copy: shm
# with DTRUN_SHM_ONE_COPY_BYTES=1048576, p2p from 1 MiB copied once), REPEATS=3,
# SWEEP=1 (SWEEP_MAX_BYTES=16777216, SWEEP_TRANSPORTS="shm tcp", SWEEP_OP=all_reduce|all_gather: one only), MIN_BYTES=4096, MAX_BYTES=67108864, FACTOR=4,
# OUT=<dir for logs, results.txt, sweep.txt, load.txt, *.dat, allreduce_busbw.png>,
# PLOT=<where the plot is copied; default bench/collectives/allreduce_busbw.png; empty: nowhere>.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DTRUN=${1:-$root/build/launcher/dtrun}
BENCH=${2:-$root/build/bench/collectives/collectives_bench}
PY=/usr/bin/python3  # Debian's interpreter with torch 1.13; the python3 on PATH has no torch
NPROCS=${NPROCS:-"2 4"}
IMPLS=${IMPLS:-"shm tcp torch-gloo"}
REPEATS=${REPEATS:-3}
SWEEP=${SWEEP:-1}
sizes=(--min-bytes "${MIN_BYTES:-4096}" --max-bytes "${MAX_BYTES:-67108864}" --factor "${FACTOR:-4}")
OUT=${OUT:-$(mktemp -d /tmp/dtrun-collectives.XXXXXX)}
mkdir -p "$OUT"
[[ -x $DTRUN ]] || { echo "run.sh: no dtrun at $DTRUN (ninja -C build dtrun)" >&2; exit 1; }
[[ -x $BENCH ]] || { echo "run.sh: no collectives_bench at $BENCH (ninja -C build collectives_bench)" >&2; exit 1; }

results=$OUT/results.txt
sweep=$OUT/sweep.txt
: >"$results"
: >"$sweep"
# one <id> <results file> <command...>: runs it under timeout, appends rank 0's result lines.
one() {
  local id=$1 into=$2
  shift 2
  local rc=0
  timeout -k 5 600 "$@" >"$OUT/$id.out" 2>"$OUT/$id.err" || rc=$?
  local log=$OUT/logs/$id/attempt_0/0/stdout.log
  if [[ $rc -ne 0 ]]; then
    echo "run.sh: $id failed (exit $rc); see $OUT/$id.err and $OUT/logs/$id" >&2
    tail -n 3 "$OUT/logs/$id/attempt_0/"*/stderr.log >&2 2>/dev/null || true
  fi
  grep '^result ' "$log" >>"$into" 2>/dev/null || true
}
echo "run.sh: load before: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min), $(nproc) cores" | tee "$OUT/load.txt" >&2
# One core's memory-copy bandwidth (64 MiB, DRAM), before and after: the physical limit of ranks on
# one host, against which report.py states every bandwidth.
MEMCPY=$(dirname "$BENCH")/memcpy_bw
[[ -x $MEMCPY ]] || { echo "run.sh: no memcpy_bw at $MEMCPY (ninja -C build memcpy_bw)" >&2; exit 1; }
memcpy=$OUT/memcpy.txt
"$MEMCPY" >"$memcpy"
for rep in $(seq 1 "$REPEATS"); do
  for n in $NPROCS; do
    for impl in $IMPLS; do
      id=${impl}_${n}_$rep
      echo "run.sh: repeat $rep/$REPEATS: $impl with $n ranks ..." >&2
      launch=("$DTRUN" --nproc_per_node="$n" --rdzv_id="$id" --log_dir="$OUT/logs")
      case $impl in
        torch-gloo)
          one "$id" "$results" env "PYTHON_EXEC=$PY" GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \
            "${launch[@]}" "$root/bench/collectives/torch_collectives.py" "${sizes[@]}" ;;
        shm | tcp)
          one "$id" "$results" env OMP_NUM_THREADS=1 DTRUN_TRANSPORT="${impl/shm/auto}" \
            "${launch[@]}" --no_python "$BENCH" --backend tcp --label "$impl" "${sizes[@]}" ;;
        shm-1copy)  # shared memory, p2p from 1 MiB copied once between the ranks' buffers
          one "$id" "$results" env OMP_NUM_THREADS=1 DTRUN_TRANSPORT=auto DTRUN_SHM_ONE_COPY_BYTES=1048576 \
            "${launch[@]}" --no_python "$BENCH" --backend tcp --label "$impl" "${sizes[@]}" ;;
        gloo)
          one "$id" "$results" env OMP_NUM_THREADS=1 \
            "${launch[@]}" --no_python "$BENCH" --backend gloo "${sizes[@]}" ;;
        *) echo "run.sh: unknown implementation '$impl' in IMPLS" >&2; exit 2 ;;
      esac
    done
    if [[ $SWEEP == 1 ]]; then
      for transport in ${SWEEP_TRANSPORTS:-shm tcp}; do
        id=sweep_${transport}_${n}_$rep
        echo "run.sh: repeat $rep/$REPEATS: ${SWEEP_OP:-all_reduce and all_gather} algorithms over $transport, $n ranks ..." >&2
        one "$id" "$sweep" env OMP_NUM_THREADS=1 DTRUN_TRANSPORT="${transport/shm/auto}" \
          "$DTRUN" --nproc_per_node="$n" --rdzv_id="$id" --log_dir="$OUT/logs" --no_python \
          "$BENCH" --backend tcp --label "$transport" --algo-sweep "${sizes[@]}" --factor 2 \
          --max-bytes "${SWEEP_MAX_BYTES:-16777216}" ${SWEEP_OP:+--sweep-op "$SWEEP_OP"}
      done
    fi
  done
done
echo "run.sh: load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.txt" >&2
"$MEMCPY" >>"$memcpy"

python3 "$root/bench/collectives/report.py" "$results" "$OUT" "$sweep" "$memcpy"
if command -v gnuplot >/dev/null; then
  gnuplot -e "dir='$OUT'" "$root/bench/collectives/plot.gp" && echo "plot: $OUT/allreduce_busbw.png"
  # As the other benchmarks do: the repository's plot is redrawn (PLOT=FILE elsewhere, PLOT= not).
  plot=${PLOT-$root/bench/collectives/allreduce_busbw.png}
  if [[ -n $plot && -f $OUT/allreduce_busbw.png ]]; then cp "$OUT/allreduce_busbw.png" "$plot" && echo "plot: $plot"; fi
else
  echo "run.sh: gnuplot not installed (apt-get install gnuplot-nox, or scripts/setup.sh): no plot" >&2
fi
echo "results: $results $sweep"
