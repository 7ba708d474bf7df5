# SPDX-License-Identifier: Apache-2.0
# Sourced by boot tests (not a test itself): a NAT64 gateway for a booted
# node, made of network namespaces on this host, with v6node's own agent as
# the translator and unbound as DNS64. Nothing in it leaves this machine.
#
#   node (guest)  --tap--  $gw_ns  --veth--  $v4_ns (IPv4-only host)
#   fd00:9::2              fd00:9::1 | 192.0.2.254    192.0.2.1
#   (node N: fd00:9::N+2, on tap gwtapN; the taps share the bridge gwbr,
#   which holds fd00:9::1, so nodes reach each other on one link)
#
# The node's pods (fd00:10:244:7::/64, routed to the node) reach the IPv4-only
# host as 64:ff9b:1::192.0.2.1, through stateful NAT64: no EAM for them, they
# share the pool address 203.0.113.1 ($gateway_pool). DNS64
# on fd00:9::1 answers 64:ff9b:1::c000:201 for ipv4only.test, which only has an
# A record on the IPv4 host's DNS server; that host serves HTTP on :8080.
#
# nat64_gateway_up ID OUTDIR [NODES]: makes the namespaces ($gw_ns, where qemu
# must run to reach the taps; node 0's is $gateway_tap) and starts the agent,
# unbound, dnsmasq and an HTTP server; nat64_gateway_down undoes it.
# gateway_agent runs the gateway's agent CLI (status --json, ...).
. "$(dirname "${BASH_SOURCE[0]}")/../netns/lib.bash"
gateway_node_address=fd00:9::2
gateway_address=fd00:9::1
gateway_pod_prefix=fd00:10:244:7::/64
# Stateful NAT64's pool, which the pods' prefixes borrow from.
gateway_pool=203.0.113.1
gateway_pool_sources='"fd00:10:244::/48"'
# Explicit address mappings (TOML inline tables, comma-separated) that give
# pods IPv4 identities of their own; without one a pod borrows from the pool.
gateway_eams=${gateway_eams:-}
gateway_ipv4_host=192.0.2.1
gateway_tap=gwtap0
gateway_pids=()

gateway_at() { at "$@"; } # tests/e2e/kubeadm-join's name for it
gateway_agent() { at "$gw_ns" env "${gateway_env[@]}" "$gateway_bin" "$@"; }

# The gateway's namespaces and its agent's pins, state and config for ID and
# the directory OUT: what nat64_gateway_down needs, from another process too.
gateway_names() { # gateway_names ID OUT
    gw_ns=$1-gw v4_ns=$1-v4
    gateway_env=(V6NODE_PIN_DIR="/sys/fs/bpf/$1" V6NODE_STATE_DIR="$2/gateway-state" V6NODE_CONFIG_ROOT="$2/gateway-root")
}

nat64_gateway_up() {
    local id=$1 out=$2 nodes=${3:-1} i
    gateway_names "$id" "$out"
    gateway_bin=$("$V6NODE_TOP/scripts/build-dataplane") || return 1
    bpffs
    namespaces "$gw_ns" "$v4_ns" || return 1
    for ns in "$gw_ns" "$v4_ns"; do at "$ns" sysctl -qw net.ipv6.conf.default.autoconf=0; done
    ip -n "$gw_ns" link add gwbr type bridge
    for ((i = 0; i < nodes; i++)); do
        ip -n "$gw_ns" tuntap add dev "gwtap$i" mode tap
        ip -n "$gw_ns" link set "gwtap$i" master gwbr up
    done
    ip -n "$gw_ns" address add "$gateway_address/64" dev gwbr
    ip -n "$gw_ns" link set gwbr up
    veth "$gw_ns gw4 192.0.2.254/24" "$v4_ns eth0 $gateway_ipv4_host/24"
    ip -n "$gw_ns" route add "$gateway_pod_prefix" via "$gateway_node_address"
    ip -n "$v4_ns" route add default via 192.0.2.254
    at "$gw_ns" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv4.ip_forward=1

    mkdir -p "$out/gateway-root/usr/lib/v6node" "$out/www"
    # gwbr*: a BGP cluster's second link (gwbr2, made later) too.
    cat >"$out/gateway-root/usr/lib/v6node/dataplane.toml" <<TOML
[services]
cgroup = ""
[attach]
devices = ["gwbr*", "gw4"]
[bigtcp]
devices = []
[nat64]
devices = ["gwbr*", "gw4"]
prefix = "64:ff9b:1::/96"
eam = [$gateway_eams]
[nat64.stateful]
pool = ["$gateway_pool"]
sources = [$gateway_pool_sources]
TOML
    # With the unit's capability set, as the namespace tests run the agent.
    local caps
    caps=$(unit_caps v6node-dataplane.service) || return 1
    # nsenter execs each program: $! is the process itself.
    nsenter --net="/run/netns/$gw_ns" env "${gateway_env[@]}" \
        setpriv --bounding-set="-all,$caps" --inh-caps=-all "$gateway_bin" run >"$out/gateway-agent.log" 2>&1 &
    gateway_pids+=($!)
    nsenter --net="/run/netns/$v4_ns" dnsmasq --conf-file=/dev/null --keep-in-foreground --log-facility=- \
        --pid-file= --listen-address="$gateway_ipv4_host" --bind-interfaces --no-resolv --no-hosts \
        --local=/test/ --host-record="ipv4only.test,$gateway_ipv4_host" >"$out/gateway-dnsmasq.log" 2>&1 &
    gateway_pids+=($!)
    echo "served over IPv4" >"$out/www/hello"
    nsenter --net="/run/netns/$v4_ns" python3 -m http.server 8080 --bind "$gateway_ipv4_host" \
        --directory "$out/www" >"$out/gateway-http.log" 2>&1 &
    gateway_pids+=($!)

    local ready=
    for _ in $(seq 100); do
        jq -e '.ready_after_ms' "$out/gateway-state/dataplane.json" >/dev/null 2>&1 && { ready=1; break; }
        sleep 0.1
    done
    [[ -n "$ready" ]] || { tail -n 20 "$out/gateway-agent.log" >&2; return 1; }
    # unbound with the prefix file the translator's agent writes.
    cat >"$out/gateway-unbound.conf" <<CONF
server:
    interface: $gateway_address
    access-control: ::/0 allow
    chroot: ""
    username: ""
    pidfile: ""
    directory: "$out"
    use-syslog: no
    module-config: "dns64 iterator"
    domain-insecure: "test."
    # test. is one of unbound's built-in NXDOMAIN zones (RFC 6761).
    local-zone: "test." nodefault
    include: "$out/gateway-state/dns64.conf"
forward-zone:
    name: "test."
    forward-addr: $gateway_ipv4_host
CONF
    nsenter --net="/run/netns/$gw_ns" unbound -d -c "$out/gateway-unbound.conf" >"$out/gateway-unbound.log" 2>&1 &
    gateway_pids+=($!)
}

nat64_gateway_down() {
    local pid
    set +e # an EXIT trap: clean up all, whatever fails
    for pid in "${gateway_pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${gateway_pids[@]}"; do wait "$pid" 2>/dev/null; done
    [[ -z "${gw_ns:-}" ]] || gateway_agent detach --force >/dev/null 2>&1
    ip netns del "$gw_ns" 2>/dev/null
    ip netns del "$v4_ns" 2>/dev/null
    rm -rf "/sys/fs/bpf/${gw_ns%-gw}"
}
