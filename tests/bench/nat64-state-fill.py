#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fills stateful NAT64's state table for tests/bench/nat64-stateful (RFC 9693
fills the state table before it measures): COUNT bindings, two entries each,
of clients under 2001:db8:ff::/64 on pool addresses from 198.18.0.0, which
the configured pool does not hold (no port of its queues is taken), live for
as long as UDP bindings live. Layout: struct v6n_ct_key / v6n_ct_value (abi.h).

  nat64-state-fill.py PINNED_MAP COUNT [FIRST]   (bindings FIRST.., default 0)
"""
import ctypes
import ipaddress
import struct
import sys
import time

SYS_BPF = 321  # x86_64
BPF_MAP_UPDATE_ELEM = 2
BPF_OBJ_GET = 7
CT_REPLY = 1
UDP = 17

libc = ctypes.CDLL(None, use_errno=True)


def bpf(command, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    rc = libc.syscall(SYS_BPF, command, buf, 128)
    if rc < 0:
        raise OSError(ctypes.get_errno(), f"bpf({command})")
    return rc


def main():
    path, count = sys.argv[1].encode(), int(sys.argv[2])
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    path_buf = ctypes.create_string_buffer(path)
    fd = bpf(BPF_OBJ_GET, struct.pack("=QII", ctypes.addressof(path_buf), 0, 0))
    key = ctypes.create_string_buffer(40)
    value = ctypes.create_string_buffer(56)
    update = struct.Struct("=IIQQQ")
    now = time.monotonic_ns()
    base6 = int(ipaddress.IPv6Address("2001:db8:ff::"))
    base4 = int(ipaddress.IPv4Address("198.18.0.0"))
    for i in range(first, first + count):
        client = (base6 + i).to_bytes(16, "big")
        pool = b"\0" * 10 + b"\xff\xff" + (base4 + i // 60000).to_bytes(4, "big")
        port = struct.pack("!H", 1024 + i % 60000)
        client_port = struct.pack("!H", 40000)
        # The client side: its transport address -> the pool's.
        key.raw = client + b"\0" * 16 + client_port + b"\0\0" + bytes([UDP, 0, 0, 0])
        value.raw = pool + b"\0" * 16 + port + b"\0\0" + b"\0" * 4 + b"\0" * 8 + b"\0" * 8
        bpf(BPF_MAP_UPDATE_ELEM, update.pack(fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0))
        # The pool side, where the lifetime lives.
        key.raw = b"\0" * 16 + pool + b"\0\0" + port + bytes([UDP, 0, 0, 0])
        value.raw = (
            b"\0" * 16 + client + b"\0\0" + client_port + b"\0" * 4 + struct.pack("=Q", now) + b"\0" * 4 + bytes([CT_REPLY, 0, 0, 0])
        )
        bpf(BPF_MAP_UPDATE_ELEM, update.pack(fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0))


if __name__ == "__main__":
    main()
