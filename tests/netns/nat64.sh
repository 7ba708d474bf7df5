#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The NAT46/64 translator end to end on this host's kernel. Four network
# namespaces in a row:
#
#   v6 (IPv6-only host)  --  gw (agent: translator + DNS64)  --  r4 (IPv4 router)  --  v4 (IPv4-only host)
#   2001:db8:6::2           2001:db8:6::1 | 192.0.2.1            192.0.2.2 | 203.0.113.1     203.0.113.2
#
# v6 reaches v4 as 64:ff9b:1::203.0.113.2 (RFC 6052 prefix); v4 reaches v6 as
# 198.51.100.6 (explicit address mapping). The r4 -- v4 link has MTU 1400,
# so path MTU discovery has to work through the translator. Covers ping, TCP
# and UDP both ways, TTL expiry at the translator and beyond it, PMTUD both
# ways, fragmented UDP both ways, DNS64 (unbound with the prefix the agent
# writes, in front of a server that only has an A record), reloads that
# change the mapping under traffic, a refused reload, and detach.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/nat64.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need unbound dig dnsmasq iperf3 curl jq python3

sandbox v6n
v6=$id-v6 gw=$id-gw r4=$id-r4 v4=$id-v4
cleanup_paths+=("/etc/netns/$v6")
cleanup() { at "$gw" "$bin" detach --force >/dev/null 2>&1; }

namespaces "$v6" "$gw" "$r4" "$v4"
veth "$v6 v6h0 2001:db8:6::2/64" "$gw gw6 2001:db8:6::1/64"
veth "$gw gw4 192.0.2.1/24" "$r4 r4a 192.0.2.2/24"
veth "$r4 r4b 203.0.113.1/24" "$v4 v4h0 203.0.113.2/24"
ip -n "$r4" link set r4b mtu 1400
ip -n "$v4" link set v4h0 mtu 1400
ip -n "$v6" route add default via 2001:db8:6::1
ip -n "$gw" route add 203.0.113.0/24 via 192.0.2.2
ip -n "$r4" route add 198.51.100.0/24 via 192.0.2.1
ip -n "$v4" route add default via 203.0.113.1
at "$gw" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv4.ip_forward=1
at "$r4" sysctl -qw net.ipv4.ip_forward=1

mkdir -p "$root/usr/lib/v6node" "$root/etc/v6node/dataplane.d"
cat >"$root/usr/lib/v6node/dataplane.toml" <<'TOML'
[services]
cgroup = ""
[attach]
devices = ["gw6", "gw4"]
[bigtcp]
devices = []
[nat64]
devices = ["gw6", "gw4"]
prefix = "64:ff9b:1::/96"
eam = [{ ipv6 = "2001:db8:6::2/128", ipv4 = "198.51.100.6/32" }]
TOML

state() { jq -r "$1" "$V6NODE_STATE_DIR/dataplane.json" 2>/dev/null; }
status_json() { at "$gw" "$bin" status --json; }
jq_status() { status_json | jq -r "$@"; }
# The agent holds exactly the unit's capabilities; readiness shows in its state file.
# Background processes start through nsenter itself (which execs): $! must be
# the process, not a subshell running a function, or kill would miss it.
nsenter --net="/run/netns/$gw" setpriv --bounding-set="-all,$caps" --inh-caps=-all "$bin" run >"$work/agent.log" 2>&1 &
agent=$!
ready() { for _ in $(seq 200); do [[ -n "$(state '.ready_after_ms // empty')" ]] && return 0; sleep 0.05; done; return 1; }
pass_if "agent with [nat64] becomes ready" ready
pass_if "status: the translator is attached to gw6, gw4 and its fragmentation link, after the host programs (and XDP)" \
    test "$(jq_status '[.links[] | select(.attached) | "\(.device)-\(.direction)-\(.program)"] | sort | join(" ")')" \
    = "gw4-egress-v6n_to_dev gw4-ingress-v6n_from_dev gw4-nat64-v6n_nat64 gw4-xdp-v6n_xdp_uplink gw6-egress-v6n_to_dev gw6-ingress-v6n_from_dev gw6-nat64-v6n_nat64 gw6-xdp-v6n_xdp_uplink v6n-frag1-nat64-v6n_nat64"
