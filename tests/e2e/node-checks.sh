#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Runs inside the node of tests/e2e/kubeadm-join (as v6node-test.service, see
# tests/image/qemu.sh) and reports TAP lines on the virtio port. The node
# booted with a wrong CA hash: checks the failed join, corrects it the way an
# operator would (/etc/credstore), tries a wrong token the same way, then
# follows the join with the boot's token and the pod. Powers
# off when the host's checks are done (or after a deadline).
set -uo pipefail
creds=${CREDENTIALS_DIRECTORY:?}
exec >/dev/virtio-ports/org.v6node.test
TAP_VERBOSE=1
gateway=$(cat "$creds/v6node.test.gateway")
token=$(cat "$creds/v6node.test.token")

sysext_merged() {
    systemctl is-active -q v6node-extensions.service &&
        systemd-sysext status --no-pager | grep kubernetes >/dev/null &&
        kubeadm version -o short && kubelet --version && systemctl cat kubelet.service >/dev/null
}

containerd_configured() {
    local config
    config=$(containerd --config /usr/lib/v6node/containerd/config.toml config dump) || return 1
    grep -E 'bin_dir|conf_dir|SystemdCgroup|sandbox_image' <<<"$config"
    grep -q 'bin_dir = "/usr/lib/cni"' <<<"$config" && grep -q 'SystemdCgroup = true' <<<"$config" &&
        grep -q 'sandbox_image = "localhost/v6node/pause:sandbox"' <<<"$config" &&
        ctr --namespace k8s.io images ls -q | grep -x localhost/v6node/pause:sandbox >/dev/null
}

# The test pod's image, as a site without a registry would bring it.
test_image_imported() {
    curl -fsS "http://[$gateway]:8000/e2e-server.oci.tar" -o /run/e2e-server.oci.tar &&
        ctr --namespace k8s.io images import --local /run/e2e-server.oci.tar &&
        ctr --namespace k8s.io images ls -q | grep -x localhost/v6node/e2e-server:1 >/dev/null
}

join_failed() {
    journalctl -b -u v6node-kubeadm-join.service -o cat | grep 'kubeadm join failed' >/dev/null
}
bad_join_reported_and_undone() {
    retry 300 join_failed || { journalctl -b -u v6node-kubeadm-join.service -o cat | tail -20; return 1; }
    local journal
    journal=$(journalctl -b -u v6node-kubeadm-join.service -o cat)
    grep -iE 'public key|pinned|hash|error' <<<"$journal" | head -3
    echo "--- journal:"
    tail -n 25 <<<"$journal"
    # The reason in the journal and in systemctl status; nothing half-made;
    # a retry scheduled; the token never logged.
    grep -qiE "none of the public keys .* pinned" <<<"$journal" || { echo "no reason in the journal"; return 1; }
    systemctl status --no-pager v6node-kubeadm-join.service >/run/v6node-test-status.txt 2>&1
    grep -q 'kubeadm join failed\|activating (auto-restart)' /run/v6node-test-status.txt ||
        { echo "systemctl status says:"; cat /run/v6node-test-status.txt; return 1; }
    [[ ! -e /etc/kubernetes/kubelet.conf && ! -e /etc/kubernetes/bootstrap-kubelet.conf ]] ||
        { echo "left behind:"; ls -l /etc/kubernetes; return 1; }
    ! systemctl is-active -q kubelet.service || { echo "kubelet runs"; return 1; }
    ! journalctl -b -o cat | grep -F "$token" || { echo "the token is in the journal (above)"; return 1; }
}

