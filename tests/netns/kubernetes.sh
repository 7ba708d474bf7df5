#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The agent follows a real Kubernetes API server: the test control plane
# (tests/e2e/control-plane.bash: etcd, kube-apiserver, controller manager,
# scheduler, set up by kubeadm's phases) runs in a namespace whose bridge is
# the "wire" between two "nodes", each a namespace:
#
#   node-a (fd00:9::a, the agent)  --veth--  cp: bridge fd00:9::1, API server
#   node-b (fd00:9::b, a "pod" fd00:10:244:b::5 on lo) --veth--/
#
# The agent runs with the ServiceAccount and ClusterRole the image ships
# (/usr/share/v6node/kubernetes/dataplane-rbac.yaml), its token in a file.
# Nodes are made with kubectl; what the agent does is read off the kernel's
# routing table, the CNI config it writes, status --json and ping.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/kubernetes.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent

sandbox v6k
gw_ns=$id-cp node=$id-a peer=$id-b
gateway_pod_prefix=fd00:10:244::/56
. "$top/tests/e2e/control-plane.bash"
export V6NODE_CNI_CONF_DIR=$work/cni
agent_pid=
cleanup_netns+=("$node" "$peer" "$gw_ns")
cleanup() {
    # What the agent said, when something failed.
    ((tap_failed == 0)) || tail -n 40 "$work/agent.log" | sed 's/^/# agent: /'
    control_plane_down
    in_node "$bin" detach --force >/dev/null 2>&1
}

echo "# building the test control plane (warm Go caches: seconds)"
"$top/scripts/build-kubernetes" --control-plane >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log" | sed 's/^/# /'; echo "Bail out! control plane build failed"; exit 1; }

in_peer() { at "$peer" "$@"; }

control_plane_wire "$node" "$peer"
wire_node "$node" fd00:9::a
wire_node "$peer" fd00:9::b
# node-b's pod, and its way back to node-a's pods (node-b runs no agent).
ip -n "$peer" address add fd00:10:244:b::5/128 dev lo
ip -n "$peer" route add fd00:10:244:a::/64 via fd00:9::a

mkdir -p "$root/usr/lib/v6node" "$work/state"
cat >"$root/usr/lib/v6node/dataplane.toml" <<EOF
[services]
cgroup = ""
[attach]
devices = ["eth0"]
[bigtcp]
devices = ["eth0"]
[kubernetes]
kubeconfig = "$work/dataplane.conf"
node_name = "node-a"
EOF

# v6node's routes in node-a's main table, one "PREFIX via ADDRESS" a line.
v6node_routes() { ip -n "$node" -6 route show table main proto 118 | awk '{ print $1, $2, $3 }' | sort; }
routes_are() { # routes_are "PREFIX via ADDR" ...: exactly these, within 10 s
    local want
    want=$(printf '%s\n' "$@" | sed '/^$/d' | sort)
    routes_equal() { [[ "$(v6node_routes)" == "$want" ]]; }
    retry 10 routes_equal ||
        { echo "have:"; v6node_routes; echo "want:"; echo "$want"; return 1; }
}
problem_for() { jq_status --arg n "$1" '.cluster.problems[] | select(.node == $n) | .reason'; }

# --- the API server is not there yet -------------------------------------------
# The kubeconfig names the server before it exists: the agent must start,
# say why it is not connected, and keep trying.
dataplane_kubeconfig "$work/ca.crt" "$work/token" >"$work/dataplane.conf"
agent_start
pass_if "the agent starts while the API server is unreachable" kill -0 "$agent_pid"
not_connected_says_why() {
    has_error() { [[ -n "$(jq_status '.cluster.api.error // empty')" ]]; }
    retry 10 has_error &&
        [[ "$(jq_status '.cluster.api.connected')" == false ]] && jq_status '.cluster.api.error'
}
pass_if "status: API not connected, and why" not_connected_says_why
pass_if "no routes of v6node's before the cluster is known" test -z "$(v6node_routes)"

# --- the API server comes up; Nodes become routes ------------------------------
control_plane_up "$work/cp" >"$work/cp.log" 2>&1 || { cat "$work/cp.log"; echo "Bail out! control plane did not start"; exit 1; }
cp "$work/cp/etc/pki/ca.crt" "$work/ca.crt"
dataplane_identity >"$work/token" || { echo "Bail out! no token for the dataplane's ServiceAccount"; exit 1; }
make_node node-a fd00:9::a fd00:10:244:a::/64
make_node node-b fd00:9::b fd00:10:244:b::/64
api_connected_is() { [[ "$(jq_status .cluster.api.connected)" == "$1" ]]; }
connected() { retry 40 api_connected_is true; }
pass_if "the agent connects once the API server is up (retrying on its own)" connected
pass_if "node-b's pod CIDR is routed via its InternalIP, protocol 118 (v6node)" \
    routes_are "fd00:10:244:b::/64 via fd00:9::b"
cni_prefix_is() { jq -e --arg p "$1" '.plugins[0].podCIDR == $p' "$work/cni/10-v6node.conflist"; }
pass_if "this node's pod prefix comes from its Node: the CNI config says fd00:10:244:a::/64" \
    retry 10 cni_prefix_is fd00:10:244:a::/64
pass_if "node-a reaches node-b's pod (ping across the wire)" in_node ping -q -c 3 -i 0.2 -W 1 fd00:10:244:b::5
peer_in_status() {
    jq_status '.cluster.peers[] | select(.name == "node-b") | "\(.address) \(.routes[0].prefix) \(.routes[0].state)"' |
        grep -x 'fd00:9::b fd00:10:244:b::/64 direct'
}
pass_if "status: peer node-b, its prefix, route state direct" peer_in_status
pass_if "status (human): the cluster section names the API server and node-b" \
    bash -c "nsenter --net=/run/netns/$node $bin status | grep -A20 '^cluster' | grep -q 'node-b'"

