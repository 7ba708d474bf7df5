#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The host side of boot-test's "gateway" scenario, run in its namespace while
# the guest boots: waits for the guest to translate, then checks what a
# client of the gateway sees, as TAP lines (without a plan: the guest's plan
# counts the guest's checks).
#   tests/image/gateway-peer.sh NAMESPACE
set -uo pipefail
ns=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../netns/lib.bash"

# TCG boots take about a minute; give it several.
for _ in $(seq 300); do
    at "$ns" ping -q -c 1 -W 1 64:ff9b:1::c000:201 >/dev/null 2>&1 && break
    sleep 1
done
www=$(mktemp -d)
cleanup_paths+=("$www")
cleanup_trap
echo "served over IPv6" >"$www/hello"
# nsenter execs python: the job is the server itself, which the exit trap kills.
nsenter --net="/run/netns/$ns" python3 -m http.server 8081 --bind fd00:8::1 --directory "$www" >/dev/null 2>&1 &
sleep 1

pass_if "host: ping fd00:8::1 -> 64:ff9b:1::192.0.2.1 through the guest" at "$ns" ping -q -c 3 -i 0.3 -W 2 64:ff9b:1::c000:201
pass_if "host: ping 192.0.2.1 -> 198.51.100.6 (fd00:8::1) through the guest" at "$ns" ping -q -c 3 -i 0.3 -W 2 198.51.100.6
pass_if "host: the guest's DNS64 answers 64:ff9b:1::192.0.2.1 for an A-only name" \
    test "$(at "$ns" dig +short +time=3 +tries=3 AAAA ipv4only.test @fd00:8::2)" = 64:ff9b:1::c000:201
pass_if "host: HTTP by name from the IPv6 side to the IPv4 server (TCP 6 -> 4)" \
    test "$(ip netns exec "$ns" curl -sf --max-time 10 http://ipv4only.test:8080/hello)" = "served over IPv4"
pass_if "host: HTTP from the IPv4 side to 198.51.100.6 (TCP 4 -> 6)" \
    test "$(at "$ns" curl -sf --max-time 10 http://198.51.100.6:8081/hello)" = "served over IPv6"

# fd00:8::100 has no mapping: the guest's stateful NAT64 lends it 203.0.113.1.
pass_if "host: ping from fd00:8::100 (no EAM) -> 64:ff9b:1::192.0.2.1 through the guest's pool" \
    at "$ns" ping -q -c 3 -i 0.3 -W 2 -I fd00:8::100 64:ff9b:1::c000:201
seen_by_ipv4_server() {
    local seen
    seen=$(at "$ns" python3 -c '
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("192.0.2.1", 8082))
server.listen(1)
server.settimeout(15)
conn, peer = server.accept()
conn.sendall(("%s %d" % peer).encode())
conn.close()' &
        sleep 0.5
        at "$ns" python3 -c '
import socket
s = socket.socket(socket.AF_INET6)
s.bind(("fd00:8::100", 0))
s.settimeout(10)
s.connect(("64:ff9b:1::c000:201", 8082))
print(s.recv(100).decode())'
        wait)
    echo "the IPv4-only server saw $seen"
    [[ "$seen" == "203.0.113.1 "* ]]
}
pass_if "host: TCP from fd00:8::100 reaches the IPv4 server, which sees the pool address 203.0.113.1" seen_by_ipv4_server
