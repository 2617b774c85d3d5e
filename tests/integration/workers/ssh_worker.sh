#!/usr/bin/env bash
# A worker for ssh_hostfile_test: prints its environment on one line (with what the launcher over
# ssh exports and what it must not), then:
#   env <token>                 exits 0
#   fail <rank> <code> <token>  the worker of global rank <rank> exits <code>, the others 0
#   sleep <token>               runs until signalled (at most 120 s)
# <token> only marks the process (its command line) for the test's leftover search.
echo "ENV RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK" \
  "MASTER_ADDR=$MASTER_ADDR HOST=$(hostname) CWD=$PWD EXPORTED=${DTRUN_SSH_TEST_VAR:-unset}" \
  "PYTHONPATH=${PYTHONPATH:-unset} PATH=$PATH"
case $1 in
  env) exit 0 ;;
  fail)
    if [[ $RANK == "$2" ]]; then
      echo "rank $RANK fails on purpose with $3" >&2
      exit "$3"
    fi
    sleep 0.5
    exit 0 ;;
  sleep)
    for _ in $(seq 1200); do sleep 0.1; done
    exit 3 ;;
esac
