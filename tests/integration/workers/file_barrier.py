"""A file barrier for the test workers: each rank creates ready.<rank> in a shared directory and
waits until all WORLD_SIZE ranks have, or exits naming what it waited for."""
import os
import sys
import time


def meet(directory, rank, world, timeout_s, waited_for):
    open(os.path.join(directory, f"ready.{rank}"), "w").close()
    deadline = time.monotonic() + timeout_s
    while len([f for f in os.listdir(directory) if f.startswith("ready.")]) < world:
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: {waited_for}")
        time.sleep(0.005)
