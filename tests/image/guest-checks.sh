#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Runs inside a booted v6node image (started by v6node-test.service, see
# qemu.sh) and reports TAP lines on the virtio port org.v6node.test.
# The scenario (which checks) comes from the credential v6node.test.scenario;
# expected boot arguments from v6node.test.cmdline.
set -uo pipefail

creds=${CREDENTIALS_DIRECTORY:?}
scenario=$(cat "$creds/v6node.test.scenario")
# TAP goes to the host through the virtio port (pass_if, tap_done: tests/lib.sh,
# which boot-test sends along ahead of this script).
exec >/dev/virtio-ports/org.v6node.test
TAP_VERBOSE=1

uplink=$(for dev in /sys/class/net/*; do
    [[ -e "$dev/device" && "$(cat "$dev/type")" == 1 ]] && { basename "$dev"; break; }
done)

# --- checks, one function each --------------------------------------------

system_running() {
    local state
    state=$(systemctl is-system-running --wait)
    echo "system state: $state"
    systemctl --failed --no-legend --plain
    [[ "$state" == running ]]
}

units_documentation_exists() {
    # Each vendor unit's Documentation=file: points into /usr/share/doc/v6node,
    # which the image must carry (the docs moved out of the README once).
    local unit doc missing=0 seen=0
    for unit in /usr/lib/systemd/system/v6node-* /usr/lib/systemd/system/*.d/*v6node*; do
        for doc in $(sed -n 's/^Documentation=//p' "$unit"); do
            [[ "$doc" == file:* ]] || continue
            seen=$((seen + 1))
            [[ -s "${doc#file:}" ]] || { echo "$unit: $doc is missing"; missing=1; }
        done
    done
    echo "$seen documentation files named"
    ((seen > 0 && !missing))
}

boots_to_multi_user() {
    [[ "$(systemctl get-default)" == multi-user.target ]] || { systemctl get-default; return 1; }
}

only_listed_units_enabled() {
    # Presets are an allowlist (99-v6node-default.preset): nothing else runs.
    local enabled unexpected
    enabled=$(systemctl list-unit-files --state=enabled --no-legend | awk '{print $1}' | sort)
    unexpected=$(grep -vxF -f <(grep -h '^enable ' /usr/lib/systemd/system-preset/*.preset | awk '{print $2}' | sort -u) <<<"$enabled")
    echo "enabled:" $enabled
    [[ -z "$unexpected" ]] || { echo "enabled but in no preset: $unexpected"; return 1; }
}

no_failed_units() {
    local failed_units
    failed_units=$(systemctl --failed --no-legend --plain)
    [[ -z "$failed_units" ]] || { echo "$failed_units"; return 1; }
}

kernel_config() { /usr/lib/v6node/kernel-config/check; }

netkit_works() {
    ip link add nktest type netkit peer name nktest-peer &&
        ip -d link show nktest | grep -q netkit &&
        ip link del nktest
}

sysctls_in_effect() {
    local key want have bad=0
    # Unquoted echo folds the tabs and spaces of multi-value keys (tcp_rmem).
    while IFS='=' read -r key want; do
        key=$(echo $key) want=$(echo $want) have=$(echo $(sysctl -n "$key" 2>&1))
        if [[ "$have" != "$want" ]]; then
            echo "$key: want '$want', have '$have'"
            bad=1
        fi
    done < <(grep -hv '^[[:space:]]*\(#\|$\)' /usr/lib/sysctl.d/60-v6node.conf)
    return $bad
}

boot_args_in_effect() {
    local arg bad=0
    read -ra cmdline </proc/cmdline
    for arg in $(cat "$creds/v6node.test.cmdline"); do
        [[ " ${cmdline[*]} " == *" $arg "* ]] || { echo "missing from /proc/cmdline: $arg"; bad=1; }
    done
    # Effects, where the kernel shows them.
    journalctl -k -b -q -g 'mem auto-init:.*heap alloc:on' >/dev/null ||
        { echo "init_on_alloc not in effect"; bad=1; }
    [[ $(cat /proc/sys/kernel/panic) == 10 ]] || { echo "panic != 10"; bad=1; }
    return $bad
}

only_lo_has_ipv4() {
    local v4
    v4=$(ip -4 -o address show | grep -v ' lo ')
    [[ -z "$v4" ]] || { echo "$v4"; return 1; }
}

uplink_slaac() {
    retry 60 sh -c "ip -6 -o address show dev '$uplink' scope global | grep -q 'inet6 fd00:6::'" || {
        ip -6 address show dev "$uplink"; return 1; }
    ip -6 -o address show dev "$uplink" scope global
}

ipv6_default_route() {
    retry 60 sh -c "ip -6 route show default | grep -q 'via fe80::'" || { ip -6 route; return 1; }
    ip -6 route show default
}

# The "router" scenario: dnsmasq at fd00:7::1 in the test's network namespace.
router_slaac_and_dhcpv6() {
    retry 60 sh -c "ip -6 -o address show dev '$uplink' | grep -q 'inet6 fd00:7::[0-9a-f]*:[0-9a-f]*:[0-9a-f]*:[0-9a-f]*/64'" ||
        { echo "no SLAAC address"; ip -6 address show dev "$uplink"; return 1; }
    retry 60 sh -c "ip -6 -o address show dev '$uplink' | grep -q 'inet6 fd00:7::1[0-9a-f][0-9a-f]/128'" ||
        { echo "no DHCPv6 address"; ip -6 address show dev "$uplink"; return 1; }
    ip -6 -o address show dev "$uplink" scope global
}

router_dns() {
    retry 30 sh -c "resolvectl dns '$uplink' | grep -q 'fd00:7::1'" || { resolvectl status "$uplink"; return 1; }
    resolvectl dns "$uplink"
    resolvectl domain "$uplink" | grep -q v6node.test || { resolvectl domain; return 1; }
    # Resolved through the DNS server the network announced. resolved uses a
    # link only once an address on it has passed DAD, so give that a moment.
    retry 30 sh -c "resolvectl query --cache=no router.v6node.test | grep -q 'fd00:7::99'" ||
        { resolvectl query router.v6node.test; return 1; }
    resolvectl query --cache=no router.v6node.test
}

