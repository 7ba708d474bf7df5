#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Native XDP on the uplinks, on this host's kernel: "peer" (fd00:6f::1) sends
# to "node" (fd00:6f::2) over a veth pair, whose driver has native XDP; the
# node also has a bridge, whose driver has none. Covers the choice per
# device (auto, xdp, tc), what status and metrics say about each path, early
# drops in XDP, adoption and replacement of the XDP program under a ping
# flood, the translator in XDP on a one-armed gateway (UDP and pings both
# ways, a ping flood across a restart) and on a two-armed one (frames
# redirected between the uplinks' drivers), and detach.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/xdp.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need jq curl bpftool ethtool python3

sandbox v6x
peer=$id-peer node=$id-node
cleanup() { in_node "$bin" detach --force >/dev/null 2>&1; }
in_peer() { at "$peer" "$@"; }

namespaces --dad "$peer" "$node"
veth "$peer peer0 fd00:6f::1/64" "$node node0 fd00:6f::2/64"
ip -n "$node" link add node9 type bridge
ip -n "$node" link set node9 up

mkdir -p "$root/usr/lib/v6node" "$root/etc/v6node/dataplane.d"
cat >"$root/usr/lib/v6node/dataplane.toml" <<EOF
[services]
cgroup = ""
[attach]
devices = ["node*"]
xdp = "auto"
[metrics]
listen = "unix:$work/metrics.sock"
EOF
dropin() { printf '%s\n' "$2" >"$root/etc/v6node/dataplane.d/$1.toml"; }

