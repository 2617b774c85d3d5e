#!/bin/sh
# Writes each argument on its own line to "$DTRUN_LOG_DIR/args".
for a in "$@"; do printf '%s\n' "$a"; done > "$DTRUN_LOG_DIR/args"
