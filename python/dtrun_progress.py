"""Progress reports and stack dumps for Python workers under dtrun.

dtrun's agent gives every worker a small progress slot (DTRUN_PROGRESS_SLOT, its local rank, in
the node's DTRUN_PROGRESS_FILE) and, with --hang_timeout, reads it to find ranks that stopped
making progress. libdtrt writes it on every collective; a Python worker writes it through this
module:

    import dtrun_progress as progress          # copy this file next to your script, or PYTHONPATH
    for step in range(steps):
        with progress.op("train_step"):         # or begin("all_reduce", group="world", nbytes=n) ... end()
            train_one_step()

Importing it also registers faulthandler on SIGRTMIN+2 (DTRUN_STACK_SIGNAL overrides the
number), writing every thread's Python stack to <DTRUN_LOG_DIR>/python_stack.txt, and records
that signal in the progress file: the agent sends it only to workers that registered it. A
real-time signal, because SIGUSR1/SIGUSR2 are the batch schedulers' preemption warnings, which
dtrun forwards to the workers and which training scripts handle themselves. Outside dtrun (no
DTRUN_PROGRESS_FILE) every call does nothing.

A slot's layout (512 bytes from SLOT * 512, little-endian; see common/src/progress_file.h, the one
definition):
  8 seq (odd while writing), 16 ops, 24 op start (CLOCK_MONOTONIC ns, 0 = none), 32 last change,
  40 bytes, 48 store connected (CLOCK_REALTIME ns), 56 communicator ready, 64 stack signal (i32),
  68 pid (i32), 72 op name (40 bytes), 112 group (48 bytes), 160 entry times on (i32, set by the
  agent for straggler detection), 256 the last 32 operations' entry times (CLOCK_REALTIME ns,
  operation n at index n % 32).
"""

import contextlib
import faulthandler
import mmap
import os
import signal
import struct
import threading
import time

_MAGIC = 0x3147525054525444
_SIZE = 512
_RING = 256
_RING_SIZE = 32
_lock = threading.Lock()
_mapping = None  # the file's mapping, up to this rank's slot
_map = None  # this rank's slot in it
_stack_file = None
_entry_times = False  # the agent compares entry times (read once: it never changes)
# Precompiled layouts: begin() and end() are on the path of every collective the torch hook
# (dtrun_torch_hook.py) wraps, so each is a handful of pack_into calls and nothing more.
_SEQ = struct.Struct("<Q")  # 8
_BEGIN = struct.Struct("<QqqQ")  # 16 ops, 24 op start, 32 last change, 40 bytes
_END = struct.Struct("<qq")  # 24 op start (0), 32 last change
_NAMES = struct.Struct("40s48s")  # 72 op, 112 group
_ENTRY = struct.Struct("<q")
_encoded = {}  # (op, group) -> the two NUL-padded fields


def _open():
    global _mapping, _map, _stack_file, _entry_times
    path = os.environ.get("DTRUN_PROGRESS_FILE")
    if not path:
        return
    try:
        offset = int(os.environ.get("DTRUN_PROGRESS_SLOT") or 0) * _SIZE
        fd = os.open(path, os.O_RDWR)
    except (OSError, ValueError):
        return
    try:
        mapping = mmap.mmap(fd, offset + _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):  # not a progress file (too short for the slot, not mappable)
        return
    finally:
        os.close(fd)
    mapped = memoryview(mapping)[offset : offset + _SIZE]  # offsets below are the slot's
    if struct.unpack_from("<Q", mapped, 0)[0] != _MAGIC:
        mapped.release()
        mapping.close()
        return
    _mapping, _map = mapping, mapped
    _entry_times = struct.unpack_from("<i", mapped, 160)[0] != 0
    log_dir = os.environ.get("DTRUN_LOG_DIR")
    if log_dir:
        try:
            stack_signal = int(os.environ.get("DTRUN_STACK_SIGNAL", int(signal.SIGRTMIN) + 2))
            # Kept open for the life of the process: faulthandler writes to its descriptor.
            _stack_file = open(os.path.join(log_dir, "python_stack.txt"), "w")
            faulthandler.register(stack_signal, file=_stack_file, all_threads=True)
            struct.pack_into("<i", _map, 64, stack_signal)
        except (OSError, ValueError, RuntimeError):
            pass  # no Python stacks in a hang report; progress still counts
    # Last: a non-zero pid tells the agent this rank reports progress (see hang_detector.h).
    struct.pack_into("<i", _map, 68, os.getpid())


def _update(fields):
    """Writes (offset, format, value) triples under the seqlock."""
    if _map is None:
        return
    with _lock:
        seq = _SEQ.unpack_from(_map, 8)[0]
        _SEQ.pack_into(_map, 8, seq + 1)
        for offset, fmt, value in fields:
            struct.pack_into(fmt, _map, offset, value)
        _SEQ.pack_into(_map, 8, seq + 2)


def _names(op, group):
    names = _encoded.get((op, group))
    if names is None:
        names = (op.encode("utf-8")[:39], group.encode("utf-8")[:47])
        if len(_encoded) < 4096:  # bounded: group names come from the user's groups
            _encoded[(op, group)] = names
    return names


def begin(op, group="", nbytes=0):
    """Marks the start of an operation (a training step, a collective)."""
    mapped = _map
    if mapped is None:
        return
    names = _names(op, group)
    with _lock:  # the count is read and written under the one lock, as every field
        now = time.monotonic_ns()
        seq = _SEQ.unpack_from(mapped, 8)[0]
        _SEQ.pack_into(mapped, 8, seq + 1)
        ops = _SEQ.unpack_from(mapped, 16)[0] + 1
        _BEGIN.pack_into(mapped, 16, ops, now, now, nbytes)
        if _entry_times:
            _ENTRY.pack_into(mapped, _RING + 8 * (ops % _RING_SIZE), time.time_ns())
        _NAMES.pack_into(mapped, 72, names[0], names[1])
        _SEQ.pack_into(mapped, 8, seq + 2)


def end():
    """Marks the end of the current operation."""
    mapped = _map
    if mapped is None:
        return
    with _lock:
        seq = _SEQ.unpack_from(mapped, 8)[0]
        _SEQ.pack_into(mapped, 8, seq + 1)
        _END.pack_into(mapped, 24, 0, time.monotonic_ns())
        _SEQ.pack_into(mapped, 8, seq + 2)


@contextlib.contextmanager
def op(name, group="", nbytes=0):
    begin(name, group, nbytes)
    try:
        yield
    finally:
        end()


def enabled():
    """True when this process writes a progress file dtrun reads."""
    return _map is not None


def mark_store_connected():
    _update([(48, "<q", time.time_ns())])


def mark_communicator_ready():
    _update([(56, "<q", time.time_ns())])


_open()
