# scripts/gpu-check.sh's `gpus` group (sourced; uses its row, $dtrun, $py, $checks and $out):
# `dtrun gpus RUN_DIR --json` (NVML, the real driver) against nvidia-smi, read in the same second,
# three times, while a rank trains ResNet-18 under dtrun: each GPU's utilisation and memory used,
# and its compute processes, each named as the rank dtrun started.
# shellcheck shell=bash disable=SC2154  # the variables are gpu-check.sh's
if want gpus; then
  gpuwork=$(mktemp -d)
  "$dtrun" --nproc_per_node=1 --log_dir="$gpuwork/logs" "$checks" resnet_speed bf16 4000 \
    >"$out/gpus-train.log" 2>&1 &
  trainer=$!
  # Until the rank trains (the GPU over 50 % busy), at most 60 s: the process shows in nvidia-smi
  # seconds before its first step (CUDA's context, NCCL, cuDNN's benchmark), at 0 % in both tools.
  for _ in $(seq 120); do
    busy=$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null | sort -n | tail -n1)
    [[ ${busy:-0} -lt 50 ]] || break
    sleep 0.5
  done
  run_dir=$(find "$gpuwork/logs" -mindepth 1 -maxdepth 1 -type d | head -n1)
  : >"$out/gpus-samples.txt"
  for i in 1 2 3; do
    {
      echo "== sample $i"
      nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits
      echo "-- apps"
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
      echo "-- dtrun"
      "$dtrun" gpus "$run_dir" --json
      echo
    } >>"$out/gpus-samples.txt" 2>&1
    sleep 1
  done
  "$dtrun" gpus "$run_dir" >"$out/gpus-human.txt" 2>&1
  kill "$trainer" 2>/dev/null
  wait "$trainer" 2>/dev/null
  verdict=$("$py" - "$out/gpus-samples.txt" <<'EOF'
import json, sys

text = open(sys.argv[1]).read()
notes, ok = [], True
for n, sample in enumerate(text.split("== sample ")[1:], 1):
    head, rest = sample.split("-- apps", 1)
    apps, mine = rest.split("-- dtrun", 1)
    smi = {}
    for line in head.strip().splitlines()[1:]:
        index, util, used, total = [v.strip() for v in line.split(",")]
        smi[int(index)] = (float(util), float(used), float(total))
    smi_apps = {}
    for line in apps.strip().splitlines():
        if "," in line:
            pid, used = [v.strip() for v in line.split(",")]
            smi_apps[int(pid)] = float(used) if used.replace(".", "", 1).isdigit() else -1.0
    try:
        readings = json.loads(mine.strip())
    except ValueError:  # an error line instead
        print(f"FAIL sample {n}: dtrun gpus printed no JSON: {mine.strip()[:160]}")
        sys.exit(0)
    for g in readings["gpus"]:
        util, used, total = smi[g["index"]]
        d_util, d_used = g["utilization_gpu_percent"], g["memory_used_mib"]
        # Utilisation is each tool's own instant; memory hardly moves in a steady run.
        if d_util is None or abs(d_util - util) > 25 or d_used is None or abs(d_used - used) > max(64, used * 0.02):
            ok = False
        procs = {p["pid"]: p for p in g["processes"]}
        if set(procs) != set(smi_apps):
            ok = False
        ranks = sorted(str(p["rank"]) for p in procs.values())
        for pid, p in procs.items():
            if p["rank"] is None or abs((p["used_memory_mib"] or 0) - smi_apps.get(pid, -1e9)) > 64:
                ok = False
        notes.append(f"s{n} GPU{g['index']}: util {d_util}/{util:.0f}%, used {d_used}/{used:.0f} MiB, "
                     f"pids {sorted(procs)}/{sorted(smi_apps)} ranks {','.join(ranks)}")
print(("PASS " if ok and notes else "FAIL ") + "; ".join(notes))
EOF
  )
  row "gpus (NVML)" "${verdict%% *}" "dtrun gpus / nvidia-smi: ${verdict#* }; $(sed -n 2p "$out/gpus-human.txt" | cut -c1-100)"
fi
