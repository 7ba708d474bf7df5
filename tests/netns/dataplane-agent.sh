#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The dataplane agent on this host's kernel, in two network namespaces joined
# by a veth pair: "peer" (fd00:6e::1) sends to "node" (fd00:6e::2), where the
# agent attaches to node0. Covers attach and READY, status, counters, SIGKILL
# under a ping flood and an iperf3 stream, adoption, program replacement,
# reloads good and bad, device hotplug, metrics, clsact mode and detach.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/dataplane-agent.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent

sandbox v6t
peer=$id-peer node=$id-node
agent_pid= listener_pid=
cleanup() { in_node "$bin" detach --force >/dev/null 2>&1; }
in_peer() { at "$peer" "$@"; }

namespaces --dad "$peer" "$node"
veth "$peer peer0 fd00:6e::1/64" "$node node0 fd00:6e::2/64"

mkdir -p "$root/usr/lib/v6node" "$root/etc/v6node/dataplane.d"
cat >"$root/usr/lib/v6node/dataplane.toml" <<'EOF'
[services]
cgroup = ""
[attach]
devices = ["node*"]
# The tc programs' own mechanics; tests/netns/xdp.sh covers XDP in front.
xdp = "tc"
[bigtcp]
devices = ["node*"]
EOF

# agent_start [ENV=VALUE...]: starts the agent in the node namespace behind a
# stand-in notify socket and waits for READY=1 (or its exit).
agent_start() {
    : >"$work/notify.log"
    "$here/notify-listen.py" "$work/notify.sock" "$V6NODE_PIN_DIR/links/node0-ingress" \
        "$V6NODE_PIN_DIR/links/node0-egress" >"$work/notify.log" &
    listener_pid=$!
    for _ in $(seq 50); do grep -q listening "$work/notify.log" && break; sleep 0.1; done
    # Every step execs, so $! is the agent itself (kill -9 must hit it) and
    # WATCHDOG_PID=$$ names it, as systemd would.
    bash -c 'export WATCHDOG_PID=$$; exec "$@"' _ \
        nsenter --net="/run/netns/$node" env NOTIFY_SOCKET="$work/notify.sock" "$@" \
        setpriv --bounding-set="-all,$caps" --inh-caps=-all "$bin" run >>"$work/agent.log" 2>&1 &
    agent_pid=$!
    for _ in $(seq 200); do
        grep -q READY=1 "$work/notify.log" && return 0
        kill -0 "$agent_pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
agent_kill9() { kill -9 "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=; kill "$listener_pid"; wait "$listener_pid" 2>/dev/null; listener_pid=; }
agent_stop() { kill -TERM "$agent_pid"; wait "$agent_pid"; local rc=$?; agent_pid=; kill "$listener_pid"; wait "$listener_pid" 2>/dev/null; listener_pid=; return $rc; }
counter() { # counter DIRECTION REASON: packets counted on node0
    status_json | jq -r --arg d "$1" --arg r "$2" \
        '[.counters[] | select(.device == "node0" and .direction == $d and .reason == $r) | .packets] | add // 0'
}
pings() { in_peer ping -q -c "${1:-3}" -i 0.1 -W 1 fd00:6e::2; }

# --- attach, READY, status ----------------------------------------------------
agent_start
pass_if "agent starts and tells READY=1" test $? = 0
pass_if "READY=1 came only after both links were pinned" grep -q 'READY=1 attached=yes' "$work/notify.log"
pass_if "status --json: running, healthy, generation 1" \
    test "$(jq_status '[.agent.running, .healthy, .agent.generation] | @tsv')" = "$(printf 'true\ttrue\t1')"
pass_if "status --json: node0 ingress and egress attached with tcx" \
    test "$(jq_status '[.links[] | select(.attached) | "\(.device)-\(.direction)-\(.program)"] | join(" ")')" \
    = "node0-ingress-v6n_from_dev node0-egress-v6n_to_dev"
# lo_passed DIRECTION: packets the self-test counted (test runs count under lo).
lo_passed() { status_json | jq -r --arg d "$1" '[.counters[] | select(.device == "lo" and .direction == $d and .reason == "pass") | .packets] | add // 0'; }
pass_if "self-test: both host programs, opened from their pins, passed its packet" \
    test "$(jq_status '[.selftest[] | select(.error == null) | "\(.device)-\(.direction)"] | join(" ")')" = "node0-ingress node0-egress"
pass_if "self-test: each program counted its packet (pass, on lo)" \
    bash -c "test $(lo_passed ingress) -ge 1 && test $(lo_passed egress) -ge 1"
pass_if "human status: self-test passed by 2 host program(s)" \
    bash -c "nsenter --net=/run/netns/$node $bin status | grep -q '^self-test: *passed by 2 host program(s)'"
pass_if "agent holds only the unit's capabilities ($caps)" \
    test "$(awk '/^CapBnd/ {print $2}' /proc/$agent_pid/status)" = "$(setpriv --bounding-set="-all,$caps" awk '/^CapBnd/ {print $2}' /proc/self/status)"
pass_if "bpftool prog show lists both programs by name" \
    bash -c "bpftool prog show | grep -q 'name v6n_from_dev' && bpftool prog show | grep -q 'name v6n_to_dev'"
# (Debian 12's bpftool predates tcx in "net show", so links are checked by id.)
links_in_bpftool() { # every link status reports is in bpftool link show, with its program
    local pairs link prog
    pairs=$(jq_status '.links[] | "\(.link_id) \(.program_id)"')
    [[ -n "$pairs" ]] || return 1
    while read -r link prog; do bpftool link show id "$link" | grep -q "prog $prog" || return 1; done <<<"$pairs"
}
pass_if "bpftool link show has both links with their programs" links_in_bpftool
pass_if "BIG TCP: node0 gso_max_size and gro_max_size 196608 in ip -d link" \
    bash -c "ip -n $node -d link show node0 | grep -q 'gso_max_size 196608' && ip -n $node -d link show node0 | grep -q 'gro_max_size 196608'"
pass_if "BIG TCP: status reports the IPv4 sizes too" \
    test "$(jq_status '.bigtcp[] | select(.device == "node0") | [.sizes.gso_ipv4_max_size, .sizes.gro_ipv4_max_size] | @tsv')" = "$(printf '196608\t196608')"
pass_if "human status names the device and the program" bash -c "nsenter --net=/run/netns/$node $bin status | grep -E '^  node0 +ingress +tcx +v6n_from_dev'"
pass_if "ping through the attached device" pings 5
pass_if "ingress pass counter counted the pings" test "$(counter ingress pass)" -ge 5

# A frame that says IPv6 but stops half way through the header: the stack
# would drop it too, but only tc sees it first (BPF_PROG_TEST_RUN refuses it).
send_runt() {
    nsenter --net="/run/netns/$peer" python3 -c '
import socket
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("peer0", 0))
for _ in range(3):
    s.send(bytes.fromhex("ffffffffffff020000000001" "86dd") + bytes([0x60]) + bytes(19))'
}
malformed_before=$(counter ingress malformed)
send_runt
pass_if "a truncated IPv6 header is dropped and counted as malformed" \
    test "$(counter ingress malformed)" = $((malformed_before + 3))

# --- SIGKILL under load, adoption ------------------------------------------------
links_before=$(jq_status '[.links[] | "\(.direction)=\(.link_id)"] | join(",")')
before=$(counter ingress pass)
in_peer ping -f -q -c 20000 fd00:6e::2 >"$work/flood.log" 2>&1 &
flood=$!
sleep 0.3
agent_kill9
wait "$flood"
pass_if "ping flood of 20000 across SIGKILL: 0% loss" grep -q ' 0% packet loss' "$work/flood.log"
pass_if "programs kept counting with no agent" test "$(counter ingress pass)" -ge $((before + 20000))
pass_if "status says the agent is not running (exit 3)" bash -c "nsenter --net=/run/netns/$node $bin status >/dev/null; test \$? = 3"
agent_start
pass_if "restarted agent is ready" test $? = 0
pass_if "it adopted both links instead of re-attaching" test "$(grep -c 'node0 .*: adopted' "$work/agent.log")" = 2
pass_if "link ids unchanged by the restart" test "$(jq_status '[.links[] | "\(.direction)=\(.link_id)"] | join(",")')" = "$links_before"

in_node iperf3 -s -1 -B fd00:6e::2 >/dev/null 2>&1 &
iperf_server=$!
wait_for "iperf3 server" bound "$node" tcp 5201
in_peer iperf3 -c fd00:6e::2 -t 4 -J >"$work/iperf.json" 2>&1 &
iperf_client=$!
sleep 1.5
agent_kill9
sleep 0.5
agent_start
wait "$iperf_client"
iperf_rc=$?
wait "$iperf_server" 2>/dev/null
pass_if "iperf3 stream across SIGKILL and restart completes" test "$iperf_rc" = 0
# (TCP retransmits say nothing here: veth streams on this kernel show tens of
# thousands without any BPF attached. The ping floods count losses exactly.)
pass_if "iperf3 stream never stalled: every second carried data" \
    test "$(jq '[.intervals[].sum.bytes | select(. == 0)] | length' "$work/iperf.json")/$(jq '.intervals | length' "$work/iperf.json")" = 0/4

# --- program replacement (upgrade) ------------------------------------------------
# A build of the same program with different code: what an agent upgrade
# brings. -mcpu=v3 changes the instructions, hence the tag.
"$top/dataplane/bpf/cc" "$top/dataplane/bpf/host.bpf.c" "$work/host-v3.bpf.o" -mcpu=v3
old_prog=$(jq_status '.links[] | select(.direction == "ingress") | .program_id')
in_peer ping -f -q -c 20000 fd00:6e::2 >"$work/flood.log" 2>&1 &
flood=$!
sleep 0.2
agent_kill9
agent_start V6NODE_DATAPLANE_HOST_OBJECT="$work/host-v3.bpf.o"
wait "$flood"
pass_if "a different program build is swapped in: replaced" test "$(grep -c 'node0 .*: replaced' "$work/agent.log")" = 2
pass_if "same links, new program" \
    test "$(jq_status '[.links[] | "\(.direction)=\(.link_id)"] | join(",")')/$(jq_status '.links[] | select(.direction == "ingress") | .program_id != '"$old_prog")" = "$links_before/true"
pass_if "ping flood across the replacement: 0% loss" grep -q ' 0% packet loss' "$work/flood.log"
agent_kill9
agent_start

# --- watchdog -----------------------------------------------------------------------
agent_kill9
agent_start WATCHDOG_USEC=200000
sleep 1
pass_if "with WatchdogSec=0.2s the agent pings the watchdog every 0.1 s" \
    test "$(grep -c 'WATCHDOG=1' "$work/notify.log")" -ge 6

# --- reload ------------------------------------------------------------------------
echo 'filter.deny_sources = ["fd00:6e::1/128", "2001:db8::/32"]' >"$root/etc/v6node/dataplane.d/50-deny.toml"
denied_before=$(counter ingress denied_source)
pass_if "reload with a deny prefix succeeds" in_node "$bin" reload
pass_if "generation 2 with 2 deny prefixes" test "$(jq_status '[.agent.generation, .deny_sources.entries] | @tsv')" = "$(printf '2\t2')"
pass_if "pings from the denied source are dropped" bash -c "! nsenter --net=/run/netns/$peer ping -q -c 3 -i 0.1 -W 1 fd00:6e::2"
pass_if "and counted as denied_source" test "$(counter ingress denied_source)" -ge $((denied_before + 3))
pass_if "systemd saw RELOADING=1 then READY=1" bash -c "grep -A3 RELOADING=1 $work/notify.log | grep -q READY=1"

snapshot() { status_json | jq -c '{g: .agent.generation, links: [.links[] | [.link_id, .program_id]], deny: .deny_sources.entries, big: [.bigtcp[] | .sizes]}'; }
good=$(snapshot)
printf '[bigtcp]\nsize = 600000\n' >"$root/etc/v6node/dataplane.d/60-broken.toml"
in_node "$bin" reload >"$work/reload.out" 2>&1
pass_if "reload of a broken config fails (exit 1)" test $? = 1
pass_if "the error names file, key and reason" \
    grep -q '60-broken.toml: bigtcp.size: 600000 is out of range' "$work/reload.out"
pass_if "nothing changed: generation, links, programs, table, sizes" test "$(snapshot)" = "$good"
pass_if "the denied source is still dropped" bash -c "! nsenter --net=/run/netns/$peer ping -q -c 2 -i 0.1 -W 1 fd00:6e::2"
pass_if "status shows the refused reload and exits 1" \
    bash -c "nsenter --net=/run/netns/$node $bin status > $work/status.txt; test \$? = 1 && grep -q 'REFUSED.*60-broken.toml: bigtcp.size' $work/status.txt"
pass_if "check-config names the same problem" \
    bash -c "nsenter --net=/run/netns/$node $bin check-config 2>&1 | grep -q '60-broken.toml: bigtcp.size'"
printf '[bigtcp]\nsize = 524280\n[metrics]\nlisten = "unix:%s"\n' "$work/metrics.sock" >"$root/etc/v6node/dataplane.d/60-broken.toml"
rm "$root/etc/v6node/dataplane.d/50-deny.toml"
pass_if "a fixed config reloads" in_node "$bin" reload
pass_if "the source is allowed again" pings 3
pass_if "BIG TCP raised to 524280 by the reload" bash -c "ip -n $node -d link show node0 | grep -q 'gso_max_size 524280'"
# A valid config that cuts the node off its link (link-local sources denied:
# no neighbour discovery): the self-test's packet is dropped, so status, and
# with it the boot health gate, says the dataplane is not healthy.
echo 'filter.deny_sources = ["fe80::/10"]' >"$root/etc/v6node/dataplane.d/50-deny.toml"
pass_if "reload denying fe80::/10 is applied (a valid config)" in_node "$bin" reload
pass_if "self-test fails for node0 ingress (its packet dropped, verdict 2): status exits 1" \
    bash -c "nsenter --net=/run/netns/$node $bin status >$work/status.txt; test \$? = 1 && grep -q '^self-test: *FAILED by 1 of 2' $work/status.txt && jq -e '.problems[] | select(test(\"self-test of node0 ingress: program [0-9]+ returned 2\"))' < <(nsenter --net=/run/netns/$node $bin status --json)"
rm "$root/etc/v6node/dataplane.d/50-deny.toml"
pass_if "without it the self-test passes again and status is healthy" \
    bash -c "nsenter --net=/run/netns/$node $bin reload && nsenter --net=/run/netns/$node $bin status >/dev/null"

# --- metrics, hotplug --------------------------------------------------------------
pass_if "metrics on the unix socket: packets_total for node0 ingress pass" \
    bash -c "curl -sf --unix-socket $work/metrics.sock http://node/metrics | grep -E '^v6node_dataplane_packets_total\{device=\"node0\",direction=\"ingress\",reason=\"pass\"\} [1-9]'"
printf '[metrics]\nlisten = "[::1]:9462"\n' >"$root/etc/v6node/dataplane.d/70-tcp.toml"
in_node "$bin" reload >/dev/null
pass_if "metrics over TCP on [::1]:9462 after a reload" \
    bash -c "nsenter --net=/run/netns/$node curl -sf 'http://[::1]:9462/metrics' | grep -q '^v6node_dataplane_config_generation '"
rm "$root/etc/v6node/dataplane.d/70-tcp.toml"
in_node "$bin" reload >/dev/null
pass_if "metrics: 404 off /metrics" bash -c "test \"\$(curl -s -o /dev/null -w '%{http_code}' --unix-socket $work/metrics.sock http://node/)\" = 404"
ip -n "$node" link add node1 type veth peer name other1
ip -n "$node" link set node1 up
sleep 1
pass_if "a new device matching attach.devices is attached within 1 s" \
    test "$(jq_status '[.links[] | select(.device == "node1" and .attached)] | length')" = 2
ip -n "$node" link del node1
sleep 1
pass_if "its pins go when the device goes" test ! -e "$V6NODE_PIN_DIR/links/node1-ingress"

# --- stop, detach -------------------------------------------------------------------
link_ids=$(jq_status '[.links[].link_id] | join(" ")')
# The agent's own programs, by id: other tests' programs of the same name may
# still be loaded on this host.
prog_ids=$(for l in $link_ids; do bpftool -j link show id "$l" | jq -r .prog_id; done | sort -u)
pass_if "detach refuses while the agent runs" bash -c "! nsenter --net=/run/netns/$node $bin detach"
agent_stop
pass_if "SIGTERM stops the agent cleanly" test $? = 0
pass_if "stopping left the links in place" bash -c "for l in $link_ids; do bpftool link show id \$l >/dev/null || exit 1; done"
pass_if "detach succeeds" in_node "$bin" detach
pass_if "detach left no pin" test ! -e "$V6NODE_PIN_DIR"
pass_if "detach left none of the links" bash -c "for l in $link_ids; do ! bpftool link show id \$l >/dev/null 2>&1 || exit 1; done"
# Programs are freed after an RCU grace period, later on a loaded machine.
no_programs() {
    local id
    [[ -n $prog_ids ]] || { echo "# no program ids were recorded"; return 1; }
    for _ in $(seq 100); do
        for id in $prog_ids; do bpftool prog show id "$id" >/dev/null 2>&1 && { sleep 0.1; continue 2; }; done
        return 0
    done
    echo "# still loaded: $(for id in $prog_ids; do bpftool prog show id "$id" 2>/dev/null | head -1; done)"
    return 1
}
pass_if "detach left no v6node program loaded" no_programs
pass_if "traffic flows without v6node" pings 3

# --- clsact mode -------------------------------------------------------------------
rm -f "$root/etc/v6node/dataplane.d/"*
printf '[attach]\nmode = "clsact"\n' >"$root/etc/v6node/dataplane.d/10-clsact.toml"
agent_start
pass_if "clsact mode: agent ready" test $? = 0
pass_if "clsact mode: cls_bpf filter on node0 ingress" bash -c "tc -n $node filter show dev node0 ingress | grep -q v6n_from_dev"
pass_if "clsact mode: counts" bash -c "nsenter --net=/run/netns/$peer ping -q -c 3 -i 0.1 -W 1 fd00:6e::2 >/dev/null && test \$(jq -r '[.counters[] | select(.device == \"node0\" and .direction == \"ingress\") | .packets] | add' < <(nsenter --net=/run/netns/$node $bin status --json)) -ge 3"
agent_kill9
agent_start
pass_if "clsact mode: restarted agent is ready" test $? = 0
pass_if "clsact mode: the restart swapped the program into our filter" \
    test "$(grep -c 'node0 .*: replaced (Clsact)' "$work/agent.log")" = 2
pass_if "clsact mode: one filter per direction after the restart" \
    test "$(tc -n "$node" filter show dev node0 ingress | grep -c v6n_from_dev)" = 1
agent_stop
pass_if "clsact mode: detach removes the filters" \
    bash -c "nsenter --net=/run/netns/$node $bin detach >/dev/null && ! tc -n $node filter show dev node0 ingress | grep -q v6n_"

# --- bad config at start --------------------------------------------------------------
printf '[attach]\ndevices = ["node0", "node0"]\n' >"$root/etc/v6node/dataplane.d/10-clsact.toml"
in_node "$bin" run >"$work/bad-start.log" 2>&1
start_rc=$?
pass_if "an invalid config stops the agent at start, naming file and key" \
    bash -c "test $start_rc != 0 && grep -q '10-clsact.toml: attach.devices\[1\]: duplicate' $work/bad-start.log"

tap_done
