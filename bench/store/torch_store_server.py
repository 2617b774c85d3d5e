#!/usr/bin/python3
"""Serve torch's own TCPStore (the baseline for bench/store) until SIGTERM/SIGINT.

Usage: /usr/bin/python3 bench/store/torch_store_server.py PORT_FILE [--max-seconds S]

Listens on 127.0.0.1, an OS-chosen port, which it writes to PORT_FILE (atomically) once serving.
Run it with an interpreter that has torch (Debian's /usr/bin/python3 has torch 1.13, whose server
speaks only the torch <= 2.0 wire dialect). It exits by itself after --max-seconds, so a crashed
run.sh cannot leave it behind forever.
"""
import argparse
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port_file")
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args()

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=60), wait_for_workers=False)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{store.port}\n")
    os.replace(tmp, args.port_file)
    print(f"torch {torch.__version__} TCPStore listening on 127.0.0.1:{store.port}", flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
