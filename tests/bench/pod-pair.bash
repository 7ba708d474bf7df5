# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/bench/pods and tests/bench/nodes (not run alone): pod A to
# pod B, one TCP stream (iperf3) and 1-byte TCP round trips (python3), at
# each GSO/GRO maximum, for each mode. The caller sets work, secs, reps,
# modes, gso_sizes, py, ns_a, ns_b, router_namespaces (whose Packet Too Big
# are counted), sources tests/netns/lib.bash and defines setup_pods MODE (sets
# addr_a, addr_b and bigtcp_links, or skip) and teardown_pods; results land in
# result[MODE,SIZE,gbps|p50|p99|ptb] and ran.
pp_port=5202
pp_cpu=$(($(nproc) - 1)) # both ends of the ping-pong

# --- request/response client and server ------------------------------------------
cat >"$work/pingpong.py" <<'EOF'
# server ADDR PORT | client ADDR PORT SECONDS: 1 byte each way over one TCP
# connection with TCP_NODELAY; the client prints "round-trips p50_us p99_us".
import array, gc, math, socket, sys, time

def nodelay(s):
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

def server(addr, port):
    ls = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(4)
    while True:
        c, _ = ls.accept()
        nodelay(c)
        with c:
            while (b := c.recv(1)):
                c.sendall(b)

def client(addr, port, secs):
    c = socket.create_connection((addr, port))
    nodelay(c)
    now = time.perf_counter_ns
    send, recv = c.send, c.recv
    for _ in range(1000):  # warm up: neighbour entries, caches, the scheduler
        send(b"x")
        recv(1)
    gc.disable()
    samples = array.array("q")
    end = now() + secs * 10**9
    while True:
        t0 = now()
        send(b"x")
        if not recv(1):
            sys.exit("server closed the connection")
        t1 = now()
        samples.append(t1 - t0)
        if t1 >= end:
            break
    c.close()
    s = sorted(samples)
    rank = lambda p: s[max(0, math.ceil(p / 100 * len(s)) - 1)] / 1000  # nearest rank, µs
    print(len(s), f"{rank(50):.1f}", f"{rank(99):.1f}")

if sys.argv[1] == "server":
    server(sys.argv[2], int(sys.argv[3]))
else:
    client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
EOF

# --- measuring -------------------------------------------------------------------
# ICMPv6 Packet Too Big sent by the namespaces that route (none: 0).
node_ptbs() {
    local ns total=0 n
    for ns in "${router_namespaces[@]}"; do
        n=$(at "$ns" awk '$1 == "Icmp6OutPktTooBigs" {print $2}' /proc/net/snmp6)
        total=$((total + n))
    done
    echo "$total"
}
pods_ping() { at "$ns_a" ping -6 -c1 -W1 "$addr_b" >/dev/null 2>&1; }
start_servers() {
    nsenter --net="/run/netns/$ns_b" iperf3 -s -B "$addr_b" >"$work/iperf3-server.log" 2>&1 &
    iperf_server=$!
    nsenter --net="/run/netns/$ns_b" taskset -c "$pp_cpu" "$py" "$work/pingpong.py" server "$addr_b" "$pp_port" \
        >"$work/pingpong-server.log" 2>&1 &
    pp_server=$!
    wait_for "iperf3 server in pod B" bound "$ns_b" tcp 5201
    wait_for "ping-pong server in pod B" bound "$ns_b" tcp "$pp_port"
}
set_gso() { # $1: GSO and GRO maximum, bytes, on every link in bigtcp_links
    local size=$1 link ns dev got
    for link in "${bigtcp_links[@]}"; do
        read -r ns dev <<<"$link"
        ip -n "$ns" link set dev "$dev" gso_max_size "$size" gro_max_size "$size"
        got=$(ip -n "$ns" -d -j link show dev "$dev" | jq -r '.[0] | "\(.gso_max_size) \(.gro_max_size)"')
        [[ "$got" == "$size $size" ]] || die "$ns $dev: gso/gro_max_size $got, not $size"
    done
}
iperf() { # prints Gbit/s at the receiver, dies with iperf3's error
    local out
    out=$(at "$ns_a" iperf3 -c "$addr_b" -t "$secs" -J) ||
        die "iperf3 -c $addr_b: $(jq -r '.error // empty' <<<"$out" 2>/dev/null)"
    jq '.end.sum_received.bits_per_second / 1e9' <<<"$out"
}
declare -A result
ran=()
# $1: label (the row: mode and GSO size); pod A to pod B, median of $reps.
measure() {
    local label=$1 gbps=() p50=() p99=() n lat50 lat99 ptbs
    # A broken mode must not be reported as a slow one.
    pods_ping || die "$label: no reply from $addr_b to pod A's ping"
    ptbs=$(node_ptbs)
    for _ in $(seq "$reps"); do
        gbps+=("$(iperf)")
        read -r n lat50 lat99 < <(at "$ns_a" taskset -c "$pp_cpu" "$py" "$work/pingpong.py" client "$addr_b" "$pp_port" "$secs") ||
            die "$label: ping-pong client failed"
        [[ -n "${lat99:-}" ]] || die "$label: ping-pong client printed nothing"
        p50+=("$lat50") p99+=("$lat99")
    done
    result[$label,gbps]=$(printf '%s\n' "${gbps[@]}" | median)
    result[$label,p50]=$(printf '%s\n' "${p50[@]}" | median)
    result[$label,p99]=$(printf '%s\n' "${p99[@]}" | median)
    result[$label,ptb]=$(($(node_ptbs) - ptbs))
    log "$label: ${result[$label,gbps]} Gbit/s, round trip p50 ${result[$label,p50]} µs," \
        "p99 ${result[$label,p99]} µs ($n in the last run), ${result[$label,ptb]} Packet Too Big sent by the routing namespaces"
}

skipped=()
for mode in $modes; do
    setup_pods "$mode"
    if [[ -n "$skip" ]]; then
        log "$mode: $skip"
        skipped+=("$mode: $skip")
        mode=
        continue
    fi
    wait_for "ping from pod A to pod B ($mode)" pods_ping
    start_servers
    for size in "${gso_sizes[@]}"; do
        set_gso "$size"
        measure "$mode,$size"
    done
    ran+=("$mode")
    teardown_pods
    mode=
done

# --- report helpers ---------------------------------------------------------------
fmt() { awk -v v="$1" -v d="$2" 'BEGIN {printf "%.*f", d, v}'; }
k() { echo "$((($1 + 1023) / 1024))k"; }
