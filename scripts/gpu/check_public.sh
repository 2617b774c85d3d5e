# scripts/gpu-check.sh's `public` group (sourced; uses its row, $dtrun, $py, $out and the
# torchrun command line from check_launch.sh): public training scripts, unmodified
# (tests/data/public_scripts, their origins and licences in its README), each run under dtrun and
# under torchrun, in a directory of its own, all eight at once (the outcome is compared, not the
# speed). One row per script: exit codes, checkpoints and loss lines, side by side.
# shellcheck shell=bash disable=SC2154  # the variables are gpu-check.sh's
pub=$repo/tests/data/public_scripts
read -r -a torchrun <<<"${TORCHRUN:-$py -m torch.distributed.run}"
nanogpt_args=(--dataset=synthetic --compile=False --n_layer=2 --n_head=4 --n_embd=128
  --block_size=64 --batch_size=32 --gradient_accumulation_steps=1 --max_iters=300
  --eval_interval=100 --eval_iters=20 --log_interval=50 --learning_rate=1e-3 --warmup_iters=20
  --lr_decay_iters=300 --min_lr=1e-4)
accelerate_script=$("$py" -c 'import accelerate.test_utils.scripts.test_script as m; print(m.__file__)' 2>/dev/null)

# public_start <script> <dtrun|torchrun>: set up its directory and start it in the background.
public_start() {
  local script=$1 who=$2 dir=$pubwork/$1-$2
  mkdir -p "$dir"
  local cmd=("$dtrun" --nproc_per_node=1)
  [[ $who == dtrun ]] || cmd=("${torchrun[@]}" --standalone --nproc_per_node=1)
  case $script in
    ddp)
      cp "$pub"/ddp_tutorial_series/*.py "$dir/"
      cmd+=(multigpu_torchrun.py 20 5) ;;
    nanogpt)
      cp "$pub"/nanogpt/*.py "$dir/"
      "$py" "$repo/scripts/gpu/make_nanogpt_data.py" "$dir" >/dev/null
      cmd+=(train.py "${nanogpt_args[@]}") ;;
    lightning)
      cp "$pub"/lightning_bug_report/*.py "$dir/"
      cmd+=(bug_report_model.py) ;;
    accelerate)
      cmd+=("$accelerate_script") ;;
  esac
  (cd "$dir" && timeout 150 "${cmd[@]}" >"$out/public-$script-$who.log" 2>&1; echo $? >"$dir.rc") &
}

# What a run left that the other launcher's run must match: its exit code, the checkpoints it
# wrote (paths) and its progress lines, one string per kind.
public_outcome() {
  local script=$1 who=$2 dir=$pubwork/$1-$2 log=$out/public-$1-$2.log
  p_rc=$(cat "$dir.rc" 2>/dev/null || echo '?')
  p_ckpt=$(cd "$dir" && find . \( -name '*.pt' -o -name '*.ckpt' \) -size +0 | sort | paste -sd' ')
  case $script in
    ddp) p_lines=$(grep -cE '^\[GPU0\] Epoch [0-9]+ \| Batchsize: 32 \| Steps: 64|^Epoch [0-9]+ \| Training snapshot saved' "$log") ;;
    nanogpt) p_lines=$(grep -oE '^step [0-9]+: train loss [0-9.]+, val loss [0-9.]+' "$log" | awk '{print $2 $NF}' | paste -sd' ') ;;
    lightning) p_lines=$(grep -cE 'test_loss' "$log") ;;
    accelerate) p_lines=$(grep -E '^\*\*.*\*\*$' "$log" | sort -u | wc -l) ;;
  esac
}

if want public; then
  pubwork=$(mktemp -d)
  scripts=(ddp nanogpt lightning accelerate)
  [[ -n $accelerate_script ]] || { row "public accelerate" FAIL "accelerate's test_script.py not found by $py"; scripts=(ddp nanogpt lightning); }
  for script in "${scripts[@]}"; do
    for who in dtrun torchrun; do public_start "$script" "$who"; done
  done
  wait
  for script in "${scripts[@]}"; do
    public_outcome "$script" dtrun
    d_rc=$p_rc d_ckpt=$p_ckpt d_lines=$p_lines
    public_outcome "$script" torchrun
    same=1
    [[ $d_rc == "$p_rc" && $d_ckpt == "$p_ckpt" ]] || same=0
    case $script in
      nanogpt)
        # The same eval steps, each val loss within 5 % (bf16 kernels need not be bitwise
        # alike), and the loss falls to under half of its start.
        awk -v a="$d_lines" -v b="$p_lines" 'BEGIN {
          n = split(a, x, " "); m = split(b, y, " "); if (n < 3 || n != m) exit 1
          for (i = 1; i <= n; i++) {
            split(x[i], p, ":"); split(y[i], q, ":")
            if (p[1] != q[1] || p[2] - q[2] > 0.05 * q[2] || q[2] - p[2] > 0.05 * q[2]) exit 1
            if (i == 1) first = p[2]
            last = p[2]
          }
          exit !(last < first / 2) }' || same=0 ;;
      *) [[ $d_lines == "$p_lines" && $d_lines != 0 ]] || same=0 ;;
    esac
    [[ $d_rc == 0 ]] || same=0
    ((same)) && s=PASS || s=FAIL
    row "public $script" "$s" "dtrun: exit $d_rc, checkpoints [${d_ckpt:-none}], lines [$d_lines]; torchrun: exit $p_rc, checkpoints [${p_ckpt:-none}], lines [$p_lines]"
  done
fi
