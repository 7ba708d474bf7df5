#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# v6node-cni as a container runtime calls it (CNI_* variables, the network
# configuration the agent wrote, on stdin), on this host's kernel, which has
# no netkit: the plugin falls back to veth by itself. Namespaces: "node"
# (agent, uplink0 fd00:6e::2) and "remote" (fd00:6e::1, outside the node),
# plus one per pod. Covers ADD/CHECK/DEL/GC/STATUS/VERSION, addresses,
# pod <-> pod, pod <-> node, pod <-> remote, BIG TCP on both ends, status,
# an agent restart, CHECK after a device is removed, 20 concurrent ADDs,
# and bad input that must leave no half-made pod.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
cni_bin=${V6NODE_CNI:-$(dirname "$bin")/v6node-cni}
[[ -x "$cni_bin" ]] || { echo "Bail out! no plugin binary at $cni_bin (scripts/build-dataplane)"; exit 1; }

sandbox v6c
node=$id-node remote=$id-remote
export V6NODE_CNI_CONF_DIR=$work/net.d
agent_pid=
cleanup() { in_node "$bin" detach --force >/dev/null 2>&1; }
in_remote() { at "$remote" "$@"; }
in_pod() { local pod=$1; shift; at "$id-$pod" "$@"; }

namespaces --dad "$node" "$remote"
veth "$remote remote0 fd00:6e::1/64" "$node uplink0 fd00:6e::2/64"
ip -n "$remote" route add fd00:10:244:1::/64 via fd00:6e::2
in_node sysctl -qw net.ipv6.conf.all.forwarding=1

mkdir -p "$root/usr/lib/v6node" "$root/etc/v6node/dataplane.d"
cat >"$root/usr/lib/v6node/dataplane.toml" <<'EOT'
[services]
cgroup = ""
[attach]
devices = ["uplink*"]
[bigtcp]
devices = ["uplink*"]
size = 196608
[pods]
prefix = "fd00:10:244:1::/64"
EOT

