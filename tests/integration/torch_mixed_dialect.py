#!/usr/bin/python3
"""A torch >= 2.2-dialect client and a torch 1.13 client share one dtrun store's key space.

Usage: /usr/bin/python3 torch_mixed_dialect.py PORT

No torch 2.x is installed here, so the >= 2.2 side is a raw socket written from the protocol:
VALIDATE (00 ce f7 85 3c), then PING (0d + u32 nonce) whose nonce must be echoed; requests are one
opcode byte plus u64-length-prefixed strings and little-endian integers. The 1.13 side is the
unmodified torch.distributed.TCPStore, which prefixes every key with "/".

Checks: the handshake; a key set by either dialect is read by the other; an ADD counter shared
by both; a WAIT in one dialect woken by a SET in the other, both ways; CHECK, GETNUMKEYS and
DELETE_KEY agree across dialects; a connection opening with a wrong VALIDATE magic is closed.
Exits 1 with a message on the first mismatch.
"""
import os
import socket
import struct
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

# torch >= 2.2 opcodes
VALIDATE, SET, GET, ADD, CHECK, WAIT, NUM_KEYS, DELETE_KEY, PING = 0, 1, 3, 4, 5, 6, 7, 8, 13
MAGIC = 0x3C85F7CE


def fail(msg):
    print(f"torch_mixed_dialect: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def expect(what, actual, expected):
    if actual != expected:
        fail(f"{what}: expected {expected!r}, got {actual!r}")


def string(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(string(k) for k in ks)


class V2Client:
    """A minimal torch >= 2.2 TCPStore client over one socket (10 s timeout on every read)."""

    def __init__(self, port, magic=MAGIC):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(struct.pack("<BI", VALIDATE, magic))

    def ping(self):
        nonce = os.getpid() & 0xFFFFFFFF
        self.sock.sendall(struct.pack("<BI", PING, nonce))
        expect("PING echo", struct.unpack("<I", self.recv(4))[0], nonce)

    def recv(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                fail(f"connection closed by the server ({len(data)} of {n} bytes read)")
            data += chunk
        return data

    def u8(self):
        return self.recv(1)[0]

    def i64(self):
        return struct.unpack("<q", self.recv(8))[0]

    def bytes_(self):
        return self.recv(struct.unpack("<Q", self.recv(8))[0])

    def set(self, key, value):
        self.sock.sendall(bytes([SET]) + string(key) + string(value))

    def get(self, key):
        self.sock.sendall(bytes([GET]) + string(key))
        return self.bytes_()

    def add(self, key, delta):
        self.sock.sendall(bytes([ADD]) + string(key) + struct.pack("<q", delta))
        return self.i64()

    def check(self, *ks):
        self.sock.sendall(bytes([CHECK]) + keys(*ks))
        return self.u8()

    def wait(self, *ks):
        self.sock.sendall(bytes([WAIT]) + keys(*ks))
        return self.u8()

    def num_keys(self):
        self.sock.sendall(bytes([NUM_KEYS]))
        return self.i64()

    def delete_key(self, key):
        self.sock.sendall(bytes([DELETE_KEY]) + string(key))
        return self.i64()


def main():
    port = int(sys.argv[1])
    v2 = V2Client(port)
    v2.ping()
    old = dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=10))

    # A key set in one dialect is read in the other.
    v2.set("/shared", "from-v2")
    expect("1.13 get('shared') of a key set by the v2 client", old.get("shared"), b"from-v2")
    old.set("back", "from-113")
    expect("v2 WAIT ['/back']", v2.wait("/back"), 0)
    expect("v2 GET '/back' of a key set by the 1.13 client", v2.get("/back"), b"from-113")

    # One counter, two dialects.
    expect("1.13 add('mix', 1)", old.add("mix", 1), 1)
    expect("v2 ADD '/mix' 2", v2.add("/mix", 2), 3)
    expect("1.13 get('mix')", old.get("mix"), b"3")

    # A v2 WAIT is released by a 1.13 SET, and a 1.13 wait by a v2 SET.
    t = threading.Thread(target=lambda: (time.sleep(0.3), old.set("later", "x")), daemon=True)
    t.start()
    expect("v2 WAIT ['/later'] released by the 1.13 client", v2.wait("/later"), 0)
    t.join(10)
    t = threading.Thread(target=lambda: (time.sleep(0.3), v2.set("/later2", "y")), daemon=True)
    t.start()
    old.wait(["later2"], timedelta(seconds=10))
    t.join(10)
    expect("1.13 get('later2')", old.get("later2"), b"y")

    # CHECK, GETNUMKEYS and DELETE_KEY see the same keys.
    expect("v2 CHECK ['/shared', '/missing']", v2.check("/shared", "/missing"), 1)
    expect("v2 CHECK ['/shared', '/back']", v2.check("/shared", "/back"), 0)
    # init/ /shared /back /mix /later /later2
    expect("v2 GETNUMKEYS", v2.num_keys(), 6)
    expect("1.13 num_keys()", old.num_keys(), 6)
    expect("v2 DELETE_KEY '/shared'", v2.delete_key("/shared"), 1)
    expect("1.13 delete_key('shared') after the v2 delete", old.delete_key("shared"), False)
    expect("1.13 num_keys() after delete", old.num_keys(), 5)

    # A wrong VALIDATE magic reads as a SET with an absurd key length: the server closes.
    bad = V2Client(port, magic=0xEFBEADDE)
    bad.sock.sendall(struct.pack("<BI", PING, 1))
    try:
        if bad.sock.recv(1) != b"":
            fail("wrong VALIDATE magic: the server replied instead of closing")
    except ConnectionResetError:
        pass
    except socket.timeout:
        fail("wrong VALIDATE magic: the connection stayed open for 10 s")
    v2.ping()  # the good connection still works
    print("torch_mixed_dialect: torch>=2.2-style client and torch 1.13 client share one store: ok",
          flush=True)


if __name__ == "__main__":
    main()
