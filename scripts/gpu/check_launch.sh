# scripts/gpu-check.sh's `launch` group (sourced; uses its row, run, $dtrun, $py and $out):
# dtrun against torch's own torchrun on the same machine, in the same call, alternating which goes
# first, with scripts/gpu/launch_probe.py (a real DDP training script that reads only torchrun's
# variables):
#   - from the launcher's start to init_process_group returning and to the first training step
#     finished, on one GPU rank (NCCL) and on 8 CPU ranks (gloo): medians of 3 and 2 runs;
#   - steady images/s under each launcher (100 steps after 10 warm-up steps);
#   - from a CUDA device-side assert on rank 0 of 2 to the launcher's exit (the whole job down);
#   - the environment each launcher gives rank 0: a diff in $out/env-diff.txt.
# shellcheck shell=bash disable=SC2154  # the variables are gpu-check.sh's
read -r -a torchrun <<<"${TORCHRUN:-$py -m torch.distributed.run}"
probe=$repo/scripts/gpu/launch_probe.py
dev=${GPU_CHECK_DEVICE:-cuda}

# launch_run <dtrun|torchrun> <log name> <nproc> <probe args...>: $launch_ns is the launcher's
# start (CLOCK_REALTIME), $exit_ns its exit; each rank's environment in $out/<log name>.env/.
launch_run() {
  local who=$1 name=$2 n=$3
  shift 3
  local cmd=("$dtrun" --nproc_per_node="$n")
  [[ $who == dtrun ]] || cmd=("${torchrun[@]}" --standalone --nproc_per_node="$n")
  mkdir -p "$out/$name.env"
  launch_ns=$(date +%s%N)
  run "$name" 240 env LAUNCH_T0="$launch_ns" LAUNCH_ENV_DIR="$out/$name.env" "${cmd[@]}" "$probe" "$@"
  exit_ns=$(date +%s%N)
}
# The RESULT launch lines of a run, whole: torchrun passes every rank the same stdout, so ranks'
# lines can run into each other ("...images_per_s=736RESULT launch rank=6 ...").
launch_results() { grep -ohE 'RESULT launch rank=[0-9]+ backend=[a-z]+ python_s=[0-9.]+ init_s=[0-9.]+ first_step_s=[0-9.]+ images_per_s=[0-9]+' "$out/$1.log"; }
# The slowest rank's <field> (every rank must have reached it).
slowest() { launch_results "$1" | grep -oE " $2=[0-9.]+" | cut -d= -f2 | sort -g | tail -n1; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {if (!NR) print "?"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "?"}'; }

# compare <label> <nproc> <runs> <device>: alternating runs; one row of medians.
compare() {
  local label=$1 n=$2 runs=$3 device=$4 i who order ok=1
  local -A init first speed
  for ((i = 1; i <= runs; i++)); do
    order=(dtrun torchrun)
    ((i % 2)) || order=(torchrun dtrun)
    for who in "${order[@]}"; do
      launch_run "$who" "launch-$label-$who-$i" "$n" speed "$device" 100
      local got
      got=$(launch_results "launch-$label-$who-$i" | wc -l)
      [[ $rc -eq 0 && $got -eq $n ]] || ok=0
      init[$who]+=" $(slowest "launch-$label-$who-$i" init_s)"
      first[$who]+=" $(slowest "launch-$label-$who-$i" first_step_s)"
      speed[$who]+=" $(launch_results "launch-$label-$who-$i" | grep '^RESULT launch rank=0 ' | grep -oE 'images_per_s=[0-9]+' | cut -d= -f2)"
    done
  done
  local init_d init_t first_d first_t speed_d speed_t
  # shellcheck disable=SC2086 # the lists split into values on purpose
  {
    init_d=$(median ${init[dtrun]}) init_t=$(median ${init[torchrun]})
    first_d=$(median ${first[dtrun]}) first_t=$(median ${first[torchrun]})
    speed_d=$(median ${speed[dtrun]}) speed_t=$(median ${speed[torchrun]})
  }
  local s=FAIL
  # At least as fast to the first step (within 50 ms), and the same training speed: dtrun's
  # median within torchrun's own runs' range, widened by 5 % (8 CPU ranks vary by 10 % run to run).
  # shellcheck disable=SC2086
  if ((ok)) && awk -v a="$first_d" -v b="$first_t" -v c="$speed_d" -v t="${speed[torchrun]}" \
    'BEGIN {n = split(t, v, " "); lo = hi = v[1]; for (i = 2; i <= n; i++) {if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]}
            exit !(a <= b + 0.05 && c >= 0.95 * lo && c <= 1.05 * hi)}'; then
    s=PASS
  fi
  row "launch $label" "$s" "medians of $runs (dtrun / torchrun, s from the launcher's start): init_process_group $init_d / $init_t, first step $first_d / $first_t ($(ratio "$first_d" "$first_t")x); images/s $speed_d / $speed_t ($(ratio "$speed_d" "$speed_t")x); runs: first step dtrun${first[dtrun]}, torchrun${first[torchrun]}; images/s dtrun${speed[dtrun]}, torchrun${speed[torchrun]}"
}