# The fragmentation link is reached by a main-table route, never a policy
# rule: any rule slows every IPv4 lookup in the namespace for good.
pass_if "the fragmentation link's route is in the main table, and no policy rule was added" \
    test "$(ip -n "$gw" -4 route show 169.254.118.1/32 | tr -s ' ') | $(ip -n "$gw" -4 rule show | wc -l)" \
    = "169.254.118.1 dev v6n-frag0 proto 118 scope link  | 3"
pass_if "status: prefix and one mapping" test "$(jq_status '.nat64 | "\(.prefix) \(.eam.entries)"')" = "64:ff9b:1::/96 1"
pass_if "bpftool prog show lists v6n_nat64" bash -c "bpftool prog show | grep -q 'name v6n_nat64'"

# --- reachability ----------------------------------------------------------------
server4=64:ff9b:1::cb00:7102 # 203.0.113.2
pass_if "ping IPv6-only -> IPv4-only through the translator" at "$v6" ping -q -c 3 -i 0.2 -W 2 "$server4"
pass_if "ping IPv4-only -> IPv6-only (198.51.100.6)" at "$v4" ping -q -c 3 -i 0.2 -W 2 198.51.100.6

nsenter --net="/run/netns/$v4" iperf3 -s -B 203.0.113.2 >"$work/iperf-v4.log" 2>&1 &
nsenter --net="/run/netns/$v6" iperf3 -s -B 2001:db8:6::2 >"$work/iperf-v6.log" 2>&1 &
wait_for "iperf3 servers" bound "$v4" tcp 5201 && wait_for "iperf3 servers" bound "$v6" tcp 5201
received() { jq -e '.end.sum_received.bytes > 1000000' >/dev/null; }
tcp_v6_to_v4() { at "$v6" iperf3 -c "$server4" -t 2 -J | received; }
tcp_v4_to_v6() { at "$v4" iperf3 -c 198.51.100.6 -t 2 -J | received; }
pass_if "TCP IPv6 -> IPv4 (1 MB+ delivered)" tcp_v6_to_v4
pass_if "TCP IPv4 -> IPv6" tcp_v4_to_v6
udp_ok() { jq -e '.end.sum_received.packets > 100 and .end.sum_received.lost_percent < 1' >/dev/null; }
pass_if "UDP IPv6 -> IPv4" bash -c "nsenter --net=/run/netns/$v6 iperf3 -c $server4 -u -b 5M -t 1 -J | jq -e '.end.sum_received.packets > 100 and .end.sum_received.lost_percent < 1' >/dev/null"
pass_if "UDP IPv4 -> IPv6" bash -c "nsenter --net=/run/netns/$v4 iperf3 -c 198.51.100.6 -u -b 5M -t 1 -J | jq -e '.end.sum_received.packets > 100 and .end.sum_received.lost_percent < 1' >/dev/null"

# A 1448-byte DF packet fits every IPv6 link but, translated (1428 bytes), not
# r4's 1400-byte one: r4's Fragmentation Needed must come back translated.
ptb_from_r4() {
    local out
    out=$(at "$v6" ping -c 2 -i 0.3 -W 1 -M do -s 1400 "$server4" 2>&1)
    grep -qE 'From 64:ff9b:1::c000:202 .*Packet too big: mtu=1420' <<<"$out" || { echo "$out"; return 1; }
}
pass_if "DF ping 1448 bytes IPv6 -> IPv4: r4's Frag Needed arrives as Packet Too Big, mtu 1420" ptb_from_r4
pass_if "the IPv6 host learnt path MTU 1420 (r4's 1400 + 20)" bash -c "ip -n $v6 -6 route get $server4 | grep -q 'mtu 1420'"

# --- TTL / hop limit: a traceroute both ways ---------------------------------------
hop() { at "$1" ping -c 1 -W 2 -t "$2" "$3" 2>&1; } # ns, ttl, target
pass_if "hop limit 1: Time Exceeded from the translator's IPv6 address" \
    bash -c "$(declare -f at hop); hop $v6 1 $server4 | grep -E 'From 2001:db8:6::1 .*Time exceeded'"
pass_if "hop limit 2: r4's ICMP Time Exceeded, translated, from 64:ff9b:1::192.0.2.2" \
    bash -c "$(declare -f at hop); hop $v6 2 $server4 | grep -E 'From 64:ff9b:1::c000:202 .*Time exceeded'"
