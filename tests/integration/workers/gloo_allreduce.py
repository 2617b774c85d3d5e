"""A plain gloo job as one would write it for torchrun: nothing launcher-specific.

init_process_group("gloo", init_method="env://") finds the store through MASTER_ADDR/MASTER_PORT
and its rank through RANK/WORLD_SIZE; then an all_reduce and an all_gather whose results are
printed, a barrier and a clean shutdown.
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    world_size = dist.get_world_size()

    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    print(f"rank {rank}/{world_size}: all_reduce sum = {tensor.item():g}")

    gathered = [torch.zeros(1) for _ in range(world_size)]
    dist.all_gather(gathered, torch.tensor([float(rank * 10)]))
    print(f"rank {rank}/{world_size}: all_gather = {[int(t.item()) for t in gathered]}")

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
