#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Nodes on different links: each agent announces its Node's pod prefix over
# BGP ([routing]) through bird2, and a router (a namespace running bird2 and
# the test control plane) learns both and carries pod traffic between them:
#
#   node-a fd00:9::a  (AS 64601) --- fd00:9::1  [router, AS 64512,  ] fd00:19::1 --- fd00:19::b (AS 64602) node-b
#   pod fd00:10:244:a::5 on lo                  [API server on :9::1]                 pod fd00:10:244:b::5 on lo
#
# Each node runs the agent with its unit's capabilities and bird exactly as
# v6node-bgp.service does (its ExecStartPre check, then bird on the agent's
# file); the test starts bird when the file appears and reloads it when it
# changes, which the unit's path units do on a node. What is checked is what
# an operator sees: the router's routing table, status --json, ping.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/bgp.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
command -v bird >/dev/null || { echo "Bail out! bird2 is not installed (scripts/setup-host)"; exit 1; }

sandbox v6g
gw_ns=$id-rt
gateway_pod_prefix=fd00:10:244::/56
. "$top/tests/e2e/control-plane.bash"
declare -A agent_pid=() bird_pid=() ns_of=([a]=$id-a [b]=$id-b) address_of=([a]=fd00:9::a [b]=fd00:19::b)
declare -A asn_of=([a]=64601 [b]=64602) router_side=([a]=fd00:9::1 [b]=fd00:19::1)
router_bird=
cleanup_netns+=("${ns_of[@]}" "$gw_ns")
cleanup_paths+=("/sys/fs/bpf/$id-a" "/sys/fs/bpf/$id-b")
cleanup() {
    ((tap_failed == 0)) || for n in a b; do tail -n 20 "$work/agent-$n.log" | sed "s/^/# agent $n: /"; done
    # Disowned, so not among the jobs the exit trap kills.
    for pid in "${bird_pid[@]}" $router_bird; do kill -9 "$pid" 2>/dev/null; done
    control_plane_down
    for n in a b; do V6NODE_PIN_DIR=/sys/fs/bpf/$id-$n at "${ns_of[$n]}" "$bin" detach --force >/dev/null 2>&1; done
}

echo "# building the test control plane (warm Go caches: seconds)"
"$top/scripts/build-kubernetes" --control-plane >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log" | sed 's/^/# /'; echo "Bail out! control plane build failed"; exit 1; }

# Subnet 1 is the bridge with the API server's address, subnet 2 a veth.
control_plane_wire "${ns_of[@]}"
ip -n "$gw_ns" link add port-a type veth peer name eth0 netns "${ns_of[a]}"
ip -n "$gw_ns" link set port-a master wire up
ip -n "$gw_ns" link add subnet2 type veth peer name eth0 netns "${ns_of[b]}"
ip -n "$gw_ns" address add fd00:19::1/64 dev subnet2 nodad
ip -n "$gw_ns" link set subnet2 up
for n in a b; do
    ip -n "${ns_of[$n]}" address add "${address_of[$n]}/64" dev eth0 nodad
    ip -n "${ns_of[$n]}" link set eth0 up
    ip -n "${ns_of[$n]}" route add default via "${router_side[$n]}"
    ip -n "${ns_of[$n]}" address add "fd00:10:244:$n::5/128" dev lo
done

in_ns() { local n=$1; shift; at "${ns_of[$n]}" "$@"; }
# The agent's environment for node N: its own pins, state, config and CNI dir.
node_env() {
    local n=$1
    echo "V6NODE_PIN_DIR=/sys/fs/bpf/$id-$n" "V6NODE_STATE_DIR=$work/$n/state" \
        "V6NODE_CONFIG_ROOT=$work/$n/root" "V6NODE_CNI_CONF_DIR=$work/$n/cni"
}
status_json() { local n=$1; shift; env $(node_env "$n") nsenter --net="/run/netns/${ns_of[$n]}" "$bin" status --json; }
jq_status() { local n=$1; shift; status_json "$n" | jq -r "$@"; }
routing_section() { # routing_section N: node N's [routing], peering with the router
    printf '[routing]\nasn = %s\npeers = [{ address = "%s", asn = 64512 }]\n' "${asn_of[$1]}" "${router_side[$1]}"
}
for n in a b; do
    mkdir -p "$work/$n/root/usr/lib/v6node" "$work/$n/root/etc/v6node/dataplane.d" "$work/$n/state"
    cat >"$work/$n/root/usr/lib/v6node/dataplane.toml" <<EOF
