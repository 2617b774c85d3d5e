"""The Python hook's own cost per collective, with and without the straggler timing: begin() and
end() of python/dtrun_progress.py on a progress file created as the agent creates it (magic, the
entry-times switch), timed over many calls; the median of REPEATS runs each, alternating.
A figure, not a test.  /usr/bin/python3 bench/live/hook_timing.py [CALLS] [REPEATS]"""

import importlib
import os
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def per_call_ns(entry_times, directory):
    path = os.path.join(directory, "progress")
    content = bytearray(512)
    struct.pack_into("<Q", content, 0, 0x3147525054525444)
    struct.pack_into("<i", content, 160, 1 if entry_times else 0)
    with open(path, "wb") as f:
        f.write(content)
    os.environ["DTRUN_PROGRESS_FILE"] = path
    os.environ.pop("DTRUN_LOG_DIR", None)
    import dtrun_progress
    progress = importlib.reload(dtrun_progress)
    assert progress.enabled()
    begin, end = progress.begin, progress.end
    start = time.perf_counter_ns()
    for _ in range(CALLS):
        begin("all_reduce", "world", 1024)
        end()
    return (time.perf_counter_ns() - start) / CALLS


with tempfile.TemporaryDirectory() as directory:
    runs = {False: [], True: []}
    for i in range(REPEATS):
        for timed in ((False, True) if i % 2 == 0 else (True, False)):
            runs[timed].append(per_call_ns(timed, directory))
off, on = statistics.median(runs[False]), statistics.median(runs[True])
print(f"hook begin+end per collective: {off / 1000:.2f} us without entry times, "
      f"{on / 1000:.2f} us with ({on - off:+.0f} ns, {on / off:.3f}x); {CALLS} calls, "
      f"median of {REPEATS}")
