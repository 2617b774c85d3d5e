#!/usr/bin/python3
"""torch 1.13's gloo doing collectives_bench's measurements, one process per rank under dtrun:

  PYTHON_EXEC=/usr/bin/python3 GLOO_SOCKET_IFNAME=lo dtrun --nproc_per_node=2 \\
      bench/collectives/torch_collectives.py [--min-bytes 4096] [--max-bytes 67108864] [--factor 4]

Same schedule, same timing rule (every rank times each iteration, the slowest rank's time counts,
median after warm-up) and the same "result ..." lines on rank 0, with impl=torch-gloo.
"""
import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def iterations_for(nbytes):
    return max(10, min(200, (1 << 30) // max(nbytes, 1)))


def warmup_for(nbytes):
    return 2 if nbytes >= (16 << 20) else 10


def slowest_rank_median(times):
    mine = torch.tensor(times, dtype=torch.float64)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    worst = torch.stack(everyone).max(dim=0).values
    return float(worst.sort().values[len(times) // 2])


def report(n, op, nbytes, iters, us, bus_factor):
    algbw = nbytes / (us * 1e3) if us > 0 else 0.0
    print(f"result impl=torch-gloo n={n} op={op} bytes={nbytes} iters={iters} median_us={us:.3f} "
          f"algbw_GBps={algbw:.4f} busbw_GBps={algbw * bus_factor:.4f}", flush=True)


def bench_all_reduce(args, rank, n):
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        data = torch.ones(nbytes // 4, dtype=torch.float32)
        iters = iterations_for(nbytes)
        for _ in range(warmup_for(nbytes)):
            dist.all_reduce(data)
            data.fill_(1.0)
        times = []
        dist.barrier()
        for i in range(iters):
            start = time.perf_counter()
            dist.all_reduce(data)
            times.append((time.perf_counter() - start) * 1e6)
            if i % 16 == 15:
                data.fill_(1.0)
        us = slowest_rank_median(times)
        if rank == 0:
            report(n, "all_reduce", nbytes, iters, us, 2.0 * (n - 1) / n)
        nbytes *= args.factor


def bench_barrier(rank, n):
    for _ in range(50):
        dist.barrier()
    times = []
    for _ in range(1000):
        start = time.perf_counter()
        dist.barrier()
        times.append((time.perf_counter() - start) * 1e6)
    us = slowest_rank_median(times)
    if rank == 0:
        report(n, "barrier", 0, 1000, us, 0)


def bench_send_recv(rank, n):
    if rank <= 1:
        small = torch.ones(2, dtype=torch.float32)
        rtts = []
        for i in range(1100):
            start = time.perf_counter()
            if rank == 0:
                dist.send(small, 1)
                dist.recv(small, 1)
            else:
                dist.recv(small, 0)
                dist.send(small, 0)
            if i >= 100:
                rtts.append((time.perf_counter() - start) * 1e6 / 2)
        nbytes = 64 << 20
        big = torch.ones(nbytes // 4, dtype=torch.float32)
        ack = torch.zeros(1, dtype=torch.float32)
        times = []
        for i in range(12):
            start = time.perf_counter()
            if rank == 0:
                dist.send(big, 1, tag=5)
                dist.recv(ack, 1, tag=6)
            else:
                dist.recv(big, 0, tag=5)
                dist.send(ack, 0, tag=6)
            if i >= 2:
                times.append((time.perf_counter() - start) * 1e6)
        if rank == 0:
            rtts.sort()
            times.sort()
            report(n, "sendrecv_lat", 8, 1000, rtts[len(rtts) // 2], 0)
            report(n, "sendrecv_bw", nbytes, 10, times[len(times) // 2], 1)
    dist.barrier()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-bytes", type=int, default=4096)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--no-p2p", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=120))
    rank, n = dist.get_rank(), dist.get_world_size()
    bench_all_reduce(args, rank, n)
    bench_barrier(rank, n)
    if not args.no_p2p and n >= 2:
        bench_send_recv(rank, n)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
