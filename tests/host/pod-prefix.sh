#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The node's pod-prefix script (v6node-pod-prefix.service) on this host, with
# stand-ins for kubectl (which answers podCIDRs on stdout and warns on stderr,
# as the real one may) and systemctl (which records the reload): which answer
# makes which dataplane drop-in, and when the agent is asked to reload.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/lib.sh"
script=$top/mkosi.extra/usr/libexec/v6node/pod-prefix
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/bin"
cat >"$tmp/bin/kubectl" <<'STANDIN'
#!/bin/bash
echo 'W1121 12:00:00.000000 1 memcache.go:265] couldn'"'"'t get current server API group list: Get "https://[2001:db8::10]:6443/api"' >&2
printf '%s' "$STANDIN_CIDRS"
STANDIN
printf '#!/bin/sh\necho "$*" >>"$STANDIN_DIR/systemctl.calls"\n' >"$tmp/bin/systemctl"
chmod +x "$tmp/bin/kubectl" "$tmp/bin/systemctl"
touch "$tmp/kubelet.conf"

run() { # run CIDRS: the script against a Node whose spec.podCIDRs are CIDRS
    rm -f "$tmp/systemctl.calls"
    PATH=$tmp/bin:$PATH STANDIN_DIR=$tmp STANDIN_CIDRS=$1 V6NODE_NODE_NAME=node-1 V6NODE_POD_PREFIX_TIMEOUT=4 \
        V6NODE_KUBECONFIG=$tmp/kubelet.conf V6NODE_DROPIN=$tmp/dropin.d/50-kubernetes.toml \
        V6NODE_CNI_CONFLIST=$tmp/10-v6node.conflist "$script" >"$tmp/log" 2>&1
}
dual_stack() {
    run "10.244.1.0/24 fd00:10:244:1::/64" || { cat "$tmp/log"; return 1; }
    cat "$tmp/dropin.d/50-kubernetes.toml"
    grep -qx 'prefix = "fd00:10:244:1::/64"' "$tmp/dropin.d/50-kubernetes.toml" &&
        grep -qx 'reload v6node-dataplane.service' "$tmp/systemctl.calls"
}
pass_if "the IPv6 podCIDR goes to the dataplane (not kubectl's warnings), and it reloads" dual_stack
settled() {
    printf '{"plugins":[{"podCIDR":"fd00:10:244:1::/64"}]}' >"$tmp/10-v6node.conflist"
    run "fd00:10:244:1::/64" && grep -q 'unchanged' "$tmp/log" && [[ ! -e "$tmp/systemctl.calls" ]]
}
pass_if "drop-in and CNI config already agree: no reload" settled
reloads_until_the_config_agrees() {
    printf '{"plugins":[{"podCIDR":"fd00:10:244:9::/64"}]}' >"$tmp/10-v6node.conflist"
    run "fd00:10:244:1::/64" && grep -qx 'reload v6node-dataplane.service' "$tmp/systemctl.calls"
}
pass_if "drop-in written but the CNI config disagrees (a reload failed): reload again" reloads_until_the_config_agrees
ipv4_only() { ! run "10.244.1.0/24" && cat "$tmp/log" && grep -q 'no IPv6 pod CIDR (10.244.1.0/24)' "$tmp/log"; }
pass_if "an IPv4-only node is refused, saying so" ipv4_only
no_cidrs() { ! run "" && cat "$tmp/log" && grep -q 'got no podCIDRs' "$tmp/log"; }
pass_if "no podCIDRs in time: gives up, naming the controller manager's flag" no_cidrs
tap_done