# agent_start: starts the agent in the node namespace, waits for the "ready"
# line that this start adds to the log.
agent_start() {
    local before
    before=$(grep -c "ready:" "$work/agent.log" 2>/dev/null)
    bash -c 'exec "$@"' _ nsenter --net="/run/netns/$node" \
        setpriv --bounding-set="-all,$caps" --inh-caps=-all "$bin" run >>"$work/agent.log" 2>&1 &
    agent_pid=$!
    for _ in $(seq 200); do
        (($(grep -c "ready:" "$work/agent.log") > before)) && return 0
        kill -0 "$agent_pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
agent_kill9() { kill -9 "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=; }

# cni COMMAND POD [IFNAME] [STDIN-FILTER]: the runtime's call, config from
# the conflist the agent wrote (its first plugin, with name and cniVersion
# copied in, as libcni does; the highest of cniVersions, as a CNI 1.1 runtime
# picks), IPAM state kept under $work.
cni() {
    local command=$1 pod=$2 ifname=${3:-eth0} filter=${4:-.}
    local conf
    conf=$(jq -c --arg data "$work/ipam" '.plugins[0] + {cniVersion: (.cniVersions | max), name, dataDir: $data}' "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" | jq -c "$filter")
    nsenter --net="/run/netns/$node" env -i PATH="$PATH" CNI_COMMAND="$command" CNI_CONTAINERID="ctr-$pod" \
        CNI_NETNS="/run/netns/$id-$pod" CNI_IFNAME="$ifname" CNI_PATH=/usr/lib/cni \
        CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$pod" \
        "$cni_bin" <<<"$conf"
}
new_pod() { namespaces --dad "$id-$1"; }
addr_of() { jq -r '.ips[0].address | sub("/128$"; "")' "$work/$1.json"; }
allocations() { find "$work/ipam/v6node" -maxdepth 1 -name 'fd00*' | wc -l; }

agent_start; pass_if "agent starts" test $? = 0
pass_if "the agent writes the CNI network configuration for pods.prefix" \
    jq -e '.cniVersion == "1.0.0" and .cniVersions == ["1.0.0", "1.1.0"] and .plugins[0].type == "v6node-cni" and .plugins[0].podCIDR == "fd00:10:244:1::/64"' "$V6NODE_CNI_CONF_DIR/10-v6node.conflist"

version() { env -i CNI_COMMAND=VERSION "$cni_bin" <<<'{"cniVersion":"1.1.0"}' | jq -e '.supportedVersions | index("1.1.0")'; }
pass_if "VERSION lists 1.1.0" version
pass_if "STATUS: ready with the agent up" cni STATUS none

for pod in a b; do new_pod $pod; done
pass_if "ADD pod a" bash -c "$(declare -f cni); $(declare -p work id V6NODE_CNI_CONF_DIR cni_bin node); cni ADD a >$work/a.json"
pass_if "ADD pod b" bash -c "$(declare -f cni); $(declare -p work id V6NODE_CNI_CONF_DIR cni_bin node); cni ADD b >$work/b.json"
a=$(addr_of a) b=$(addr_of b)
result_ok() { jq -e '.cniVersion == "1.1.0" and (.ips[0].address | startswith("fd00:10:244:1::")) and .ips[0].interface == 1 and .interfaces[1].name == "eth0" and (.interfaces[1].sandbox | endswith("-a")) and .routes[0].dst == "::/0"' "$work/a.json"; }
pass_if "the ADD result names the address, both interfaces and the route ($a, $b)" result_ok
pass_if "the pods got distinct addresses" test "$a" != "$b"
pass_if "the address is on eth0 inside pod a" bash -c "ip -n $id-a -6 addr show dev eth0 | grep -q 'inet6 $a/128'"
pass_if "pod a has a default route and no IPv4" bash -c "ip -n $id-a -6 route show default | grep -q 'via fe80::1 dev eth0' && [[ -z \$(ip -n $id-a -4 addr show dev eth0) ]]"
pass_if "the allocations persist under the data directory" test "$(allocations)" = 2

status_has() { status_json | jq -e "$1"; }
pass_if "status lists both endpoints: pod, device, address, mode veth (no netkit here)" \
    status_has "[.pods.endpoints[] | select(.device == \"veth\" and (.pod == \"default/a\" or .pod == \"default/b\") and (.host_device | startswith(\"v6n\")))] | length == 2"
pass_if "status (table) shows the pods" bash -c "nsenter --net=/run/netns/$node $bin status | grep -E '^ +default/a +v6n[0-9a-f]{12} +$a +veth'"
host_a=$(status_json | jq -r '.pods.endpoints[] | select(.pod == "default/a") | .host_device')
pass_if "pod programs attached on $host_a (from_pod, to_pod)" \
    status_has "[.links[] | select(.device == \"$host_a\" and .attached)] | length == 2"

pass_if "BIG TCP on the pod's eth0" bash -c "ip -n $id-a -d link show eth0 | grep -q 'gso_max_size 196608 .*gro_max_size 196608'"
pass_if "BIG TCP on the host side" bash -c "ip -n $node -d link show $host_a | grep -q 'gso_max_size 196608 .*gro_max_size 196608'"

pass_if "pod a -> pod b" in_pod a ping -6 -c 2 -i 0.2 -W 2 "$b"
pass_if "pod b -> pod a" in_pod b ping -6 -c 2 -i 0.2 -W 2 "$a"
pass_if "pod a -> the node" in_pod a ping -6 -c 2 -i 0.2 -W 2 fd00:6e::2
pass_if "the node -> pod a" in_node ping -6 -c 2 -i 0.2 -W 2 "$a"
pass_if "pod a -> a host outside the node" in_pod a ping -6 -c 2 -i 0.2 -W 2 fd00:6e::1
pass_if "a host outside the node -> pod b" in_remote ping -6 -c 2 -i 0.2 -W 2 "$b"
in_pod b iperf3 -s -1 -D -B "$b" >/dev/null 2>&1
wait_for "iperf3 server in pod b" bound "$id-b" tcp 5201
pass_if "TCP pod a -> pod b (iperf3, 2 s)" in_pod a iperf3 -c "$b" -t 2 -J
counted() { status_json | jq -e "[.counters[] | select($1)] | map(.packets) | add > 0"; }
pass_if "counters: pod traffic routed in BPF (from_pod)" counted '.direction == "from_pod" and .reason == "routed"'
pass_if "counters: uplink traffic switched into pods (ingress routed)" counted '.device == "uplink0" and .direction == "ingress" and .reason == "routed"'
ip -n "$id-a" addr add fd00:10:244:1::ffff/128 dev eth0 nodad
in_pod a ping -6 -c 2 -i 0.2 -W 1 -I fd00:10:244:1::ffff fd00:6e::1 >/dev/null 2>&1
pass_if "a pod sending from an address not its own is dropped and counted" counted '.direction == "from_pod" and .reason == "spoofed_source"'
ip -n "$id-a" addr del fd00:10:244:1::ffff/128 dev eth0

pass_if "CHECK pod a: as added" cni CHECK a eth0 ".prevResult = $(cat "$work/a.json")"

# The agent goes away and comes back: pods keep talking meanwhile (pinned
# links and endpoint map), and the new agent adopts the endpoints.
in_pod a ping -6 -c 60 -i 0.05 -W 1 "$b" >"$work/ping.log" 2>&1 &
ping_pid=$!
sleep 0.5
agent_kill9
pass_if "with the agent killed, pod a still reaches the remote host" bash -c "nsenter --net=/run/netns/$id-a ping -6 -c 2 -i 0.2 -W 2 fd00:6e::1"
agent_start; pass_if "agent restarts" test $? = 0
wait "$ping_pid"
pass_if "no ping lost across the agent's restart" grep -q ' 0% packet loss' "$work/ping.log"
pass_if "the restarted agent still routes both pods" status_has '.pods.endpoints | length == 2'
pass_if "and adopted their links" grep -q "$host_a from_pod: adopted" "$work/agent.log"
pass_if "CHECK pod b after the restart" cni CHECK b

ip -n "$node" link del "$host_a"
check_fails() { local out; out=$(cni CHECK a); [[ $? != 0 ]] && jq -e '.code == 100 and (.details | contains("missing"))' <<<"$out"; }
pass_if "CHECK notices pod a's deleted device (CNI error 100)" check_fails
pass_if "DEL pod a with its device gone" cni DEL a
pass_if "DEL pod a again (idempotent)" cni DEL a
pass_if "DEL freed pod a's address" test "$(allocations)" = 1
pass_if "the agent forgot pod a" status_has '[.pods.endpoints[] | select(.pod == "default/a")] | length == 0'

# 20 pods at once, as a busy node's runtime would start them.
for i in $(seq 1 20); do new_pod "c$i"; done
adds=()
for i in $(seq 1 20); do
    cni ADD "c$i" >"$work/c$i.json" 2>"$work/c$i.err" &
    adds+=($!)
done
wait "${adds[@]}"
distinct() {
    local ok=0
    for i in $(seq 1 20); do jq -e '.ips[0].address' "$work/c$i.json" >/dev/null && ok=$((ok + 1)); done
    [[ $ok == 20 ]] || { echo "$ok of 20 succeeded"; cat "$work"/c*.err; return 1; }
    [[ $(for i in $(seq 1 20); do addr_of "c$i"; done | sort -u | wc -l) == 20 ]]
}
pass_if "20 concurrent ADDs: 20 successes, 20 distinct addresses" distinct
pass_if "status lists 21 endpoints" status_has '.pods.endpoints | length == 21'
pass_if "pod c20 reaches pod c1" in_pod c20 ping -6 -c 1 -W 2 "$(addr_of c1)"

valid=$(for i in b $(seq -f 'c%g' 1 10); do printf '{"containerID":"ctr-%s","ifname":"eth0"},' "$i"; done)
pass_if "GC with 11 valid attachments" cni GC none eth0 ".[\"cni.dev/valid-attachments\"] = [${valid%,}]"
pass_if "GC released the other 10 addresses" test "$(allocations)" = 11
# (Devices by name: an uplink's line names its XDP program, v6n_xdp_uplink.)
pass_if "GC removed their devices and endpoints" bash -c "[[ \$(nsenter --net=/run/netns/$node ip -j link show | jq '[.[] | select(.ifname | startswith(\"v6n\"))] | length') == 11 ]] && nsenter --net=/run/netns/$node $bin status --json | jq -e '.pods.endpoints | length == 11'"

# Bad input: a CNI error object, and nothing half-made.
new_pod bad
before_links=$(in_node ip -o link | wc -l)
error_is() {
    local want=$1 out; shift
    out=$("$@")
    [[ $? != 0 ]] && jq -e --argjson c "$want" '.code == $c and (.msg | length > 0)' <<<"$out"
}
pass_if "malformed JSON: error 6 (decode)" error_is 6 bash -c "printf '{\"cniVersion\":' | nsenter --net=/run/netns/$node env -i CNI_COMMAND=ADD CNI_CONTAINERID=ctr-bad CNI_NETNS=/run/netns/$id-bad CNI_IFNAME=eth0 $cni_bin"
pass_if "missing CNI_NETNS: error 4 (environment)" error_is 4 bash -c "jq -c '.plugins[0] + {cniVersion, name}' $V6NODE_CNI_CONF_DIR/10-v6node.conflist | nsenter --net=/run/netns/$node env -i CNI_COMMAND=ADD CNI_CONTAINERID=ctr-bad CNI_IFNAME=eth0 $cni_bin"
pass_if "unsupported cniVersion: error 1" error_is 1 cni ADD bad eth0 '.cniVersion = "0.1.0"'
pass_if "podCIDR that is IPv4: error 7 (config)" error_is 7 cni ADD bad eth0 '.podCIDR = "10.244.0.0/24"'
# This agent follows no cluster, so it has no service tables to serve hostPorts.
host_port_refused() {
    local out
    out=$(cni ADD bad eth0 '. + {runtimeConfig: {portMappings: [{HostPort: 8080, ContainerPort: 80, Protocol: "tcp", HostIP: ""}]}}')
    echo "# $out"
    jq -e '.code == 5 and (.details | contains("hostPorts"))' <<<"$out" >/dev/null
}
pass_if "a hostPort on a node without service tables: error 5, the agent's reason in details" host_port_refused
agent_kill9
pass_if "ADD with the agent down: error 11 (try again later)" error_is 11 cni ADD bad
pass_if "STATUS with the agent down: error 50 (not available)" error_is 50 cni STATUS none
pass_if "no half-made pod: no device, no address, nothing in the pod" bash -c "
    [[ \$(nsenter --net=/run/netns/$node ip -o link | wc -l) == $before_links ]] &&
    [[ \$(find $work/ipam/v6node -maxdepth 1 -name 'fd00*' | wc -l) == 11 ]] &&
    [[ -z \$(ip -n $id-bad -o link show | grep -v ': lo:') ]]"
agent_start; pass_if "agent back" test $? = 0
pass_if "ADD pod bad once the agent is back" cni ADD bad

tap_done
