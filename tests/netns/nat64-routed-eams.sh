#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# EAMs whose IPv6 side the network routes natively, as a BGP cluster's
# gateway holds them: it routes between the nodes' pods and gives each pod
# an IPv4 identity. Pod to pod must stay IPv6; pod to IPv4 is translated.
#
#   a (pod on node 1) 2001:db8:a::5 --+
#                                     +-- gw (agent; EAMs 2001:db8:a::/120 <-> 198.51.100.0/24,
#   b (pod on node 2) 2001:db8:b::7 --+        2001:db8:b::/120 <-> 198.51.101.0/24) -- v4 192.0.2.2
#
# a's prefix is on a link of gw's (connected: routed natively from the
# start); b's arrives later, as BGP would add it, through a route via b's
# link address, and leaves again. The agent follows the main table: status
# counts the EAMs routed natively, and traffic to b is translated only
# while no route covers b's prefix.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/nat64-routed-eams.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need jq python3

sandbox v6r
node=$id-gw a=$id-a b=$id-b v4=$id-v4
cleanup() { in_node "$bin" detach --force >/dev/null 2>&1; }

namespaces "$node" "$a" "$b" "$v4"
veth "$a a0 2001:db8:a::5/64" "$node gwa 2001:db8:a::1/64"
veth "$b b0 2001:db8:bb::2/64" "$node gwb 2001:db8:bb::1/64"
veth "$node gw4 192.0.2.1/24" "$v4 v40 192.0.2.2/24"
# b's pod address is not on gw's link with b: only a route reaches it.
ip -n "$b" address add 2001:db8:b::7/128 dev lo
ip -n "$a" route add default via 2001:db8:a::1
ip -n "$b" route add default via 2001:db8:bb::1 src 2001:db8:b::7
ip -n "$v4" route add 198.51.100.0/23 via 192.0.2.1
at "$node" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv4.ip_forward=1

mkdir -p "$root/usr/lib/v6node"
cat >"$root/usr/lib/v6node/dataplane.toml" <<'TOML'
[services]
cgroup = ""
[attach]
devices = ["gwa", "gwb", "gw4"]
[bigtcp]
devices = []
[nat64]
devices = ["gwa", "gwb", "gw4"]
prefix = "64:ff9b:1::/96"
eam = [{ ipv6 = "2001:db8:a::/120", ipv4 = "198.51.100.0/24" }, { ipv6 = "2001:db8:b::/120", ipv4 = "198.51.101.0/24" }]
TOML

agent_start
pass_if "agent with two EAMs becomes ready" test $? = 0
routed_natively() { [[ "$(jq_status '.nat64.eam_routed_natively')" == "$1" ]]; }
pass_if "status: a's prefix (on gwa's link) is routed natively, b's (no route yet) is not" routed_natively 1

# seen_from CLIENT SERVER_NS ADDRESS PROTO: the address SERVER_NS's server
# sees CLIENT's TCP connection or UDP datagram come from.
seen_from() {
    local client=$1 server=$2 address=$3 proto=$4 family=AF_INET6
    [[ "$server" != "$v4" ]] || family=AF_INET
    at "$server" python3 -c "
import socket, sys
kind = socket.SOCK_STREAM if sys.argv[1] == 'tcp' else socket.SOCK_DGRAM
s = socket.socket(socket.$family, kind); s.bind(('', 7007)); s.settimeout(10)
if kind == socket.SOCK_STREAM:
    s.listen(1); c, peer = s.accept(); c.recv(16)
else:
    _, peer = s.recvfrom(16)
print(peer[0])
" "$proto" >"$work/seen" &
    local server_pid=$!
    wait_for "a server in $server" bound "$server" "$proto" 7007
    at "$client" python3 -c "
import socket, sys
kind = socket.SOCK_STREAM if sys.argv[2] == 'tcp' else socket.SOCK_DGRAM
s = socket.socket(socket.AF_INET6, kind); s.settimeout(5)
s.connect((sys.argv[1], 7007)); s.send(b'hello')
" "$address" "$proto" 2>/dev/null
    wait "$server_pid"
    cat "$work/seen"
}

# b's prefix arrives, as BGP would add it.
ip -n "$node" route add 2001:db8:b::/64 via 2001:db8:bb::2
pass_if "a route for b's prefix appears: both EAMs routed natively within 3 s" retry 3 routed_natively 2
pass_if "pod a -> pod b over TCP stays IPv6 (b sees 2001:db8:a::5)" \
    test "$(seen_from "$a" "$b" 2001:db8:b::7 tcp)" = 2001:db8:a::5
pass_if "pod a -> pod b over UDP stays IPv6" test "$(seen_from "$a" "$b" 2001:db8:b::7 udp)" = 2001:db8:a::5
pass_if "pod b -> pod a over TCP stays IPv6 (a sees 2001:db8:b::7)" \
    test "$(seen_from "$b" "$a" 2001:db8:a::5 tcp)" = 2001:db8:b::7
pass_if "pod a -> IPv4 host over TCP: translated, seen as 198.51.100.5" \
    test "$(seen_from "$a" "$v4" 64:ff9b:1::c000:202 tcp)" = 198.51.100.5
pass_if "pod b -> IPv4 host over UDP: translated, seen as 198.51.101.7" \
    test "$(seen_from "$b" "$v4" 64:ff9b:1::c000:202 udp)" = 198.51.101.7
pass_if "IPv4 host -> pod b by its IPv4 identity (198.51.101.7)" at "$v4" ping -q -c 2 -i 0.2 -W 2 198.51.101.7

# The route goes (BGP lost the peer): b's EAM is a destination to translate
# again, as before this change every EAM was.
ip -n "$node" route del 2001:db8:b::/64 via 2001:db8:bb::2
pass_if "the route goes: one EAM routed natively again within 3 s" retry 3 routed_natively 1
pass_if "the translator's map says so: b's entry unflagged, a's flagged" bash -c "
    bpftool map dump pinned $V6NODE_PIN_DIR/v6n_eam6 -j | jq -e '[.[] | .formatted.value | select(.ipv6_len == 120) | .flags] | sort == [0, 1]'"

tap_done
