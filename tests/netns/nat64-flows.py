#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Many flows at once for tests/netns/nat64-stateful.sh (not a test itself).

  tcp-server ADDR PORT PEERS    echo lines ("big SIZE": answer SIZE bytes instead);
                                append each peer "ADDR PORT" to PEERS
  tcp-clients TARGET PORT N GO RESULT
                                open N connections, check an echo on each, write
                                "open K" to RESULT; once the file GO exists, check
                                an echo on each again and write "open K alive L"
  tcp-big TARGET PORT SIZE      asks for SIZE bytes; prints how many arrived
  udp-server ADDR PORT          echo datagrams
  udp-flows TARGET PORT N       N sockets, one datagram each, then the first N-1
                                again; prints "first A again B" (answers counted)
"""
import asyncio
import os
import socket
import sys


async def tcp_server(addr, port, peers_path):
    peers = open(peers_path, "a", buffering=1)

    async def serve(reader, writer):
        host, peer_port = writer.get_extra_info("peername")[:2]
        peers.write(f"{host} {peer_port}\n")
        try:
            while line := await reader.readline():
                writer.write(bytes(int(line.split()[1])) if line.startswith(b"big ") else line)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    server = await asyncio.start_server(serve, addr, int(port), backlog=4096)
    async with server:
        await server.serve_forever()


async def echo(conn, text):
    reader, writer = conn
    try:
        writer.write(text)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 10) == text
    except (ConnectionError, asyncio.TimeoutError):
        return False


async def tcp_clients(target, port, count, go, result):
    conns = []
    for _ in range(int(count)):
        try:
            conns.append(await asyncio.wait_for(asyncio.open_connection(target, int(port)), 10))
        except (OSError, asyncio.TimeoutError):
            pass
    opened = sum(await asyncio.gather(*(echo(c, b"before\n") for c in conns)))
    with open(result, "w") as out:
        out.write(f"open {opened}\n")
    while not os.path.exists(go):
        await asyncio.sleep(0.1)
    alive = sum(await asyncio.gather(*(echo(c, b"after\n") for c in conns)))
    with open(result, "w") as out:
        out.write(f"open {opened} alive {alive}\n")


def tcp_big(target, port, size):
    conn = socket.create_connection((target, int(port)), timeout=20)
    conn.sendall(f"big {size}\n".encode())
    received = 0
    try:
        while received < int(size) and (chunk := conn.recv(65536)):
            received += len(chunk)
    except socket.timeout:
        pass
    print(received)


def udp_server(addr, port):
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, int(port)))
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)


def answered(sockets):
    for s in sockets:
        s.send(b"flow")
    count = 0
    for s in sockets:
        try:
            count += s.recv(2048) == b"flow"
        except (socket.timeout, ConnectionRefusedError):
            pass
    return count


def udp_flows(target, port, count):
    sockets = []
    for _ in range(int(count)):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.connect((target, int(port)))
        sockets.append(s)
    first = answered(sockets)
    again = answered(sockets[:-1])
    print(f"first {first} again {again}")


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "tcp-server":
        asyncio.run(tcp_server(*args))
    elif command == "tcp-clients":
        asyncio.run(tcp_clients(*args))
    elif command == "tcp-big":
        tcp_big(*args)
    elif command == "udp-server":
        udp_server(*args)
    elif command == "udp-flows":
        udp_flows(*args)
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
