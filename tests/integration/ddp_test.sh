#!/usr/bin/env bash
# dtrun::ddp end to end (demos/toy_ddp, demos/resnet_ddp) under the real dtrun binary:
#   bash tests/integration/ddp_test.sh /abs/path/to/build/launcher/dtrun
# The demos are found next to dtrun's build tree (build/demos/{toy_ddp,resnet_ddp}); they are
# built only where libtorch is found and not in sanitizer trees, so without them this prints
# SKIP and exits 0.
# Checks:
#   equivalence  toy_ddp with N ranks (each initialised from a different seed, so only DDP's
#                broadcast makes them agree) for 5 SGD+momentum steps ends with parameters
#                identical on every rank and within 1e-5 of one process trained on the union
#                of the N ranks' batches (--emulate-ranks N); variants: 2 ranks tcp with 4
#                buckets overlapping backward, 2 ranks gloo without overlap, 3 ranks tcp. A
#                control run on rank 0's batches alone must differ by more than 1e-4.
#   training     resnet_ddp (width 8) on a synthetic set from scripts/make-cifar10-sample,
#                2 ranks, 2 epochs of 30 steps: the loss of the last window is below 80 % of the
#                first window's, each epoch prints a test accuracy and saves a checkpoint.
#   resume       1 epoch, then --resume --num_epochs 2: prints "resumed", trains epoch 2 only,
#                and its loss lines equal those of the uninterrupted 2-epoch run.
# Every dtrun run is bounded by timeout(1) in the foreground (no process is left behind);
# loopback only; one mktemp directory, removed on exit. Failures are collected, then exit 1.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" ddp_test "$@"
RUN_LIMIT=${DDP_TEST_RUN_LIMIT:-90}
export DTRUN_TIMEOUT=30

TOY=$BUILD/demos/toy_ddp/toy_ddp
RESNET=$BUILD/demos/resnet_ddp/resnet_ddp
if [[ ! -x $TOY || ! -x $RESNET ]]; then
  echo "ddp_test: SKIP: $TOY or $RESNET not built (needs libtorch-dev; never in sanitizer builds)"
  exit 0
fi

ulimit -c 0
unset OMP_NUM_THREADS DTRT_LOG_FILE

