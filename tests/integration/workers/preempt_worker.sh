#!/bin/sh
# preempt_worker.sh MARKS GO [slow|quick]: records its pid in "$DTRUN_LOG_DIR/pid" and runs until
# the file GO exists (then exits 0; after 60 s without it, exits 3). SIGUSR1 and SIGUSR2 append
# "USR1 <rank>" and "USR2 <rank>" to MARKS and it keeps running (a checkpoint on a preemption
# warning). SIGTERM appends "TERM <rank>"; then slow (the default) keeps running (a checkpoint
# longer than dtrun's grace period) and quick exits 0.
marks=$1
go=$2
trap 'echo "USR1 $RANK" >> "$marks"' USR1
trap 'echo "USR2 $RANK" >> "$marks"' USR2
if [ "${3:-slow}" = quick ]; then
  trap 'echo "TERM $RANK" >> "$marks"; exit 0' TERM
else
  trap 'echo "TERM $RANK" >> "$marks"' TERM
fi
echo $$ > "$DTRUN_LOG_DIR/pid.tmp" && mv "$DTRUN_LOG_DIR/pid.tmp" "$DTRUN_LOG_DIR/pid"
i=0
while [ ! -e "$go" ] && [ $i -lt 1200 ]; do
  sleep 0.05
  i=$((i + 1))
done
[ -e "$go" ] || exit 3
exit 0