# The right CA hash with the right token ID but a wrong secret: kubeadm
# cannot verify the cluster-info signature and must not trust the server.
wrong_token_refused() {
    install -d -m 0700 /etc/credstore
    install -m 0600 "$creds/v6node.test.ca-cert-hash" /etc/credstore/v6node.kubeadm.ca-cert-hash
    (umask 077 && echo "${token%%.*}.$(echo "${token#*.}" | tr 'a-z0-9' 'b-z0-9a' | head -c 16)" >/etc/credstore/v6node.kubeadm.token)
    systemctl restart v6node-kubeadm-join.service
    local journal
    journal=$(journalctl -b -u v6node-kubeadm-join.service -o cat)
    grep 'JWS signature' <<<"$journal" | tail -n 1
    grep -q "failed to verify JWS signature of received cluster info object" <<<"$journal" &&
        [[ ! -e /etc/kubernetes/kubelet.conf ]] && ! systemctl is-active -q kubelet.service
}

corrected_join_succeeds() {
    rm /etc/credstore/v6node.kubeadm.token
    systemctl restart v6node-kubeadm-join.service
    journalctl -b -u v6node-kubeadm-join.service -o cat | tail -n 30
    [[ "$(systemctl show -P Result v6node-kubeadm-join.service)" == success ]] &&
        [[ -e /etc/kubernetes/kubelet.conf ]] && retry 120 systemctl is-active -q kubelet.service
}

no_secret_world_readable() {
    local file bad=0
    # kubeadm keeps the token only in root-only files, if at all.
    for file in $(grep -rlF "$token" /etc /run /var/lib/kubelet 2>/dev/null); do
        stat -c '%a %n' "$file"
        [[ "$(stat -c '%a' "$file")" == ?00 ]] || bad=1
    done
    [[ ! -e /run/v6node-kubeadm-join ]] && return $bad
}

# kubelet's configuration (from the cluster's kubelet-config): IPv6 cluster DNS.
kubelet_ipv6_only() {
    sed -n '/^clusterDNS:/,/^[a-z]/p' /var/lib/kubelet/config.yaml | head -3
    grep -A1 '^clusterDNS:' /var/lib/kubelet/config.yaml | grep -q -- '- fd00:10:96::a$' &&
        grep -q -- '--node-ip=fd00:9::2' /var/lib/kubelet/kubeadm-flags.env
}

# The agent follows the cluster with its own ServiceAccount token: the Node's
# podCIDR becomes the CNI config, the kubeconfig and token are root's only.
pod_prefix_reaches_cni() {
    retry 300 test -e /etc/cni/net.d/10-v6node.conflist || {
        journalctl -b -u v6node-dataplane.service -o cat | grep -i kubernetes | tail -n 15
        v6node-dataplane status | sed -n '/^cluster:/,/^$/p'
        return 1
    }
    jq -r '.plugins[0].podCIDR' /etc/cni/net.d/10-v6node.conflist
    v6node-dataplane status | sed -n '/^cluster:/,/^counters:/p'
    v6node-dataplane status --json | jq -e --arg p "$(jq -r '.plugins[0].podCIDR' /etc/cni/net.d/10-v6node.conflist)" \
        '.cluster.api.connected and .cluster.pod_prefixes == [$p]' >/dev/null &&
        [[ "$(stat -c %a /etc/kubernetes/v6node-dataplane.conf /etc/kubernetes/v6node-dataplane.token | sort -u)" == 600 ]]
}

pod_on_netkit() {
    local endpoint
    endpoint() { v6node-dataplane status --json | jq -ec '.pods.endpoints[] | select(.pod == "default/e2e-server")'; }
    retry 600 endpoint || { v6node-dataplane status; return 1; }
    endpoint
    v6node-dataplane status | sed -n '/^pods:/,/^$/p'
    # A container exists only once the sandbox's network was set up.
    retry 300 bash -c "ctr --namespace k8s.io containers ls | grep 'localhost/v6node/e2e-server:1' >/dev/null" || {
        journalctl -b -u containerd -o cat | grep -i cni | tail -n 5
        return 1
    }
    endpoint | jq -e '.device == "netkit"' >/dev/null &&
        ip -d link show "$(endpoint | jq -r .host_device)" | grep 'netkit mode l3' >/dev/null
}

operator_view() {
    # What an operator reads: one line of state per unit, and the agent's view.
    local unit
    for unit in v6node-extensions v6node-kubeadm-join containerd v6node-images kubelet v6node-dataplane; do
        printf '%s: %s/%s\n' "$unit" "$(systemctl show -P ActiveState "$unit")" "$(systemctl show -P Result "$unit")"
    done
    systemctl is-active -q kubelet containerd v6node-dataplane
}

units_hardened() {
    local unit
    # Exposure (0 best .. 10): measured and reported; the two that must mount
    # or run kubeadm (which needs most of the system) are reported, not held.
    for unit in v6node-images.service v6node-extensions.service v6node-kubeadm-join.service; do
        printf '%s: %s\n' "$unit" "$(systemd-analyze security --no-pager "$unit" 2>&1 | grep -o 'Overall exposure level.*')"
    done
    systemd-analyze security --no-pager --threshold=20 v6node-images.service >/dev/null
}

pass_if "the Kubernetes sysext is downloaded, checked and merged (kubeadm, kubelet)" sysext_merged
pass_if "containerd: systemd cgroups, CNI in /usr/lib/cni, the pause image present" containerd_configured
pass_if "the test pod's image imported into containerd (no registry)" test_image_imported
pass_if "a wrong CA hash: join fails with kubeadm's reason, undone, retried, token not logged" bad_join_reported_and_undone
pass_if "hash corrected in /etc/credstore, a wrong token: refused with kubeadm's reason" wrong_token_refused
pass_if "the boot's token again: the join succeeds, kubelet runs" corrected_join_succeeds
pass_if "no world-readable file holds the bootstrap token" no_secret_world_readable
pass_if "kubelet: IPv6 node IP, IPv6 cluster DNS" kubelet_ipv6_only
pass_if "the agent follows the API with its own token: the Node's podCIDR in the CNI config" pod_prefix_reaches_cni
pass_if "the pod runs on a netkit device (v6node-dataplane status)" pod_on_netkit
pass_if "systemctl shows every piece active" operator_view
pass_if "new units' exposure (systemd-analyze security)" units_hardened
# Keep the node up until the host has checked the pod from outside.
retry 900 curl -sf -o /dev/null "http://[$gateway]:8000/done"
# kubelet's unit came with the sysext, after the boot transaction: the
# sysext's multi-user.target drop-in upholds it instead of [Install].
kubelet_upheld() {
    systemctl show -P Upholds multi-user.target | grep kubelet.service >/dev/null &&
        systemctl stop kubelet.service && retry 30 systemctl is-active -q kubelet.service
}
pass_if "kubelet is upheld: stopped, it is started again" kubelet_upheld
pass_if "no failed units" bash -c '[[ -z "$(systemctl --failed --no-legend --plain | tee /dev/stderr)" ]]'
tap_done
exec >&-
systemctl poweroff --no-block
