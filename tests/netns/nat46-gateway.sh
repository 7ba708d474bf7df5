#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The stateful NAT46 gateway end to end on this host's kernel: an IPv4-only
# client reaches three IPv6-only backends, weighted 1, 2 and 3, through the
# VIP 198.51.100.80 of the gateway (the agent, translator on every link);
# the backends see the client as 2001:db8:46::c000:202 and answer with
# their names:
#
#   c4 192.0.2.2 -- gw4 192.0.2.1 (agent) gw-b1 -- b1 2001:db8:6:1::2  weight 1
#   (route to 198.51.100.0/24 via gw)     gw-b2 -- b2 2001:db8:6:2::2  weight 2
#                                         gw-b3 -- b3 2001:db8:6:3::2  weight 3
#   c5 192.0.4.2 -- r4 (MTU 1400 towards c5) -- gw5 192.0.3.1
#
# Covers TCP and UDP through the VIP, the shares of 12,000 flows against
# the weights (within 5% of each), a reload that removes b2 (only b2's flows
# move; TCP connections to b1 and b3 keep their backend, and new flows split
# 1:3), an agent restart that keeps every flow's backend, a refused reload
# that changes nothing, status, and ICMP errors following their flow both
# ways (a backend's closed port refuses the client's socket; a client's
# closed port is reported to the backend's; an IPv4 router's Fragmentation
# Needed shrinks the backend's TCP segments to c5 behind it); a flow through
# the stock hubble CLI, from the IPv4 client to its backend; a health check
# that quarantines a backend (no new flows, its connections kept) and lets
# it back.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/nat46-gateway.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need jq python3

sandbox v6g
node=$id-gw c4=$id-c4 r4=$id-r4 c5=$id-c5
backends=("$id-b1" "$id-b2" "$id-b3")
flows="python3 $here/nat46-flows.py"
cleanup() { in_node "$bin" detach --force >/dev/null 2>&1; }

namespaces "$node" "$c4" "$r4" "$c5" "${backends[@]}"
veth "$c4 c0 192.0.2.2/24" "$node gw4 192.0.2.1/24"
ip -n "$c4" route add 198.51.100.0/24 via 192.0.2.1
# c5 announces an MSS for its own 1500-byte link; the path is narrower.
veth "$r4 r0 192.0.3.2/24" "$node gw5 192.0.3.1/24"
veth "$r4 r1 192.0.4.1/24" "$c5 c0 192.0.4.2/24"
ip -n "$r4" link set r1 mtu 1400
ip -n "$node" route add 192.0.4.0/24 via 192.0.3.2
ip -n "$r4" route add 198.51.100.0/24 via 192.0.3.1
ip -n "$c5" route add default via 192.0.4.1
at "$r4" sysctl -qw net.ipv4.ip_forward=1
for i in 1 2 3; do
    b=${backends[i - 1]}
    veth "$b b0 2001:db8:6:$i::2/64" "$node gw-b$i 2001:db8:6:$i::1/64"
    ip -n "$b" route add 2001:db8:46::/96 via "2001:db8:6:$i::1"
    nsenter --net="/run/netns/$b" python3 "$here/nat46-flows.py" udp-server "2001:db8:6:$i::2" 5353 "b$i" "$work/errors-b$i" &
    udp_server[i]=$!
    nsenter --net="/run/netns/$b" python3 "$here/nat46-flows.py" tcp-server "2001:db8:6:$i::2" 8080 "b$i" &
done
at "$node" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv4.ip_forward=1
for b in "${backends[@]}"; do wait_for "$b's servers" bound "$b" udp 5353 && wait_for "$b's servers" bound "$b" tcp 8080; done

