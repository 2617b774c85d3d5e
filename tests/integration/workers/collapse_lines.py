"""A worker for console_collapse_test.sh: every rank prints the same lines, some ranks lines of
their own, in 10 steps 50 ms apart, after a file barrier so that the ranks' steps line up.

    BARRIER_DIR=DIR python3 collapse_lines.py   (RANK, WORLD_SIZE from dtrun)
"""
import os
import sys
import time

from file_barrier import meet

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
meet(os.environ["BARRIER_DIR"], rank, world, 30, "the other ranks never came")
for step in range(10):
    print(f"epoch {step} loss 0.41", flush=True)
    if rank == 3:
        print(f"rank 3 sees {step}", flush=True)
    if rank % 2 == 0:
        print(f"even step {step}", flush=True)
    time.sleep(0.05)
print("warning: the same on every rank", file=sys.stderr, flush=True)
