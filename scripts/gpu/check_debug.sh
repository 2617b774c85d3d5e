# scripts/gpu-check.sh's `debug` group (sourced; uses its row, run, results, $dtrun, $py, $checks
# and $out): PyTorch's own debug aids under dtrun, with a real NCCL process group of one rank.
#   flight recorder  a rank hangs in a barrier queued behind a long GPU sleep; dtrun's
#                    --hang_timeout finds it, writes torch's flight-recorder pipe, and names the
#                    dump torch writes in the rank's stack.txt; the dump is read back with pickle.
#   debug server     torch.distributed.debug.start_debug_server (torch >= 2.10) on rank 0, its
#                    worker registered in dtrun's store: every page its index links to.
# Not run (one GPU): the flight recorder's cross-rank analysis (a mismatch between ranks' records
# needs two NCCL ranks, which need two GPUs).
# shellcheck shell=bash disable=SC2154  # the variables are gpu-check.sh's
if want debug; then
  frwork=$(mktemp -d)
  run fr-hang 120 "$dtrun" --nproc_per_node=1 --hang_timeout=10 --log_dir="$frwork/logs" "$checks" fr_hang
  fr_rc=$rc
  dump=$(find "$frwork/logs" -name 'nccl_trace_rank_0' -size +0 2>/dev/null | head -n1)
  stack=$(find "$frwork/logs" -name stack.txt 2>/dev/null | head -n1)
  named=0
  [[ -z $stack ]] || named=$(grep -c 'NCCL flight recorder: .*bytes' "$stack")
  record="no dump"
  if [[ -n $dump ]]; then
    cp "$dump" "$out/"
    run fr-read 60 "$py" "$checks" fr_read "$dump"
    record=$(results fr_read fr-read)
  fi
  hang=$(grep -m1 -o 'dtrun: hang: .*' "$out/fr-hang.log" | cut -c1-120)
  [[ $fr_rc -ne 0 && $named -ge 1 && $record == *entries=* && $record != *entries=0* ]] && s=PASS || s=FAIL
  row "flight recorder" "$s" "exit $fr_rc; ${hang:-no hang line}; stack.txt names the dump: $named; dump: $record"

  run debug-server 100 "$dtrun" --nproc_per_node=1 "$checks" debug_server
  r=$(results debug_server debug-server)
  if [[ $r == *present=0* ]]; then
    row "torch.distributed.debug" INFO "not in this torch: $r"
  else
    [[ $rc -eq 0 && -n $r ]] && s=PASS || s=FAIL
    row "torch.distributed.debug" "$s" "${r:-no result}; exit $rc$(grep -m1 'torch_checks: FAIL' "$out/debug-server.log" | cut -c1-160 | sed 's/^/; /')"
  fi
fi
