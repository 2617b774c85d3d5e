"""Prints LINES lines of 500-2000 bytes, each as print(..., flush=True) under python -u does it
(the text, then the newline: two writes), and some in several pieces; every line names its rank
and number and ends in a checksum of its own text, so a line glued to another's shows. With
PROGRESS=1 it first draws a '\r' progress bar; with HUGE=N it ends with one line of N bytes.
With GAP_MS=N the rest of every print-style line follows its first 100 bytes N ms later (a line
still being written, not a quiet one); with CRLF=1 every line ends in "\r\n", written at once.
"""
import os
import random
import sys
import time
import zlib

rank = int(os.environ["RANK"])
lines = int(os.environ.get("LINES", "200"))
rng = random.Random(rank)
out = sys.stdout
gap = float(os.environ.get("GAP_MS", "0")) / 1000
crlf = os.environ.get("CRLF") == "1"
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
    elif crlf:
        out.write(text + "\r\n")
        out.flush()
    elif gap:
        out.write(text[:100])
        out.flush()
        time.sleep(gap)
        out.write(text[100:] + "\n")
        out.flush()
    else:
        print(text, flush=True)
huge = int(os.environ.get("HUGE", "0"))
if huge:
    print(f"rank {rank} huge " + "y" * huge, flush=True)
