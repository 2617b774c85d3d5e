#!/bin/bash
# Writes this worker's whole environment to "$DTRUN_LOG_DIR/env", and "reachable" to
# "$DTRUN_LOG_DIR/store" when a TCP connection to MASTER_ADDR:MASTER_PORT succeeds (the agent's
# store must be listening there while the workers run).
env > "$DTRUN_LOG_DIR/env"
if (exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null; then
  echo reachable > "$DTRUN_LOG_DIR/store"
else
  echo unreachable > "$DTRUN_LOG_DIR/store"
fi
