#!/usr/bin/python3
"""An unmodified torch.distributed worker that bootstraps through dtrun's store.

Usage (what scripts/demo.sh does): start `dtrun store --port 0 --port-file F`, then run N copies
with MASTER_ADDR=127.0.0.1 MASTER_PORT=<port> RANK=<r> WORLD_SIZE=N
TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0, exactly as torchrun's agent sets
them. Each rank prints: "rank 2/4: all_reduce([3.0]) = 10.0 (expected 10.0)".
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
before = t.item()
dist.all_reduce(t)
expected = world * (world + 1) / 2
print(f"rank {rank}/{world}: all_reduce([{before}]) = {t.item()} (expected {expected})", flush=True)
dist.barrier()
dist.destroy_process_group()
raise SystemExit(0 if t.item() == expected else 1)
