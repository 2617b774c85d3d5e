#!/usr/bin/python3
"""torchrun's c10d rendezvous (torch 1.13) with N simulated nodes, for bench/rendezvous.

Usage: /usr/bin/python3 bench/rendezvous/torch_c10d_rdzv.py [--nodes 8,64] [--timeout-s 60]

For each size N: a torch TCPStore server (is_master) on a free loopback port, and N threads, each
a node with its own TCPStore client, C10dRendezvousBackend and DynamicRendezvousHandler
(min = max = N, last_call_timeout 0.1 s, join timeout --timeout-s), exactly what a torchrun agent
builds for --rdzv_backend=c10d. All threads are released together and call next_rendezvous();
close time = first call -> last return. That includes the handler's own random 0..0.3 s delay on
a first round and its 1 s sleeps between polls (torch's design, not noise). Every node must get a
distinct rank and world size N, or the run is marked failed.

Prints one key=value line per size (as rdzv_bench does):
  torch_c10d nodes=8 close_ms=1234.5 ok=1
A size that does not finish within --timeout-s prints ok=0 reason=timeout and the script goes on
with no larger size; the process exits with 0 unless a run completed with wrong assignments.
Threads (not processes) share one interpreter: the store calls release the GIL, the handler's
Python code does not, so with many nodes this measures torch's protocol plus the GIL.
"""
import argparse
import os
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)


def run_size(n, timeout_s, run_id):
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=timeout_s),
                           wait_for_workers=False)
    port = server.port
    setup_start = time.monotonic()
    handlers = []
    for _ in range(n):
        client = dist.TCPStore("127.0.0.1", port, is_master=False,
                               timeout=timedelta(seconds=timeout_s))
        backend = C10dRendezvousBackend(client, run_id)
        handler = DynamicRendezvousHandler.from_backend(
            run_id, client, backend, min_nodes=n, max_nodes=n,
            timeout=RendezvousTimeout(join=timedelta(seconds=timeout_s),
                                      last_call=timedelta(milliseconds=100)))
        handlers.append((client, handler))
    print(f"torch_c10d: nodes={n}: {n} clients and handlers set up in "
          f"{time.monotonic() - setup_start:.1f} s", file=sys.stderr, flush=True)

    start = threading.Event()
    starts = [0.0] * n
    ends = [0.0] * n
    results = [None] * n
    errors = [None] * n

    def node(i):
        start.wait()
        starts[i] = time.monotonic()
        try:
            _, rank, world = handlers[i][1].next_rendezvous()
            results[i] = (rank, world)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors[i] = f"{type(e).__name__}: {e}"
        ends[i] = time.monotonic()

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    start.set()
    deadline = time.monotonic() + timeout_s + 5
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        return None, "timeout"
    failed = [e for e in errors if e]
    if failed:
        return None, f"{len(failed)} node(s) failed: {failed[0][:200]}"
    ranks = sorted(r for r, _ in results)
    if ranks != list(range(n)) or any(w != n for _, w in results):
        return None, f"wrong assignments: ranks {ranks[:10]}..., world sizes {set(w for _, w in results)}"
    for _, handler in handlers:  # stops the heartbeat timers
        try:
            handler.shutdown()
        except Exception:  # noqa: BLE001  (best effort)
            pass
    return (max(ends) - min(starts)) * 1000.0, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="8,64")
    parser.add_argument("--timeout-s", type=float, default=60)
    args = parser.parse_args()
    bad = False
    for n in [int(x) for x in args.nodes.split(",") if x]:
        close_ms, reason = run_size(n, args.timeout_s, f"bench-{n}-{os.getpid()}")
        if close_ms is None:
            print(f"torch_c10d nodes={n} close_ms=- ok=0 reason={reason.replace(' ', '_')}",
                  flush=True)
            bad = bad or reason != "timeout"
            break  # larger sizes would take longer still
        print(f"torch_c10d nodes={n} close_ms={close_ms:.1f} ok=1", flush=True)
    # Daemon threads of a timed-out run may still be blocked in the store: leave at once.
    sys.stdout.flush()
    os._exit(1 if bad else 0)


if __name__ == "__main__":
    main()
