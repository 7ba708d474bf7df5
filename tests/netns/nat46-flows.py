#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Servers that answer with their name and IPv4 clients that count which
server answered, for tests/netns/nat46-gateway.sh (not a test itself).

  udp-server ADDR PORT NAME        answer each datagram with NAME
  tcp-server ADDR PORT NAME        answer each line of each connection with NAME
  udp-flows VIP PORT FIRST COUNT   one flow from each source port FIRST..;
                                   prints "PORT NAME" per flow ("PORT -" unanswered)
  tcp-hold VIP PORT COUNT GO OUT   COUNT connections, each answered; writes
                                   the names that answered to OUT.names and
                                   "open N" to OUT, then once GO exists asks
                                   each again and adds "same K": K answered
                                   by the backend that answered first
"""
import os
import selectors
import socket
import sys
import time


def udp_server(addr, port, name):
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.bind((addr, int(port)))
    while True:
        _, peer = sock.recvfrom(2048)
        sock.sendto(name.encode(), peer)


def tcp_server(addr, port, name):
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addr, int(port)))
    listener.listen(1024)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
                continue
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                continue
            key.fileobj.sendall((name + "\n").encode() * data.count(b"\n"))


def udp_flows(vip, port, first, count):
    first, count = int(first), int(count)
    out = []
    for sport in range(first, first + count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", sport))
        sock.settimeout(2)
        name = "-"
        for _ in range(2):  # one retry: a first packet may meet a neighbour lookup
            sock.sendto(b"?", (vip, int(port)))
            try:
                name = sock.recv(64).decode()
                break
            except socket.timeout:
                pass
        sock.close()
        out.append(f"{sport} {name}")
    print("\n".join(out))


def ask(conn):
    conn.sendall(b"?\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            return None
        data += chunk
    return data.decode().strip()


def tcp_hold(vip, port, count, go, out):
    conns = []
    for _ in range(int(count)):
        conn = socket.create_connection((vip, int(port)), timeout=10)
        conns.append((conn, ask(conn)))
    opened = sum(1 for _, name in conns if name)
    with open(out + ".names", "w") as f:
        f.write("".join(f"{name}\n" for _, name in conns))
    with open(out, "w") as f:
        f.write(f"open {opened}\n")
    while not os.path.exists(go):
        time.sleep(0.2)
    same = 0
    for conn, name in conns:
        try:
            same += ask(conn) == name
        except OSError:
            pass
    with open(out, "w") as f:
        f.write(f"open {opened} same {same}\n")


if __name__ == "__main__":
    commands = {"udp-server": udp_server, "tcp-server": tcp_server, "udp-flows": udp_flows, "tcp-hold": tcp_hold}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
