#!/usr/bin/env bash
# A worker for multi-node tests. Prints its environment on one line, then:
#   env               exits 0
#   fail <rank> <n>   the worker of global rank <rank> exits 7 in attempts below <n>
#   wait <file>       waits (at most 60 s) until <file> exists, then exits 0
#   grow <nodes>      waits (at most 60 s) while GROUP_WORLD_SIZE < <nodes>, then exits 0;
#                     in a bigger group it exits 0 at once
echo "ENV RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE" \
  "GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE ROLE_RANK=$ROLE_RANK" \
  "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT RESTART=$TORCHELASTIC_RESTART_COUNT" \
  "RUN_ID=$TORCHELASTIC_RUN_ID HOST=$(hostname)"
case ${1:-env} in
  env) exit 0 ;;
  fail)
    if [[ $RANK == "$2" && $TORCHELASTIC_RESTART_COUNT -lt $3 ]]; then
      echo "rank $RANK fails on purpose" >&2
      exit 7
    fi
    sleep 0.5
    exit 0 ;;
  wait)
    for _ in $(seq 600); do [[ -e $2 ]] && exit 0; sleep 0.1; done
    exit 3 ;;
  grow)
    for _ in $(seq 600); do [[ $GROUP_WORLD_SIZE -ge $2 ]] && exit 0; sleep 0.1; done
    exit 3 ;;
esac