# --- the agent restarts under a ping flood: nothing is torn down ----------------
# 3000 pings 2 ms apart: about 6 s, spanning the stop and the start.
in_node ping -q -i 0.002 -c 3000 -W 1 fd00:10:244:b::5 >"$work/flood.log" 2>&1 &
flood=$!
sleep 1
cni_file_before=$(stat -c '%i %Y' "$work/cni/10-v6node.conflist")
agent_stop
pass_if "routes stay while the agent is stopped" routes_are "fd00:10:244:b::/64 via fd00:9::b"
agent_start
# Before the new agent has its own list of Nodes, the prefix the last one
# learnt keeps the CNI config: never removed, so the runtime never reports the
# network not ready across a restart.
cni_file_untouched() { [[ "$(stat -c '%i %Y' "$work/cni/10-v6node.conflist")" == "$cni_file_before" ]]; }
pass_if "the restarted agent leaves the CNI config in place (same file, not rewritten)" cni_file_untouched
wait "$flood"
pass_if "pings every 2 ms across the agent's restart: none lost ($(grep -o '[0-9]* received' "$work/flood.log"))" \
    grep -q ' 0% packet loss' "$work/flood.log"
pass_if "after the restart: connected again" connected
pass_if "after the restart: the same single route" routes_are "fd00:10:244:b::/64 via fd00:9::b"

# --- changes and deletes --------------------------------------------------------
make_node node-c fd00:9::c fd00:10:244:c::/64
pass_if "a new Node (node-c) adds its route" routes_are "fd00:10:244:b::/64 via fd00:9::b" "fd00:10:244:c::/64 via fd00:9::c"
kc patch node node-c --subresource=status --type=merge \
    -p '{"status":{"addresses":[{"type":"InternalIP","address":"fd00:9::cc"}]}}' >/dev/null
pass_if "a changed InternalIP moves node-c's route (replaced, not added)" \
    routes_are "fd00:10:244:b::/64 via fd00:9::b" "fd00:10:244:c::/64 via fd00:9::cc"
kc delete node node-c >/dev/null
pass_if "a deleted Node's route is withdrawn, the others stay" routes_are "fd00:10:244:b::/64 via fd00:9::b"

# --- bad input: named, counted, and never takes down a right route --------------
make_node node-v4 192.0.2.4 10.244.4.0/24
make_node node-overlap fd00:9::d fd00:10:244:a::/64
make_node node-far fd00:99::f fd00:10:244:f::/64
ipv4_only_named() { problem_for node-v4 | grep 'only IPv4 pod CIDRs'; }
pass_if "a Node with only IPv4 pod CIDRs is named: no route" retry 10 ipv4_only_named
overlap_named() { problem_for node-overlap | grep 'overlaps fd00:10:244:a::/64 of node node-a'; }
pass_if "a Node claiming this node's prefix is refused, named" retry 10 overlap_named
far_unreachable() {
    jq_status '.cluster.peers[] | select(.name == "node-far") | .routes[0] | "\(.state) \(.error)"' | grep '^unreachable .*fd00:99::f'
}
pass_if "a peer whose InternalIP is not on-link: unreachable, with the kernel's reason" retry 10 far_unreachable
pass_if "and through all of it only the right route is installed" routes_are "fd00:10:244:b::/64 via fd00:9::b"
pass_if "status counts the problems (3)" \
    test "$(jq_status '(.cluster.problems | length) + ([.cluster.peers[].routes[] | select(.state != "direct")] | length)')" = 3
pass_if "this node's CNI prefix is still its own" cni_prefix_is fd00:10:244:a::/64
for n in node-v4 node-overlap node-far; do kc delete node "$n" >/dev/null; done

# --- the API server goes away and comes back, and the token was rotated ---------
# A new token in the file, the old one revoked (its Secret deleted): the next
# connection uses the file as it is then, without a restart of the agent.
old_token=$(cat "$work/token")
kc -n kube-system create token v6node-dataplane --duration=1h >"$work/token.new" && mv "$work/token.new" "$work/token"
kc -n kube-system delete secret v6node-dataplane-token >/dev/null
old_token_refused() {
    ! nsenter --net="/run/netns/$gw_ns" curl -sf --cacert "$work/ca.crt" -H "Authorization: Bearer $old_token" \
        -o /dev/null "https://[$cp_api]:6443/api/v1/nodes"
}
pass_if "token rotated: the old one (its Secret deleted) is refused by the API server" retry 20 old_token_refused
connects_before=$(jq_status '.cluster.api.connects')
control_plane_down
disconnected() { retry 60 api_connected_is false; }
pass_if "API server gone: the agent says so" disconnected
sleep 2
pass_if "API server gone: routes unchanged" routes_are "fd00:10:244:b::/64 via fd00:9::b"
pass_if "API server gone: node-b's pod still reachable" in_node ping -q -c 3 -i 0.2 -W 1 fd00:10:244:b::5
# The same etcd data and certificates (kubeadm's phases keep what exists):
# the cluster as it was.
control_plane_up "$work/cp" >>"$work/cp.log" 2>&1 || { echo "Bail out! control plane did not restart"; exit 1; }
pass_if "API server back: the agent reconnects by itself, with the rotated token" connected
pass_if "API server back: a new connection was made" test "$(jq_status '.cluster.api.connects')" -gt "$connects_before"
pass_if "API server back: routes unchanged" routes_are "fd00:10:244:b::/64 via fd00:9::b"

agent_stop
tap_done
