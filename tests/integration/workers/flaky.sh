#!/bin/sh
# flaky.sh K CODE FAIL_RANK: rank FAIL_RANK exits CODE while TORCHELASTIC_RESTART_COUNT < K;
# every rank prints "attempt <n> rank <r>" and records its pid in "$DTRUN_LOG_DIR/pid".
echo $$ > "$DTRUN_LOG_DIR/pid"
echo "attempt $TORCHELASTIC_RESTART_COUNT rank $RANK"
if [ "$RANK" = "$3" ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt "$1" ]; then
  echo "failing in attempt $TORCHELASTIC_RESTART_COUNT" >&2
  exit "$2"
fi
exit 0