resolver_uses_only_the_network() {
    # No fallback servers, no LLMNR/mDNS: DNS only from the network or credentials.
    local status
    status=$(resolvectl status)
    ! grep -A3 'Fallback DNS' <<<"$status" || return 1
    grep -- '-LLMNR -mDNS' <<<"$status" || { head -5 <<<"$status"; return 1; }
}

router_reachable() {
    ipv6_default_route && ping -6 -c 2 -W 2 fd00:7::1
}

no_ipv4_default_route() {
    local routes
    routes=$(ip -4 route show default)
    [[ -z "$routes" ]] || { echo "$routes"; return 1; }
}

bigtcp_sizes() { # bigtcp_sizes DEV: the four limits, deduplicated
    ip -j -d link show dev "$1" | jq -c '.[0] | [.gso_max_size, .gro_max_size, .gso_ipv4_max_size, .gro_ipv4_max_size] | unique'
}

bigtcp_on_uplink() {
    local tso want set
    tso=$(ip -j -d link show dev "$uplink" | jq '.[0].tso_max_size')
    want=$((tso < 196608 ? tso : 196608))
    [[ "$(bigtcp_sizes "$uplink")" == "[$want]" ]] || { echo "want $want (tso_max_size $tso), have $(bigtcp_sizes "$uplink")"; return 1; }
    # ... and the agent reports what it set.
    set=$(v6node-dataplane status --json | jq -c --arg d "$uplink" '.bigtcp[] | select(.device == $d) | [.target, .sizes.gso_max_size, .sizes.gro_ipv4_max_size]')
    [[ "$set" == "[$want,$want,$want]" ]] || { echo "status reports $set"; return 1; }
    echo "$uplink: $want (tso_max_size $tso)"
}

dataplane_running() {
    systemctl is-active -q v6node-dataplane.service || { systemctl status v6node-dataplane.service; return 1; }
    # tc ingress and egress, and native XDP in front (xdp_on_uplink).
    systemctl show -P StatusText v6node-dataplane.service | grep -q '^generation 1: 3 attachment(s) (tcx)' ||
        { systemctl show -P StatusText v6node-dataplane.service; return 1; }
    v6node-dataplane status >/tmp/status.txt || { cat /tmp/status.txt; return 1; }
    grep -qE "^  $uplink +ingress +tcx +v6n_from_dev " /tmp/status.txt || { cat /tmp/status.txt; return 1; }
    grep -qE '^self-test: +passed by [1-9]' /tmp/status.txt || { cat /tmp/status.txt; return 1; }
    head -4 /tmp/status.txt
}

# hubble_socket_serves: the vendor config's Hubble socket answers gRPC's
# health check for the Observer (what `hubble` asks first) as SERVING: a
# HealthCheckRequest for "hubble.server.Observer", framed by hand for curl.
# The bandwidth manager's default (auto): on, as the image's kernel has fq,
# with fq (its horizon set for the pacers) on the uplink.
bandwidth_on_uplink() {
    tc qdisc show dev "$uplink"
    v6node-dataplane status --json | jq -e '.bandwidth.enabled and (.bandwidth.uplinks | length > 0 and all(.error == null and (.qdisc | test("fq"))))' &&
        tc qdisc show dev "$uplink" | grep -q 'fq .*horizon 4s horizon_drop'
}

