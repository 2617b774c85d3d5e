#!/usr/bin/python3
"""Unmodified torch 1.13 TCPStore clients against a dtrun store: every Python-binding operation.

Usage: /usr/bin/python3 torch_store_ops.py PORT

Checks, with exact expected results: the properties host/port/timeout; set/get (text, binary,
empty and 1 MiB values); add (missing key, negative delta, result read back as decimal ASCII);
wait on one and several keys, on no keys, woken later by a second client's set/add/compare_set
(several keys set at different times); compare_set in all four cases, including upstream's quirk
compare_set("nokey", "x", "y") == b"x" with nothing stored; num_keys (which counts the client's
own "init/" key); delete_key twice; set_timeout (then a wait without explicit timeout raises);
wait with a timeout that raises; a client that goes away while waiting; an ADD on a non-numeric
value (the server drops that connection and keeps serving); PrefixStore key composition; and that
two clients share one key space. The binding has no check()/watch_key() in 1.13 (C++ only).
Every blocking call has a bounded timeout. Exits 1 with a message on the first mismatch.
"""
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

TIMEOUT = timedelta(seconds=10)


def fail(msg):
    print(f"torch_store_ops: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def expect(what, actual, expected):
    if actual != expected or type(actual) is not type(expected):
        fail(f"{what}: expected {expected!r}, got {actual!r}")


def expect_raises(what, fn, max_seconds):
    """fn() must raise RuntimeError within max_seconds; returns the elapsed time."""
    start = time.monotonic()
    try:
        fn()
    except RuntimeError:
        elapsed = time.monotonic() - start
        if elapsed > max_seconds:
            fail(f"{what}: raised only after {elapsed:.2f}s (limit {max_seconds}s)")
        return elapsed
    fail(f"{what}: expected RuntimeError, got a normal return")


def later(delay, fn):
    """Runs fn after delay seconds on a daemon thread; returns the thread."""
    t = threading.Thread(target=lambda: (time.sleep(delay), fn()), daemon=True)
    t.start()
    return t


def client(port):
    # Not the master: only connects (and sends ADD "init/" 1, as every 1.13 client does).
    return dist.TCPStore("127.0.0.1", port, 1, False, TIMEOUT)


def main():
    port = int(sys.argv[1])
    s = client(port)
    expect("host", s.host, "127.0.0.1")
    expect("port", s.port, port)
    expect("timeout", s.timeout, TIMEOUT)
    expect("num_keys() on a fresh server (the client's init/ key)", s.num_keys(), 1)

    # set / get
    s.set("key0", "value0")
    expect('get("key0")', s.get("key0"), b"value0")
    s.set("key0", "value1")
    expect('get("key0") after overwrite', s.get("key0"), b"value1")
    s.set("empty", "")
    expect('get("empty")', s.get("empty"), b"")
    binary = bytes(range(256)) * 4
    s.set("binary", binary)
    expect('get("binary") (all 256 byte values)', s.get("binary"), binary)
    big = bytes((i * 7) & 0xFF for i in range(1 << 20))
    s.set("big", big)
    expect('get("big") (1 MiB)', s.get("big"), big)
    s.set("ключ/ü", "wert")
    expect("get(non-ASCII key)", s.get("ключ/ü"), b"wert")

    # add: missing key starts at 0; negative deltas; the value is decimal ASCII
    expect('add("cnt", 5)', s.add("cnt", 5), 5)
    expect('add("cnt", -2)', s.add("cnt", -2), 3)
    expect('add("cnt", 0)', s.add("cnt", 0), 3)
    expect('get("cnt")', s.get("cnt"), b"3")
    expect('add("neg", -7)', s.add("neg", -7), -7)
    expect('get("neg")', s.get("neg"), b"-7")
    s.set("num", "40")
    expect('add("num", 2) on a set value', s.add("num", 2), 42)

    # wait on keys that exist, and on no keys
    s.wait(["key0"])
    s.wait(["key0", "cnt", "empty"], TIMEOUT)
    s.wait([], TIMEOUT)

    # compare_set, all four cases
    expect('compare_set("cas", "", "v1") (missing, empty expected: creates)',
           s.compare_set("cas", "", "v1"), b"v1")
    expect('get("cas")', s.get("cas"), b"v1")
    expect('compare_set("cas", "wrong", "v2") (mismatch: unchanged)',
           s.compare_set("cas", "wrong", "v2"), b"v1")
    expect('compare_set("cas", "v1", "v2") (match: swaps)', s.compare_set("cas", "v1", "v2"), b"v2")
    expect('get("cas") after swap', s.get("cas"), b"v2")
    expect('compare_set("nokey", "x", "y") (missing, non-empty expected: returns expected)',
           s.compare_set("nokey", "x", "y"), b"x")

    # num_keys: init/ key0 empty binary big ключ/ü cnt neg num cas (nokey was not stored)
    expect("num_keys()", s.num_keys(), 10)

    # delete_key twice
    expect('delete_key("cas")', s.delete_key("cas"), True)
    expect('delete_key("cas") again', s.delete_key("cas"), False)
    expect('delete_key("nokey") (never stored)', s.delete_key("nokey"), False)
    expect("num_keys() after delete", s.num_keys(), 9)

    # A second client shares the key space (its init/ ADD reuses the same key).
    s2 = client(port)
    expect("num_keys() seen by client 2", s2.num_keys(), 9)
    expect('client 2 get("key0")', s2.get("key0"), b"value1")
    expect('client 2 add("cnt", 10)', s2.add("cnt", 10), 13)
    expect('client 1 add("cnt", 0)', s.add("cnt", 0), 13)
    s2.set("from2", "hello")
    expect('client 1 get("from2")', s.get("from2"), b"hello")
    expect('client 2 delete_key("from2")', s2.delete_key("from2"), True)
    expect('client 1 delete_key("from2") after client 2 deleted it', s.delete_key("from2"), False)

    # PrefixStore (what init_process_group wraps around the agent store) composes "prefix/key".
    p = dist.PrefixStore("worker/attempt_0", s)
    p.set("x", "px")
    expect('get("worker/attempt_0/x") through the plain store', s2.get("worker/attempt_0/x"), b"px")
    expect("PrefixStore add", p.add("c", 4), 4)

    # wait woken later by another client: set, add, compare_set; several keys at different times
    later(0.3, lambda: s2.set("late", "x"))
    start = time.monotonic()
    s.wait(["late"], TIMEOUT)
    if time.monotonic() - start < 0.2:
        fail('wait(["late"]) returned before client 2 set the key')
    expect('get("late")', s.get("late"), b"x")

    later(0.2, lambda: s2.add("late_add", 1))
    s.wait(["late_add"], TIMEOUT)
    expect('get("late_add")', s.get("late_add"), b"1")

    later(0.2, lambda: s2.compare_set("late_cas", "", "c"))
    s.wait(["late_cas"], TIMEOUT)
    expect('get("late_cas")', s.get("late_cas"), b"c")

    t1 = later(0.2, lambda: s2.set("m1", "1"))
    t1.join(5)
    later(0.4, lambda: s2.set("m2", "2"))
    start = time.monotonic()
    s.wait(["m1", "m2", "key0"], TIMEOUT)
    if time.monotonic() - start < 0.3:
        fail('wait(["m1","m2","key0"]) returned before m2 was set')
    expect('get("m2")', s.get("m2"), b"2")

    # get() blocks until the key appears (the client WAITs first)
    later(0.2, lambda: s2.set("late_get", "g"))
    expect('get("late_get") set later', s.get("late_get"), b"g")

    # Timeouts. A 1.13 client has no CANCEL_WAIT: after a timed-out wait its connection would read
    # a stale reply, so each timeout uses its own client, which is then dropped.
    s3 = client(port)
    elapsed = expect_raises('wait(["never"], 300 ms)',
                            lambda: s3.wait(["never"], timedelta(milliseconds=300)), 5)
    if elapsed < 0.25:
        fail(f'wait(["never"], 300 ms) raised after only {elapsed:.2f}s')
    del s3  # closes its connections while the server still holds its wait

    s4 = client(port)
    s4.set_timeout(timedelta(milliseconds=300))
    expect("timeout after set_timeout", s4.timeout, timedelta(milliseconds=300))
    expect_raises('wait(["never2"]) after set_timeout(300 ms)', lambda: s4.wait(["never2"]), 5)
    del s4

    s5 = client(port)
    s5.set_timeout(timedelta(milliseconds=300))
    expect_raises('get("never3") after set_timeout(300 ms)', lambda: s5.get("never3"), 5)
    del s5

    # The key the dropped clients waited for appears now; the server must not trip over them.
    s2.set("never", "now")
    s2.set("never2", "now")
    expect('get("never") after its waiter left', s.get("never"), b"now")

    # ADD on a non-numeric value: the server closes that connection and keeps serving others.
    s6 = client(port)
    expect_raises('add("key0", 1) on a non-numeric value', lambda: s6.add("key0", 1), 5)
    del s6
    expect('get("key0") after a bad ADD', s.get("key0"), b"value1")
    expect('get("cnt")', s2.get("cnt"), b"13")

    # Final tally: 9 + late late_add late_cas m1 m2 late_get never never2
    # + worker/attempt_0/x worker/attempt_0/c
    expect("final num_keys()", s.num_keys(), 19)
    print("torch_store_ops: all TCPStore operations ok", flush=True)


if __name__ == "__main__":
    main()
