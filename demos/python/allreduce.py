#!/usr/bin/python3
"""An unmodified torch.distributed worker, launched by dtrun exactly as torchrun would launch it.

Usage:  PYTHON_EXEC=/usr/bin/python3 dtrun --nproc_per_node=4 demos/python/allreduce.py
Each rank bootstraps through dtrun's store (init_method="env://", TORCHELASTIC_USE_AGENT_STORE)
and prints: "rank 2/4: all_reduce([3.0]) = 10.0 (expected 10.0)".
"""
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
