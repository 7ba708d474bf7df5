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

# image_state FILE: the image file's identity and last changes (size, inode,
# modified and changed to the nanosecond), for "the test left the image as
# make image wrote it". Any write to the file, or one put in its place,
# changes its ctime, which no one can set back; hashing its 3.8 GB before
# and after took 40 s a test.
image_state() { stat -c '%s %i %.9Y %.9Z' "$1"; }

# The boot arguments every test boot adds: start the test unit, and keep
# timesyncd from waiting for servers the isolated network lacks.
guest_test_cmdline="systemd.wants=v6node-test.service systemd.mask=systemd-timesyncd.service"

# guest_test_credentials SCRIPT: the unit that runs SCRIPT once the boot is
# done, and the script with the TAP helpers it needs (tests/lib.sh), so host
# and guest tests share them.
guest_test_credentials() {
    guest_credential systemd.extra-unit.v6node-test.service '[Unit]
Description=v6node test script
After=multi-user.target

[Service]
Type=exec
ImportCredential=v6node.test.*
ExecStart=/usr/bin/bash -c '\''exec bash "$CREDENTIALS_DIRECTORY/v6node.test.script"'\''
StandardOutput=journal+console
'
    guest_credential v6node.test.script "$(cat "$V6NODE_TOP/tests/lib.sh" "$1")"
}

# guest_results_port OUTDIR: the qemu options (in guest_port) of the virtio
# port the guest's script writes its TAP lines to, kept in OUTDIR/results.
guest_results_port() {
    guest_port=(-device virtio-serial-pci -chardev "file,id=v6nodetest,path=$1/results"
        -device "virtserialport,chardev=v6nodetest,name=org.v6node.test")
}

# plain_vm_options EFIVARS [MEMORY]: the qemu options (in vm_options) of a
# plain UEFI VM as "any UEFI VM" runs the image: this host's own qemu and OVMF
# firmware (not mkosi's), a fresh copy of OVMF's variables in EFIVARS.
# With guest_secure_boot_certificate set (a PEM file), the VM is one with
# Secure Boot enforcing that trusts that certificate alone: OVMF's Secure
# Boot build (which needs SMM), the certificate enrolled as PK, KEK and db.
guest_secure_boot_certificate=
plain_vm_options() {
    local code=/usr/share/OVMF/OVMF_CODE_4M.fd machine=q35 owner secure=()
    cp /usr/share/OVMF/OVMF_VARS_4M.fd "$1"
    if [[ -n "$guest_secure_boot_certificate" ]]; then
        code=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd machine=q35,smm=on
        secure=(-global driver=cfi.pflash01,property=secure,value=on)
        owner=$(cat /proc/sys/kernel/random/uuid)
        # virt-fw-vars from mkosi's tools tree, which carries it.
        "$V6NODE_TOP/scripts/mkosi" --tools-tree="$V6NODE_TOP/mkosi.output/tools" sandbox \
            virt-fw-vars --inplace "$1" --set-pk "$owner" "$guest_secure_boot_certificate" \
            --add-kek "$owner" "$guest_secure_boot_certificate" \
            --add-db "$owner" "$guest_secure_boot_certificate" --secure-boot >"$1.log" 2>&1 ||
            die "enrolling $guest_secure_boot_certificate in $1 failed: $1.log"
    fi
    vm_options=(-machine "$machine" -accel tcg -smp 2 -m "${2:-2G}" -nodefaults "${secure[@]}"
        -drive "if=pflash,format=raw,unit=0,readonly=on,file=$code"
        -drive "if=pflash,format=raw,unit=1,file=$1")
}

# launch_mkosi OUTDIR MKOSI_OPTION...: mkosi's qemu on the image as built, on
# a throwaway copy (30-runtime.conf). mkosi reopens its stdout for qemu
# without O_APPEND; a pipe keeps the firmware's, mkosi's and the kernel's
# lines from overwriting each other.
launch_mkosi() {
    local out=$1
    shift
    ${guest_netns:+ip netns exec "$guest_netns"} \
        timeout --kill-after=10 "${V6NODE_BOOT_TIMEOUT:-600}" "$V6NODE_TOP/scripts/mkosi" "$@" \
        --kernel-command-line-extra="$guest_test_cmdline" \
        qemu "${guest_credentials[@]}" "${guest_network[@]}" "${guest_port[@]}" \
        </dev/null 2>&1 | cat >"$out/console.log"
    return "${PIPESTATUS[0]}"
}