pass_if "hop limit 3: the IPv4 host answers" bash -c "$(declare -f at hop); hop $v6 3 $server4 | grep -q '1 received'"
pass_if "TTL 2 from the IPv4 side: Time Exceeded from the translator (192.0.2.1)" \
    bash -c "$(declare -f at hop); hop $v4 2 198.51.100.6 | grep -E 'From 192.0.2.1 .*Time to live exceeded'"

counter() { jq_status --arg dev "$1" --arg d "$2" --arg r "$3" '[.counters[] | select(.device == $dev and .direction == $d and .reason == $r) | .packets] | add // 0'; }

# --- path MTU, IPv4 side towards a smaller IPv6 link -------------------------------
ip -n "$gw" link set gw6 mtu 1280
ip -n "$v6" link set v6h0 mtu 1280
pass_if "DF ping 1328 bytes IPv4 -> IPv6 over a 1280 link: Frag Needed, mtu 1260, from the translator" \
    bash -c "nsenter --net=/run/netns/$v4 ping -c 2 -i 0.2 -W 1 -M do -s 1300 198.51.100.6 2>&1 | grep -E 'From 192.0.2.1 .*(Frag needed|mtu = 1260)'"
pass_if "the IPv4 host learnt path MTU 1260" bash -c "ip -n $v4 route get 198.51.100.6 | grep -q 'mtu 1260'"
# RFC 7915 4.1: without DF the translator fragments instead.
df_clear() { # [size [ttl]]: one datagram IPv4 -> IPv6, DF clear: prints its length and hop limit as they arrived
    local size=${1:-1300} ttl=${2:-64}
    at "$v6" python3 -c '
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
s.bind(("2001:db8:6::2", 9998))
s.settimeout(5)
try:
    data, anc, _, _ = s.recvmsg(65535, socket.CMSG_SPACE(4))
except socket.timeout:
    print("nothing")
else:
    print(len(data), [int.from_bytes(d, "little") for l, t, d in anc if t == socket.IPV6_HOPLIMIT][0])' >"$work/df-clear" 2>&1 &
    local receiver=$!
    wait_for "the receiver" bound "$v6" udp 9998
    at "$v4" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER: IP_PMTUDISC_DONT
s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, int(sys.argv[2]))
s.sendto(bytes(int(sys.argv[1])), ("198.51.100.6", 9998))' "$size" "$ttl"
    wait "$receiver"
    cat "$work/df-clear"
}
before=$(counter gw4 4to6 translated_after_fragmenting)
pass_if "a DF-clear 1328-byte IPv4 datagram over the 1280 link arrives whole, fragmented by the translator" \
    test "$(df_clear | cut -d' ' -f1)" = 1300
pass_if "...counted as translated after fragmenting, and its fragments translated on $(jq_status '.nat64 | "v6n-frag1 (MTU \(.fragment_mtu))"')" \
    test "$(($(counter gw4 4to6 translated_after_fragmenting) - before)) $(counter v6n-frag1 4to6 translated)" = "1 2"
