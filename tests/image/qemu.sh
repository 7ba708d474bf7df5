# SPDX-License-Identifier: Apache-2.0
# Boots an image built by scripts/mkosi under qemu (TCG) with a script injected
# as systemd credentials, and collects what the script writes to the virtio
# port org.v6node.test. Sourced by boot-test and the benchmarks.
#
# No rebuild is needed: the unit v6node-test.service arrives as the credential
# systemd.extra-unit.v6node-test.service and runs the credential
# v6node.test.script once the boot is done. The guest's only network is qemu
# user networking with restrict=on and no IPv4 (router advertisements for
# fd00:6::/64, nothing outside this machine), or a tap device in a network
# namespace the test made (guest_network, guest_netns).

guest_credentials=()
# The guest's network: by default qemu user networking, isolated (restrict=on).
guest_network=(-nic "user,model=virtio-net-pci,restrict=on,ipv4=off,ipv6-net=fd00:6::/64")
# Set to run qemu inside a network namespace (for tap devices living there).
guest_netns=
# guest_credential KEY VALUE: passed as an SMBIOS type 11 string, base64 so
# that no value needs quoting (mkosi's --credential would shell-split it).
guest_credential() {
    guest_credentials+=(-smbios "type=11,value=io.systemd.credential.binary:$1=$(printf '%s' "$2" | base64 -w0)")
}

# boot_with_script OUTDIR SCRIPT [MKOSI_OPTION...]: boots, waits for the guest
# to power off (V6NODE_BOOT_TIMEOUT seconds at most), leaves console.log and
# results (the port's output) in OUTDIR. Returns qemu's status (124: timeout).
boot_with_script() {
    local out=$1 script=$2 rc saved=("${guest_credentials[@]}")
    shift 2
    mkdir -p "$out"
    rm -f "$out/results" "$out/console.log"
    guest_credential systemd.extra-unit.v6node-test.service '[Unit]
Description=v6node test script
After=multi-user.target

[Service]
Type=exec
ImportCredential=v6node.test.*
ExecStart=/usr/bin/bash -c '\''exec bash "$CREDENTIALS_DIRECTORY/v6node.test.script"'\''
StandardOutput=journal+console
'
    # The TAP helpers travel with the script, so host and guest tests share them.
    guest_credential v6node.test.script "$(cat "$V6NODE_TOP/tests/lib.sh" "$script")"
    # mkosi reopens its stdout for qemu without O_APPEND; a pipe keeps the
    # firmware's, mkosi's and the kernel's lines from overwriting each other.
    ${guest_netns:+ip netns exec "$guest_netns"} \
        timeout --kill-after=10 "${V6NODE_BOOT_TIMEOUT:-600}" "$V6NODE_TOP/scripts/mkosi" "$@" \
        --kernel-command-line-extra="systemd.wants=v6node-test.service systemd.mask=systemd-timesyncd.service" \
        qemu \
        "${guest_credentials[@]}" \
        "${guest_network[@]}" \
        -device virtio-serial-pci \
        -chardev "file,id=v6nodetest,path=$out/results" \
        -device "virtserialport,chardev=v6nodetest,name=org.v6node.test" \
        </dev/null 2>&1 | cat >"$out/console.log"
    rc=${PIPESTATUS[0]}
    # The unit and script belong to this boot only; callers may boot again.
    guest_credentials=("${saved[@]}")
    touch "$out/results"
    return "$rc"
}