# gateway_config "WEIGHTS" [HEALTH_CHECK]: the vendor config with b1..b3 at
# those weights ("-" leaves one out), the TCP frontend's health check set.
gateway_config() {
    local weights=($1) list="" i
    for i in 1 2 3; do
        [[ ${weights[i - 1]} == - ]] && continue
        list+="{ address = \"[2001:db8:6:$i::2]:PORT\", weight = ${weights[i - 1]} }, "
    done
    mkdir -p "$root/usr/lib/v6node"
    cat >"$root/usr/lib/v6node/dataplane.toml" <<TOML
[services]
cgroup = ""
[attach]
devices = ["gw4", "gw5", "gw-b*"]
[bigtcp]
devices = []
[nat64]
devices = ["gw4", "gw5", "gw-b*"]
[nat46]
source_prefix = "2001:db8:46::/96"
[[nat46.gateway]]
frontend = "198.51.100.80:53"
protocol = "udp"
backends = [${list//PORT/5353}]
[[nat46.gateway]]
frontend = "198.51.100.80:80"
backends = [${list//PORT/8080}]
${2:+health_check = $2}
[flows]
hubble = "unix:$work/hubble.sock"
TOML
}
reload() { in_node "$bin" reload --pid "$agent_pid"; }

gateway_config "1 2 3"
use_hubble
agent_start
pass_if "agent with [nat46] becomes ready" test $? = 0
buckets() { jq_status '[.nat64.nat46.frontends[] | select(.protocol == "udp") | .backends[] | .buckets] | join(" ")'; }
# 4,099 buckets in shares of 1/6, 2/6 and 3/6.
pass_if "status: the UDP frontend's Maglev table holds 683, 1366 and 2050 buckets" test "$(buckets)" = "683 1366 2050"

# within5 FILE NAME WEIGHT TOTAL: NAME answered WEIGHT/TOTAL of FILE's flows, within 5% of that.
within5() {
    awk -v name="$2" -v w="$3" -v total="$4" '
        { n++; if ($2 == name) hit++ }
        END {
            share = hit / n; want = w / total
            printf "%s: %d of %d flows (%.4f, weight %d/%d = %.4f)\n", name, hit, n, share, w, total, want
            exit !(share > want * 0.95 && share < want * 1.05)
        }' "$1"
}

# --- TCP through the VIP, held across what follows ---------------------------------
nsenter --net="/run/netns/$c4" python3 "$here/nat46-flows.py" tcp-hold 198.51.100.80 80 60 "$work/go" "$work/tcp" &
pass_if "60 TCP connections to 198.51.100.80:80, each answered by a backend" retry 30 grep -qx 'open 60' "$work/tcp"
pass_if "...spread over all three backends" test "$(sort -u "$work/tcp.names" | paste -sd' ')" = "b1 b2 b3"
nat46_flow_seen() {
    observed '.IP.source == "192.0.2.2" and (.IP.destination | test("^2001:db8:6:[123]::2$")) and .verdict == "FORWARDED"
        and .l4.TCP.destination_port == 8080
        and (.Summary | test("^translated(_to_stack)?; frontend 198.51.100.80:80 to backend \\[2001:db8:6:[123]::2\\]:8080$"))' \
        --from-ip 192.0.2.2 --protocol tcp
}
pass_if "hubble observe --from-ip 192.0.2.2: a connection's new flow, from the IPv4 client to its backend, naming the frontend" \
    retry 10 nat46_flow_seen

# --- 12,000 UDP flows ------------------------------------------------------------
at "$c4" $flows udp-flows 198.51.100.80 53 20000 12000 >"$work/udp-1"
pass_if "12,000 UDP flows to 198.51.100.80:53, every one answered" \
    test "$(wc -l <"$work/udp-1") $(grep -c ' -$' "$work/udp-1")" = "12000 0"
for i in 1 2 3; do
    pass_if "b$i's share of the flows is within 5% of weight $i/6" within5 "$work/udp-1" "b$i" "$i" 6
done
flows_of() { jq_status --arg b "$1" '[.nat64.nat46.frontends[] | select(.protocol == "udp") | .backends[] | select(.address == $b) | .flows] | add'; }
counted_flows() { test "$(flows_of "[2001:db8:6:1::2]:5353")" = "$(grep -c ' b1$' "$work/udp-1")"; }
pass_if "status: b1's flow count (after a sweep) is the flows b1 answered" retry 30 counted_flows

# --- b2 removed: only its flows move ----------------------------------------------
gateway_config "1 - 3"
pass_if "a reload removes b2" reload
at "$c4" $flows udp-flows 198.51.100.80 53 20000 12000 >"$work/udp-2"
moved() { # FILE: flows whose backend changed from udp-1, "kept", "moved off b2", "moved elsewhere"
    join "$work/udp-1" "$1" | awk '
        $2 == $3 { kept++; next }
        $2 == "b2" && $3 != "-" { off++; next }
        { other++ }
        END { printf "%d %d %d\n", kept, off, other }'
}
b2_flows=$(grep -c ' b2$' "$work/udp-1")
pass_if "every b1 and b3 flow keeps its backend, every b2 flow moves to b1 or b3" \
    test "$(moved "$work/udp-2")" = "$((12000 - b2_flows)) $b2_flows 0"
touch "$work/go"
kept_tcp=$(grep -cv '^b2$' "$work/tcp.names")
pass_if "the $kept_tcp TCP connections on b1 and b3 are answered by the same backend again" \
    retry 30 grep -qx "open 60 same $kept_tcp" "$work/tcp"
at "$c4" $flows udp-flows 198.51.100.80 53 40000 6000 >"$work/udp-new"
pass_if "6,000 new flows: b1 takes 1/4 within 5%" within5 "$work/udp-new" b1 1 4
pass_if "...b3 3/4 within 5%" within5 "$work/udp-new" b3 3 4
pass_if "...and b2 none" test "$(grep -c ' b2$' "$work/udp-new")" = 0

# --- an agent restart keeps every flow's backend ----------------------------------
agent_stop
agent_start
pass_if "the agent restarts" test $? = 0
at "$c4" $flows udp-flows 198.51.100.80 53 20000 12000 >"$work/udp-3"
pass_if "after the restart all 12,000 flows are answered by the same backends as before it" \
    cmp -s "$work/udp-2" "$work/udp-3"

# --- a refused reload changes nothing ---------------------------------------------
sed -i 's/weight = 3/weight = 5000/' "$root/usr/lib/v6node/dataplane.toml"
refusal=$(reload 2>&1)
pass_if "a reload with weight 5000 is refused, naming the key and the range" \
    grep -q 'nat46.gateway\[0\].backends\[1\].weight.*0..=1000' <<<"$refusal"
at "$c4" $flows udp-flows 198.51.100.80 53 20000 3000 >"$work/udp-4"
pass_if "...and the flows are served as before" test "$(head -3000 "$work/udp-2" | cmp - "$work/udp-4" && echo same)" = same
# (status exits 1 while the refused reload is listed as a problem)
row() { in_node "$bin" status >"$work/status.txt"; grep -E '^ +198\.51\.100\.80:53 +udp +\[2001:db8:6:3::2\]:5353 +3 +3074 +[0-9]+ +healthy$' "$work/status.txt"; }
pass_if "status text: b3's row, weight 3, 3/4 of 4,099 buckets, its flows, healthy" row

# --- ICMP errors follow their flow -------------------------------------------------
# b3's port closes: its kernel's "port unreachable" reaches the client from the
# VIP, quoting the client's own datagram, so the client's socket is refused.
kill "${udp_server[3]}"
at "${backends[2]}" sysctl -qw net.ipv6.icmp.ratelimit=0 # one error per flow, all to one client
at "$c4" $flows udp-flows 198.51.100.80 53 20000 100 1 >"$work/udp-5"
refused_as_expected() { # b1's flows answered as before, b3's refused
    diff <(head -100 "$work/udp-2" | sed 's/ b3$/ refused/') "$work/udp-5"
}
pass_if "b3's port closed: its $(head -100 "$work/udp-2" | grep -c ' b3$') of 100 flows are refused (ICMP port unreachable from the VIP), b1's answered" \
    refused_as_expected
# The client's port closes: its "port unreachable" reaches the flow's backend,
# quoting the backend's datagram to the embedded client.
port=$(awk '$2 == "b1" { print $1; exit }' "$work/udp-2") # a flow of b1's, whose server runs
closing=$(at "$c4" $flows udp-closing 198.51.100.80 53 "$port")
pass_if "the client's port $port closed before $closing's second answer: b1's socket is told (ICMPv6 from the gateway)" \
    retry 5 grep -qx "refused 2001:db8:46::c000:202 $port" "$work/errors-b1"
# Path MTU discovery: the backend's 1500-byte packets become 1480-byte IPv4
# ones with DF, which r4 cannot pass to c5; its Fragmentation Needed reaches
# the backend as Packet Too Big (MTU 1420), and the segments shrink.
got=$(at "$c5" $flows tcp-big 198.51.100.80 80 300000)
pass_if "c5 behind a 1400-byte IPv4 hop receives 300,000 bytes from a backend through the VIP ($got)" \
    test "${got% *}" = 300000
pmtu_learnt() { # the backend that answered routes to c5 with MTU 1420
    at "${backends[${got#* b} - 1]}" ip -6 route get 2001:db8:46::c000:402 | grep -q 'mtu 1420'
}
pass_if "...and that backend learnt path MTU 1420 to c5 (2001:db8:46::c000:402)" pmtu_learnt

# --- a health check quarantines a backend and lets it back ---------------------------
# b1 and b3 answer probes on TCP 9000 apart from their service: b3's prober
# port closes while its service keeps running, as when a backend is taken
# out of rotation.
health_listener() { # health_listener I: TCP 9000 in b$I, accepting and closing
    nsenter --net="/run/netns/${backends[$1 - 1]}" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9000))
s.listen(64)
while True:
    s.accept()[0].close()
' "2001:db8:6:$1::2" &
}
health_listener 1
health_pid1=$!
health_listener 3
health_pid3=$!
wait_for "b3's health port" bound "${backends[2]}" tcp 9000
gateway_config "1 - 3" "{ port = 9000, interval_seconds = 1, timeout_ms = 300, fall = 2, rise = 2 }"
reload >/dev/null
health() { jq_status '[.nat64.nat46.frontends[] | select(.protocol == "tcp") | .backends[] | "\(.address | sub(":8080$"; "")) \(.health) \(.buckets)"] | join(", ")'; }
pass_if "with a health check on the TCP frontend: both backends healthy ($(health))" \
    test "$(health)" = "[2001:db8:6:1::2] healthy 1025, [2001:db8:6:3::2] healthy 3074"
nsenter --net="/run/netns/$c4" python3 "$here/nat46-flows.py" tcp-hold 198.51.100.80 80 40 "$work/go-held" "$work/held" &
retry 30 grep -qx 'open 40' "$work/held"
kill "$health_pid3"
quarantined() { [[ "$(health)" == "[2001:db8:6:1::2] healthy 4099, [2001:db8:6:3::2] quarantined 0" ]]; }
pass_if "b3's probe port closed: within 2 failed probes b3 is quarantined, out of the Maglev table" retry 10 quarantined
at "$c4" $flows tcp-hold 198.51.100.80 80 40 "$work/go-held" "$work/new" 2>"$work/new.err" &
retry 30 grep -q '^open 40' "$work/new"
only_b1() { # what answered, or why nothing did
    [[ "$(sort -u "$work/new.names" 2>/dev/null | paste -sd' ')" == b1 ]] && return
    echo "answered by: $(sort "$work/new.names" 2>/dev/null | uniq -c | paste -sd,); $(tail -n 3 "$work/new.err")"
    return 1
}
pass_if "40 new connections: all to b1" only_b1
touch "$work/go-held"
pass_if "the 40 connections held across the quarantine keep their backends, b3's too ($(grep -c b3 "$work/held.names") of them)" \
    retry 30 grep -qx 'open 40 same 40' "$work/held"
health_listener 3
health_pid3=$!
healthy_again() { [[ "$(health)" == "[2001:db8:6:1::2] healthy 1025, [2001:db8:6:3::2] healthy 3074" ]]; }
pass_if "b3 answers its probes again: after 2 it is back in the table" retry 10 healthy_again
at "$c4" $flows tcp-hold 198.51.100.80 80 40 "$work/go-held" "$work/again" >/dev/null 2>&1 &
retry 30 grep -q '^open 40' "$work/again"
pass_if "...and new connections reach it again" grep -qx b3 "$work/again.names"
kill "$health_pid1" "$health_pid3" 2>/dev/null

tap_done