hubble_socket_serves() {
    local answer
    grep -q "Hubble's API unix:/run/v6node/hubble.sock" /tmp/status.txt || { grep -A3 '^flows:' /tmp/status.txt; return 1; }
    answer=$(printf '\0\0\0\0\030\n\026hubble.server.Observer' |
        curl -s --max-time 5 --http2-prior-knowledge --unix-socket /run/v6node/hubble.sock -H 'content-type: application/grpc' \
            -H 'te: trailers' --data-binary @- http://localhost/grpc.health.v1.Health/Check | od -An -tx1 | tr -s ' \n' ' ')
    echo "health answer:$answer"
    [[ "$answer" == " 00 00 00 00 02 08 01 " ]]
}

# The uplink (virtio-net) runs the XDP program in the driver (attach.xdp =
# auto): status says so, and so does the device, natively, never generic.
# virtio-net turns its guest offloads off for XDP itself; what it has of
# queues and offloads is printed.
xdp_on_uplink() {
    local link
    link=$(ip -d link show "$uplink")
    printf '%s, %s; %s\n' "$(ethtool -i "$uplink" | grep '^driver')" \
        "$(ethtool -l "$uplink" 2>&1 | grep -i '^combined' | tail -1 | tr -s ' \t' ' ')" \
        "$(ethtool -k "$uplink" | grep -E '^(rx-checksumming|generic-receive-offload|large-receive-offload):' | tr -s ' \n' ' ')"
    grep -E "^  $uplink " <(sed -n '/^uplinks/,/^$/p' /tmp/status.txt)
    grep -qE "^  $uplink +xdp, then tc +native XDP in the driver" /tmp/status.txt &&
        grep -qE '\bxdp\b' <<<"$link" && ! grep -qE 'xdpgeneric' <<<"$link" || { echo "$link"; return 1; }
}

dataplane_in_bpftool() {
    local programs net
    programs=$(bpftool prog show | grep -oE 'name v6n_[a-z_]+' | sort -u | tr '\n' ' ')
    net=$(bpftool net show dev "$uplink" | grep -v '^$')
    printf 'programs: %s\n%s\n' "$programs" "$net"
    [[ "$programs" == *"name v6n_from_dev "*"name v6n_to_dev "* ]] && grep -q 'tcx/ingress v6n_from_dev' <<<"$net" &&
        grep -q 'tcx/egress v6n_to_dev' <<<"$net"
}

service_hooks_on_root_cgroup() {
    # Services for every process of the node (pods included): the four socket
    # hooks on the root cgroup, as status and the kernel (bpftool) say.
    local recorded attached
    recorded=$(v6node-dataplane status --json | jq -c '[.socket_hooks[] | select(.error == null and .cgroup == "/sys/fs/cgroup") | .program]')
    attached=$(bpftool cgroup show /sys/fs/cgroup | grep -oE 'v6n_sock_[a-z]+' | sort | tr '\n' ' ')
    echo "status: $recorded; bpftool: $attached"
    [[ "$recorded" == '["v6n_sock_connect","v6n_sock_sendmsg","v6n_sock_recvmsg","v6n_sock_peername"]' &&
        "$attached" == "v6n_sock_connect v6n_sock_peername v6n_sock_recvmsg v6n_sock_sendmsg " ]]
}

dataplane_survives_sigkill() {
    # systemd restarts it (Restart=on-failure); the new agent adopts the pinned
    # links, so their ids stay.
    local before after
    # bpftool lists tcx links in its "tc" array, with kind tcx/ingress|egress.
    before=$(bpftool -j net show dev "$uplink" | jq -c '[.[0].tc[]? | select(.kind | startswith("tcx/")) | .link_id]')
    systemctl kill -s SIGKILL v6node-dataplane.service
    for _ in $(seq 60); do
        sleep 0.5
        [[ "$(systemctl show -P NRestarts v6node-dataplane.service)" -ge 1 ]] &&
            systemctl is-active -q v6node-dataplane.service && break
    done
    after=$(bpftool -j net show dev "$uplink" | jq -c '[.[0].tc[]? | select(.kind | startswith("tcx/")) | .link_id]')
    echo "links before $before, after $after"
    systemctl is-active -q v6node-dataplane.service || { systemctl status v6node-dataplane.service; return 1; }
    [[ "$before" =~ ^\[[0-9]+,[0-9]+\]$ && "$before" == "$after" ]] &&
        journalctl -b -u v6node-dataplane.service -o cat | grep -q "$uplink ingress: adopted"
}

dataplane_logs_for_journald() {
    # Levels reach journald as priorities (from "<6>" prefixes); no colour codes.
    journalctl -b -u v6node-dataplane.service -o json | jq -e -s 'map(select(.MESSAGE | type == "string" and startswith("ready:"))) | .[0].PRIORITY == "6"' >/dev/null ||
        { journalctl -b -u v6node-dataplane.service; return 1; }
    ! journalctl -b -u v6node-dataplane.service -o cat | grep -q $'\e\[' || { echo "colour codes in the journal"; return 1; }
}

bigtcp_on_capable_device() {
    # veth segments up to 512 KiB, so the configured size applies unclamped.
    # Sizes go through the agent: a drop-in, then a reload.
    ip link add bt0 type veth peer name bt1 || return 1
    local bad=0 msg dropin=/etc/v6node/dataplane.d/50-test.toml
    mkdir -p /etc/v6node/dataplane.d
    printf '[bigtcp]\ndevices = ["en*", "eth*", "bt*"]\n' >"$dropin"
    systemctl reload v6node-dataplane.service || bad=1
    [[ "$(bigtcp_sizes bt0)" == "[196608]" ]] || { echo "default: $(bigtcp_sizes bt0)"; bad=1; }
    printf '[bigtcp]\ndevices = ["en*", "eth*", "bt*"]\nsize = 524280\n' >"$dropin"
    systemctl reload v6node-dataplane.service || bad=1
    [[ "$(bigtcp_sizes bt0)" == "[524280]" ]] || { echo "maximum: $(bigtcp_sizes bt0)"; bad=1; }
    # A bad size fails the reload, names file and key, and changes nothing.
    printf '[bigtcp]\ndevices = ["bt*"]\nsize = 9999999\n' >"$dropin"
    if systemctl reload v6node-dataplane.service 2>/dev/null; then echo "bad size reloaded"; bad=1; fi
    msg=$(v6node-dataplane status 2>&1)
    [[ "$(bigtcp_sizes bt0)" == "[524280]" && "$msg" == *"REFUSED"*"50-test.toml: bigtcp.size: 9999999"* ]] ||
        { echo "bad setting: $(bigtcp_sizes bt0): $msg"; bad=1; }
    systemctl is-active -q v6node-dataplane.service || { echo "agent died on a bad reload"; bad=1; }
    rm "$dropin"
    systemctl reload v6node-dataplane.service || bad=1
    ip link del bt0
    return $bad
}

usr_read_only_verity() {
    local source fstype hash
    read -r source fstype < <(findmnt -n -o SOURCE,FSTYPE /usr)
    [[ "$source" == /dev/mapper/usr && "$fstype" == erofs ]] || { echo "/usr is $source ($fstype)"; return 1; }
    if touch /usr/.v6node-write-test 2>/dev/null; then echo "/usr is writable"; return 1; fi
    dmsetup table usr | grep -q ' verity ' || { dmsetup table usr; return 1; }
    # "V": every block read so far verified against the root hash.
    [[ "$(dmsetup status usr | awk '{print $4}')" == V ]] || { dmsetup status usr; return 1; }
    hash=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^usrhash=//p')
    dmsetup table usr | grep -q " $hash " || { echo "usrhash=$hash not the table's root hash"; return 1; }
}

# The firmware's global variables: four bytes of attributes, then the value.
efi_global_byte() { od -An -t u1 -j4 -N1 "/sys/firmware/efi/efivars/$1-8be4df61-93ca-11d2-aa0d-00e098032b8c" | tr -d ' '; }

secure_boot_enforced() {
    local secure_boot setup_mode
    secure_boot=$(efi_global_byte SecureBoot) setup_mode=$(efi_global_byte SetupMode)
    echo "SecureBoot=$secure_boot SetupMode=$setup_mode"
    bootctl status 2>/dev/null | grep -m1 'Secure Boot:'
    [[ "$secure_boot" == 1 && "$setup_mode" == 0 ]]
}

kernel_locked_down() {
    # A Secure Boot boot of Debian's kernel locks it down; the dataplane's BPF
    # has to work under that (the other checks of this scenario).
    cat /sys/kernel/security/lockdown
    grep -q '\[integrity\]' /sys/kernel/security/lockdown
}

usr_tampering_detected() {
    # boot-test overwrote the first block of this file in the /usr partition.
    local err
    if err=$(cat /usr/share/doc/v6node/README.md 2>&1 >/dev/null); then
        echo "read the tampered file without an error"
        return 1
    fi
    echo "$err" | grep 'Input/output error' || { echo "$err"; return 1; }
    journalctl -k -b -q -g 'verity.*data block [0-9]+ is corrupted' | head -n 1 | grep . ||
        { journalctl -k -b -q -g verity; return 1; }
    # "C": a corrupted block was found.
    [[ "$(dmsetup status usr | awk '{print $4}')" == C ]] || { dmsetup status usr; return 1; }
}

root_created_at_first_boot() {
    findmnt -n -o SOURCE,FSTYPE,OPTIONS / | grep -q 'ext4.*rw' || { findmnt /; return 1; }
    [[ "$(lsblk -no LABEL "$(findmnt -n -o SOURCE /)")" == v6node-root ]] || { lsblk -o NAME,LABEL,PARTLABEL; return 1; }
    touch /etc/.v6node-write-test /var/.v6node-write-test && rm /etc/.v6node-write-test /var/.v6node-write-test
}

# disk_of DEVICE: the disk(s) under a partition or device-mapper device. /usr
# (dm-verity over the usr partitions) is on the disk the node booted from.
disk_of() { lsblk -s -l -n -o NAME,TYPE "$1" | awk '$2 == "disk" { print $1 }' | sort -u; }
root_disk() { disk_of "$(findmnt -n -o SOURCE /)"; }
usr_disk() { disk_of "$(findmnt -n -o SOURCE /usr)"; }

root_on_the_boot_disk() {
    local root usr
    root=$(root_disk) usr=$(usr_disk)
    echo "root on $root, /usr on $usr"
    [[ -n "$root" && "$root" == "$usr" ]] || { lsblk -o NAME,SIZE,TYPE,PARTLABEL,MOUNTPOINTS; return 1; }
    root_created_at_first_boot
}

# The disk was exactly the image's size: the root partition is the image's
# own 1G, nothing was added, the node still has room to work.
root_as_shipped() {
    local disk_bytes root_bytes
    disk_bytes=$(blockdev --getsize64 "/dev/$(root_disk)")
    root_bytes=$(blockdev --getsize64 "$(findmnt -n -o SOURCE /)")
    echo "disk $disk_bytes bytes (image $(cat "$creds/v6node.test.image-size")), root partition $root_bytes bytes"
    df -h /
    [[ $disk_bytes == "$(cat "$creds/v6node.test.image-size")" && $root_bytes == $((1024 ** 3)) ]]
}

blank_disk_untouched() {
    local blank=/dev/disk/by-id/virtio-v6node-blank
    [[ -b $blank ]] || { ls -l /dev/disk/by-id; return 1; }
    echo "blank disk $(readlink -f "$blank"); root on /dev/$(root_disk)"
    # Not partitioned, no file system, no signature of any kind; all zeros.
    [[ -z "$(blkid -p "$blank")" && -z "$(lsblk -no NAME "$blank" | tail -n +2)" ]] || { blkid -p "$blank"; lsblk "$blank"; return 1; }
    cmp -s -n $((64 * 1024 * 1024)) "$blank" /dev/zero || { echo "the blank disk's first 64 MiB were written"; return 1; }
}

# Written with dd over a 5G disk that held an old GPT: the node's table has
# the image's partitions only, and root takes the rest of the disk.
root_fills_reimaged_disk() {
    local disk types root_bytes disk_bytes
    disk=/dev/$(root_disk)
    # The partition types on the disk: the image's six (ESP, two /usr slots
    # and their verity, root), none of the old table's (Linux data, swap).
    types=$(lsblk -n -l -o PARTTYPE "$disk" | sed '/^$/d' | sort | paste -sd' ')
    echo "partition types: $types"
    [[ "$types" == "4f68bce3-e8cd-4db1-96e7-fbcaf984b709 77ff5f63-e7b6-4633-acf4-1565b864c0e6 77ff5f63-e7b6-4633-acf4-1565b864c0e6 8484680c-9521-48c6-9c11-b0720656f69e 8484680c-9521-48c6-9c11-b0720656f69e c12a7328-f81f-11d2-ba4b-00a0c93ec93b" ]] ||
        { lsblk -o NAME,SIZE,PARTTYPENAME,LABEL "$disk"; return 1; }
    ! blkid -t LABEL=old-system >/dev/null || { echo "the old file system is still visible"; return 1; }
    disk_bytes=$(blockdev --getsize64 "$disk")
    root_bytes=$(blockdev --getsize64 "$(findmnt -n -o SOURCE /)")
    echo "disk $disk_bytes bytes, root partition $root_bytes bytes"
    df -h /
    ((disk_bytes == $(cat "$creds/v6node.test.disk-size"))) || return 1
    # The image's ~2.5G before root plus the rest: root grew well past its
    # shipped 1G, and so did its ext4.
    ((root_bytes > 2 * 1024 ** 3 + 256 * 1024 ** 2)) || return 1
    (($(df -B1 --output=size / | tail -n 1) > 3 * 1024 ** 3 / 2)) || { echo "ext4 did not grow"; return 1; }
}

ssh_without_default_password() {
    systemctl is-active -q ssh.service || { systemctl status ssh.service; return 1; }
    # No usable password unless a credential set one: shadow field "!" or "!*" or "*".
    [[ "$(getent shadow root | cut -d: -f2)" =~ ^[!*] ]] || { echo "root has a password"; return 1; }
    test -s /etc/ssh/ssh_host_ed25519_key
}

root_credentials_applied() {
    grep -q "v6node-test-key" /root/.ssh/authorized_keys || { echo "authorized_keys from credential missing"; return 1; }
    [[ "$(getent shadow root | cut -d: -f2)" == '$'* ]] || { echo "hashed password from credential not set"; return 1; }
}

static_network_applied() {
    [[ "$(hostname)" == v6node-static-1 ]] || { echo "hostname $(hostname)"; return 1; }
    retry 60 sh -c "ip -6 -o address show dev '$uplink' | grep -q 'fd00:6::100/64'" || { ip -6 address; return 1; }
    retry 30 sh -c "ip -6 route show default | grep -q 'via fe80::2'" || { ip -6 route; return 1; }
    resolvectl dns "$uplink" | grep -q 'fd00:6::3' || { resolvectl dns; return 1; }
    # Static means static: no SLAAC address besides the one handed over.
    if ip -6 -o address show dev "$uplink" scope global | grep -v 'fd00:6::100/' | grep -q inet6; then
        ip -6 address show dev "$uplink"; return 1; fi
}

bad_credential_falls_back() {
    journalctl -b -q -u v6node-network-credentials.service -g 'ignoring v6node.network credentials' ||
        { journalctl -b -u v6node-network-credentials.service; return 1; }
    [[ ! -e /run/systemd/network/10-v6node-static.network ]]
}

units_hardened() {
    # systemd-analyze's exposure runs from 0 (locked down) to 10; --threshold is
    # that times ten. 2.0 is what a root service with only the capabilities it
    # needs can reach; the dataplane agent, loading BPF, is measured at 2.0 too
    # (it may reach localhost only, until the join adds the API server). The
    # health check listener is open to the network, so it has nothing else.
    # end-connections holds CAP_SYS_ADMIN for setns() and nothing else; its
    # socket must be listening for the agent's requests.
    local unit report bad=0
    systemctl is-active -q v6node-end-connections.socket || { systemctl status v6node-end-connections.socket; bad=1; }
    for unit in v6node-dataplane.service v6node-end-connections@check.service v6node-health-checks.service \
        v6node-network-credentials.service v6node-images.service v6node-update-source.service \
        v6node-boot-health.service; do
        report=$(systemd-analyze security --no-pager --threshold=20 "$unit" 2>&1) || bad=1
        grep -o 'Overall exposure level.*' <<<"$report"
    done
    return $bad
}

# Without [routing], BGP waits for the agent to configure it: the path unit
# watches, bird does not run, status has no bgp section.
bgp_waits_for_routing() {
    systemctl is-active -q v6node-bgp.path &&
        ! systemctl is-active -q v6node-bgp.service &&
        [[ ! -e /run/v6node/bird.conf ]] &&
        [[ "$(v6node-dataplane status --json | jq -c .bgp)" == null ]] && command -v bird >/dev/null || {
        systemctl status --no-pager v6node-bgp.path v6node-bgp.service | tail -n 20
        return 1
    }
}

# [routing] through a reload: the agent writes bird's configuration, the path
# unit starts v6node-bgp.service (its hardening as shipped), bird answers
# status over its socket; the peer does not exist here, so the session is not
# Established. Without [routing] again the file has no sessions and bird stays.
bgp_started_by_routing() {
    local dropin=/etc/v6node/dataplane.d/50-bgp-test.toml session
    mkdir -p /etc/v6node/dataplane.d
    printf '[routing]\nasn = 64601\nrouter_id = "0.0.0.10"\npeers = [{ address = "fd00:ffff::1", asn = 64512 }]\n' >"$dropin"
    systemctl reload v6node-dataplane.service || return 1
    for _ in $(seq 30); do
        session=$(v6node-dataplane status --json | jq -r '.bgp.sessions[0].state // empty')
        [[ -n "$session" ]] && break
        sleep 1
    done
    echo "session to fd00:ffff::1: ${session:-none}"
    v6node-dataplane status | sed -n '/^bgp:/,/^$/p'
    local ok=1
    systemctl is-active -q v6node-bgp.service && [[ -n "$session" && "$session" != Established ]] &&
        grep -q 'neighbor fd00:ffff::1 as 64512;' /run/v6node/bird.conf || ok=0
    rm "$dropin"
    systemctl reload v6node-dataplane.service || ok=0
    for _ in $(seq 10); do grep -q 'BGP is off' /run/v6node/bird.conf && break; sleep 1; done
    grep -q 'BGP is off' /run/v6node/bird.conf && systemctl is-active -q v6node-bgp.service || ok=0
    ((ok)) || { systemctl status --no-pager v6node-bgp.service v6node-bgp.path | tail -n 25; journalctl -b -u v6node-bgp.service -o cat | tail -n 10; }
    ((ok))
}

# The "gateway" scenario: v6node.role=gateway, enp0s8 on fd00:8::/64 and
# enp0s9 on 192.0.2.0/24, the host namespace sending through.
gateway_role_applied() {
    journalctl -b -u v6node-role.service -o cat | grep -q 'role: gateway' &&
        test -L /run/v6node/dataplane.d/50-role-gateway.toml &&
        test "$(sysctl -n net.ipv4.ip_forward)" = 1 &&
        test "$(sysctl -n net.ipv4.conf.enp0s8.forwarding)" = 1 || {
        journalctl -b -u v6node-role.service -o cat
        ls -l /run/v6node/dataplane.d /run/systemd/networkd.conf.d
        sysctl net.ipv4.ip_forward net.ipv4.conf.enp0s8.forwarding net.ipv4.conf.enp0s9.forwarding
        return 1
    }
}
gateway_stateful_pool() {
    v6node-dataplane status --json | jq -e '[.nat64.stateful.pool[].address] | unique == ["203.0.113.1"]'
}
gateway_ipv4_side() { ip -4 -o address show dev enp0s9 | grep -q '192.0.2.2/24'; }
gateway_translator_attached() {
    local links
    links=$(v6node-dataplane status --json | jq -r '[.links[] | select(.direction == "nat64" and .attached) | .device] | sort | join(" ")')
    echo "nat64 on: $links"
    # v6n-frag1: where DF-clear IPv4 fragments come back in to be translated.
    [[ "$links" == "enp0s8 enp0s9 v6n-frag1" ]] && bpftool prog show | grep -q 'name v6n_nat64'
}
gateway_translates() { # the host side's traffic shows in both directions' counters
    # IPv6 comes in on enp0s8, IPv4 on enp0s9. Both run XDP natively, and
    # virtio-net takes frames redirected to it, so XDP translates most of
    # it and sends it out of the other uplink; tc what XDP leaves it.
    local six four six_xdp four_xdp status
    counted() { jq --arg d "$1" --arg dev "$2" '[.counters[] | select(.direction == $d and (.device == $dev or $dev == "") and .reason == "translated") | .packets] | add // 0' <<<"$status"; }
    for _ in $(seq 180); do
        status=$(v6node-dataplane status --json)
        six_xdp=$(counted xdp enp0s8) four_xdp=$(counted xdp enp0s9)
        six=$(($(counted 6to4 "") + six_xdp)) four=$(($(counted 4to6 "") + four_xdp))
        ((six >= 6 && four >= 6 && six_xdp > 0 && four_xdp > 0)) && break
        sleep 1
    done
    echo "translated: 6to4 $six (in XDP $six_xdp), 4to6 $four (in XDP $four_xdp)"
    ((six >= 6 && four >= 6 && six_xdp > 0 && four_xdp > 0))
}
gateway_dns64() {
    systemctl is-active v6node-dns64.service &&
        grep -q 'dns64-prefix: 64:ff9b:1::/96' /run/v6node/dns64.conf &&
        ss -Hlnu 'sport = :53' | grep -q '\[::\]:53' || {
        journalctl -b -u v6node-dns64.service -o cat | tail -n 15
        ls -l /run/v6node/ /run/v6node/dns64.conf.d/
        return 1
    }
}
role_units_hardened() {
    local unit report bad=0
    for unit in v6node-role.service v6node-dns64.service v6node-bgp.service; do
        report=$(systemd-analyze security --no-pager --threshold=30 "$unit" 2>&1) || bad=1
        grep -o 'Overall exposure level.*' <<<"$report"
    done
    return $bad
}

# --- scenarios ----------------------------------------------------------------

pass_if "system reaches running" system_running
# Without the Kubernetes sysext and join credentials (tests/e2e has both):
# containerd runs with v6node's configuration, the join says why it waits.
kubernetes_ready_to_join() {
    systemctl is-active -q containerd.service &&
        ctr version >/dev/null &&
        systemctl show -P ExecStart containerd.service | grep -q -- '--config /usr/lib/v6node/containerd/config.toml' &&
        journalctl -b -u v6node-kubeadm-join.service -o cat | grep -q 'no v6node.kubeadm.\* credentials: not joining' || {
        systemctl status --no-pager containerd.service v6node-kubeadm-join.service | tail -n 20
        return 1
    }
}

# --- pods on netkit (scenario pods) ------------------------------------------

cni_conflist=/etc/cni/net.d/10-v6node.conflist
# cni_call COMMAND POD [DEVICE] [JQ]: the plugin as a runtime calls it.
cni_call() {
    local command=$1 pod=$2 device=${3:-auto} filter=${4:-.}
    jq -c --arg d "$device" ".plugins[0] + {cniVersion, name, device: \$d} | $filter" "$cni_conflist" |
        env CNI_COMMAND="$command" CNI_CONTAINERID="ctr-$pod" CNI_NETNS="/run/netns/$pod" CNI_IFNAME=eth0 \
            CNI_ARGS="K8S_POD_NAMESPACE=test;K8S_POD_NAME=$pod" /usr/lib/cni/v6node-cni
}
pod_addr() { jq -r '.ips[0].address | sub("/128$"; "")' "/run/v6node-test-$1.json"; }
host_dev() { jq -r '.interfaces[0].name' "/run/v6node-test-$1.json"; }
in_pod() { local pod=$1; shift; nsenter --net="/run/netns/$pod" "$@"; }

pods_network_configured() {
    mkdir -p /run/v6node/dataplane.d
    printf '[pods]\nprefix = "fd00:10:244:7::/64"\n' >/run/v6node/dataplane.d/50-test-pods.toml
    v6node-dataplane reload && jq -e '.plugins[0].podCIDR == "fd00:10:244:7::/64"' "$cni_conflist"
}

pods_added_on_netkit() {
    local pod
    for pod in a b; do
        ip netns add "$pod" && ip -n "$pod" link set lo up || return 1
        cni_call ADD "$pod" >"/run/v6node-test-$pod.json" || { cat "/run/v6node-test-$pod.json"; return 1; }
    done
    ip -d link show "$(host_dev a)"
    ip -d link show "$(host_dev a)" | grep -q 'netkit mode l3 .*peer policy blackhole' &&
        ip -n a -6 addr show dev eth0 | grep -q "inet6 $(pod_addr a)/128" &&
        v6node-dataplane status --json | jq -e --arg d "$(host_dev a)" '
            ([.pods.endpoints[] | select(.device == "netkit")] | length == 2) and
            ([.attachments[] | select(.device == $d and .mode == "netkit" and .error == null)] | length == 2)'
}

pods_in_status() {
    v6node-dataplane status | sed -n '/^pods:/,/^$/p'
    v6node-dataplane status --json | jq -c '.problems'
    v6node-dataplane status | sed -n '/^attached/,/^$/p'
    v6node-dataplane status | grep -Eq "^ +test/a +$(host_dev a) +$(pod_addr a) +netkit"
}

pods_reach_each_other_and_the_node() {
    local node
    node=$(ip -6 -o addr show dev "$uplink" scope global | awk '{ sub("/.*", "", $4); print $4; exit }')
    in_pod a ping -6 -c 2 -i 0.2 -W 2 "$(pod_addr b)" && in_pod b ping -6 -c 2 -i 0.2 -W 2 "$(pod_addr a)" &&
        in_pod a ping -6 -c 2 -i 0.2 -W 2 "$node" && ping -6 -c 2 -i 0.2 -W 2 "$(pod_addr b)" &&
        v6node-dataplane status --json | jq -e '[.counters[] | select(.direction == "from_pod" and .reason == "routed")] | map(.packets) | add > 0'
}

pods_have_bigtcp() {
    ip -n a -d link show eth0 | grep -o 'gso_max_size [0-9]* .*gro_max_size [0-9]*'
    ip -n a -d link show eth0 | grep -q 'gso_max_size 196608 .*gro_max_size 196608' &&
        ip -d link show "$(host_dev a)" | grep -q 'gso_max_size 196608 .*gro_max_size 196608'
}

# The pods' TCP settings the agent asks v6node-cni to set ([bandwidth]).
pods_tcp_settings() {
    local got
    got=$(ip netns exec a sysctl -n net.ipv4.tcp_congestion_control net.ipv4.tcp_slow_start_after_idle net.ipv4.tcp_tso_rtt_log | paste -sd' ')
    echo "$got"
    [[ $got == "bbr 0 9" ]]
}

pods_survive_agent_restart() {
    in_pod a ping -6 -c 100 -i 0.05 -W 1 "$(pod_addr b)" >/run/v6node-test-ping.log 2>&1 &
    local ping=$!
    sleep 1
    systemctl restart v6node-dataplane
    wait "$ping"
    tail -2 /run/v6node-test-ping.log
    journalctl -b -u v6node-dataplane -o cat | tail -12
    grep -q ' 0% packet loss' /run/v6node-test-ping.log &&
        v6node-dataplane status --json | jq -e '.pods.endpoints | length == 2' &&
        cni_call CHECK b
}

pods_check_and_del() {
    local out
    ip link del "$(host_dev b)"
    out=$(cni_call CHECK b) && return 1
    echo "$out"
    jq -e '.code == 100' <<<"$out" && cni_call DEL b && cni_call DEL b &&
        retry 5 bash -c "v6node-dataplane status --json | jq -e '.pods.endpoints | length == 1'"
}

# The node's network is a NAT64 gateway on the test host (boot-test's
# nat64-gateway.bash) with an IPv4-only server at 192.0.2.1 behind it.
# http_get HOST PORT PATH: HTTP/1.0 over bash's /dev/tcp (the image has no curl).
http_get() {
    exec 3<>"/dev/tcp/$1/$2" || return 1
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$3" "$1" >&3
    timeout 10 cat <&3 | tr -d '\r' | sed '1,/^$/d'
    exec 3<&-
}

pod_reaches_ipv4_host_through_nat64() {
    in_pod a ping -6 -c 3 -i 0.3 -W 3 64:ff9b:1::c000:201 &&
        [[ "$(in_pod a bash -c "$(declare -f http_get); http_get 64:ff9b:1::c000:201 8080 /hello")" == "served over IPv4" ]]
}

pod_reaches_ipv4_host_by_name_through_dns64() {
    local answer
    # The pod asks the node's resolver (nss-resolve talks to it over a socket
    # in the file system, so from any network namespace); it asks the gateway.
    answer=$(in_pod a getent ahostsv6 ipv4only.test | awk '{ print $1; exit }')
    echo "ipv4only.test -> $answer"
    [[ "$answer" == 64:ff9b:1::c000:201 ]] &&
        [[ "$(in_pod a bash -c "$(declare -f http_get); http_get ipv4only.test 8080 /hello")" == "served over IPv4" ]]
}

# Request/response latency over ICMP echo, netkit pair vs veth pair, both
# routed in BPF: a measurement (under TCG, so only the ratio means anything).
netkit_vs_veth_latency() {
    local pod
    for pod in c d; do ip netns add "$pod" && ip -n "$pod" link set lo up; done
    cni_call ADD c veth >/run/v6node-test-c.json && cni_call ADD d veth >/run/v6node-test-d.json || return 1
    ip -d link show "$(host_dev c)" | grep -q veth || return 1
    # b is gone by now: e is the second netkit pod.
    ip netns add e && ip -n e link set lo up && cni_call ADD e >/run/v6node-test-e.json || return 1
    percentiles() { grep -o 'time=[0-9.]*' | cut -d= -f2 | sort -n | awk '{ v[NR] = $1 } END { printf "p50 %.0f us, p99 %.0f us", v[int(NR * 0.5)] * 1000, v[int(NR * 0.99)] * 1000 }'; }
    in_pod a ping -6 -c 20 -i 0.01 "$(pod_addr e)" >/dev/null
    in_pod c ping -6 -c 20 -i 0.01 "$(pod_addr d)" >/dev/null
    local netkit veth
    netkit=$(in_pod a ping -6 -c 400 -i 0.01 "$(pod_addr e)" | percentiles)
    veth=$(in_pod c ping -6 -c 400 -i 0.01 "$(pod_addr d)" | percentiles)
    echo "pod-to-pod ICMP echo under TCG: netkit $netkit; veth $veth"
    [[ $netkit == p50* && $veth == p50* ]]
}

case "$scenario" in
default)
    pass_if "a node boots to multi-user.target, not graphical" boots_to_multi_user
    pass_if "only units the presets list are enabled" only_listed_units_enabled
    pass_if "every unit's Documentation= file is in the image" units_documentation_exists
    pass_if "kernel config has what v6node needs" kernel_config
    pass_if "netkit devices can be created" netkit_works
    pass_if "every v6node sysctl is in effect" sysctls_in_effect
    pass_if "every boot argument is in effect" boot_args_in_effect
    pass_if "no IPv4 address but on lo" only_lo_has_ipv4
    pass_if "uplink $uplink has a SLAAC address from the router" uplink_slaac
    pass_if "default route is IPv6, via the router" ipv6_default_route
    pass_if "dataplane agent active, attached to $uplink, status works" dataplane_running
    pass_if "$uplink (virtio-net) runs native XDP before tc, and status says so" xdp_on_uplink
    pass_if "Hubble's API on /run/v6node/hubble.sock answers gRPC health for hubble.server.Observer: SERVING" hubble_socket_serves
    pass_if "bandwidth manager on by default: fq with the pacers' horizon on $uplink" bandwidth_on_uplink
    pass_if "bpftool lists the dataplane's programs and tcx links" dataplane_in_bpftool
    pass_if "Service socket hooks (connect, sendmsg, recvmsg, getpeername) on the root cgroup" service_hooks_on_root_cgroup
    pass_if "dataplane logs carry journald priorities, no colour" dataplane_logs_for_journald
    pass_if "SIGKILL: systemd restarts the agent, which adopts the same links" dataplane_survives_sigkill
    pass_if "BIG TCP applied on $uplink by the agent, clamped to tso_max_size" bigtcp_on_uplink
    pass_if "BIG TCP via reload: 196608 and 524280 on veth, bad size refused" bigtcp_on_capable_device
    pass_if "/usr is read-only erofs under dm-verity" usr_read_only_verity
    pass_if "root (/etc, /var) on the disk the node booted from" root_on_the_boot_disk
    pass_if "the old partition table is gone; root and its ext4 fill the disk" root_fills_reimaged_disk
    pass_if "sshd runs, root has no default password" ssh_without_default_password
    pass_if "resolver has no public fallback servers, no LLMNR/mDNS" resolver_uses_only_the_network
    pass_if "v6node units are hardened (systemd-analyze security); end-connections.socket listens" units_hardened
    pass_if "containerd runs with v6node's config; no join without credentials" kubernetes_ready_to_join
    pass_if "BGP waits for [routing]: v6node-bgp.path active, bird not running" bgp_waits_for_routing
    pass_if "[routing] by reload starts v6node-bgp.service; status shows its session; removed: no sessions" bgp_started_by_routing
    ;;
