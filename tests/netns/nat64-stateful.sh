#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Stateful NAT64 (RFC 6146) end to end on this host's kernel: three IPv6-only
# clients, each in a namespace of its own with a /64 of its own, behind the
# gateway (the agent, translator on every link), and an IPv4-only server
# that knows the clients only as the pool address 203.0.113.1:
#
#   c1 2001:db8:6:1::2 --+
#   c2 2001:db8:6:2::2 --+-- gw (agent) 192.0.2.1 -- s4 192.0.2.2 (route to 203.0.113.0/24 via gw)
#   c3 2001:db8:6:3::2 --+
#   c4 2001:db8:6:5::2 -- r6 (MTU 1400 towards c4; 2001:db8:7:4::2, no source of the pool's) --+
#
# Covers ping (identifiers), 1,200 TCP connections seen by the server from
# the pool address with 1,200 distinct ports, an agent restart that keeps
# every one of them, a UDP range of 100 exhausted on purpose (the 101st flow
# refused and counted, the 100 untouched), bindings expiring by the agent's
# sweep and their ports coming back, status and metrics of the pool, and
# path MTU discovery for c4 behind an IPv6 router with a 1400-byte hop.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/nat64-stateful.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need jq python3 ss

sandbox v6s
node=$id-gw s4=$id-s4 r6=$id-r6 c4=$id-c4
clients=("$id-c1" "$id-c2" "$id-c3")
flows="python3 $here/nat64-flows.py"
cleanup() { in_node "$bin" detach --force >/dev/null 2>&1; }

ulimit -n "$(ulimit -Hn)" # the server holds 1,300 connections
namespaces "$node" "$s4" "$r6" "$c4" "${clients[@]}"
for i in 1 2 3; do
    veth "${clients[i - 1]} c0 2001:db8:6:$i::2/64" "$node gw-c$i 2001:db8:6:$i::1/64"
    ip -n "${clients[i - 1]}" route add default via "2001:db8:6:$i::1"
done
veth "$node gw4 192.0.2.1/24" "$s4 s0 192.0.2.2/24"
ip -n "$s4" route add 203.0.113.0/24 via 192.0.2.1
# c4 announces an MSS for its own 1500-byte link; the path is narrower.
veth "$r6 r0 2001:db8:7:4::2/64" "$node gw-r 2001:db8:7:4::1/64"
veth "$r6 r1 2001:db8:6:5::1/64" "$c4 c0 2001:db8:6:5::2/64"
ip -n "$r6" link set r1 mtu 1400
ip -n "$node" route add 2001:db8:6:5::/64 via 2001:db8:7:4::2
ip -n "$r6" route add default via 2001:db8:7:4::1
ip -n "$c4" route add default via 2001:db8:6:5::1
at "$r6" sysctl -qw net.ipv6.conf.all.forwarding=1
at "$node" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv4.ip_forward=1

mkdir -p "$root/usr/lib/v6node" "$root/etc/v6node/dataplane.d"
cat >"$root/usr/lib/v6node/dataplane.toml" <<'TOML'
[services]
cgroup = ""
[attach]
devices = ["gw-c*", "gw-r", "gw4"]
[bigtcp]
devices = []
[nat64]
devices = ["gw-c*", "gw-r", "gw4"]
# RFC 8215's local-use prefix: documentation addresses are not global,
# which the well-known 64:ff9b::/96 refuses (RFC 6052 3.1).
prefix = "64:ff9b:1::/96"
[nat64.stateful]
pool = ["203.0.113.1"]
sources = ["2001:db8:6::/48"]
udp_ports = "40000-40099"
udp_seconds = 4
TOML
cat >"$root/etc/v6node/dataplane.d/50-flows.toml" <<TOML
[flows]
hubble = "unix:$work/hubble.sock"
TOML
use_hubble

agent_start
pass_if "agent with [nat64.stateful] becomes ready" test $? = 0
pool_use() { jq_status --arg p "$1" '.nat64.stateful.pool[] | select(.protocol == $p) | "\(.address) \(.in_use)/\(.ports)"'; }
pass_if "status: pool 203.0.113.1, nothing in use, 64512 TCP ports and 100 UDP ones" \
    test "$(pool_use tcp) $(pool_use udp)" = "203.0.113.1 0/64512 203.0.113.1 0/100"
server=64:ff9b:1::c000:202 # 192.0.2.2

pass_if "ping c1 -> the IPv4-only server through the pool" at "${clients[0]}" ping -q -c 3 -i 0.2 -W 2 "$server"
# The agent reads flow events from the kernel's ring as they come: the
# binding's may reach Hubble's buffer a moment after the last echo.
pass_if "hubble observe --from-ip c1 --protocol icmpv4: the binding, c1's echo translated from the pool 203.0.113.1 to 192.0.2.2" \
    retry 10 observed '.IP.source_xlated == "203.0.113.1" and .IP.destination == "192.0.2.2" and .verdict == "FORWARDED"
        and (.Summary | test("^translated; \\[2001:db8:6:1::2\\]:[0-9]+ bound to 203.0.113.1:[0-9]+$"))' \
    --from-ip 2001:db8:6:1::2 --protocol icmpv4
