# SPDX-License-Identifier: Apache-2.0
# Inside the VM tests/bench/in-image boots (after tests/lib.sh): stops the
# node's own agent and its programs (their socket hooks sit on the root
# cgroup, which every process of the benchmark is in), then runs
# tests/bench/NAME in a chroot of the host's root, read from the 9p share
# v6node-host with a tmpfs over it. Writes everything to the results port and
# ends with "# in-image: exit STATUS", then powers the VM off.
set -uo pipefail
creds=${CREDENTIALS_DIRECTORY:?}
exec >/dev/virtio-ports/org.v6node.test 2>&1
top=$(cat "$creds/v6node.test.top")
bench=$(cat "$creds/v6node.test.bench")
mapfile -t assignments <"$creds/v6node.test.env"
finish() {
    echo "# in-image: exit $1"
    systemctl poweroff --no-block
    exit 0
}
echo "# guest kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB"
systemctl stop v6node-dataplane.service
v6node-dataplane detach --force || echo "# the node's agent left programs attached"

base=/run/v6node-bench
chroot_root=$base/root
mkdir -p "$base/host" "$base/rw" "$chroot_root"
modprobe -a 9p 9pnet_virtio overlay || finish 1
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=1048576,cache=loose v6node-host "$base/host" || finish 1
mount -t tmpfs tmpfs "$base/rw" && mkdir "$base/rw/upper" "$base/rw/work" || finish 1
mount -t overlay overlay -o "lowerdir=$base/host,upperdir=$base/rw/upper,workdir=$base/rw/work" "$chroot_root" || finish 1
mount -t proc proc "$chroot_root/proc" &&
    mount --rbind /sys "$chroot_root/sys" &&
    mount --rbind /dev "$chroot_root/dev" &&
    mount -t tmpfs tmpfs "$chroot_root/run" &&
    mount -t tmpfs tmpfs "$chroot_root/tmp" || finish 1
echo "# tests/bench/$bench ${assignments[*]}"
chroot "$chroot_root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    "${assignments[@]}" bash -c 'cd "$1" && exec "tests/bench/$2"' - "$top" "$bench"
finish $?