# run_plain_vm OUTDIR QEMU_OPTION...: qemu as a plain UEFI VM, on the
# variables plain_vm_options set up (in vm_options), with the disks exactly as
# given (the first one boots); the test's boot arguments reach the UKI through
# systemd-stub's SMBIOS credential, as mkosi passes them. The console is
# appended to OUTDIR/console.log.
run_plain_vm() {
    local out=$1
    shift
    ${guest_netns:+ip netns exec "$guest_netns"} \
        timeout --kill-after=10 "${V6NODE_BOOT_TIMEOUT:-600}" qemu-system-x86_64 "${vm_options[@]}" \
        -nographic -serial stdio \
        -smbios "type=11,value=io.systemd.stub.kernel-cmdline-extra=$guest_test_cmdline" \
        "${guest_credentials[@]}" "${guest_network[@]}" "${guest_port[@]}" "$@" \
        </dev/null >>"$out/console.log" 2>&1
}

# launch_plain_vm OUTDIR QEMU_DRIVE_OPTION...: one boot of a plain UEFI VM
# with fresh UEFI variables and guest_memory (2G unless set).
guest_memory=
launch_plain_vm() {
    local out=$1 vm_options
    shift
    plain_vm_options "$out/efivars.fd" "${guest_memory:-2G}"
    run_plain_vm "$out" "$@"
}

# power_cycle_with_script OUTDIR SCRIPT MAX_BOOTS QEMU_DRIVE_OPTION...: a plain
# UEFI VM (run_plain_vm) whose reboots are power cycles: qemu exits when
# the guest reboots (-no-reboot) and starts again on the same disks and UEFI
# variables, until the guest reports its plan (then powers off) or MAX_BOOTS
# boots. For tests that reboot a node several times: a warm reset under TCG
# once hung in the firmware for minutes, which no real machine is asked to
# survive; a power cycle is what a node's BMC would do anyway. SCRIPT runs at
# every boot and appends to OUTDIR/results. Returns 124 if a boot timed out.
power_cycle_with_script() {
    local out=$1 script=$2 max_boots=$3 boot rc=0 vm_options saved=("${guest_credentials[@]}")
    shift 3
    mkdir -p "$out"
    rm -f "$out/results" "$out/console.log"
    guest_test_credentials "$script"
    guest_port=(-device virtio-serial-pci -chardev "file,id=v6nodetest,path=$out/results,append=on"
        -device "virtserialport,chardev=v6nodetest,name=org.v6node.test")
    plain_vm_options "$out/efivars.fd"
    for ((boot = 1; boot <= max_boots; boot++)); do
        echo "=== power on $boot" >>"$out/console.log"
        run_plain_vm "$out" -no-reboot "$@" || rc=$?
        ((rc == 0)) || break
        grep -q '^1\.\.[0-9]' "$out/results" 2>/dev/null && break
    done
    # The unit and script belong to these boots only, as in boot_and_collect.
    guest_credentials=("${saved[@]}")
    touch "$out/results"
    return "$rc"
}

# boot_with_script OUTDIR SCRIPT [MKOSI_OPTION...]: boots, waits for the guest
# to power off (V6NODE_BOOT_TIMEOUT seconds at most), leaves console.log and
# results (the port's output) in OUTDIR. Returns qemu's status (124: timeout).
# boot_disks_with_script OUTDIR SCRIPT QEMU_DRIVE_OPTION...: the same in a
# plain UEFI VM (launch_plain_vm).
boot_with_script() { boot_and_collect launch_mkosi "$@"; }
boot_disks_with_script() { boot_and_collect launch_plain_vm "$@"; }

boot_and_collect() {
    local launch=$1 out=$2 script=$3 rc=0 saved=("${guest_credentials[@]}")
    shift 3
    mkdir -p "$out"
    rm -f "$out/results" "$out/console.log"
    guest_test_credentials "$script"
    guest_results_port "$out"
    "$launch" "$out" "$@" || rc=$?
    # The unit and script belong to this boot only; callers may boot again.
    guest_credentials=("${saved[@]}")
    touch "$out/results"
    return "$rc"
}