[services]
cgroup = ""
[attach]
devices = ["eth0"]
[bigtcp]
devices = ["eth0"]
[kubernetes]
kubeconfig = "$work/dataplane.conf"
node_name = "node-$n"
EOF
    routing_section "$n" >"$work/$n/root/etc/v6node/dataplane.d/50-routing.toml"
done
dataplane_kubeconfig "$work/ca.crt" "$work/token" >"$work/dataplane.conf"

agent_start() {
    local n=$1
    env $(node_env "$n") bash -c 'exec "$@"' _ nsenter --net="/run/netns/${ns_of[$n]}" \
        setpriv --bounding-set="-all,$caps" --inh-caps=-all "$bin" run >>"$work/agent-$n.log" 2>&1 &
    agent_pid[$n]=$!
    retry 20 status_json "$n" >/dev/null 2>&1
}
reload() { # reload N: as `systemctl reload` does; its exit status is the verdict
    env $(node_env "$1") nsenter --net="/run/netns/${ns_of[$1]}" "$bin" reload --pid "${agent_pid[$1]}"
}
# v6node-bgp.service's command lines, read from the unit with its paths
# turned into node N's.
bird_command() { # bird_command N PRE|START|RELOAD
    local key=ExecStart
    case $2 in PRE) key=ExecStartPre ;; RELOAD) key=ExecReload ;; esac
    sed -n "s|^$key=||p" "$top/units/v6node-bgp.service" | sed "s|/run/v6node/|$work/$1/state/|g"
}
bird_start() {
    local n=$1 file=$work/$1/state/bird.conf
    retry 20 test -s "$file" || return 1
    in_ns "$n" $(bird_command "$n" PRE) || return 1
    # nsenter itself in the background, not in_ns: a backgrounded function is
    # a subshell, and $! would name it instead of bird, which cleanup then
    # missed.
    nsenter --net="/run/netns/${ns_of[$n]}" $(bird_command "$n" START) >>"$work/bird-$n.log" 2>&1 &
    bird_pid[$n]=$!
    disown
}
bird_reload() { in_ns "$1" $(bird_command "$1" RELOAD) >/dev/null; }

cat >"$work/router.conf" <<EOF
router id 0.0.0.1;
protocol device {}
protocol kernel { ipv6 { import none; export all; }; }
protocol bgp node_a { local fd00:9::1 as 64512; neighbor fd00:9::a as 64601; ipv6 { import all; export none; }; }
protocol bgp node_b { local fd00:19::1 as 64512; neighbor fd00:19::b as 64602; ipv6 { import all; export none; }; }
EOF
ip netns exec "$gw_ns" bird -f -c "$work/router.conf" -s "$work/router.ctl" >"$work/router.log" 2>&1 &
router_bird=$!
disown
# The router's BGP routes, one "PREFIX via ADDRESS" a line.
router_routes() { ip -n "$gw_ns" -6 route show proto bird | awk '{ print $1, $2, $3 }' | sort; }
router_has() {
    local want
    want=$(printf '%s\n' "$@" | sed '/^$/d' | sort)
    routes_equal() { [[ "$(router_routes)" == "$want" ]]; }
    retry 30 routes_equal || { echo "router has:"; router_routes; echo "want:"; echo "$want"; return 1; }
}

control_plane_up "$work/cp" >"$work/cp.log" 2>&1 || { cat "$work/cp.log"; echo "Bail out! control plane did not start"; exit 1; }
cp "$work/cp/etc/pki/ca.crt" "$work/ca.crt"
dataplane_identity >"$work/token" || { echo "Bail out! no token for the dataplane's ServiceAccount"; exit 1; }
make_node node-a fd00:9::a fd00:10:244:a::/64
make_node node-b fd00:19::b fd00:10:244:b::/64
for n in a b; do agent_start "$n"; done

# --- each node configures bird from [routing] and its Node ------------------------
conf_announces() { grep -q "route fd00:10:244:$1::/64 blackhole;" "$work/$1/state/bird.conf" 2>/dev/null; }
both_configured() {
    retry 30 conf_announces a && retry 30 conf_announces b &&
        grep -q 'neighbor fd00:19::1 as 64512;' "$work/b/state/bird.conf"
}
pass_if "each agent writes bird's configuration: its Node's pod prefix, its peer" both_configured
# Not in a pass_if: its subshell would lose the daemons' pids.
birds=ok
for n in a b; do bird_start "$n" >>"$work/bird-$n.log" 2>&1 || birds="bird on node-$n: $(tail -n 3 "$work/bird-$n.log")"; done
pass_if "bird accepts both (v6node-bgp.service's ExecStartPre) and runs" test "$birds" = ok
pass_if "the router learns each node's pod prefix via that node" \
    router_has "fd00:10:244:a::/64 via fd00:9::a" "fd00:10:244:b::/64 via fd00:19::b"