if want launch; then
  compare "1-gpu" 1 3 "$dev"
  compare "8-cpu" 8 2 cpu
  # The whole job down after a CUDA error on rank 0 of 2 (rank 1 trains on over gloo).
  downs=()
  for who in dtrun torchrun; do
    launch_run "$who" "crash-$who" 2 crash "$dev" 20
    err=$(grep -h '^RESULT crash ' "$out/crash-$who.log" | grep -oE 'error_ns=[0-9]+' | cut -d= -f2)
    named=$(grep -m1 -oE 'CUDA error: [^"]{0,40}|device-side assert[^"]{0,20}' "$out/crash-$who.log")
    if [[ -n $err ]]; then
      downs+=("$who $(awk -v a="$exit_ns" -v b="$err" 'BEGIN {printf "%.2f", (a - b) / 1e9}') s (exit $rc${named:+, \"$named\"})")
    else
      downs+=("$who: no error seen (exit $rc)")
    fi
  done
  d_s=$(sed 's/^dtrun \([0-9.]*\) s.*/\1/' <<<"${downs[0]}")
  t_s=$(sed 's/^torchrun \([0-9.]*\) s.*/\1/' <<<"${downs[1]}")
  awk -v a="$d_s" -v b="$t_s" 'BEGIN {exit !(a + 0 > 0 && a <= b + 0.05)}' && s=PASS || s=FAIL
  row "crash to down" "$s" "CUDA error on rank 0 of 2 to the launcher's exit: ${downs[*]}"
  # What each launcher puts in rank 0's environment (the probe's own LAUNCH_* variables aside).
  a=$out/launch-1-gpu-dtrun-1.env/rank0.env
  b=$out/launch-1-gpu-torchrun-1.env/rank0.env
  if [[ -s $a && -s $b ]]; then
    names() { grep -v '^LAUNCH_' "$1" | cut -d= -f1 | sort -u; }
    only_d=$(comm -23 <(names "$a") <(names "$b") | paste -sd' ')
    only_t=$(comm -13 <(names "$a") <(names "$b") | paste -sd' ')
    pairs() { grep -v '^LAUNCH_' "$1" | sed 's/=/\t/' | sort -t $'\t' -k1,1; }
    differ=$(join -t $'\t' <(pairs "$a") <(pairs "$b") | awk -F'\t' '$2 != $3 {print $1}' | paste -sd' ')
    diff <(grep -v '^LAUNCH_' "$b") <(grep -v '^LAUNCH_' "$a") >"$out/env-diff.txt"
    [[ -z ${OUT:-} ]] || cp "$out/env-diff.txt" "$OUT/"
    row "environment" INFO "rank 0, dtrun vs torchrun: only dtrun: ${only_d:-none}; only torchrun: ${only_t:-none}; values differ: ${differ:-none}"
  else
    row "environment" FAIL "no environment recorded ($a, $b)"
  fi
fi
