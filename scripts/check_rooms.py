#!/usr/bin/env python3
"""The house rules of docs/ARCHITECTURE.md, checked over the include lines and the line counts.

  python3 scripts/check_rooms.py        (scripts/test.sh runs it beside the format check)

1. The agent's rooms (agent/src/<room>/) stand in layers: a part includes its own room and the
   rooms below it, never one above it, and never the wiring's header dtrun/agent.h (parts read
   the configuration from dtrun/agent_config.h). The files at agent/src/ itself are the wiring.
2. No product file (a module's src/ or include/) passes 600 lines, but for the ones listed in
   OVER_LIMIT, each held at its size today until it is split (issue 28): they may shrink, not grow.
Prints one line per broken rule, naming the file, the line and the fix; exits 1 if any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Lowest first: a room may include the rooms before it in this list.
AGENT_LAYERS = ["job", "console", "workers", "health", "report", "hang"]
LIMIT = 600
OVER_LIMIT = {
    "launcher/src/launch_plan.cpp": 759,
    "rendezvous/src/etcd_client.cpp": 696,
    "rendezvous/src/round_keeper.cpp": 872,
    "rendezvous/src/tcp_store.cpp": 615,
    "worker_runtime/src/gloo_communicator.cpp": 712,
    "worker_runtime/src/nccl_communicator.cpp": 785,
    "worker_runtime/src/tcp_communicator.cpp": 1252,
    "worker_runtime/src/tcp_transport.cpp": 1068,
}
PRODUCT_MODULES = ["agent", "common", "launcher", "netcheck", "placement", "rendezvous",
                   "scheduler", "worker_runtime"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def agent_rule_breaks():
    src = ROOT / "agent" / "src"
    rank = {room: i for i, room in enumerate(AGENT_LAYERS)}
    breaks = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        rel = path.relative_to(src)
        if len(rel.parts) == 1:
            continue  # the wiring includes any room
        room = rel.parts[0]
        if room not in rank:
            breaks.append(f"agent/src/{rel}: room '{room}' is not in scripts/check_rooms.py's "
                          f"AGENT_LAYERS: add it where it stands among {AGENT_LAYERS}")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            where = f"agent/src/{rel}:{number}"
            if target == "dtrun/agent.h":
                breaks.append(f"{where}: a part includes the wiring's dtrun/agent.h; include "
                              f"dtrun/agent_config.h for the configuration")
                continue
            other = target.split("/")[0] if "/" in target else None
            if other in rank and rank[other] > rank[room]:
                breaks.append(f"{where}: '{room}' includes {target} from '{other}', a room above "
                              f"it ({' < '.join(AGENT_LAYERS)}): move what it needs down, or "
                              f"pass it in from the wiring")
            if other is None and (src / target).exists():
                breaks.append(f"{where}: {target} is the wiring's: a part never includes it")
    return breaks


def size_breaks():
    breaks = []
    for module in PRODUCT_MODULES:
        for part in ("src", "include"):
            for path in sorted((ROOT / module / part).rglob("*")):
                if path.suffix not in (".h", ".cpp"):
                    continue
                rel = str(path.relative_to(ROOT))
                lines = len(path.read_text().splitlines())
                ceiling = OVER_LIMIT.get(rel, LIMIT)
                if lines > ceiling:
                    why = ("its ceiling until it is split" if rel in OVER_LIMIT else
                           f"the limit for a product file")
                    breaks.append(f"{rel}: {lines} lines, over {ceiling} ({why}): split it by "
                                  f"what its parts do")
    for rel, ceiling in OVER_LIMIT.items():
        path = ROOT / rel
        if path.exists() and len(path.read_text().splitlines()) <= LIMIT:
            breaks.append(f"{rel}: now within {LIMIT} lines: remove it from OVER_LIMIT in "
                          f"scripts/check_rooms.py")
    return breaks


def main():
    breaks = agent_rule_breaks() + size_breaks()
    for line in breaks:
        print(f"check_rooms: {line}", file=sys.stderr)
    if not breaks:
        print(f"check_rooms: the agent's {len(AGENT_LAYERS)} rooms include downwards only; "
              f"no product file grew past its limit")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main())
