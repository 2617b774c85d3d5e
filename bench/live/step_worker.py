"""One rank of bench/live/run.sh's job: a DDP-like training loop on CPU over gloo.

A small MLP, a fixed number of steps; each step is forward, backward, one dist.all_reduce per
gradient tensor from Python (as a hand-written DDP does: each call goes through torch.distributed's
Python function, which dtrun's hook wraps when --python_hook=on), and an SGD update. After WARMUP
steps, every step is timed; the rank writes "rank=R steps=N mean_ms=X" to STEP_BENCH_OUT/rank_R.
Knobs (environment): STEPS=300, WARMUP=30, WIDTH=256, LAYERS=4, BATCH=32.
"""
import os
import time

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "300"))
WARMUP = int(os.environ.get("WARMUP", "30"))
WIDTH = int(os.environ.get("WIDTH", "256"))
LAYERS = int(os.environ.get("LAYERS", "4"))
BATCH = int(os.environ.get("BATCH", "32"))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP's broadcast gives
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)  # each rank its own shard of data
    x = torch.randn(BATCH, WIDTH)
    y = torch.randn(BATCH, WIDTH)
    times = []
    dist.barrier()
    for step in range(WARMUP + STEPS):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        optimizer.step()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    dist.barrier()
    out = os.path.join(os.environ["STEP_BENCH_OUT"], f"rank_{rank}")
    with open(out, "w") as f:
        f.write(f"rank={rank} steps={len(times)} mean_ms={1000 * sum(times) / len(times):.4f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
