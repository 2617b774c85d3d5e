"""hang_sleep.py: a Python worker that reports progress through python/dtrun_progress.py and
then hangs: rank 1 sleeps forever inside load_batch_forever() (in a "load_batch" operation),
every other rank waits forever in an "all_reduce" for it. For dtrun --hang_timeout
(tests/integration/hang_report_test.sh); PYTHONPATH must hold the repository's python/.
"""
import os
import time

import dtrun_progress as progress

rank = int(os.environ["RANK"])
# Every rank starts reporting at once (a file barrier in $HANG_BARRIER_DIR, when set): under load
# a Python start can take longer than the test's --hang_timeout=2, and a rank not started yet
# while the others report is a suspect.
if os.environ.get("HANG_BARRIER_DIR"):
    from file_barrier import meet

    meet(os.environ["HANG_BARRIER_DIR"], rank, int(os.environ["WORLD_SIZE"]), 120,
         "the other ranks never started")
progress.mark_store_connected()
progress.mark_communicator_ready()
for step in range(3):
    with progress.op("train_step"):
        pass


def load_batch_forever():
    with progress.op("load_batch"):
        while True:
            time.sleep(3600)


def wait_in_all_reduce():
    with progress.op("all_reduce", group="world", nbytes=4):
        while True:
            time.sleep(3600)


print(f"rank {rank}: entering the hang", flush=True)
if rank == 1:
    load_batch_forever()
else:
    wait_in_all_reduce()
