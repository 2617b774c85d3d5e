"""A torch worker for elastic rounds (tests/integration/torch_rounds_test.sh): first counts
itself in "seen/<rank>" under its attempt's prefix through its own TCPStore client (what
torch's env:// rendezvous uses under an agent), so a key left by an earlier round with the same
attempt number shows as a count above 1; then init_process_group("gloo"), an all_reduce of ones,
and one line "ROUND world=<n> attempt=<a> rank=<r> seen=<count> sum=<sum>". It finishes when the
world size is argv[1], else waits (at most 60 s) for the agent to stop it for the next round.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

finish_at = int(sys.argv[1])
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                       timeout=datetime.timedelta(seconds=30))
store = dist.PrefixStore(f"/worker/attempt_{attempt}", client)
seen = store.add(f"seen/{rank}", 1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
total = torch.ones(1)
dist.all_reduce(total)
print(f"ROUND world={world} attempt={attempt} rank={rank} seen={seen} sum={total.item():g}",
      flush=True)
if world == finish_at:
    dist.barrier()
    sys.exit(0)
time.sleep(60)
sys.exit(1)
