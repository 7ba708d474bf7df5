# SPDX-License-Identifier: Apache-2.0
"""SCTP packets through raw sockets, for kernels without SCTP (the test
host's): what the datapath translates is the packet, so a packet is enough.

  sctp-raw.py serve NAME ADDRESS PORT   answers each packet to ADDRESS:PORT
                                        whose CRC32c is right with NAME
  sctp-raw.py ask ADDRESS PORT SPORT    sends one, prints the answer:
                                        "NAME from [ADDRESS]:PORT"
  sctp-raw.py init ADDRESS PORT SPORT   sends an INIT to a real SCTP stack,
                                        prints "INIT ACK from [ADDRESS]:PORT"

Each packet is an SCTP common header and one DATA chunk (RFC 9260), its
checksum computed here; a packet whose checksum is wrong is reported on
stderr and not answered, as an SCTP stack drops it.
"""
import socket
import struct
import sys

SCTP = 132


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def packet(sport, dport, text):
    body = text.encode()
    chunk = struct.pack("!BBH", 0, 3, 4 + len(body)) + body
    chunk += b"\0" * (-len(chunk) % 4)
    header = struct.pack("!HHI", sport, dport, 0x76366E64) + b"\0" * 4
    crc = crc32c(header + chunk)
    return header[:8] + struct.pack("<I", crc) + chunk


def parse(data):
    """(sport, dport, text, checksum right?) of a packet as it arrived."""
    sport, dport = struct.unpack("!HH", data[:4])
    (stored,) = struct.unpack("<I", data[8:12])
    ok = crc32c(data[:8] + b"\0" * 4 + data[12:]) == stored
    length = struct.unpack("!H", data[14:16])[0]
    return sport, dport, data[16:12 + length].decode(errors="replace"), ok


def serve(name, address, port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, SCTP)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    while True:
        data, ancillary, _, peer = s.recvmsg(65535, 256)
        local = next((socket.inet_ntop(socket.AF_INET6, d[:16]) for level, kind, d in ancillary
                      if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO), None)
        sport, dport, _, ok = parse(data)
        if local != address or dport != port:
            continue
        if not ok:
            print(f"{name}: bad checksum from [{peer[0]}]:{sport}", file=sys.stderr, flush=True)
            continue
        s.sendto(packet(dport, sport, name), (peer[0], 0))


def ask(address, port, sport):
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, SCTP)
    s.settimeout(2)
    s.sendto(packet(sport, port, "query"), (address, 0))
    while True:
        data, peer = s.recvfrom(65535)
        rsport, rdport, text, ok = parse(data)
        if rdport != sport:
            continue
        if not ok:
            sys.exit(f"bad checksum on the answer from [{peer[0]}]:{rsport}")
        print(f"{text} from [{peer[0]}]:{rsport}")
        return


def init(address, port, sport):
    """An INIT (RFC 9260 3.3.2): a listening SCTP stack answers INIT ACK,
    after checking the packet's checksum; tried three times."""
    tag = 0x76366E64
    chunk = struct.pack("!BBHIIHHI", 1, 0, 20, tag, 65535, 1, 1, 1)
    header = struct.pack("!HHI", sport, port, 0) + b"\0" * 4
    crc = crc32c(header + chunk)
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, SCTP)
    s.settimeout(2)
    for _ in range(3):
        s.sendto(header[:8] + struct.pack("<I", crc) + chunk, (address, 0))
        try:
            while True:
                data, peer = s.recvfrom(65535)
                rsport, rdport = struct.unpack("!HH", data[:4])
                (vtag,) = struct.unpack("!I", data[4:8])
                if rdport != sport or vtag != tag:
                    continue
                (stored,) = struct.unpack("<I", data[8:12])
                if crc32c(data[:8] + b"\0" * 4 + data[12:]) != stored:
                    sys.exit(f"bad checksum on the answer from [{peer[0]}]:{rsport}")
                kind = {2: "INIT ACK", 6: "ABORT"}.get(data[12], f"chunk {data[12]}")
                print(f"{kind} from [{peer[0]}]:{rsport}")
                return
        except socket.timeout:
            continue
    sys.exit(f"no answer from [{address}]:{port}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "init":
        init(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        ask(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
