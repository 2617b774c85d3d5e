#!/bin/sh
# Two stdout lines around one stderr line, each naming the rank.
echo "out-$RANK first"
echo "err-$RANK only" >&2
echo "out-$RANK second"
