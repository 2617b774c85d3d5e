#!/usr/bin/env bash
# DDP training benchmark: ResNet-18 (CIFAR variant, width 64) training throughput on CPU with 1
# and 2 ranks, our C++ DDP (demos/resnet_ddp on dtrun::ddp over libdtrt's tcp backend) against
# PyTorch 1.13's DistributedDataParallel over gloo (torch_resnet_ddp.py, same model, data,
# augmentation, batch and optimizer), both launched by dtrun, in one run. Prints one table of
# images/s (all ranks together, after the warm-up steps): the median of REPEAT runs, with
# min-max, the runs of all configurations interleaved so that load from other work on the
# machine spreads over all of them; then dtrun::ddp / PyTorch DDP at each rank count and each
# one's scaling efficiency (images/s at N ranks / (N x at 1 rank)), and draws
# bench/ddp/ddp.png (PLOT=FILE elsewhere, PLOT= none; needs gnuplot). Asserts nothing.
# Both sides get the same intra-op thread count, set twice: OMP_NUM_THREADS=THREADS in the
# environment and --threads THREADS (at::set_num_threads / torch.set_num_threads); each prints
# the count it runs with, and the table's header states it.
#   bench/ddp/run.sh [DTRUN] [RESNET_DDP]        (builds nothing: ninja -C build dtrun resnet_ddp)
# Knobs (environment): NPROCS="1 2" (or "1 2 4"), IMPLS="cpp cpp-no-overlap torch", REPEAT=3, BATCH=32 (per rank), STEPS=8,
# WARMUP=2, WIDTH=64, THREADS=1 (torch threads per rank), DATA=<CIFAR-10 binary dir; default: a
# synthetic set from scripts/make-cifar10-sample>, OUT=<dir for logs and results.txt>,
# BUCKET_KB=<dtrun::ddp bucket size; default: resnet_ddp's>, PLOT=bench/ddp/ddp.png.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DTRUN=${1:-$root/build/launcher/dtrun}
RESNET=${2:-$root/build/demos/resnet_ddp/resnet_ddp}
PY=/usr/bin/python3  # Debian's interpreter with torch 1.13; the python3 on PATH has no torch
NPROCS=${NPROCS:-"1 2"}
IMPLS=${IMPLS:-"cpp cpp-no-overlap torch"}
REPEAT=${REPEAT:-3}
BATCH=${BATCH:-32}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
WIDTH=${WIDTH:-64}
THREADS=${THREADS:-1}
PLOT=${PLOT-$root/bench/ddp/ddp.png}
OUT=${OUT:-$(mktemp -d /tmp/dtrun-ddp-bench.XXXXXX)}
mkdir -p "$OUT"
[[ -x $DTRUN ]] || { echo "run.sh: no dtrun at $DTRUN (ninja -C build dtrun)" >&2; exit 1; }
[[ -x $RESNET ]] || { echo "run.sh: no resnet_ddp at $RESNET (needs libtorch-dev; ninja -C build resnet_ddp)" >&2; exit 1; }
if [[ -z ${DATA:-} ]]; then
  DATA=$OUT/cifar
  "$root/scripts/make-cifar10-sample" "$DATA" --train 1024 --test 10 >/dev/null
fi

results=$OUT/results.txt
: >"$results"
for rep in $(seq 1 "$REPEAT"); do
for n in $NPROCS; do
  for impl in $IMPLS; do
    id=${impl}_${n}_$rep
    echo "run.sh: [$rep/$REPEAT] $impl with $n rank(s), $STEPS steps of batch $BATCH per rank ..." >&2
    common=(--data-dir "$DATA" --width "$WIDTH" --max-steps "$STEPS" --warmup-steps "$WARMUP")
    if [[ $impl == torch ]]; then
      cmd=(env "PYTHON_EXEC=$PY" GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS="$THREADS" "$DTRUN"
        --nproc_per_node="$n" --rdzv_id="$id" --log_dir="$OUT/logs"
        "$root/bench/ddp/torch_resnet_ddp.py" "${common[@]}" --batch-size "$BATCH" --log-every 1000
        --threads "$THREADS")
    else
      cmd=(env OMP_NUM_THREADS="$THREADS" "$DTRUN" --nproc_per_node="$n" --rdzv_id="$id"
        --log_dir="$OUT/logs" --no_python "$RESNET" "${common[@]}" --batch_size "$BATCH"
        --num_epochs 1 --no-eval --no-save --log-every 1000 --threads "$THREADS")
      [[ $impl != cpp-no-overlap ]] || cmd+=(--no-overlap)
      [[ -z ${BUCKET_KB:-} ]] || cmd+=(--bucket-kb "$BUCKET_KB")
    fi
    rc=0
    start=$SECONDS
    timeout -k 5 600 "${cmd[@]}" >"$OUT/$id.out" 2>"$OUT/$id.err" || rc=$?
    log=$OUT/logs/$id/attempt_0/0/stdout.log
    if [[ $rc -ne 0 ]]; then
      echo "run.sh: $impl n=$n failed (exit $rc); see $OUT/$id.err and $OUT/logs/$id" >&2
      tail -n 3 "$OUT/logs/$id/attempt_0/"*/stderr.log >&2 2>/dev/null || true
      continue
    fi
    rate=$(grep -m1 -o '^throughput: [0-9.]*' "$log" | cut -d' ' -f2 || true)
    echo "$impl $n ${rate:-?} $((SECONDS - start))" >>"$results"
  done
