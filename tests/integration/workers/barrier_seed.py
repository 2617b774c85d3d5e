"""The seeds' barrier ablation (gao-hongnan/omniverse, omnixamples/distributed/a_basic/d_ablations.py,
"Barrier" section of /work/shared/seeds/000_f3dd6724290787f3.txt), adapted to run under a
torchrun-compatible launcher.

What changed, and only this:
  * mp.spawn is gone: the launcher starts one process per rank, so the rank comes from the
    environment (LOCAL_RANK) and the target function is called once, directly. MASTER_ADDR and
    MASTER_PORT come from the launcher too (its store), so the script no longer picks a port.
  * No rich/omnivault imports: `pprint` is the standard library's, the logger is plain `logging` to
    stdout with microsecond time stamps, the process info is a dict dumped as JSON, and the
    omnixamples helpers (get_args_parser, init_process) are inlined in their simplest form.
Both modes are kept: with a barrier (default) and --run_with_no_barrier.

Run it as the seed does, with the launcher in front:
  dtrun --nproc_per_node=4 barrier_seed.py --nnodes=1 --nproc_per_node=4 --node_rank=0 \
      --world_size=4 --backend=gloo --init_method=env:// [--run_with_no_barrier]
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import socket
import sys
from pprint import pprint
from typing import Any, Dict, Tuple

import torch
import torch.distributed


class _MicrosecondFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return datetime.datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S.%f")


def configure_logger(rank: int) -> logging.Logger:
    """Stand-in for omnivault's configure_logger: one stdout handler, time-stamped lines."""
    logger = logging.getLogger(f"barrier_seed.rank{rank}")
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_MicrosecondFormatter("%(asctime)s [%(levelname)s]: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    return logger


def get_args_parser() -> argparse.ArgumentParser:
    """omnixamples.distributed.a_basic.config.get_args_parser, minus its logging options."""
    parser = argparse.ArgumentParser(description="Distributed Training Demo")
    parser.add_argument("--master_addr", type=str, default="localhost", help="Master address.")
    parser.add_argument("--master_port", type=str, default="29500", help="Master port.")
    parser.add_argument("--nnodes", type=int, required=True, help="Number of nodes.")
    parser.add_argument("--nproc_per_node", type=int, required=True, help="Number of processes per node.")
    parser.add_argument("--node_rank", type=int, required=True, help="Node rank.")
    parser.add_argument("--world_size", type=int, required=True, help="Total number of processes.")
    parser.add_argument("--backend", type=str, default="gloo", help="Backend for distributed training.")
    parser.add_argument(
        "--init_method", type=str, default="env://", help="Initialization method for distributed training."
    )
    return parser


def init_process(local_rank: int, args: argparse.Namespace) -> Tuple[logging.Logger, Dict[str, Any]]:
    """omnixamples.distributed.a_basic.a_setup.init_process in its simplest form."""
    nproc_per_node = args.nproc_per_node
    world_size = args.world_size
    assert world_size == args.nnodes * nproc_per_node
    global_rank = local_rank + args.node_rank * nproc_per_node
    assert local_rank == global_rank % nproc_per_node

    dist_info_per_process = {
        "master_addr": os.environ["MASTER_ADDR"],
        "master_port": os.environ["MASTER_PORT"],
        "nnodes": args.nnodes,
        "nproc_per_node": nproc_per_node,
        "node_rank": args.node_rank,
        "world_size": world_size,
        "backend": args.backend,
        "init_method": args.init_method,
        "global_rank": global_rank,
        "local_world_size": nproc_per_node,
        "local_rank": local_rank,
        "hostname": socket.gethostname(),
        "process_id": os.getpid(),
    }
    logger = configure_logger(rank=global_rank)
    torch.distributed.init_process_group(
        backend=args.backend,
        rank=global_rank,
        world_size=world_size,
        init_method=args.init_method,
    )
    return logger, dist_info_per_process


def run_with_no_barrier(local_rank: int, args: argparse.Namespace) -> None:
    logger, dist_info_per_process = init_process(local_rank, args=args)
    logger.info(f"{json.dumps(dist_info_per_process, indent=4)}")

    results = []

    logger.info("I HAVE NO BARRIER DUDE!")

    # NOTE: add `torch.distributed.barrier()` here if you want to synchronize all processes
    results.append([1, 2, 3])

    logger.info(f"Results: {results}")


def run_with_barrier(local_rank: int, args: argparse.Namespace) -> None:
    logger, dist_info_per_process = init_process(local_rank, args=args)
    logger.info(f"{json.dumps(dist_info_per_process, indent=4)}")

    results = []

    # We use barrier to synchronize all processes before computation.
    # A barrier acts as a checkpoint in the code. When a process reaches this
    # checkpoint, it must wait until all other processes in the group also reach this
    # checkpoint.
    logger.info("I HAVE BARRIER DUDE! WAITING FOR ALL PROCESSES TO SYNCHRONIZE...")
    torch.distributed.barrier()

    results.append([1, 2, 3])

    logger.info(f"Results: {results}")


if __name__ == "__main__":
    parser = get_args_parser()
    parser.add_argument("--run_with_no_barrier", action="store_true", help="Run with no barrier.")

    args = parser.parse_args()
    pprint(args)

    target_fn = run_with_no_barrier if args.run_with_no_barrier else run_with_barrier

    # Was mp.spawn(fn=target_fn, args=(args,), nprocs=args.nproc_per_node, ...): the launcher
    # already started this process as one of the ranks.
    target_fn(int(os.environ["LOCAL_RANK"]), args)