pass_if "ping c2 and c3 at once (one echo identifier each)" bash -c "
    nsenter --net=/run/netns/${clients[1]} ping -q -c 3 -i 0.2 -W 2 $server &
    nsenter --net=/run/netns/${clients[2]} ping -q -c 3 -i 0.2 -W 2 $server && wait \$!"

# --- 1,200 TCP connections, and an agent restart under them ------------------------
nsenter --net="/run/netns/$s4" python3 "$here/nat64-flows.py" tcp-server 192.0.2.2 7000 "$work/peers" &
wait_for "the TCP server" bound "$s4" tcp 7000
for i in 1 2 3; do
    nsenter --net="/run/netns/${clients[i - 1]}" python3 "$here/nat64-flows.py" \
        tcp-clients "$server" 7000 400 "$work/go" "$work/tcp-$i" &
done
opened() { for i in 1 2 3; do grep -qx 'open 400' "$work/tcp-$i" 2>/dev/null || return 1; done; }
pass_if "three clients open 400 connections each, each echoing" retry 120 opened
pass_if "the server sees 1,200 connections, all from 203.0.113.1" \
    test "$(awk '$1 == "203.0.113.1"' "$work/peers" | wc -l) $(wc -l <"$work/peers")" = "1200 1200"
pass_if "...with 1,200 distinct ports" test "$(awk '{print $2}' "$work/peers" | sort -u | wc -l)" = 1200
in_use() { test "$(pool_use tcp)" = "203.0.113.1 $1/64512"; }
pass_if "status: 1200 TCP ports in use (after a sweep)" retry 40 in_use 1200

agent_stop
agent_start
pass_if "the agent restarts" test $? = 0
touch "$work/go"
alive() { for i in 1 2 3; do grep -qx 'open 400 alive 400' "$work/tcp-$i" 2>/dev/null || return 1; done; }
pass_if "every one of the 1,200 connections still echoes after the restart" retry 120 alive
nsenter --net="/run/netns/${clients[0]}" python3 "$here/nat64-flows.py" \
    tcp-clients "$server" 7000 100 "$work/go" "$work/tcp-new" &
pass_if "100 new connections after the restart" retry 120 grep -qx 'open 100 alive 100' "$work/tcp-new"
pass_if "...on ports no earlier connection holds (1,300 distinct)" \
    test "$(awk '{print $2}' "$work/peers" | sort -u | wc -l) $(wc -l <"$work/peers")" = "1300 1300"

# --- UDP: a range of 100, exhausted on purpose --------------------------------------
nsenter --net="/run/netns/$s4" python3 "$here/nat64-flows.py" udp-server 192.0.2.2 7001 &
wait_for "the UDP server" bound "$s4" udp 7001
counter() { jq_status --arg d "$1" --arg r "$2" '[.counters[] | select(.direction == $d and .reason == $r) | .packets] | add // 0'; }
before=$(counter 6to4 nat64_pool_exhausted)
at "${clients[0]}" $flows udp-flows "$server" 7001 101 >"$work/udp-1"
pass_if "101 UDP flows on 100 ports: 100 answered, and all 100 again after the 101st" \
    grep -qx 'first 100 again 100' "$work/udp-1"
pass_if "...the 101st was refused and counted (nat64_pool_exhausted)" \
    test "$(($(counter 6to4 nat64_pool_exhausted) - before))" -ge 1
all_in_use() { test "$(pool_use udp)" = "203.0.113.1 100/100"; }
pass_if "status: 100/100 UDP ports in use (after a sweep)" retry 3 all_in_use

# udp_seconds = 4: the sweep ends them within 4 + 2 (margin) + 2 (period) s.
freed() { test "$(pool_use udp)" = "203.0.113.1 0/100"; }
pass_if "the 100 UDP bindings expire and their ports come back" retry 60 freed
pass_if "status: the sweep counted 100 expired bindings or more" test "$(jq_status '.nat64.stateful.expired')" -ge 100
at "${clients[1]}" $flows udp-flows "$server" 7001 100 >"$work/udp-2"
pass_if "another client gets all 100 ports" grep -qx 'first 100 again 99' "$work/udp-2"
pool_row() { in_node "$bin" status | grep -E '^ +203\.0\.113\.1 +udp +100 +100$'; }
pass_if "status text: the pool's table shows the UDP ports in use again" retry 10 pool_row

# --- path MTU discovery through a router on the clients' side -----------------------
# The server's 1480-byte segments become 1500-byte IPv6 packets, which r6
# cannot pass to c4; its Packet Too Big (from an address that may not use the
# pool) reaches the server as Fragmentation Needed (MTU 1380) from the pool.
got=$(at "$c4" $flows tcp-big "$server" 7000 300000)
pass_if "c4 behind a 1400-byte IPv6 hop receives 300,000 bytes from the server through the pool (received $got)" \
    test "$got" = 300000
pass_if "...and the server learnt path MTU 1380 to the pool address" \
    bash -c "ip -n $s4 route get 203.0.113.1 | grep -q 'mtu 1380'"

tap_done
