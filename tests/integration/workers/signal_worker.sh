#!/bin/sh
# signal_worker.sh MODE MARKS: records its pid in "$DTRUN_LOG_DIR/pid", then runs until stopped.
#   term        on SIGTERM: append "TERM <rank>" to MARKS and exit 0
#   int         on SIGINT: append "INT <rank>" to MARKS and exit 0
#   hup         on SIGHUP: append "HUP <rank>" to MARKS and exit 0
#   quit        on SIGQUIT: append "QUIT <rank>" to MARKS and exit 0
#   ignore-term SIGTERM is ignored
#   int-stay    on SIGINT: append "INT <rank>" to MARKS and keep running
#   plain       default dispositions
marks=$2
case $1 in
  term) trap 'echo "TERM $RANK" >> "$marks"; exit 0' TERM ;;
  int) trap 'echo "INT $RANK" >> "$marks"; exit 0' INT ;;
  hup) trap 'echo "HUP $RANK" >> "$marks"; exit 0' HUP ;;
  quit) trap 'echo "QUIT $RANK" >> "$marks"; exit 0' QUIT ;;
  ignore-term) trap '' TERM ;;
  int-stay) trap 'echo "INT $RANK" >> "$marks"' INT ;;
  plain) ;;
  *) echo "signal_worker.sh: unknown mode '$1'" >&2; exit 2 ;;
esac
echo $$ > "$DTRUN_LOG_DIR/pid.tmp" && mv "$DTRUN_LOG_DIR/pid.tmp" "$DTRUN_LOG_DIR/pid"
while :; do sleep 0.05; done
