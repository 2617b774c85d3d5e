"""An unmodified torch.distributed script (nothing of dtrun's imported) that hangs one way,
chosen by CASE, for tests/integration/torch_hang_test.sh:
  late_init      rank 1 sleeps in sleep_before_init() before init_process_group
  slow_start     rank 1 keeps a CPU busy for 14 s before init_process_group (no hang: finishes)
  skip_barrier   rank 1 skips the barrier of step 2 and goes on to the next all_reduce
  recv_deadlock  rank 1 waits in recv from rank 0, which never sends
  patched        the script wraps dist.all_reduce itself (as profilers do), then finishes
  no_dist        never imports torch: prints the sitecustomize that ran, and finishes
  flight_recorder  recv_deadlock, with every rank also doing what torch >= 2.2's ProcessGroupNCCL
                 does with TORCH_NCCL_DEBUG_INFO_PIPE_FILE (this machine's torch 1.13 has no
                 NCCL and no flight recorder): a FIFO <pipe prefix><rank>.pipe read without
                 blocking about once a second, and on a write, a dump of the recent collectives
                 to <TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>. It checks dtrun's half of the
                 protocol: the pipe is written on a hang and the dump is named in the report.
"""
import os
import sys
import time

case = os.environ.get("CASE", "late_init")
rank = int(os.environ["RANK"])
if case == "no_dist":
    site = sys.modules.get("sitecustomize")
    print(f"rank {rank}: sitecustomize {getattr(site, '__file__', None)}", flush=True)
    sys.exit(0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def sleep_before_init():
    time.sleep(3600)


def spin_before_init(seconds):
    """Busy, as an import or a data load is on a loaded node: a rank still starting."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def meet_after_imports():
    """Every rank waits here (a file barrier in $HANG_BARRIER_DIR, when set) until all have
    imported torch, so that the hang cases start their collectives together: the skew of the
    imports on a loaded machine (longer than the test's --hang_timeout) is slow_start's part."""
    directory = os.environ.get("HANG_BARRIER_DIR")
    if directory:
        # Imported here: the script stays one file (docs/pytorch.md copies it alone).
        from file_barrier import meet

        meet(directory, rank, int(os.environ["WORLD_SIZE"]), 120,
             "the other ranks never finished their imports")


def serve_debug_info_pipe():
    import pickle
    import threading

    pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + f"{rank}.pipe"
    dump = os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + f"{rank}"
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)

    def watch():
        while True:
            time.sleep(0.2)
            try:
                asked = os.read(fd, 1)
            except BlockingIOError:
                continue
            if asked:
                with open(dump + ".tmp", "wb") as f:
                    pickle.dump({"version": "2.2", "entries": [{"profiling_name": "nccl:recv"}]}, f)
                os.rename(dump + ".tmp", dump)
                return

    threading.Thread(target=watch, daemon=True).start()


meet_after_imports()
if case == "late_init" and rank == 1:
    sleep_before_init()
if case == "slow_start" and rank == 1:
    spin_before_init(14)
if case == "flight_recorder":
    serve_debug_info_pipe()
    case = "recv_deadlock"
if case == "patched":
    original = dist.all_reduce
    calls = []

    def counted_all_reduce(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    dist.all_reduce = counted_all_reduce
dist.init_process_group("gloo")
t = torch.ones(4)
for step in range(5):
    dist.all_reduce(t)
    if case == "skip_barrier" and step == 2:
        if rank != 1:
            dist.barrier()
if case == "recv_deadlock":
    if rank == 1:
        dist.recv(t, src=0)
    else:
        dist.all_reduce(t)
dist.all_reduce(t)
if case == "patched":
    assert len(calls) == 6, calls
    print(f"rank {rank}: patched all_reduce ran {len(calls)} times, sum {t[0].item():g}", flush=True)
dist.destroy_process_group()
