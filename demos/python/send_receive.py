#!/usr/bin/python3
"""The seeds' message passing (send_receive.py) as an unmodified torch.distributed script.

Usage:  PYTHON_EXEC=/usr/bin/python3 dtrun --nproc_per_node=3 demos/python/send_receive.py
            [run_blocking|run_non_blocking|run_all_reduce ...]   (default: all three)
Expected, rank 2 of 3:
  Rank  2  has data  tensor(0.)         run_blocking: before recv
  Rank  2  has data  tensor(1.)         after recv from rank 0
  Rank 2 started receiving              run_non_blocking
  Rank 2 has data  tensor(...)          before wait: 0. or 1., the transfer may be under way
  Rank  2  has data  tensor(1.)         after req.wait()
  Rank  2  has data  tensor(1.)         run_all_reduce: rank 2 is not in new_group([0, 1])
Ranks 0 and 1 print tensor(2.) after run_all_reduce. The seed launches its processes with
mp.Process and MASTER_ADDR/MASTER_PORT of its own; under dtrun, as under torchrun, the
launcher starts them and sets the environment that init_method="env://" reads. The seed's
'tcp' backend no longer exists in torch: this uses gloo. Its run_non_blocking sends to rank 1
only; here rank 0 sends to every other rank, as the seed's blocking walk-through does.
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def run_blocking(rank, size):
    """Blocking point-to-point communication."""
    tensor = torch.zeros(1)
    print('Rank ', rank, ' has data ', tensor[0])
    if rank == 0:
        tensor += 1
        # Send the tensor to processes other than 0
        for other_rank in range(1, size):  # Sending to all other ranks
            dist.send(tensor=tensor, dst=other_rank)
    else:
        # Receive tensor from process 0
        dist.recv(tensor=tensor, src=0)

    print('Rank ', rank, ' has data ', tensor[0])


def run_non_blocking(rank, size):
    """Non-blocking point-to-point communication."""
    tensor = torch.zeros(1)
    reqs = []
    if rank == 0:
        tensor += 1
        # Send the tensor to every other process
        for other_rank in range(1, size):
            reqs.append(dist.isend(tensor=tensor, dst=other_rank))
        print('Rank 0 started sending')
    else:
        # Receive tensor from process 0
        reqs.append(dist.irecv(tensor=tensor, src=0))
        print(f'Rank {rank} started receiving')
        print(f'Rank {rank} has data ', tensor[0])
    for req in reqs:
        req.wait()
    print('Rank ', rank, ' has data ', tensor[0])


def run_all_reduce(rank, size):
    """All-Reduce example."""
    group = dist.new_group([0, 1])
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print('Rank ', rank, ' has data ', tensor[0])


def init_processes(fn_names, backend='gloo'):
    """ Initialize the distributed environment (from dtrun's RANK, WORLD_SIZE, MASTER_*). """
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    for name in fn_names:
        print(f"--- {name}")
        globals()[name](rank, size)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # stdout is a log file under dtrun
    functions = ["run_blocking", "run_non_blocking", "run_all_reduce"]
    chosen = sys.argv[1:] or functions
    unknown = [name for name in chosen if name not in functions]
    if unknown:
        sys.exit(f"send_receive.py: unknown function(s) {unknown}; choose from {functions}")
    init_processes(chosen)
