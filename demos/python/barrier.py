#!/usr/bin/python3
"""The seeds' barrier ablation as an unmodified torch.distributed script, launched by dtrun.

Usage:  PYTHON_EXEC=/usr/bin/python3 dtrun --nproc_per_node=4 demos/python/barrier.py
            [--run_with_no_barrier]
Every rank first does uneven work (rank r sleeps r * 0.1 s), then logs
  2025-01-01 12:00:00,412 [INFO]: rank 3: I HAVE BARRIER DUDE! WAITING FOR ALL PROCESSES TO
      SYNCHRONIZE... (monotonic_ns=8817306152117)
  2025-01-01 12:00:00,413 [INFO]: rank 3: Results: [[1, 2, 3]] (monotonic_ns=8817306826553)
With the barrier every rank's WAITING line precedes every rank's Results line; with
--run_with_no_barrier rank 0 logs its results while rank 3 is still working. monotonic_ns is
CLOCK_MONOTONIC, one clock for all processes of the host, so lines of different ranks can be
ordered. The seed starts its processes with mp.spawn; under dtrun (as under torchrun) the
launcher starts them and init_process_group reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
"""
import argparse
import logging
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

DELAY_PER_RANK_S = 0.1


def init_process() -> logging.Logger:
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
    logging.basicConfig(
        level="INFO",
        format="%(asctime)s [%(levelname)s]: %(message)s",
        stream=sys.stdout,
    )
    return logging.getLogger(f"Process-{dist.get_rank()}")


def log(logger: logging.Logger, message: str) -> None:
    logger.info(f"rank {dist.get_rank()}: {message} (monotonic_ns={time.monotonic_ns()})")
    sys.stdout.flush()


def run_with_no_barrier(logger: logging.Logger) -> None:
    results = []

    log(logger, "I HAVE NO BARRIER DUDE!")

    # NOTE: add `torch.distributed.barrier()` here if you want to synchronize all processes
    results.append([1, 2, 3])

    log(logger, f"Results: {results}")


def run_with_barrier(logger: logging.Logger) -> None:
    results = []

    # We use barrier to synchronize all processes before computation.
    # A barrier acts as a checkpoint in the code. When a process reaches this
    # checkpoint, it must wait until all other processes in the group also reach this
    # checkpoint.
    log(logger, "I HAVE BARRIER DUDE! WAITING FOR ALL PROCESSES TO SYNCHRONIZE...")
    torch.distributed.barrier()

    results.append([1, 2, 3])

    log(logger, f"Results: {results}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--run_with_no_barrier", action="store_true", help="Run with no barrier.")
    args = parser.parse_args()

    logger = init_process()
    time.sleep(DELAY_PER_RANK_S * dist.get_rank())  # uneven work before the checkpoint
    target_fn = run_with_no_barrier if args.run_with_no_barrier else run_with_barrier
    target_fn(logger)
    dist.destroy_process_group()