session_established() { [[ "$(jq_status "$1" '.bgp.sessions[0].state')" == Established ]]; }
exported_one() { retry 30 session_established a && jq_status a '.bgp.sessions[0].routes' | grep '1 exported'; }
pass_if "status on node-a: the session to the router is Established, one route exported" exported_one
peer_state() { jq_status "$1" --arg p "$2" '.cluster.peers[] | select(.name == $p) | .routes[0].state'; }
pass_if "node-a: node-b is not on-link, its prefix is left to BGP (route state bgp)" \
    test "$(peer_state a node-b)" = bgp
pass_if "no direct route of v6node's to the other subnet's pods" \
    test -z "$(ip -n "${ns_of[a]}" -6 route show proto 118)$(ip -n "${ns_of[b]}" -6 route show proto 118)"
pass_if "pod a -> pod b through the router (ping, from pod a's address)" \
    in_ns a ping -q -c 3 -i 0.2 -W 1 -I fd00:10:244:a::5 fd00:10:244:b::5
pass_if "pod b -> pod a through the router" in_ns b ping -q -c 3 -i 0.2 -W 1 -I fd00:10:244:b::5 fd00:10:244:a::5
pass_if "status is healthy on both nodes with BGP" eval 'status_json a >/dev/null && status_json b >/dev/null'

# --- direct routes stay the default ----------------------------------------------
make_node node-c fd00:9::c fd00:10:244:c::/64
direct_for_c() { ip -n "${ns_of[a]}" -6 route show proto 118 | grep -q '^fd00:10:244:c::/64 via fd00:9::c'; }
pass_if "an on-link peer (node-c) still gets a direct route on node-a, with BGP on" retry 10 direct_for_c
pass_if "status: node-c direct, node-b bgp" \
    test "$(peer_state a node-c) $(peer_state a node-b)" = "direct bgp"
kc delete node node-c >/dev/null

# --- bad [routing] is refused; nothing that is right changes ------------------------
conf_before=$(cat "$work/a/state/bird.conf")
dropin=$work/a/root/etc/v6node/dataplane.d/50-routing.toml
printf '[routing]\nasn = 23456\npeers = [{ address = "fd00:9::1", asn = 64512 }]\n' >"$dropin"
refused_asn=$(reload a 2>&1)
pass_if "asn = 23456 is refused, named with the reason" grep -q 'routing.asn.*AS_TRANS' <<<"$refused_asn"
printf '[routing]\nasn = 64601\npeers = [{ address = "fe80::1", asn = 64512 }]\n' >"$dropin"
refused_peer=$(reload a 2>&1)
pass_if "a link-local peer is refused, named with the reason" grep -q 'routing.peers\[0\].address.*link-local' <<<"$refused_peer"
pass_if "the refusal shows in status: last reload not applied, listed as a problem" \
    test "$(jq_status a '"\(.agent.last_reload.ok) \(.problems | map(select(startswith("last reload refused"))) | length)"')" = "false 1"
unchanged_after_refusals() {
    [[ "$(cat "$work/a/state/bird.conf")" == "$conf_before" ]] && session_established a &&
        router_has "fd00:10:244:a::/64 via fd00:9::a" "fd00:10:244:b::/64 via fd00:19::b"
}
pass_if "bird's configuration is unchanged, the session stays, the router keeps both prefixes" unchanged_after_refusals

# --- BGP off on node-a: its prefix is withdrawn ------------------------------------
rm "$dropin"
reload a >/dev/null
bird_reload a
pass_if "[routing] removed: bird keeps no session, the router withdraws node-a's prefix" \
    router_has "fd00:10:244:b::/64 via fd00:19::b"
bgp_gone_on_a() { [[ "$(peer_state a node-b) $(jq_status a -c .bgp)" == "unreachable null" ]]; }
pass_if "node-a without BGP: node-b is unreachable (the kernel's reason); status has no bgp" retry 10 bgp_gone_on_a
routing_section a >"$dropin"
reload a >/dev/null
bird_reload a
pass_if "[routing] back: the router learns node-a's prefix again" \
    router_has "fd00:10:244:a::/64 via fd00:9::a" "fd00:10:244:b::/64 via fd00:19::b"
pass_if "and pods reach each other again" in_ns a ping -q -c 3 -i 0.2 -W 1 -I fd00:10:244:a::5 fd00:10:244:b::5

for n in a b; do kill -TERM "${agent_pid[$n]}"; wait "${agent_pid[$n]}"; done
agent_pid=()
tap_done