counter() { # counter DEVICE DIRECTION REASON: packets counted
    status_json | jq -r --arg dev "$1" --arg d "$2" --arg r "$3" \
        '[.counters[] | select(.device == $dev and .direction == $d and .reason == $r) | .packets] | add // 0'
}
pings() { in_peer ping -q -c "${1:-3}" -i 0.1 -W 1 fd00:6f::2; }
# ip_link_xdp DEVICE: how `ip link` says the device runs XDP: xdp (native),
# xdpgeneric, or nothing.
ip_link_xdp() { ip -n "$node" link show "$1" | grep -oE '\b(xdpgeneric|xdpoffload|xdp)\b' | head -1; }
path_of() { jq_status --arg dev "$1" '.attachments as $a | [$a[] | select(.device == $dev and .direction == "xdp")][0] | if . == null then "tc" elif .action == "declined" or .error != null then "tc: \(.note // .error)" else "xdp" end'; }
metric() { curl -sf --unix-socket "$work/metrics.sock" http://node/metrics | grep -E "^$1 " | awk '{print $2}'; }
# flood_across_restart DESTINATION: 20,000 pings from the peer while the
# agent is killed (SIGKILL) and started again (with the caller's
# environment); their summary in $work/flood.log.
flood_across_restart() {
    in_peer ping -f -q -c 20000 "$1" >"$work/flood.log" 2>&1 &
    local flood=$!
    sleep 0.3
    kill -9 "$agent_pid"
    wait "$agent_pid" 2>/dev/null
    agent_start
    wait "$flood"
}
xdp_link_id() { jq_status '.links[] | select(.device == "node0" and .direction == "xdp") | .link_id'; }

# --- auto: native XDP where the driver has it, tc alone where not -------------------
agent_start
pass_if "agent ready" test $? = 0
pass_if "node0 (veth): the XDP program attached by a pinned link" \
    test "$(jq_status '[.links[] | select(.device == "node0" and .direction == "xdp" and .attached) | .program] | join(",")')" = v6n_xdp_uplink
pass_if "node0: ip link shows native XDP (xdp, not xdpgeneric)" test "$(ip_link_xdp node0)" = xdp
pass_if "node0: the tc programs stay behind it" \
    test "$(jq_status '[.links[] | select(.device == "node0" and .attached) | .direction] | sort | join(",")')" = egress,ingress,xdp
pass_if "node9 (bridge): declined, and status says why" \
    bash -c "[[ \"\$(nsenter --net=/run/netns/$node $bin status --json | jq -r '.attachments[] | select(.device == \"node9\" and .direction == \"xdp\") | \"\(.action) \(.note)\"')\" == 'declined no native XDP, tc alone runs the device:'*'Operation not supported'* ]]"
pass_if "node9: no XDP of any kind on the device (never generic)" test -z "$(ip_link_xdp node9)"
pass_if "node9: tc ingress and egress attached" \
    test "$(jq_status '[.links[] | select(.device == "node9" and .attached) | .direction] | sort | join(",")')" = egress,ingress
pass_if "a declined device is no problem: status healthy" test "$(jq_status .healthy)" = true
pass_if "human status: each uplink's path and why" \
    bash -c "out=\$(nsenter --net=/run/netns/$node $bin status); grep -qE '^  node0 +xdp, then tc +native XDP in the driver' <<<\"\$out\" && grep -qE '^  node9 +tc +no native XDP' <<<\"\$out\""
pass_if "metrics: v6node_dataplane_uplink_xdp 1 for node0, 0 for node9" \
    test "$(metric 'v6node_dataplane_uplink_xdp\{device="node0"\}')/$(metric 'v6node_dataplane_uplink_xdp\{device="node9"\}')" = 1/0

# --- what XDP passes, tc sees; what it drops, it counts -------------------------------
pass_before=$(counter node0 ingress pass)
pass_if "pings pass XDP to tc and the stack" pings 5
pass_if "counted once, by tc ingress (XDP records no pass)" \
    test "$(counter node0 ingress pass)" -ge $((pass_before + 5)) -a "$(counter node0 xdp pass)" = 0
dropin 50-deny 'filter.deny_sources = ["fd00:6f::1/128"]'
in_node "$bin" reload >/dev/null
tc_denied=$(counter node0 ingress denied_source)
pass_if "a denied source's pings are dropped" bash -c "! nsenter --net=/run/netns/$peer ping -q -c 3 -i 0.1 -W 1 fd00:6f::2"
pass_if "in XDP: counted under xdp, denied_source; tc never saw them" \
    test "$(counter node0 xdp denied_source)/$(counter node0 ingress denied_source)" = "3/$tc_denied"
pass_if "metrics: packets_total for direction xdp, reason denied_source" \
    bash -c "curl -sf --unix-socket $work/metrics.sock http://node/metrics | grep -qE '^v6node_dataplane_packets_total\{device=\"node0\",direction=\"xdp\",reason=\"denied_source\"\} 3$'"
rm "$root/etc/v6node/dataplane.d/50-deny.toml"
in_node "$bin" reload >/dev/null
pass_if "allowed again after the reload" pings 3

# --- xdp: a refusal is a problem; tc: never ------------------------------------------
dropin 50-xdp 'attach.xdp = "xdp"'
in_node "$bin" reload >/dev/null
pass_if "attach.xdp = xdp: node9's refusal is a problem (status exit 1, names it)" \
    bash -c "out=\$(nsenter --net=/run/netns/$node $bin status); test \$? = 1 && grep -q 'node9 xdp: attaching native XDP to node9' <<<\"\$out\""
pass_if "node9 keeps tc; node0 keeps its XDP" test "$(path_of node0)/$(ip_link_xdp node0)/$(ip_link_xdp node9)" = xdp/xdp/
link_before=$(xdp_link_id)
dropin 50-xdp 'attach.xdp_per_device = ["node0=tc", "node9=tc"]'
in_node "$bin" reload >/dev/null
pass_if "xdp_per_device node0=tc: its XDP link is gone, from status and the device" \
    test "$(path_of node0)/$(ip_link_xdp node0)/$(xdp_link_id)" = tc//
pass_if "status healthy, with each path chosen by the config" \
    bash -c "out=\$(nsenter --net=/run/netns/$node $bin status); test \$? = 0 && grep -qE '^  node0 +tc +attach.xdp chooses tc' <<<\"\$out\""
pass_if "pings on tc alone" pings 3
rm "$root/etc/v6node/dataplane.d/50-xdp.toml"
in_node "$bin" reload >/dev/null
pass_if "back to auto: node0 runs XDP again, by a new link" \
    test "$(path_of node0)/$(ip_link_xdp node0)/$([[ $(xdp_link_id) != "$link_before" ]] && echo new)" = xdp/xdp/new

# --- restart and upgrade under traffic ----------------------------------------------
link_before=$(xdp_link_id)
flood_across_restart fd00:6f::2
pass_if "ping flood of 20000 across SIGKILL and restart: 0% loss" grep -q ' 0% packet loss' "$work/flood.log"
pass_if "the restarted agent adopted the XDP link (same id)" \
    test "$(grep -c 'node0 xdp: adopted' "$work/agent.log")/$(xdp_link_id)" = "1/$link_before"
# Another build of the program (-mcpu=v3 changes its instructions, hence
# its tag): what an agent upgrade brings.
"$top/dataplane/bpf/cc" "$top/dataplane/bpf/xdp.bpf.c" "$work/xdp-v3.bpf.o" -mcpu=v3
old_prog=$(jq_status '.links[] | select(.direction == "xdp") | .program_id')
V6NODE_DATAPLANE_XDP_OBJECT="$work/xdp-v3.bpf.o" flood_across_restart fd00:6f::2
pass_if "another build is swapped into the same XDP link: replaced" \
    test "$(grep -c 'node0 xdp: replaced' "$work/agent.log")/$(xdp_link_id)" = "1/$link_before"
pass_if "the link runs the new program" test "$(jq_status '.links[] | select(.direction == "xdp") | .program_id')" != "$old_prog"
pass_if "ping flood of 20000 across the replacement: 0% loss" grep -q ' 0% packet loss' "$work/flood.log"
agent_stop

# --- the translator in XDP: a one-armed gateway -----------------------------------
# node0 translates too (nat64.devices): the peer, as an IPv6 client
# (fd00:6f::1, mapped to 198.51.100.1), pings and sends UDP to its own
# IPv4 face (192.0.2.1, under 64:ff9b:1::/96); both ways leave by node0,
# so XDP translates them. The peer's veth takes frames sent by XDP_TX only
# while it runs an XDP program (xdp-pass.bpf.c); its checksums are made
# whole in software (tx off), as a NIC would send them.
"$top/dataplane/bpf/cc" "$here/xdp-pass.bpf.c" "$work/xdp-pass.bpf.o"
ip -n "$peer" link set dev peer0 xdpdrv obj "$work/xdp-pass.bpf.o" sec xdp.frags
in_peer ethtool -K peer0 tx off >/dev/null
ip -n "$peer" addr add 192.0.2.1/24 dev peer0
ip -n "$node" addr add 192.0.2.2/24 dev node0
ip -n "$peer" route add 64:ff9b:1::/96 via fd00:6f::2
ip -n "$peer" route add 198.51.100.1/32 via 192.0.2.2
in_node sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv4.ip_forward=1
dropin 20-nat64 '[nat64]
devices = ["node0"]
prefix = "64:ff9b:1::/96"
eam = [{ ipv6 = "fd00:6f::1/128", ipv4 = "198.51.100.1/32" }]'
agent_start
pass_if "with [nat64] on node0: the translator attached behind XDP" \
    test "$(jq_status '[.links[] | select(.device == "node0" and .attached) | .direction] | sort | join(",")')" = egress,ingress,nat64,xdp
xlat_counts() { echo "$(counter node0 xdp translated) $(counter node0 6to4 translated) $(counter node0 4to6 translated)"; }
# XDP sends only to neighbours the kernel knows (tc resolves the others).
in_node ping -q -c 1 -W 1 192.0.2.1 >/dev/null
in_node ping -q -c 1 -W 1 fd00:6f::1 >/dev/null
read -r xdp_before tc64_before tc46_before <<<"$(xlat_counts)"
in_peer python3 -c '
import socket, sys
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("192.0.2.1", 7007))
client = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
client.settimeout(2)
for i in range(10):
    client.sendto(b"query %d" % i, ("64:ff9b:1::c000:201", 7007))
    data, source = server.recvfrom(100)
    assert source[0] == "198.51.100.1", source
    server.sendto(b"answer %d" % i, source)
    answer, source = client.recvfrom(100)
    assert answer == b"answer %d" % i and source[0] == "64:ff9b:1::c000:201", (answer, source)