router)
    pass_if "a changed /usr block is refused by dm-verity" usr_tampering_detected
    pass_if "malformed network credential is logged and ignored" bad_credential_falls_back
    pass_if "SLAAC and DHCPv6 addresses from the network's router" router_slaac_and_dhcpv6
    pass_if "DNS servers and domain from RA/DHCPv6 reach resolved, names resolve" router_dns
    pass_if "default route via the router, router answers" router_reachable
    # This network offers DHCPv4 with a router; the node takes neither.
    pass_if "no IPv4 address but on lo, though DHCPv4 is offered" only_lo_has_ipv4
    pass_if "no IPv4 default route, though DHCPv4 offers one" no_ipv4_default_route
    ;;
gateway)
    pass_if "role gateway from the credential: drop-in linked, IPv4 forwarding on" gateway_role_applied
    pass_if "IPv4 side enp0s9 has 192.0.2.2/24 (network.network credential)" gateway_ipv4_side
    pass_if "translator attached to both uplinks, v6n_nat64 in bpftool" gateway_translator_attached
    pass_if "stateful NAT64 pool 203.0.113.1 from the dataplane credential, in status" gateway_stateful_pool
    pass_if "DNS64 (unbound) active on every address with the translator's prefix" gateway_dns64
    pass_if "the host side's traffic was translated both ways, some of it in XDP between the virtio uplinks" gateway_translates
    pass_if "role, DNS64 and BGP units are hardened (systemd-analyze security)" role_units_hardened
    ;;
