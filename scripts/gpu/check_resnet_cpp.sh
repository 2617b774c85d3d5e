# scripts/gpu-check.sh's `resnet-cpp` group (sourced; uses its row, run, util_start/util_stop,
# $dtrun, $py, $checks, $gpu, $ckpt and $out): demos/resnet_ddp built on this machine against its
# torch (scripts/gpu/build_resnet_ddp.sh), dtrun::ddp over libdtrt's NCCL on the GPU: the loss
# falls, checkpoint and resume; then images/s against torch's DDP, the same model and batch, one
# rank each, in pairs: fp32; bf16 autocast (both NCHW); and dtrun::ddp's fastest (bf16,
# channels-last, the step as one CUDA graph) against torch's fastest eager (bf16, channels-last).
# GPU_CHECK_DEVICE=cpu rehearses it at a toy size where there is no GPU (no torch runs, no graph).
# shellcheck shell=bash disable=SC2154  # the variables are gpu-check.sh's
if want resnet-cpp; then
dev=${GPU_CHECK_DEVICE:-cuda}
size=(--batch_size 256)
sample=(--train 4096 --test 512)
if [[ $dev != cuda ]]; then
  size=(--batch_size 32 --width 8)
  sample=(--train 512 --test 128)
fi
cifar=$(mktemp -d)
"$py" scripts/make-cifar10-sample "$cifar" "${sample[@]}" >"$out/cifar.log" 2>&1
run resnet-cpp-build 300 bash scripts/gpu/build_resnet_ddp.sh "$gpu" "$ckpt/resnet_ddp"
if [[ $rc -ne 0 ]]; then
  row "resnet-18 c++ build" FAIL "exit $rc: $(grep -m2 -E 'error|build_resnet_ddp' "$out/resnet-cpp-build.log" | cut -c1-200 | paste -sd' ')"
else
  # One progress line per epoch (--log-every beyond an epoch's steps).
  common=(--nproc_per_node=1 --no_python "$ckpt/resnet_ddp" --device "$dev" --data-dir "$cifar"
    --model-dir "$ckpt" --log-every 100000 "${size[@]}")
  losses() { grep -oE '^epoch [0-9]+/[0-9]+ step [0-9]+/[0-9]+ loss [0-9.]+' "$out/$1.log" | awk '{print $NF}' | paste -sd,; }
  run resnet-cpp-train 300 "$dtrun" "${common[@]}" --num_epochs 3
  train_rc=$rc
  trained=$(losses resnet-cpp-train)
  run resnet-cpp-resume 300 "$dtrun" "${common[@]}" --num_epochs 4 --resume
  resume_rc=$rc
  resumed=$(losses resnet-cpp-resume)
  falls=$(awk -v t="$trained" -v r="$resumed" 'BEGIN {n = split(t, a, ","); print (n == 3 && a[3] < a[1] && r != "" && r + 0 <= a[1]) ? 1 : 0}')
  at4=$(grep -c 'continuing at epoch 4' "$out/resnet-cpp-resume.log")
  [[ $train_rc -eq 0 && $resume_rc -eq 0 && $falls == 1 && $at4 == 1 ]] && s=PASS || s=FAIL
  row "resnet-18 c++ train" "$s" "dtrun::ddp on $dev: epoch losses $trained; resumed at epoch 4: $resumed (exits $train_rc, $resume_rc)"
  # Throughput: 16 epochs of the sample (256 steps of 256), augmentation off, the data set on the
  # GPU as torch's is; torch's DDP: 256 steps of one batch after 10 warm-up steps.
  cpp_speed() {  # <log name> <flags...>: $speed, $util
    util_start "$1"
    run "$1" 300 "$dtrun" "${common[@]}" --num_epochs 16 --no-eval --no-save --no-augment --warmup-steps 10 "${@:2}"
    util_stop
    speed=$(grep -m1 -oE '^throughput: [0-9.]+' "$out/$1.log" | awk '{print $2}')
  }
  torch_speed() {  # <log name> <fp32|bf16-nchw|bf16>: $speed, $util
    speed= util=
    [[ $dev == cuda ]] || return 0
    util_start "$1"
    run "$1" 300 "$dtrun" --nproc_per_node=1 "$checks" resnet_speed "$2" 256
    util_stop
    speed=$(results resnet_speed "$1" | grep -oE 'images_per_s=[0-9]+' | cut -d= -f2)
  }
  # pair <label> <torch precision> <c++ flags...>: one row, PASS when dtrun::ddp is at least as fast.
  pair() {
    local label=$1 precision=$2
    shift 2
    cpp_speed "resnet-cpp-$label" "$@"
    local c=$speed c_util=$util c_line
    c_line=$(grep -m1 -E '^throughput: |^cuda graph: ' "$out/resnet-cpp-$label.log" | cut -c1-240)
    torch_speed "resnet-torch-$label" "$precision"
    local t=$speed r s
    r=$(awk -v a="${c:-0}" -v b="${t:-0}" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "?"}')
    # 3.3 GFLOP per image trained (forward and backward); the H200's bf16 matrix rate measured
    # here is about 790 TFLOP/s (../.library device notes), its dense TF32 about 495.
    local tflops
    tflops=$(awk -v a="${c:-0}" 'BEGIN {printf "%.0f", a * 3.3e9 / 1e12}')
    s=FAIL
    if [[ -n $c ]] && { [[ $dev != cuda ]] || awk -v a="$c" -v b="${t:-0}" 'BEGIN {exit !(b > 0 && a >= b)}'; }; then s=PASS; fi
    row "resnet-18 c++ $label" "$s" "batch ${size[1]}, 1 rank: dtrun::ddp ($*) ${c:-?} images/s (~$tflops TFLOP/s, GPU p90 ${c_util}%), torch DDP ($precision) ${t:-not run} images/s (GPU p90 ${util:-?}%): ${r}x; ${c_line}"
  }
  pair fp32 fp32 --precision fp32
  pair bf16 bf16-nchw --precision bf16
  graph=(--cuda-graph)
  [[ $dev == cuda ]] || graph=()
  pair fastest bf16 --precision bf16 --channels-last "${graph[@]}"
fi
fi