' >"$work/udp-xlat.log" 2>&1
pass_if "UDP through the gateway both ways: 10 queries answered" test $? = 0
read -r xdp_after tc64_after tc46_after <<<"$(xlat_counts)"
translated="$((xdp_after - xdp_before)) $((tc64_after - tc64_before)) $((tc46_after - tc46_before))"
pass_if "XDP translated all 20 datagrams, tc none (xdp, tc 6to4, tc 4to6: $translated)" test "$translated" = "20 0 0"
link_before=$(xdp_link_id)
flood_across_restart 64:ff9b:1::c000:201
pass_if "ping flood of 20000 through the translator across SIGKILL and restart: 0% loss" grep -q ' 0% packet loss' "$work/flood.log"
pass_if "the echoes were translated in XDP" test "$(counter node0 xdp translated)" -ge 40000
agent_stop

# --- the translator in XDP: a two-armed gateway -----------------------------------
# An IPv4 server (192.0.3.1) in a namespace of its own, behind a second
# uplink, node4: the peer's queries come in on node0 and leave by node4, its
# answers come back the other way. Both uplinks run the program natively,
# so XDP sends each frame out of the other one (XDP_REDIRECT): the server's
# veth, like the peer's, takes them while it runs an XDP program.
v4=$id-v4
namespaces "$v4"
veth "$node node4 192.0.3.2/24" "$v4 v4side 192.0.3.1/24"
ip -n "$v4" link set dev v4side xdpdrv obj "$work/xdp-pass.bpf.o" sec xdp.frags
at "$v4" ethtool -K v4side tx off >/dev/null
ip -n "$v4" route add 198.51.100.0/24 via 192.0.3.2
dropin 20-nat64 '[nat64]
devices = ["node0", "node4"]
prefix = "64:ff9b:1::/96"
eam = [{ ipv6 = "fd00:6f::1/128", ipv4 = "198.51.100.1/32" }]'
agent_start
pass_if "both arms run native XDP (node0, node4: $(path_of node0), $(path_of node4))" \
    test "$(path_of node0) $(path_of node4)" = "xdp xdp"
