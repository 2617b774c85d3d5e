#!/usr/bin/env python3
"""The house rules of docs/ARCHITECTURE.md, checked over the include lines and the line counts.

  python3 scripts/check_rooms.py        (scripts/test.sh runs it beside the format check)

1. A module's src/ may hold rooms (sub-folders) under its wiring (the files at src/ itself).
   Rooms stand in layers (ROOMS, lowest first): a file in a room includes its own room's files
   and, of a room below it, that room's header <room>/<room>.h only; never a room above it, and
   never the wiring's files. The wiring includes a room through its header too.
2. The agent's parts never include the wiring's public header dtrun/agent.h (they read the
   configuration from dtrun/agent_config.h).
3. No product file (a module's src/ or include/) passes 600 lines.
Prints one line per broken rule, naming the file, the line and the fix; exits 1 if any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Per module: its rooms, lowest first: a room may include the rooms before it in its list.
ROOMS = {
    "agent": ["job", "console", "workers", "health", "report", "hang", "live"],
    "launcher": ["fanout", "report"],
}
# Rooms whose files are included from outside the room one by one (no room header yet).
NO_ROOM_HEADER = set()
LIMIT = 600
PRODUCT_MODULES = ["agent", "common", "launcher", "netcheck", "placement", "rendezvous",
                   "scheduler", "worker_runtime"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def includes(path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield number, m.group(1)


def room_rule_breaks(module, layers):
    src = ROOT / module / "src"
    rank = {room: i for i, room in enumerate(layers)}
    breaks = []
    for room in layers:
        if room not in NO_ROOM_HEADER and not (src / room / f"{room}.h").exists():
            breaks.append(f"{module}/src/{room}/: no room header {room}/{room}.h listing what "
                          f"the rooms above it and the wiring may use")
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        rel = path.relative_to(src)
        room = rel.parts[0] if len(rel.parts) > 1 else None  # None: the wiring
        if room is not None and room not in rank:
            breaks.append(f"{module}/src/{rel}: room '{room}' is not in scripts/check_rooms.py's "
                          f"ROOMS['{module}']: add it where it stands among {layers}")
            continue
        for number, target in includes(path):
            where = f"{module}/src/{rel}:{number}"
            if module == "agent" and room is not None and target == "dtrun/agent.h":
                breaks.append(f"{where}: a part includes the wiring's dtrun/agent.h; include "
                              f"dtrun/agent_config.h for the configuration")
                continue
            other = target.split("/")[0] if "/" in target else None
            if other in rank and other != room:
                if room is not None and rank[other] > rank[room]:
                    breaks.append(f"{where}: '{room}' includes {target} from '{other}', a room "
                                  f"above it ({' < '.join(layers)}): move what it needs down, "
                                  f"or pass it in from the wiring")
                elif other not in NO_ROOM_HEADER and target != f"{other}/{other}.h":
                    breaks.append(f"{where}: {target} is '{other}''s own: include "
                                  f"{other}/{other}.h (and list it there if it is the room's "
                                  f"interface)")
            if room is not None and other is None and (src / target).exists():
                breaks.append(f"{where}: {target} is the wiring's: a room never includes it")
    return breaks


def size_breaks():
    breaks = []
    for module in PRODUCT_MODULES:
        for part in ("src", "include"):
            for path in sorted((ROOT / module / part).rglob("*")):
                if path.suffix not in (".h", ".cpp"):
                    continue
                lines = len(path.read_text().splitlines())
                if lines > LIMIT:
                    breaks.append(f"{path.relative_to(ROOT)}: {lines} lines, over the {LIMIT} "
                                  f"of a product file: split it by what its parts do")
    return breaks


def main():
    breaks = []
    for module, layers in ROOMS.items():
        breaks += room_rule_breaks(module, layers)
    breaks += size_breaks()
    for line in breaks:
        print(f"check_rooms: {line}", file=sys.stderr)
    if not breaks:
        rooms = ", ".join(f"{m} {len(layers)}" for m, layers in ROOMS.items())
        print(f"check_rooms: rooms ({rooms}) include downwards through their headers; no "
              f"product file over {LIMIT} lines")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main())