# RFC 7915 4.1/5.1: the translator is one hop, fragmenting or not. Sent with
# TTL 64, r4 takes one and the translator one: hop limit 62 both ways.
arrives_as() { # want size ttl...: df_clear's "length hop-limit" for each, joined by " / "
    local want=$1 got="" size ttl
    shift
    while (($#)); do size=$1 ttl=$2; shift 2; got+="${got:+ / }$(df_clear "$size" "$ttl")"; done
    [[ $got == "$want" ]] || { echo "arrived: $got, wanted: $want"; return 1; }
}
pass_if "TTL 64 from the IPv4 side: hop limit 62 unfragmented, and 62 fragmented by the translator (one hop, not two)" \
    arrives_as "100 62 / 1300 62" 100 64 1300 64
# The edge: TTL 2 at the translator leaves it with hop limit 1 whether it
# is fragmented or not; TTL 1 there gets Time Exceeded, not hop limit 0.
pass_if "TTL 3 from the IPv4 side, DF clear, fragmented: arrives with hop limit 1" arrives_as "1300 1" 1300 3
ttl_exceeded_df_clear() { # a 1300-byte DF-clear datagram arriving at the translator with TTL 1
    at "$v4" python3 -c '
import socket, time
icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
icmp.settimeout(3)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER: IP_PMTUDISC_DONT
s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 2)
s.sendto(bytes(1300), ("198.51.100.6", 9998))
deadline = time.time() + 3
while time.time() < deadline:
    pkt, (src, _) = icmp.recvfrom(65535)
    if pkt[(pkt[0] & 15) * 4] == 11:
        print(src)
        break'
}
pass_if "TTL 2 from the IPv4 side, DF clear, 1300 bytes: Time Exceeded from the translator (192.0.2.1)" \
    test "$(ttl_exceeded_df_clear 2>&1)" = 192.0.2.1
ip -n "$gw" link set gw6 mtu 1500
ip -n "$v6" link set v6h0 mtu 1500

# --- fragmented UDP both ways ------------------------------------------------------
udp_receive() { # ns address: prints "LENGTH SHA256" of one datagram
    at "$1" python3 -c '
import hashlib, socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
s.settimeout(5)
data = s.recv(65535)
print(len(data), hashlib.sha256(data).hexdigest())' "$2" >"$work/udp-$1" 2>&1
}
udp_send() { # ns target: one 3000-byte datagram, fragmented by the sender's kernel
    at "$1" python3 -c '
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
socket.socket(family, socket.SOCK_DGRAM).sendto(bytes(range(256)) * 11 + bytes(184), (sys.argv[1], 9999))' "$2"
}
expected="3000 $(python3 -c 'import hashlib; print(hashlib.sha256(bytes(range(256)) * 11 + bytes(184)).hexdigest())')"
fragmented() { # from-ns to-ns to-address target
    udp_receive "$2" "$3" &
    local receiver=$!
    wait_for "the receiver" bound "$2" udp 9999
    udp_send "$1" "$4"
    wait "$receiver"
    [[ "$(cat "$work/udp-$2")" == "$expected" ]] || { cat "$work/udp-$2"; return 1; }
}
pass_if "3000-byte UDP datagram IPv6 -> IPv4, in fragments, arrives whole" fragmented "$v6" "$v4" 203.0.113.2 "$server4"
pass_if "3000-byte UDP datagram IPv4 -> IPv6, in fragments, arrives whole" fragmented "$v4" "$v6" 2001:db8:6::2 198.51.100.6

# --- DNS64 -------------------------------------------------------------------------
# The IPv4-only side's DNS server knows only an A record; unbound on gw
# synthesizes the AAAA under the prefix the agent wrote for it.
nsenter --net="/run/netns/$v4" dnsmasq --conf-file=/dev/null --keep-in-foreground --log-facility=- --pid-file= \
    --listen-address=203.0.113.2 --bind-interfaces --no-resolv --no-hosts \
    --local=/test/ --host-record=ipv4only.test,203.0.113.2 >"$work/dnsmasq.log" 2>&1 &
cat >"$work/unbound.conf" <<CONF
server:
    interface: 2001:db8:6::1
    access-control: 2001:db8:6::/64 allow
    chroot: ""
    username: ""
    pidfile: ""
    directory: "$work"
    use-syslog: no
    module-config: "dns64 iterator"
    do-not-query-localhost: no
    domain-insecure: "test."
    # test. is one of unbound's built-in NXDOMAIN zones (RFC 6761).
    local-zone: "test." nodefault
    include: "$V6NODE_STATE_DIR/dns64.conf"
forward-zone:
    name: "test."
    forward-addr: 203.0.113.2
CONF
pass_if "the agent wrote unbound's DNS64 prefix" grep -qx '    dns64-prefix: 64:ff9b:1::/96' "$V6NODE_STATE_DIR/dns64.conf"
nsenter --net="/run/netns/$gw" unbound -d -c "$work/unbound.conf" >"$work/unbound.log" 2>&1 &
wait_for "dnsmasq" bound "$v4" udp 53 && wait_for "unbound" bound "$gw" udp 53
mkdir -p "/etc/netns/$v6"
echo "nameserver 2001:db8:6::1" >"/etc/netns/$v6/resolv.conf"
mkdir -p "$work/www" && echo "served over IPv4" >"$work/www/hello"
nsenter --net="/run/netns/$v4" python3 -m http.server 8080 --bind 203.0.113.2 --directory "$work/www" >"$work/http.log" 2>&1 &
wait_for "the HTTP server" bound "$v4" tcp 8080
dns64() {
    local answer
    answer=$(at "$v6" dig +short +time=2 +tries=2 AAAA ipv4only.test @2001:db8:6::1)
    [[ "$answer" == "$server4" ]] || {
        echo "answer: '$answer'"
        at "$v6" dig +time=2 +tries=1 AAAA ipv4only.test @2001:db8:6::1 | grep -E 'status|ANSWER'
        at "$gw" dig +time=2 +tries=1 AAAA ipv4only.test @203.0.113.2 | grep -E 'status|ANSWER'
        at "$gw" dig +time=2 +tries=1 A ipv4only.test @203.0.113.2 | grep -E 'status|ANSWER'
        tail -n 5 "$work/unbound.log" "$work/dnsmasq.log"
        return 1
    }
}
pass_if "DNS64: AAAA for an A-only name is 64:ff9b:1::203.0.113.2" dns64
pass_if "the IPv6-only host fetches http://ipv4only.test:8080/ by name through the translator" \
    test "$(ip netns exec "$v6" curl -sf --max-time 5 http://ipv4only.test:8080/hello)" = "served over IPv4"

# --- counters ----------------------------------------------------------------------
pass_if "counters: 6to4 translated on gw6" test "$(counter gw6 6to4 translated)" -gt 1000
pass_if "counters: 4to6 translated on gw4" test "$(counter gw4 4to6 translated)" -gt 1000
pass_if "counters: hop limit exceeded on both sides" \
    test "$(counter gw6 6to4 hop_limit_exceeded)" -ge 1 -a "$(counter gw4 4to6 hop_limit_exceeded)" -ge 1
pass_if "counters: too big (the DF pings)" test "$(counter gw4 4to6 too_big)" -ge 1

# --- reloads -----------------------------------------------------------------------
reload() { at "$gw" "$bin" reload --pid "$agent"; }
cat >"$root/etc/v6node/dataplane.d/50-more.toml" <<'TOML'
[nat64]
eam = [
  { ipv6 = "2001:db8:6::2/128", ipv4 = "198.51.100.6/32" },
  { ipv6 = "2001:db8:6::3/128", ipv4 = "198.51.100.7/32" },
]
TOML
at "$v4" ping -q -c 300 -i 0.01 -W 1 198.51.100.6 >"$work/flood.log" 2>&1 &
flood=$!
sleep 0.5
pass_if "reload adding a mapping succeeds" reload
wait "$flood"
pass_if "no ping lost to 198.51.100.6 while the mapping table changed" grep -q ' 0% packet loss' "$work/flood.log"
pass_if "status shows two mappings" test "$(jq_status '.nat64.eam.entries')" = 2
ip -n "$v6" addr add 2001:db8:6::3/64 dev v6h0
pass_if "the new mapping translates: IPv4 host pings 198.51.100.7" at "$v4" ping -q -c 2 -i 0.2 -W 2 198.51.100.7

# An IPv6 service numbered under the prefix (64:ff9b:1::198.51.100.65), reached
# from IPv4 by nat64.translatable alone, no EAM.
ip -n "$v6" addr add 64:ff9b:1::c633:6441/128 dev v6h0
ip -n "$gw" route add 64:ff9b:1::c633:6440/122 via 2001:db8:6::2
pass_if "before nat64.translatable, 198.51.100.65 is not translated" \
    bash -c "! nsenter --net=/run/netns/$v4 ping -q -c 1 -W 1 198.51.100.65"
printf '[nat64]\ntranslatable = ["198.51.100.64/26"]\n' >"$root/etc/v6node/dataplane.d/55-translatable.toml"
pass_if "reload adding translatable 198.51.100.64/26 succeeds; status shows it" \
    bash -c "$(declare -f at reload status_json jq_status); bin=$bin agent=$agent gw=$gw; reload && test \"\$(jq_status '.nat64.translatable.entries')\" = 1"
pass_if "IPv4 host pings 198.51.100.65: the IPv6 service at 64:ff9b:1::198.51.100.65 answers" \
    at "$v4" ping -q -c 2 -i 0.2 -W 2 198.51.100.65
tcp_v4_to_translatable() {
    at "$v6" python3 -c "
import socket
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('64:ff9b:1::c633:6441', 8465)); s.listen(1); s.settimeout(10)
c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()" &
    local server=$!
    wait_for "the IPv6 service" bound "$v6" tcp 8465
    local seen
    seen=$(at "$v4" python3 -c "
import socket
s = socket.create_connection(('198.51.100.65', 8465), timeout=5); print(s.recv(100).decode())")
    wait "$server"
    echo "the service saw $seen"
    [[ "$seen" == 64:ff9b:1::cb00:7102 ]]
}
pass_if "TCP IPv4 -> 198.51.100.65: the service sees the client as 64:ff9b:1::203.0.113.2" tcp_v4_to_translatable
rm "$root/etc/v6node/dataplane.d/55-translatable.toml"
# Gone, or it would be the IPv6 host's source for the prefixes below.
ip -n "$v6" addr del 64:ff9b:1::c633:6441/128 dev v6h0

echo '[nat64]
eam = [{ ipv6 = "2001:db8:6::/120", ipv4 = "198.51.100.0/25" }]' >"$root/etc/v6node/dataplane.d/60-bad.toml"
refused() { ! reload >"$work/reload.out" 2>&1 && grep -q '60-bad.toml: nat64.eam\[0\]: .*leaves 8 host bits' "$work/reload.out"; }
pass_if "a reload with a bad mapping is refused, naming the file and key" refused
pass_if "...and the mappings in force are unchanged" test "$(jq_status '.nat64.eam.entries')" = 2
pass_if "...and traffic still flows" at "$v4" ping -q -c 2 -i 0.2 -W 2 198.51.100.6
rm "$root/etc/v6node/dataplane.d/60-bad.toml"
# RFC 6052 3.1: the well-known prefix carries global IPv4 only; this
# world's documentation addresses are not.
echo '[nat64]
prefix = "64:ff9b::/96"' >"$root/etc/v6node/dataplane.d/60-bad.toml"
wkp_refused() {
    ! reload >"$work/reload.out" 2>&1 &&
        grep -q 'nat64.eam\[[0-9]\].ipv4: 198\.51\.100\.[0-9/]* is not a global IPv4 range .*RFC 6052 3.1 forbids it' "$work/reload.out" ||
        { cat "$work/reload.out"; return 1; }
}
pass_if "a reload to 64:ff9b::/96 with documentation addresses is refused, naming the key and RFC 6052 3.1" wkp_refused
pass_if "...and the prefix in force is unchanged" test "$(jq_status '.nat64.prefix')" = 64:ff9b:1::/96
pass_if "...and traffic still flows" at "$v4" ping -q -c 2 -i 0.2 -W 2 198.51.100.6

echo '[nat64]
prefix = "64:ff9b:1::/48"' >"$root/etc/v6node/dataplane.d/70-prefix.toml"
pass_if "reload moving to the prefix 64:ff9b:1::/48" reload
pass_if "the DNS64 file follows the prefix" grep -qx '    dns64-prefix: 64:ff9b:1::/48' "$V6NODE_STATE_DIR/dns64.conf"
pass_if "ping under the new prefix (64:ff9b:1:cb00:71:200::)" at "$v6" ping -q -c 2 -i 0.2 -W 2 64:ff9b:1:cb00:71:200::
pass_if "the old prefix is no longer translated" bash -c "! nsenter --net=/run/netns/$v6 ping -q -c 1 -W 1 $server4"

# --- detach ------------------------------------------------------------------------
nat64_ids=$(jq_status '[.links[] | select(.direction == "nat64") | .program_id] | join(" ")')
kill "$agent"
wait "$agent" 2>/dev/null
pass_if "detach --force removes the translator too" bash -c "nsenter --net=/run/netns/$gw $bin detach --force | grep -q 'detached gw6 nat64'"
# By id: other tests may load programs of the same name meanwhile. The
# kernel frees a released program after a grace period; on a loaded
# machine, with the uplinks' XDP being torn down too, that took over 2 s.
programs_gone() {
    local id
    [[ -n "$nat64_ids" ]] || return 1
    for _ in $(seq 200); do
        local alive=0
        for id in $nat64_ids; do bpftool prog show id "$id" >/dev/null 2>&1 && alive=1; done
        ((alive)) || return 0
        sleep 0.05
    done
    return 1
}
pass_if "the translator's programs ($nat64_ids) are gone" programs_gone

tap_done
