#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Runs inside the node at every boot of tests/image/update-test (started by
# v6node-test.service, see qemu.sh) and reports TAP lines on the virtio port
# org.v6node.test. One VM, rebooted between versions; what happened on
# earlier boots is kept in $state on the node's root partition:
#
#   V1 (the image as built)  checks, then systemd-sysupdate update from the
#                            source in the credential v6node.update.url (V2) and
#                            the Kubernetes sysext (its own component), reboot
#   V2 (first time)          updated, blessed, state and sysext kept; a tampered V3 refused;
#                            then /etc/v6node/update.url names the good V3, update, reboot
#   V3                       its dataplane cannot start: not healthy, the node
#                            reboots itself; the test spent two of its three
#                            tries beforehand (+1-2), so this is its last
#   V2 (again)               back by itself, V3 marked bad, the reason in the
#                            journal of V3's boots; figures; power off
set -uo pipefail

creds=${CREDENTIALS_DIRECTORY:?}
exec >/dev/virtio-ports/org.v6node.test
TAP_VERBOSE=1
state=/var/lib/v6node-update-test
mkdir -p "$state"
# TAP numbering runs on across boots.
tap_count=$(cat "$state/tap_count" 2>/dev/null || echo 0)
tap_failed=$(cat "$state/tap_failed" 2>/dev/null || echo 0)
save_tap() { echo "$tap_count" >"$state/tap_count"; echo "$tap_failed" >"$state/tap_failed"; }

v1=$(cat "$creds/v6node.test.v1") v2=$(cat "$creds/v6node.test.v2") v3=$(cat "$creds/v6node.test.v3")
version=$(. /usr/lib/os-release && echo "$IMAGE_VERSION")
echo "$version $(date +%s)" >>"$state/boots"
echo "# boot $(wc -l <"$state/boots"): version $version, /usr from $(findmnt -n -f -o SOURCE /usr)"
# systemd-gpt-auto-generator mounts the ESP on /boot (automount).
esp=/boot/EFI/Linux

# The UKIs on the ESP and the /usr partitions' labels, for the record.
layout() {
    ls "$esp"
    lsblk -n -o PARTLABEL,PARTTYPENAME "/dev/$(lsblk -n -o PKNAME "$(findmnt -n -o SOURCE /)")" | grep -i usr
}
sysupdate_to() { # sysupdate_to VERSION: an update that must install VERSION
    local started=$SECONDS
    systemd-sysupdate update 2>&1 | tail -n 20 || return 1
    echo "$(date +%s) $((SECONDS - started))" >"$state/update-$1"
    echo "systemd-sysupdate update took $((SECONDS - started)) s"
    layout
    [[ -e "$esp/v6node_$1+3-0.efi" ]] && lsblk -n -o PARTLABEL | grep -qx "v6node_$1"
}

# The Kubernetes sysext is a sysupdate component of its own, from the same
# server: installed into /var/lib/extensions/kubernetes.raw.v, merged.
kubernetes=$(cat "$creds/v6node.test.kubernetes-version")
kubelet_is() { # kubelet_is VERSION: the merged sysext's kubelet says it is VERSION
    systemd-sysext status --no-pager 2>&1 | grep -w kubernetes || return 1
    /usr/bin/kubelet --version | tee /dev/stderr | grep -qx "Kubernetes v$1"
}
sysext_component_updates() {
    local started=$SECONDS
    systemd-sysupdate components 2>&1 | tee /dev/stderr | grep -qw kubernetes || return 1
    systemd-sysupdate --component=kubernetes update 2>&1 | tail -n 5 || return 1
    ls -l /var/lib/extensions/kubernetes.raw.v/
    [[ -f "/var/lib/extensions/kubernetes.raw.v/kubernetes_$kubernetes.raw" ]] || return 1
    systemd-sysext refresh || return 1
    echo "$((SECONDS - started))" >"$state/sysext-update"
    kubelet_is "$kubernetes"
}

booted_as_built() {
    [[ "$version" == "$v1" ]] && layout &&
        # Nothing to bless: the image as built boots without tries.
        [[ ! -e /sys/firmware/efi/efivars/LoaderBootCountPath-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f ]] &&
        lsblk -n -o PARTLABEL | grep -qx _empty
}
source_from_credential() {
    journalctl -b -q -o cat -u v6node-update-source.service | grep 'updates from http.*its signature checked' &&
        grep -qxF "Path=$(cat "$creds/v6node.test.url-first")" /run/sysupdate.d/10-usr.transfer &&
        # The boot disk by its sequence number, the one holding the root partition.
        grep -x "Path=/dev/disk/by-diskseq/$(cat "/sys/block/$(lsblk -n -o PKNAME "$(findmnt -n -o SOURCE /)")/diskseq")" \
            /run/sysupdate.d/10-usr.transfer
}
sees_v2() { systemd-sysupdate list 2>&1 | tee /dev/stderr | grep -qw "$v2"; }
marker_written() {
    echo "$v1" >/etc/v6node-update-test && echo "$v1" >"$state/marker" &&
        ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub >"$state/host-key"
}

