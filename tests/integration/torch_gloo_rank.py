#!/usr/bin/python3
"""One rank of a gloo job that bootstraps, unmodified torch 1.13, through a dtrun store.

Env, as a torchrun agent sets it: MASTER_ADDR, MASTER_PORT (the dtrun store), RANK, WORLD_SIZE,
TORCHELASTIC_USE_AGENT_STORE=True (every rank is a TCPStore client; none hosts a server),
TORCHELASTIC_RESTART_COUNT=0.

Checks: init_process_group("gloo", init_method="env://") completes (gloo's full-mesh rendezvous
and the store-based barrier run through the store), all_reduce of [rank + 1] equals
n(n + 1) / 2 on every rank, the default store is a TCPStore under PrefixStore, barrier() and
destroy_process_group() complete. Exits 1 with a message on a mismatch.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    for var in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        if var not in os.environ:
            sys.exit(f"torch_gloo_rank: FAIL: {var} is not set")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        sys.exit("torch_gloo_rank: FAIL: TORCHELASTIC_USE_AGENT_STORE must be True")

    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=30))
    rank, n = dist.get_rank(), dist.get_world_size()
    if (rank, n) != (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])):
        sys.exit(f"torch_gloo_rank: FAIL: rank/world {rank}/{n} differ from the environment")
    store = dist.distributed_c10d._get_default_store()
    if not isinstance(store, dist.PrefixStore):
        sys.exit(f"torch_gloo_rank: FAIL: default store is {type(store).__name__}, not PrefixStore")

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = n * (n + 1) / 2
    if t.item() != expected:
        sys.exit(f"torch_gloo_rank: FAIL: rank {rank}/{n}: all_reduce={t.item()}, "
                 f"expected {expected}")
    dist.barrier()
    dist.destroy_process_group()
    print(f"torch_gloo_rank: rank {rank}/{n} all_reduce={t.item()} ok", flush=True)


if __name__ == "__main__":
    main()
