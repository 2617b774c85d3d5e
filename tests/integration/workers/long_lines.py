"""Prints LINES lines of 500-2000 bytes, each as print(..., flush=True) under python -u does it
(the text, then the newline: two writes), and some in several pieces; every line names its rank
and number and ends in a checksum of its own text, so a line glued to another's shows. With
PROGRESS=1 it first draws a '\r' progress bar; with HUGE=N it ends with one line of N bytes.
"""
import os
import random
import sys
import zlib

rank = int(os.environ["RANK"])
lines = int(os.environ.get("LINES", "200"))
rng = random.Random(rank)
out = sys.stdout
if os.environ.get("PROGRESS") == "1":
    for step in range(0, 101, 10):
        out.write(f"\rrank {rank} progress {step:3d}%")
        out.flush()
    out.write("\n")
    out.flush()
for i in range(lines):
    body = f"rank {rank} line {i} " + "x" * rng.randint(480, 1980)
    text = f"{body} crc={zlib.crc32(body.encode()):08x}"
    if i % 7 == 0:
        for cut in range(0, len(text), 300):  # several partial writes
            out.write(text[cut:cut + 300])
            out.flush()
        out.write("\n")
        out.flush()
    else:
        print(text, flush=True)
huge = int(os.environ.get("HUGE", "0"))
if huge:
    print(f"rank {rank} huge " + "y" * huge, flush=True)
