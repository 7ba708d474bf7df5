#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints where the partitions of a GPT disk image are, for the tests and
benchmarks that look inside a built image without loop devices:

    partition.py IMAGE           one line per partition: NAME OFFSET SIZE (bytes)
    partition.py IMAGE NAME      OFFSET SIZE of that partition (exit 1 if absent)

NAME is the Discoverable Partitions Specification's name of the type (esp,
usr, usr-verity, root) for the x86-64 types v6node uses.
"""
import struct
import sys
import uuid

TYPES = {
    "c12a7328-f81f-11d2-ba4b-00a0c93ec93b": "esp",
    "8484680c-9521-48c6-9c11-b0720656f69e": "usr",
    "77ff5f63-e7b6-4633-acf4-1565b864c0e6": "usr-verity",
    "4f68bce3-e8cd-4db1-96e7-fbcaf984b709": "root",
}
SECTOR = 512


def partitions(path):
    with open(path, "rb") as image:
        image.seek(SECTOR)
        header = image.read(92)
        if header[:8] != b"EFI PART":
            sys.exit(f"{path}: no GPT header")
        entries_lba, count, entry_size = struct.unpack("<QII", header[72:88])
        image.seek(entries_lba * SECTOR)
        for _ in range(count):
            entry = image.read(entry_size)
            kind = str(uuid.UUID(bytes_le=entry[:16]))
            if kind in TYPES:
                first, last = struct.unpack("<QQ", entry[32:48])
                yield TYPES[kind], first * SECTOR, (last - first + 1) * SECTOR


def main():
    found = list(partitions(sys.argv[1]))
    if len(sys.argv) == 2:
        for name, offset, size in found:
            print(name, offset, size)
        return
    for name, offset, size in found:
        if name == sys.argv[2]:
            print(offset, size)
            return
    sys.exit(f"{sys.argv[1]}: no {sys.argv[2]} partition")


if __name__ == "__main__":
    main()