done
done

label() {
  case $1 in
    cpp) echo "C++ dtrun::ddp, tcp, overlap" ;;
    cpp-no-overlap) echo "C++ dtrun::ddp, tcp, after backward" ;;
    torch) echo "PyTorch 1.13 DDP, gloo" ;;
    *) echo "$1" ;;
  esac
}
# median <impl> <n>: "median min max runs" of that configuration's images/s.
median() {
  awk -v i="$1" -v n="$2" '$1 == i && $2 == n && $3 != "?" { print $3 }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print "- - - 0"; exit }
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f %.1f %d\n", m, v[1], v[NR], NR }'
}
echo
echo "ResNet-18 (CIFAR variant, width $WIDTH) training on CPU under dtrun: batch $BATCH per rank, $THREADS thread(s) per rank,"
echo "$((STEPS - WARMUP)) timed steps after $WARMUP warm-up; images/s over all ranks, median of $REPEAT runs (min-max)"
echo
printf '| %-36s | %-5s | %-8s | %-13s | %-17s |\n' implementation ranks images/s min-max "vs 1 rank (same)"
printf '| %-36s | %-5s | %-8s | %-13s | %-17s |\n' ------------------------------------ ----- -------- ------------- -----------------
for n in $NPROCS; do
  for impl in $IMPLS; do
    read -r med lo hi _ < <(median "$impl" "$n")
    read -r one _ < <(median "$impl" 1)
    speed=$(awk -v r="$med" -v o="$one" 'BEGIN { if (o + 0 > 0 && r + 0 > 0) printf "%.2fx", r / o; else print "-" }')
    printf '| %-36s | %-5s | %-8s | %-13s | %-17s |\n' "$(label "$impl")" "$n" "$med" "$lo-$hi" "$speed"
  done
done
echo
# dtrun::ddp against PyTorch DDP measured in this run, and each one's scaling from 1 rank.
plotdat=$OUT/ddp_plot.dat  # ranks, then the median images/s of each implementation
: >"$plotdat"
for n in $NPROCS; do
  read -r c _ < <(median cpp "$n")
  read -r t _ < <(median torch "$n")
  read -r c1 _ < <(median cpp 1)
  read -r t1 _ < <(median torch 1)
  awk -v n="$n" -v c="$c" -v t="$t" -v c1="$c1" -v t1="$t1" 'BEGIN {
    r = (c + 0 > 0 && t + 0 > 0) ? sprintf("%.2fx", c / t) : "-"
    ec = (c + 0 > 0 && c1 + 0 > 0) ? sprintf("%.2f", c / (n * c1)) : "-"
    et = (t + 0 > 0 && t1 + 0 > 0) ? sprintf("%.2f", t / (n * t1)) : "-"
    printf "%d rank(s): dtrun::ddp %s images/s, PyTorch DDP %s: dtrun/torch %s; scaling efficiency from 1 rank: dtrun %s, torch %s\n", n, c, t, r, ec, et
  }'
  row=$n
  for impl in $IMPLS; do
    read -r med _ < <(median "$impl" "$n")
    row+=" $med"
  done
  echo "$row" >>"$plotdat"
done
echo "(scaling efficiency = images/s at N ranks / (N x images/s at 1 rank); targets (issue 32): dtrun/torch >= 1.05x at 2 ranks, >= 1.00x at 4)"
if [[ -n $PLOT ]]; then
  if command -v gnuplot >/dev/null; then
    titles=""
    for impl in $IMPLS; do titles+="$(label "$impl" | tr ' ' '_');"; done
    gnuplot -e "data='$plotdat'; out='$PLOT'; titles='$titles'; subtitle='batch $BATCH per rank, $THREADS thread(s) per rank, width $WIDTH'" \
      "$root/bench/ddp/plot.gp" && echo "plot: $PLOT"
  else
    echo "run.sh: gnuplot not installed (apt-get install gnuplot-nox, or scripts/setup.sh): no plot" >&2
  fi
fi
echo
echo "results: $results (logs: $OUT/logs)"
