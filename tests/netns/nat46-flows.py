#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Servers that answer with their name and IPv4 clients that count which
server answered, for tests/netns/nat46-gateway.sh (not a test itself).

  udp-server ADDR PORT NAME ERRORS answer each datagram with NAME ("twice": again
                                   0.5 s later); append "refused ADDR PORT" to
                                   ERRORS for each ICMPv6 error about an answer
  tcp-server ADDR PORT NAME        answer each line of each connection with NAME;
                                   "big SIZE" with NAME then SIZE - len(NAME) bytes
  tcp-big VIP PORT SIZE            asks for SIZE bytes; prints "RECEIVED NAME"
  udp-flows VIP PORT FIRST COUNT [WAIT]
                                   one flow from each source port FIRST..;
                                   prints "PORT NAME" per flow ("PORT -"
                                   unanswered after WAIT s twice, default 2;
                                   "PORT refused" on an ICMP error)
  udp-closing VIP PORT SPORT       asks "twice" from SPORT, prints who answered,
                                   and closes the port before the second answer
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


def udp_server(addr, port, name, errors):
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    # Errors about answers are reported to this unconnected socket too.
    sock.setsockopt(socket.IPPROTO_IPV6, 25, 1)  # IPV6_RECVERR (linux/in6.h)
    sock.bind((addr, int(port)))
    log = open(errors, "a", buffering=1)
    while True:
        try:
            data, peer = sock.recvfrom(2048)
        except ConnectionRefusedError:
            # The datagram the error was about, and where it was sent.
            _, _, _, dest = sock.recvmsg(2048, 512, socket.MSG_ERRQUEUE)
            log.write(f"refused {dest[0]} {dest[1]}\n")
            continue
        sock.sendto(name.encode(), peer)
        if data == b"twice":
            time.sleep(0.5)
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
            if data.startswith(b"big "):
                size = int(data.split()[1])
                key.fileobj.settimeout(20)  # blocking, as long as the path needs
                try:
                    key.fileobj.sendall(name.encode() + bytes(size - len(name)))
                except OSError:
                    pass
                key.fileobj.setblocking(False)
                continue
            key.fileobj.sendall((name + "\n").encode() * data.count(b"\n"))


def udp_flows(vip, port, first, count, wait="2"):
    first, count = int(first), int(count)
    out = []
    for sport in range(first, first + count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", sport))
        sock.connect((vip, int(port)))  # connected: ICMP errors come to it
        sock.settimeout(float(wait))
        name = "-"
        for _ in range(2):  # one retry: a first packet may meet a neighbour lookup
            sock.send(b"?")
            try:
                name = sock.recv(64).decode()
                break
            except ConnectionRefusedError:
                name = "refused"
                break
            except socket.timeout:
                pass
        sock.close()
        out.append(f"{sport} {name}")
    print("\n".join(out))


def udp_closing(vip, port, sport):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", int(sport)))
    sock.connect((vip, int(port)))
    sock.settimeout(5)
    sock.send(b"twice")
    print(sock.recv(64).decode())
    sock.close()


def tcp_big(vip, port, size):
    conn = socket.create_connection((vip, int(port)), timeout=20)
    conn.sendall(f"big {size}\n".encode())
    data = b""
    try:
        while len(data) < int(size):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    print(len(data), data[:2].decode())


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
    commands = {
        "udp-server": udp_server,
        "tcp-server": tcp_server,
        "udp-flows": udp_flows,
        "udp-closing": udp_closing,
        "tcp-hold": tcp_hold,
        "tcp-big": tcp_big,
    }
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
