"""A worker for console_collapse_test.sh: every rank prints the same lines, some ranks lines of
their own, in 10 steps 50 ms apart, each after a file barrier so that the ranks' steps line up
(with one barrier at the start only, a rank descheduled under load drifted past the console's
window within a few steps).

    BARRIER_DIR=DIR python3 collapse_lines.py   (RANK, WORLD_SIZE from dtrun)
"""
import os
import sys
import time

from file_barrier import meet

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
for step in range(10):
    directory = os.path.join(os.environ["BARRIER_DIR"], f"step{step}")
    os.makedirs(directory, exist_ok=True)
    meet(directory, rank, world, 30, f"the other ranks never came to step {step}")
    print(f"epoch {step} loss 0.41", flush=True)
    if rank == 3:
        print(f"rank 3 sees {step}", flush=True)
    if rank % 2 == 0:
        print(f"even step {step}", flush=True)
    time.sleep(0.05)
print("warning: the same on every rank", file=sys.stderr, flush=True)