rc=0
# run <name> <nproc> <binary> <args...>: logs under $work/logs/<name>/attempt_0/<rank>/.
run() {
  local name=$1 n=$2 bin=$3
  shift 3
  rc=0
  timeout -k 5 "$RUN_LIMIT" "$DTRUN" --nproc_per_node="$n" --rdzv_id="$name" \
    --log_dir="$work/logs" --no_python "$bin" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    note_fail "$name: dtrun exited $rc$([[ $rc -ne 124 ]] || echo " (timed out after $RUN_LIMIT s)")"
    tail -n 5 "$work/logs/$name"/attempt_0/*/stderr.log 2>/dev/null | sed 's/^/    ! /' >&2 || true
    return 1
  fi
}
out() { echo "$work/logs/$1/attempt_0/${2:-0}/stdout.log"; }

# maxdiff <file a> <file b>: the largest absolute difference of two one-number-per-line files.
maxdiff() {
  paste "$1" "$2" | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
    END { if (bad || NR == 0) print "nan"; else printf "%.3g\n", m }'
}
# below <x> <limit>: x < limit (x may be "nan").
below() { awk -v x="$1" -v l="$2" 'BEGIN { exit !(x != "nan" && x + 0 < l + 0) }'; }

# ---------------------------------------------------------------------------------------------
# equivalence
toy=(--steps 5 --batch 8 --lr 0.05 --momentum 0.9 --seed 7)
for spec in "2 tcp overlap 100" "2 gloo no-overlap 26214400" "3 tcp overlap 200"; do
  read -r n backend mode bucket <<<"$spec"
  name=toy_${n}_${backend}_$mode
  flags=(--backend "$backend" --bucket-bytes "$bucket")
  [[ $mode == overlap ]] || flags+=(--no-overlap)
  run "$name" "$n" "$TOY" "${toy[@]}" "${flags[@]}" --dump "$work/$name" || continue
  run "${name}_ref" 1 "$TOY" "${toy[@]}" --emulate-ranks "$n" --dump "$work/${name}_ref" || continue
  ok=0
  for r in $(seq 1 $((n - 1))); do
    cmp -s "$work/$name.0" "$work/$name.$r" ||
      { note_fail "$name: rank $r's parameters differ from rank 0's"; ok=1; }
  done
  d=$(maxdiff "$work/$name.0" "$work/${name}_ref.0")
  below "$d" 1e-5 || { note_fail "$name: max |DDP - single process on the union| = $d (limit 1e-5)"; ok=1; }
  buckets=$(grep -m1 -o '[0-9]* buckets\?)' "$(out "$name")" || true)
  [[ $ok -ne 0 ]] || echo "ddp_test: $name ok: $(wc -l <"$work/$name.0") parameters identical on $n ranks, max |DDP - union| = $d, ${buckets%)}"
done
# control: the same comparison against rank 0's batches alone must fail clearly.
if run toy_control 1 "$TOY" "${toy[@]}" --dump "$work/toy_control" && [[ -f $work/toy_2_tcp_overlap.0 ]]; then
  d=$(maxdiff "$work/toy_2_tcp_overlap.0" "$work/toy_control.0")
  if below "$d" 1e-4; then
    note_fail "control: 2-rank DDP is within $d of training on rank 0's batches alone"
  else
    echo "ddp_test: control ok: rank 0's batches alone differ by $d"
  fi
fi

# ---------------------------------------------------------------------------------------------
# training and resume
data=$work/cifar
"$ROOT/scripts/make-cifar10-sample" "$data" --train 1000 --test 200 >/dev/null ||
  die "scripts/make-cifar10-sample failed"
resnet=(--data-dir "$data" --batch_size 16 --width 8 --max-steps 30 --log-every 10
  --learning_rate 0.05 --random_seed 3)
# loss_lines <name> <epoch>: the "epoch E/... step S/N loss L" prefixes of that epoch's lines.
loss_lines() { grep -o "^epoch $2/[0-9]* step [0-9]*/[0-9]* loss [0-9.]*" "$(out "$1")" | sed 's|^epoch [0-9]*/[0-9]* ||' || true; }

if run train 2 "$RESNET" "${resnet[@]}" --num_epochs 2 --model_dir "$work/m_train"; then
  log=$(out train)
  first=$(grep -m1 -o 'loss [0-9.]*' "$log" | cut -d' ' -f2 || true)
  last=$(grep -o 'loss [0-9.]*' "$log" | tail -n1 | cut -d' ' -f2 || true)
  ok=0
  if [[ -z $first || -z $last ]] || ! awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.8 * f) }'; then
    note_fail "train: loss did not go down: first window '${first}', last window '${last}'"
    ok=1
  fi
  for e in 1 2; do
    grep -q "^epoch $e/2: test accuracy [0-9.]* (200 images), checkpoint " "$log" ||
      { note_fail "train: no accuracy/checkpoint line for epoch $e"; ok=1; }
  done
  [[ -s $work/m_train/resnet_distributed.pth ]] || { note_fail "train: no checkpoint file"; ok=1; }
  [[ $ok -ne 0 ]] || echo "ddp_test: train ok: loss $first -> $last, $(grep -m1 -o 'test accuracy [0-9.]*' "$log") -> $(grep -o 'test accuracy [0-9.]*' "$log" | tail -n1 | cut -d' ' -f3), $(grep -o '^throughput: [0-9.]* images/s' "$log")"

  if run first_epoch 2 "$RESNET" "${resnet[@]}" --num_epochs 1 --model_dir "$work/m_resume" &&
     run resumed 2 "$RESNET" "${resnet[@]}" --num_epochs 2 --model_dir "$work/m_resume" --resume; then
    log=$(out resumed)
    ok=0
    grep -q "^resumed from $work/m_resume/resnet_distributed.pth: continuing at epoch 2" "$log" ||
      { note_fail "resume: no 'resumed from ...' line"; ok=1; }
    ! grep -q '^epoch 1/' "$log" || { note_fail "resume: epoch 1 ran again"; ok=1; }
    expected=$(loss_lines train 2)
    got=$(loss_lines resumed 2)
    if [[ -z $got || $got != "$expected" ]]; then
      note_fail "resume: epoch 2 after --resume differs from the uninterrupted run"
      diff <(echo "$expected") <(echo "$got") | sed 's/^/    /' >&2 || true
      ok=1
    fi
    [[ $ok -ne 0 ]] || echo "ddp_test: resume ok: epoch 2 after --resume has the uninterrupted run's losses ($(echo "$got" | awk '{print $NF}' | paste -sd' '))"
  fi
fi

end_test
