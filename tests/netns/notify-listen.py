#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Stands in for systemd's notify socket: prints each sd_notify message with
the milliseconds since this listener started, and on READY=1 whether the
given files (the agent's link pins) already existed at that moment.

    notify-listen.py SOCKET [FILE...]
"""
import os
import socket
import sys
import time

path, files = sys.argv[1], sys.argv[2:]
start = time.monotonic()
if os.path.exists(path):
    os.unlink(path)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
print("listening", flush=True)
while True:
    data = sock.recv(65536).decode(errors="replace")
    ms = (time.monotonic() - start) * 1000
    for line in data.splitlines():
        extra = ""
        if line == "READY=1" and files:
            extra = " attached=" + ("yes" if all(os.path.exists(f) for f in files) else "no")
        print(f"{ms:.1f} {line}{extra}", flush=True)
