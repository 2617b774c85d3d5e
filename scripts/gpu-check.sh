#!/usr/bin/env bash
# Issue 16's checks on a GPU machine (PyTorch 2.x, CUDA, NCCL), in one call; prints one table.
# Prepare here (Debian, no GPU):  bash scripts/gpu/pack.sh    (dtrun, dtrt_check_worker, libs -> .gpu/)
# Run there, from the repository root, with .gpu carried:  bash scripts/gpu-check.sh [check...]
# (no check named: all of them; env always runs).
# Nothing here runs in CI or in the README's test command: it needs a GPU.
#   env          the device, driver, torch, CUDA and NCCL versions
#   nproc        --nproc_per_node=gpu and auto count the GPU; CUDA_VISIBLE_DEVICES="" is respected
#   dtrt-nccl    libdtrt's NCCL backend, world size 1: every operation x dtype x op, sub-groups,
#                error paths (dtrt_check_worker ops nccl, errors nccl)
#   torch-gloo   unmodified torch gloo ranks (init_process_group env://) with 2, 4 and 8 ranks
#   torch-nccl   unmodified torch NCCL, 1 rank
#   store        torch's TCPStore client against dtrun's store: every operation its binding has
#   elastic      TORCHELASTIC_* variables; @record's error file quoted by dtrun's failure report
#   cuda-error   a device-side assert: the failure report names the CUDA error
#   lightning    a Lightning Trainer (strategy ddp) on the GPU and on 2 CPU ranks
#   accelerate   an accelerate loop on the GPU and on 2 CPU ranks
#   resnet       ResNet-18 with torch DDP over NCCL under dtrun vs the same without DDP, bf16:
#                loss falls, checkpoint and resume, images/s, GPU utilisation
#   resnet-cpp   demos/resnet_ddp built here against this torch (scripts/gpu/build_resnet_ddp.sh):
#                dtrun::ddp over libdtrt's NCCL on the GPU: loss falls, checkpoint and resume;
#                images/s and GPU utilisation against torch's DDP, fp32, same model and batch.
#                GPU_CHECK_DEVICE=cpu rehearses it at a toy size where there is no GPU.
# Round two (issue 33; `round2` names them all), each in scripts/gpu/check_<group>.sh:
#   launch       dtrun against torch's own torchrun, alternating: launcher start to
#                init_process_group and to the first training step, steady images/s (1 GPU rank,
#                and 8 CPU ranks); CUDA error on one rank to the whole job down; the environment
#                each gives a rank (a diff, $out/env-diff.txt)
#   public       public scripts, unmodified (tests/data/public_scripts): pytorch/examples'
#                multigpu_torchrun.py, nanoGPT's train.py, Lightning's bug_report_model.py,
#                accelerate's test_script.py, each under both launchers: the outcomes compared
#   gpus         `dtrun gpus RUN_DIR --json` against nvidia-smi in the same second
#   debug        torch's flight recorder dumped through --hang_timeout; torch.distributed.debug
#   resnet-cpp   (above) also bf16 autocast, channels-last and CUDA graphs against torch's DDP
# TORCHRUN (a command line) replaces `python3 -m torch.distributed.run` (a rehearsal without
# torch 2.x names dtrun itself).
set -uo pipefail
repo=${DTRUN_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$repo"
gpu=${GPU_DIR:-$repo/.gpu}
out=${GPU_CHECK_LOGS:-/tmp/gpu-check}  # every log; with $OUT set (the device tool), a tarball
mkdir -p "$out"
py=$(command -v python3)
# NCCL and the CUDA runtime: the machine's own (PyTorch's wheels, then the toolkit).
libs=$("$py" - <<'EOF'
import glob, os, site
dirs = set()
for root in site.getsitepackages():
    for pattern in ("nvidia/*/lib/libnccl.so*", "nvidia/*/lib/libcudart.so*", "nvidia/cu13/lib/*.so*"):
        dirs.update(os.path.dirname(p) for p in glob.glob(os.path.join(root, pattern)))
print(":".join(sorted(dirs)))
EOF
)
export LD_LIBRARY_PATH=$gpu/lib:$libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHON_EXEC=$py
dtrun=$gpu/bin/dtrun
checks=${GPU_CHECKS:-$repo/scripts/gpu/torch_checks.py}
export DTRUN_REPO=$repo
rows=()
only=("$@")
[[ " ${only[*]} " != *" round2 "* ]] || only+=(launch public gpus debug resnet-cpp)
want() { ((${#only[@]} == 0)) || [[ " ${only[*]} " == *" $1 "* ]]; }
row() {  # <check> <PASS|FAIL|INFO> <figures>; the table so far in $OUT, should the call be cut
  rows+=("| $1 | $2 | $3 |")
  echo "== $1: $2: $3"
  [[ -z ${OUT:-} ]] || printf '%s\n' "| check | result | figures |" "| --- | --- | --- |" "${rows[@]}" >"$OUT/table.md"
}
# run <name> <seconds> <command...>: output to $out/<name>.log, exit code in $rc
run() {
  local name=$1 limit=$2
  shift 2
  rc=0
  timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
}
results() { grep -h "^RESULT $1 " "$out/$2.log" | sed "s/^RESULT $1 //" | head -n "${3:-1}" | paste -sd';'; }
# GPU utilisation, sampled every 200 ms while a run lasts: util_start <name>, util_stop -> $util (p90)
util_start() {
  util_file=$out/util-$1.txt
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 >"$util_file" 2>/dev/null &
  smi=$!
}
util_stop() {
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  util=$(sort -n "$util_file" | awk '{v[NR] = $1} END {if (NR) print v[int(NR * 0.9)]; else print "?"}')
}

# --- env ----------------------------------------------------------------------------------------
device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n1)
versions=$("$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())' 2>&1 | tail -n1)
row env INFO "$device; $versions; dtrun $("$dtrun" --version 2>&1 | head -n1)"

# --- nproc --------------------------------------------------------------------------------------
if want nproc; then
run nproc-gpu 30 "$dtrun" --nproc_per_node=gpu --dry-run "$checks" nccl
run nproc-auto 30 "$dtrun" --nproc_per_node=auto --dry-run "$checks" nccl
gpu_n=$(grep -m1 -E '^ *nproc_per_node' "$out/nproc-gpu.log" | awk '{print $NF}')
auto_n=$(grep -m1 -E '^ *nproc_per_node' "$out/nproc-auto.log" | awk '{print $NF}')
run nproc-hidden 30 env CUDA_VISIBLE_DEVICES= "$dtrun" --nproc_per_node=gpu --dry-run "$checks" nccl
hidden=$(grep -m1 'dtrun' "$out/nproc-hidden.log" | cut -c1-120)
[[ $gpu_n == 1 && $auto_n == 1 && $rc -ne 0 ]] && s=PASS || s=FAIL
row nproc "$s" "gpu -> $gpu_n, auto -> $auto_n; CUDA_VISIBLE_DEVICES='' -> exit $rc: $hidden"
fi

# --- libdtrt NCCL, world size 1 ---------------------------------------------------------------
if want dtrt-nccl; then
run dtrt-nccl 240 "$dtrun" --nproc_per_node=1 --no_python "$gpu/bin/dtrt_check_worker" ops nccl
pass=$(grep -c '^PASS' "$out/dtrt-nccl.log")
failn=$(grep -c '^FAIL' "$out/dtrt-nccl.log")
skip=$(grep -c '^SKIP' "$out/dtrt-nccl.log")
[[ $rc -eq 0 && $failn -eq 0 && $pass -gt 0 ]] && s=PASS || s=FAIL
row dtrt-nccl "$s" "ops nccl: $pass passed, $failn failed, $skip skipped (exit $rc)$(grep -m2 '^FAIL' "$out/dtrt-nccl.log" | cut -c1-160 | sed 's/^/; /' | paste -sd' ')"
run dtrt-nccl-errors 60 "$dtrun" --nproc_per_node=1 --no_python "$gpu/bin/dtrt_check_worker" errors nccl
pass=$(grep -c '^PASS' "$out/dtrt-nccl-errors.log")
failn=$(grep -c '^FAIL' "$out/dtrt-nccl-errors.log")
[[ $rc -eq 0 && $failn -eq 0 ]] && s=PASS || s=FAIL
row dtrt-nccl-errors "$s" "errors nccl: $pass passed, $failn failed (exit $rc)"
fi

# --- torch: gloo 2/4/8, NCCL 1 -----------------------------------------------------------------
if want torch; then
for n in 2 4 8; do
  SECONDS=0
  run "gloo$n" 120 "$dtrun" --nproc_per_node="$n" tests/integration/torch_gloo_rank.py
  ok=$(grep -c 'all_reduce=.* ok' "$out/gloo$n.log")
  [[ $rc -eq 0 && $ok -eq $n ]] && s=PASS || s=FAIL
  row "torch-gloo $n" "$s" "$ok of $n ranks all_reduced through dtrun's store in ${SECONDS}s (exit $rc)"
done
run torch-nccl 120 "$dtrun" --nproc_per_node=1 "$checks" nccl
[[ $rc -eq 0 ]] && s=PASS || s=FAIL
row torch-nccl "$s" "$(results nccl torch-nccl) (exit $rc)"
fi

# --- store, elastic, CUDA error ----------------------------------------------------------------
if want store; then
run store 120 "$dtrun" --nproc_per_node=1 "$checks" store
[[ $rc -eq 0 ]] && s=PASS || s=FAIL
row store "$s" "$(results store store) (exit $rc)$(grep -m1 FAIL "$out/store.log" | cut -c1-160 | sed 's/^/; /')"
run elastic 120 "$dtrun" --nproc_per_node=1 "$checks" elastic
quoted=$(grep -c 'ValueError: planted by gpu-check' "$out/elastic.log")
missing=$(results elastic elastic)
[[ $rc -eq 1 && $quoted -ge 1 && $missing == *missing=none* ]] && s=PASS || s=FAIL
row elastic "$s" "$missing; exit $rc; the failure report quotes @record's ValueError: $quoted line(s)"
run cuda-error 120 "$dtrun" --nproc_per_node=1 "$checks" cuda_error
named=$(grep -m1 -o 'CUDA error[^"]*' "$out/cuda-error.log" | cut -c1-100)
[[ $rc -ne 0 && -n $named ]] && s=PASS || s=FAIL
row cuda-error "$s" "exit $rc; report: ${named:-no CUDA error named}"
fi

# --- Lightning, accelerate ---------------------------------------------------------------------
if want lightning; then
run lightning-gpu 240 "$dtrun" --nproc_per_node=1 "$checks" lightning gpu
[[ $rc -eq 0 ]] && s=PASS || s=FAIL
row "lightning gpu" "$s" "$(results lightning lightning-gpu) (exit $rc)"
run lightning-cpu 240 "$dtrun" --nproc_per_node=2 "$checks" lightning cpu
[[ $rc -eq 0 ]] && s=PASS || s=FAIL
row "lightning cpu x2" "$s" "$(results lightning lightning-cpu 2) (exit $rc)"
run accelerate-gpu 180 "$dtrun" --nproc_per_node=1 "$checks" accelerate gpu
[[ $rc -eq 0 ]] && s=PASS || s=FAIL
row "accelerate gpu" "$s" "$(results accelerate accelerate-gpu) (exit $rc)"
run accelerate-cpu 180 "$dtrun" --nproc_per_node=2 "$checks" accelerate cpu
[[ $rc -eq 0 ]] && s=PASS || s=FAIL
row "accelerate cpu x2" "$s" "$(results accelerate accelerate-cpu 2) (exit $rc)"
fi

# --- round two: launchers side by side, GPU readings, debug aids, public scripts -----------------
for group in launch gpus debug public; do
  # shellcheck source=/dev/null
  source "$repo/scripts/gpu/check_$group.sh"
done

# --- ResNet-18 ------------------------------------------------------------------------------------
ckpt=$(mktemp -d)  # checkpoints stay out of the logs
if want resnet; then
for kind in plain ddp; do
  util_start "$kind"
  run "resnet-$kind" 300 "$dtrun" --nproc_per_node=1 "$checks" resnet "$kind" 200 "$ckpt"
  util_stop
  r=$(results resnet "resnet-$kind")
  [[ $rc -eq 0 && $r == *falls=1* ]] && s=PASS || s=FAIL
  row "resnet-18 $kind" "$s" "$r; GPU utilisation p90 ${util}% (exit $rc)"
done
fi

# --- ResNet-18 in C++: dtrun::ddp over libdtrt's NCCL, against torch's DDP -----------------------
# shellcheck source=/dev/null
source "$repo/scripts/gpu/check_resnet_cpp.sh"
echo
echo "| check | result | figures |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
printf '%s\n' "| check | result | figures |" "| --- | --- | --- |" "${rows[@]}" >"$out/table.md"
if [[ -n ${OUT:-} ]]; then
  cp "$out/table.md" "$OUT/"
  tar czf "$OUT/gpu-check-logs.tgz" -C "$(dirname "$out")" "$(basename "$out")"
fi
