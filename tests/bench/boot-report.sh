#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Injected into a booted image by tests/bench/image: reports the boot's timing.
exec 3>/dev/virtio-ports/org.v6node.test
systemctl is-system-running --wait >/dev/null
{
    systemd-analyze time
    echo "# slowest services:"
    systemd-analyze blame --no-pager | grep '\.service$' | head -n 8
    echo "# critical chain:"
    systemd-analyze critical-chain --no-pager multi-user.target
} >&3 2>&1
exec 3>&-
systemctl poweroff --no-block