in_node ping -q -c 1 -W 1 192.0.3.1 >/dev/null
arm_counts() { echo "$(counter node0 xdp translated) $(counter node4 xdp translated) $(counter node0 6to4 translated) $(counter node4 4to6 translated)"; }
read -r -a before <<<"$(arm_counts)"
at "$v4" python3 -c '
import socket
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("192.0.3.1", 7007))
server.settimeout(5)
for i in range(10):
    data, source = server.recvfrom(100)
    assert source[0] == "198.51.100.1" and data == b"query %d" % i, (data, source)
    server.sendto(b"answer %d" % i, source)
' >"$work/udp-server.log" 2>&1 &
server_pid=$!
sleep 0.5
in_peer python3 -c '
import socket
client = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
client.settimeout(2)
for i in range(10):
    client.sendto(b"query %d" % i, ("64:ff9b:1::c000:301", 7007))
    answer, source = client.recvfrom(100)
    assert answer == b"answer %d" % i and source[0] == "64:ff9b:1::c000:301", (answer, source)
' >"$work/udp-client.log" 2>&1
client_rc=$?
wait "$server_pid"
pass_if "UDP across the two arms both ways: 10 queries answered" test "$client_rc $?" = "0 0"
read -r -a after <<<"$(arm_counts)"
translated="$((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2])) $((after[3] - before[3]))"
pass_if "XDP translated the 10 queries on node0 and the 10 answers on node4, tc none (node0 xdp, node4 xdp, node0 tc, node4 tc: $translated)" \
    test "$translated" = "10 10 0 0"
agent_stop
rm "$root/etc/v6node/dataplane.d/20-nat64.toml"

# --- detach -----------------------------------------------------------------------
pass_if "XDP stays attached with no agent" test "$(ip_link_xdp node0)" = xdp
in_node "$bin" detach >/dev/null
pass_if "detach removes it" test -z "$(ip_link_xdp node0)"
pass_if "traffic flows without v6node" pings 3

tap_done
