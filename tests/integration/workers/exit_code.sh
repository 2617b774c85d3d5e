#!/bin/sh
# exit_code.sh MODE: rank 1 ends by MODE, every other rank runs until it is stopped.
#   exit:<n>       exit n
#   signal:<NAME>  kill itself with SIG<NAME> (e.g. signal:SEGV, signal:KILL)
#   stderr:<n>     print <n> numbered lines to stderr, then exit 5
#   errorfile      write a torchelastic error file (new form), then exit 1
#   legacyfile     write a legacy-form error file, then exit 1
echo $$ > "$DTRUN_LOG_DIR/pid"
if [ "$RANK" = 1 ]; then
  case $1 in
    exit:*) exit "${1#exit:}" ;;
    signal:*) kill -s "${1#signal:}" $$ ;;
    stderr:*)
      i=1
      while [ "$i" -le "${1#stderr:}" ]; do echo "stderr line $i of rank $RANK" >&2; i=$((i + 1)); done
      exit 5 ;;
    errorfile)
      echo "this stderr line must not be the traceback" >&2
      printf '{"message": {"message": "ValueError: bad shard", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"train.py\\", line 7\\nValueError: bad shard 17 on rank 1\\n", "timestamp": "1700000000"}}}' \
        > "$TORCHELASTIC_ERROR_FILE"
      exit 1 ;;
    legacyfile)
      printf '{"message": "legacy failure on rank 1", "timestamp": 1700000000}' > "$TORCHELASTIC_ERROR_FILE"
      exit 1 ;;
  esac
fi
while :; do sleep 0.1; done
