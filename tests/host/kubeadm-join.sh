#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The node's join script (v6node-kubeadm-join.service) on this host, with
# stand-ins for kubeadm and hostname that record what they were given: which
# credentials make which JoinConfiguration, and which are refused with a
# message naming the credential and never showing the token. (The real
# kubeadm against a real control plane: tests/e2e.)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/lib.sh"
script=$top/mkosi.extra/usr/libexec/v6node/kubeadm-join
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/bin"
cat >"$tmp/bin/kubeadm" <<'EOF'
#!/bin/bash
# Records the join's configuration; fails when told to; a join that works
# leaves kubelet's kubeconfig as kubeadm does.
[[ "$1" == join ]] && cp "$3" "$STANDIN_DIR/join.yaml"
echo "$*" >>"$STANDIN_DIR/kubeadm.calls"
[[ "$1" != join || -z "${STANDIN_FAIL:-}" ]] || { echo "error: the stand-in was told to fail" >&2; exit 3; }
[[ "$1" != join ]] || printf 'clusters:\n- cluster:\n    server: https://[2001:db8::10]:6443\n' >"$V6NODE_KUBERNETES_DIR/kubelet.conf"
EOF
printf '#!/bin/sh\necho "${STANDIN_HOSTNAME:-node-1}"\n' >"$tmp/bin/hostname"
printf '#!/bin/sh\necho "$*" >>"$STANDIN_DIR/systemctl.calls"\n' >"$tmp/bin/systemctl"
chmod +x "$tmp/bin/kubeadm" "$tmp/bin/hostname" "$tmp/bin/systemctl"

token=abcdef.0123456789abcdef
hash=sha256:$(printf 'ab%.0s' $(seq 32))
# join KEY=VALUE...: runs the script with these v6node.kubeadm.* credentials.
join() {
    rm -rf "$tmp/creds" "$tmp/run" "$tmp/join.yaml" "$tmp/kubeadm.calls" "$tmp/systemctl.calls" "$tmp/etc" && mkdir -p "$tmp/creds" "$tmp/run" "$tmp/etc"
    local kv
    for kv in "$@"; do
        case "$kv" in
        kubernetes.*) printf '%s\n' "${kv#*=}" >"$tmp/creds/v6node.${kv%%=*}" ;;
        *) printf '%s\n' "${kv#*=}" >"$tmp/creds/v6node.kubeadm.${kv%%=*}" ;;
        esac
    done
    # In a network namespace of its own whose one address, 2001:db8::2, is
    # the source towards the endpoint.
    PATH=$tmp/bin:$PATH STANDIN_DIR=$tmp CREDENTIALS_DIRECTORY=$tmp/creds RUNTIME_DIRECTORY=$tmp/run V6NODE_KUBERNETES_DIR=$tmp/etc \
        unshare --net bash -c 'ip link add d0 type veth peer name d1 && ip -6 address add 2001:db8::2/64 dev d0 nodad && ip link set d1 up &&
            ip link set d0 up && exec "$0"' "$script" >"$tmp/log" 2>&1
}
refused() { # refused PATTERN KEY=VALUE...: fails, says PATTERN, never shows the token, runs no join
    local pattern=$1
    shift
    join "$@" && { echo "accepted"; cat "$tmp/log"; return 1; }
    cat "$tmp/log"
    grep -q -- "$pattern" "$tmp/log" && ! grep -qF "$token" "$tmp/log" && [[ ! -e "$tmp/join.yaml" ]]
}

joined() {
    join endpoint='[2001:db8::10]:6443' token="$token" ca-cert-hash="$hash" || { cat "$tmp/log"; return 1; }
    cat "$tmp/join.yaml"
    grep -q 'apiServerEndpoint: "\[2001:db8::10\]:6443"' "$tmp/join.yaml" &&
        grep -q "token: \"$token\"" "$tmp/join.yaml" && grep -q "caCertHashes: \[\"$hash\"\]" "$tmp/join.yaml" &&
        grep -A1 'name: node-ip' "$tmp/join.yaml" | grep -q 'value: "2001:db8::2"' &&
        [[ "$(stat -c %a "$tmp/join.yaml")" == 600 ]] && ! grep -qF "$token" "$tmp/log"
}
pass_if "endpoint, token and hash make a JoinConfiguration (mode 600, node IP, token not logged)" joined