blessed() {
    retry 300 sh -c '[ "$(/usr/lib/systemd/systemd-bless-boot status)" = good ]' || {
        /usr/lib/systemd/systemd-bless-boot status; systemctl status --no-pager v6node-boot-health.service; return 1; }
    layout
    journalctl -b -q -o cat -u v6node-boot-health.service | grep healthy &&
        [[ -e "$esp/v6node_$version.efi" ]] && date +%s >"$state/blessed-$version"
}
state_kept() {
    [[ "$(cat /etc/v6node-update-test)" == "$v1" && "$(cat "$state/marker")" == "$v1" ]] &&
        [[ "$(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)" == "$(cat "$state/host-key")" ]] &&
        systemctl is-active -q v6node-dataplane.service
}
# tampered KIND REASON: V3 from a source where its UKI was changed after
# publishing is refused for REASON (a pattern of systemd-sysupdate's
# output), and nothing changes.
tampered_refused() {
    local output
    cat "$creds/v6node.test.url-tampered-$1" >/etc/v6node/update.url &&
        systemctl restart v6node-update-source.service || return 1
    grep -qx Verify=yes /run/sysupdate.d/30-uki.transfer || { echo "signatures not checked"; return 1; }
    if output=$(systemd-sysupdate update 2>&1); then echo "the update was taken"; return 1; fi
    tail -n 5 <<<"$output"
    grep -q "$2" <<<"$output" || { echo "refused, but not for: $2"; return 1; }
    layout
    [[ ! -e "$esp/v6node_$v3+3-0.efi" ]] && [[ -e "$esp/v6node_$v2.efi" ]]
}
update_from_config_file() {
    echo "# the update source from /etc/v6node/update.url" >/etc/v6node/update.url &&
        cat "$creds/v6node.test.url-good" >>/etc/v6node/update.url &&
        systemctl restart v6node-update-source.service &&
        grep -qxF "Path=$(cat "$creds/v6node.test.url-good")" /run/sysupdate.d/10-usr.transfer || return 1
    sysupdate_to "$v3"
}

fell_back() {
    layout
    # V3 used its last try unblessed: +0-3, sorted last by systemd-boot.
    [[ -e "$esp/v6node_$v3+0-3.efi" && -e "$esp/v6node_$v2.efi" ]] &&
        [[ "$(/usr/lib/systemd/systemd-bless-boot status)" == clean ]]
}
reason_visible() {
    journalctl -q -o cat -b -1 -u v6node-boot-health.service | tee /dev/stderr |
        grep -q "version $v3 NOT healthy.*v6node-dataplane.service"
}
figures() {
    local started took booted_v2 into_v3 back
    read -r started took <"$state/update-$v2"
    read -r _ booted_v2 < <(grep "^$v2 " "$state/boots" | head -n 1)
    into_v3=$(cat "$state/reboot-into-$v3")
    read -r _ back < <(grep "^$v2 " "$state/boots" | tail -n 1)
    echo "update to $v2: systemd-sysupdate update $took s; from its start to $v2 running $((booted_v2 - started)) s, blessed $(($(cat "$state/blessed-$v2") - started)) s (TCG)"
    echo "first boot of the image as built (a re-imaged node): $(cat "$state/first-boot")"
    echo "fallback: from the reboot into $v3 to $v2 running again $((back - into_v3)) s (TCG, its last try)"
    echo "Kubernetes sysext $kubernetes: systemd-sysupdate --component=kubernetes update and systemd-sysext refresh $(cat "$state/sysext-update") s (TCG)"
}

case "$version:$(grep -c "^$version " "$state/boots")" in
"$v1:1")
    systemd-analyze time | head -n 1 >"$state/first-boot"
    pass_if "$v1 boots from the image as built, without tries; slot B is empty" booted_as_built
    pass_if "the update source from the credential v6node.update.url, signatures checked" source_from_credential
    pass_if "systemd-sysupdate sees $v2 at the source" sees_v2
    pass_if "state written to /etc and /var" marker_written
    pass_if "systemd-sysupdate update installs $v2: /usr into slot B, its UKI with 3 tries" sysupdate_to "$v2"
    pass_if "the Kubernetes sysext $kubernetes, its own sysupdate component: installed, merged" sysext_component_updates
    save_tap
    systemctl reboot --no-block
    ;;
"$v2:1")
    pass_if "$v2 runs from slot B and is blessed once healthy" blessed
    pass_if "/etc, /var, the SSH host key carried over" state_kept
    pass_if "the Kubernetes sysext carried over: merged at boot on $v2" kubelet_is "$kubernetes"
    pass_if "an artifact changed after SHA256SUMS is refused (its checksum); nothing changes" \
        tampered_refused file 'Checksum of .*v6node_'"$v3"'\.efi file did not check out'
    pass_if "SHA256SUMS changed to match it fails its signature; nothing changes" \
        tampered_refused sums 'Signature verification failed'
    pass_if "$v3 installed from the source in /etc/v6node/update.url" update_from_config_file
    # Each try of V3 is the same boot (not healthy, reboot), two minutes
    # under TCG: the test marks two as spent, which systemd-boot counts on
    # from (+1-2, then +0-3 as it boots the last).
    mv "$esp/v6node_$v3+3-0.efi" "$esp/v6node_$v3+1-2.efi" || echo "# could not mark two of $v3's tries spent"
    save_tap
    date +%s >"$state/reboot-into-$v3"
    systemctl reboot --no-block
    ;;
"$v3:"*)
    # Not healthy by design (its dataplane config is broken): boot-health
    # reboots the node; nothing to do here.
    echo "# $v3 is running; v6node-boot-health decides"
    ;;
"$v2:2")
    pass_if "back on $v2 by itself after $v3 used its last try; $v3 marked bad" fell_back
    pass_if "why: $v3's health verdict is in its boot's journal" reason_visible
    pass_if "/etc, /var, the SSH host key carried over" state_kept
    pass_if "figures" figures
    pass_if "no failed units" sh -c '[ -z "$(systemctl --failed --no-legend --plain)" ] || systemctl --failed'
    tap_done
    exec >&-
    systemctl poweroff --no-block
    ;;
*)
    pass_if "a boot the test expects (version $version, boot $(wc -l <"$state/boots"))" false
    tap_done
    exec >&-
    systemctl poweroff --no-block
    ;;
esac
