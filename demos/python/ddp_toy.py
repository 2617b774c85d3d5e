#!/usr/bin/python3
"""The seeds' ToyModel DDP example (mp.py's demo_basic) on CPU with gloo, launched by dtrun.

Usage:  PYTHON_EXEC=/usr/bin/python3 dtrun --nproc_per_node=2 demos/python/ddp_toy.py
The seed asks "What is wrong with torchrun ... mp.py?": mp.py spawns its own processes, so
under a launcher it would start world_size processes per launched rank. Here the launcher
starts the ranks and demo_basic reads them from the environment, as torchrun scripts do.
Each rank trains one step on its own random batch; DDP averages the gradients, so afterwards
every rank holds the same parameters, equal to one SGD step of the undistributed model on
all ranks' batches together. Each rank checks that and prints, e.g.:
  Running basic DDP example on rank 1.
  rank 1: loss 1.0732, parameters after one DDP step match the single-process step on all 2
      ranks' data (max diff 0.0e+00); checksum -3.1795560638
Exit 1 if they do not match.
"""
import copy
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

LR = 0.001
TOLERANCE = 1e-6


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def setup(rank, world_size):
    # MASTER_ADDR and MASTER_PORT come from dtrun, as from torchrun.
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))


def cleanup():
    dist.destroy_process_group()


def batch_of(rank):
    """Rank r's batch; any rank can rebuild any other's."""
    gen = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(20, 10, generator=gen), torch.randn(20, 5, generator=gen)


def demo_basic(rank, world_size):
    print(f"Running basic DDP example on rank {rank}.", flush=True)
    setup(rank, world_size)

    # create model (on CPU: gloo) with the same initial parameters on every rank
    torch.manual_seed(0)
    model = ToyModel()
    reference = copy.deepcopy(model)
    ddp_model = DDP(model)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=LR)

    optimizer.zero_grad()
    inputs, labels = batch_of(rank)
    outputs = ddp_model(inputs)
    loss = loss_fn(outputs, labels)
    loss.backward()
    optimizer.step()

    # The same step without DDP, on every rank's batch at once (equal batch sizes: the mean
    # loss over all of them has the average of the ranks' gradients).
    batches = [batch_of(r) for r in range(world_size)]
    ref_optimizer = optim.SGD(reference.parameters(), lr=LR)
    ref_optimizer.zero_grad()
    loss_fn(reference(torch.cat([b[0] for b in batches])),
            torch.cat([b[1] for b in batches])).backward()
    ref_optimizer.step()

    diff = max((p - q).abs().max().item()
               for p, q in zip(model.parameters(), reference.parameters()))
    checksum = sum(p.double().sum().item() for p in model.parameters())
    ok = diff <= TOLERANCE
    verdict = "match" if ok else "DO NOT match"
    print(f"rank {rank}: loss {loss.item():.4f}, parameters after one DDP step {verdict} the "
          f"single-process step on all {world_size} ranks' data (max diff {diff:.1e}); "
          f"checksum {checksum:.10f}", flush=True)

    cleanup()
    return ok


if __name__ == "__main__":
    ok = demo_basic(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    raise SystemExit(0 if ok else 1)