passthrough() {
    local config='apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  file:
    kubeConfigPath: /etc/site/discovery.conf'
    join join-config="$config" || { cat "$tmp/log"; return 1; }
    diff <(echo "$config") "$tmp/join.yaml"
}
pass_if "a whole JoinConfiguration is used as given, byte for byte" passthrough
no_credentials() { join && grep -q 'no v6node.kubeadm.\* credentials: not joining' "$tmp/log" && [[ ! -e "$tmp/kubeadm.calls" ]]; }
pass_if "no credentials: no join, says how to join" no_credentials
pass_if "a malformed token is refused without being shown" \
    refused 'v6node.kubeadm.token is not a bootstrap token' endpoint='[2001:db8::10]:6443' token="${token}X" ca-cert-hash="$hash"
pass_if "a malformed CA hash is refused, naming the credential" \
    refused "v6node.kubeadm.ca-cert-hash='sha256:1234' is not sha256: followed by 64 hex digits" \
    endpoint='[2001:db8::10]:6443' token="$token" ca-cert-hash=sha256:1234
pass_if "a missing CA hash is named" \
    refused 'v6node.kubeadm.ca-cert-hash is missing' endpoint='[2001:db8::10]:6443' token="$token"
pass_if "an endpoint without a port is refused" \
    refused "v6node.kubeadm.endpoint='2001:db8::10' is not \[IPv6\]:port or name:port" \
    endpoint=2001:db8::10 token="$token" ca-cert-hash="$hash"
pass_if "join-config together with the three is refused" \
    refused 'give one or the other' join-config='kind: JoinConfiguration' token="$token"
unnamed() { STANDIN_HOSTNAME=localhost refused "the host name is 'localhost'" join-config='kind: JoinConfiguration'; }
pass_if "a node called localhost is refused (credential system.hostname)" unnamed
failed_join_undone() {
    STANDIN_FAIL=1 join join-config='kind: JoinConfiguration' && return 1
    cat "$tmp/log"
    grep -q 'the stand-in was told to fail' "$tmp/log" && grep -q 'kubeadm join failed (status 3' "$tmp/log" &&
        grep -qx 'reset --force' "$tmp/kubeadm.calls"
}
pass_if "a failed join keeps kubeadm's reason, exits with its status and is reset" failed_join_undone
sa_token=eyJhbGciOiJSUzI1NiJ9.dataplane.signature
dataplane_kubeconfig() {
    join endpoint='[2001:db8::10]:6443' token="$token" ca-cert-hash="$hash" kubernetes.token="$sa_token" ||
        { cat "$tmp/log"; return 1; }
    cat "$tmp/etc/v6node-dataplane.conf"
    grep -q 'server: "https://\[2001:db8::10\]:6443"' "$tmp/etc/v6node-dataplane.conf" &&
        grep -q "tokenFile: \"$tmp/etc/v6node-dataplane.token\"" "$tmp/etc/v6node-dataplane.conf" &&
        grep -q "certificate-authority: \"$tmp/etc/pki/ca.crt\"" "$tmp/etc/v6node-dataplane.conf" &&
        [[ "$(cat "$tmp/etc/v6node-dataplane.token")" == "$sa_token" ]] &&
        [[ "$(stat -c %a "$tmp/etc/v6node-dataplane.conf" "$tmp/etc/v6node-dataplane.token" | sort -u)" == 600 ]] &&
        ! grep -qF "$sa_token" "$tmp/log" &&
        grep -qx 'set-property v6node-dataplane.service IPAddressAllow=2001:db8::10' "$tmp/systemctl.calls"
}
pass_if "joined with v6node.kubernetes.token: the agent's kubeconfig and token file (mode 600), token not logged, its unit may reach the API server" dataplane_kubeconfig
no_dataplane_token() {
    join endpoint='[2001:db8::10]:6443' token="$token" ca-cert-hash="$hash" || return 1
    grep 'no v6node.kubernetes.token credential' "$tmp/log" && [[ ! -e "$tmp/etc/v6node-dataplane.token" ]]
}
pass_if "joined without it: says what the dataplane cannot do, and how to give the token" no_dataplane_token
tap_done