pods)
    pass_if "pods.prefix from a drop-in: the agent writes the CNI network config" pods_network_configured
    pass_if "two pods on netkit (L3, peer policy blackhole), programs on netkit links" pods_added_on_netkit
    pass_if "status lists the pods: pod, device, address, mode" pods_in_status
    pass_if "pod <-> pod and pod <-> node, routed in BPF" pods_reach_each_other_and_the_node
    pass_if "BIG TCP on both ends of the pod's netkit pair" pods_have_bigtcp
    pass_if "the pods' TCP as [bandwidth] says: bbr, no slow start after idle, TSO by the kernel's rule" pods_tcp_settings
    pass_if "pod -> IPv4-only host (ping, HTTP) through the network's NAT64 gateway" pod_reaches_ipv4_host_through_nat64
    pass_if "pod -> IPv4-only host by name: DNS64 answer, then HTTP" pod_reaches_ipv4_host_by_name_through_dns64
    pass_if "pods keep talking across an agent restart; CHECK passes" pods_survive_agent_restart
    pass_if "CHECK notices a deleted device; DEL cleans up, twice" pods_check_and_del
    pass_if "netkit vs veth pod-to-pod latency (measured under TCG)" netkit_vs_veth_latency
    ;;
secure-boot)
    pass_if "Secure Boot enforcing: the firmware trusts only the test key, not in setup mode" secure_boot_enforced
    pass_if "the kernel is locked down (integrity)" kernel_locked_down
    pass_if "/usr is read-only erofs under dm-verity, root hash from the signed UKI" usr_read_only_verity
    pass_if "dataplane agent active, attached to $uplink, status works" dataplane_running
    pass_if "Service socket hooks (connect, sendmsg, recvmsg, getpeername) on the root cgroup" service_hooks_on_root_cgroup
    ;;
as-built)
    pass_if "root (/etc, /var) on the disk the node booted from" root_on_the_boot_disk
    pass_if "on a disk the image's own size, root is the image's 1G" root_as_shipped
    pass_if "the second, blank disk is left blank" blank_disk_untouched
    pass_if "hostname, static address, gateway, DNS from credentials" static_network_applied
    pass_if "root password and SSH key from credentials" root_credentials_applied
    pass_if "no IPv4 address but on lo" only_lo_has_ipv4
    pass_if "dataplane agent active, attached to $uplink, status works" dataplane_running
    ;;
*)
    pass_if "known scenario '$scenario'" false
    ;;
esac
# Last, so that units failing while the checks ran count too.
pass_if "no failed units" no_failed_units
tap_done
exec >&-
systemctl poweroff --no-block
