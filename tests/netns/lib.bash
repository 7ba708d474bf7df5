# SPDX-License-Identifier: Apache-2.0
# The library of the namespace tests (tests/netns/*.sh), the benchmarks
# (tests/bench) and the host side of the boot tests' networks (tests/image);
# not a test itself (tests/run runs tests/netns/*.sh). Sourcing it brings
# scripts/lib.sh (log, die, V6NODE_TOP) and the TAP helpers of tests/lib.sh
# (pass_if, retry, tap_done), and sets top, the checkout. A test starts with
#
#   set -uo pipefail
#   here=$(cd "$(dirname "$0")" && pwd)
#   . "$here/lib.bash"
#   use_agent       (a test that runs the agent)
#   sandbox v6x     (id, work, the agent's environment, bpffs, the exit trap)
#   namespaces "$id-a" "$id-b"
#   veth "$id-a eth0 fd00:6e::1/64" "$id-b eth0 fd00:6e::2/64"
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
top=$V6NODE_TOP
# Sourced again (by tests/image/nat64-gateway.bash) into a script that has
# counted checks already, tests/lib.sh would start the count over.
declare -F tap_done >/dev/null || . "$top/tests/lib.sh"

# at NETNS COMMAND...: COMMAND in the network namespace NETNS. nsenter, not
# "ip netns exec", which remounts /sys and would hide the host's bpffs, where
# the pins live (ip netns exec where a namespace's own /etc/resolv.conf is
# wanted). Not for what runs in the background: $! would be this function's
# subshell, and killing that leaves its child running; there, nsenter
# --net=/run/netns/NETNS itself, which execs the command.
at() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

# bpffs: the BPF file system on /sys/fs/bpf, where the agent pins, which a
# fresh container or a minimal host may lack.
bpffs() { mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf; }

# median: the median of the numbers on stdin, one per line (the benchmarks'
# figure of several runs).
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# per_second SECONDS COUNT...: each COUNT over SECONDS, whole, on one line.
per_second() { awk -v t="$1" 'BEGIN { for (i = 2; i < ARGC; i++) printf "%d%s", ARGV[i] / t, (i < ARGC - 1 ? " " : "\n") }' "$@"; }
# ratio A B: A over B to two places, "-" without A or B.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else printf "-" }'; }
# ratio_of_rounds: of "A B" lines on stdin, one per round, the median of
# A over B with the rounds' lowest and highest: "2.50 (2.41-2.62)".
ratio_of_rounds() {
    local a b ratios
    ratios=$(while read -r a b; do echo "$(ratio "$a" "$b")"; done | sort -n)
    echo "$(median <<<"$ratios" | awk '{ printf "%.2f", $1 }') ($(head -1 <<<"$ratios")-$(tail -1 <<<"$ratios"))"
}
# in_rounds N "MODES" COMMAND [ARG...]: COMMAND ARG... MODE ROUND for each
# mode in each of N rounds, the modes' order turned every round (a b c,
# c b a, ...): a benchmark's modes measured close together in time, as the
# host's speed drifts within a run.
in_rounds() {
    local n=$1 round mode
    local -a order
    read -r -a order <<<"$2"
    shift 2
    for round in $(seq "$n"); do
        for mode in "${order[@]}"; do "$@" "$mode" "$round"; done
        mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    done
}

# --- the exit trap ---------------------------------------------------------------
# What runs in the background is killed, then the script's own `cleanup`
# runs if it defines one (detaching the agent, stopping a control plane,
# showing a log), then the namespaces in cleanup_netns are deleted and the
# paths in cleanup_paths removed. -g: sourced inside a function too; declared,
# not assigned, so that a second sourcing forgets nothing.
declare -ga cleanup_netns cleanup_paths
# Set by the benchmarks: $work stays when the script fails, for its logs.
keep_failed_work=${keep_failed_work:-}
cleanup_trap() {
    trap cleanup_exit EXIT
    # Untrapped, these end the shell without its EXIT trap.
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
cleanup_exit() {
    local rc=$? pids pid ns path
    # All of it, whatever fails on the way and whatever the script had not set yet.
    set +eu
    # SIGKILL: a hung agent must not hang the exit. Disowned first, or bash
    # would report each as "Killed"; so waited for by polling (10 s at most each).
    pids=$(jobs -pr)
    disown -a
    [[ -z "$pids" ]] || kill -9 $pids 2>/dev/null
    for pid in $pids; do
        for _ in $(seq 500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
    done
    ! declare -F cleanup >/dev/null || cleanup
    for ns in "${cleanup_netns[@]}"; do ip netns del "$ns" 2>/dev/null; done
    for path in "${cleanup_paths[@]}"; do
        if ((rc)) && [[ -n "$keep_failed_work" && "$path" == "$work" ]]; then
            log "logs kept in $work"
        else
            rm -rf "$path"
        fi
    done
}

# sandbox PREFIX: id is PREFIX and this shell's pid, so that tests running
# side by side name different namespaces, pins and cgroups; work, a fresh
# directory, and root, the agent's configuration root in it; the agent's
# pins, state and configuration (V6NODE_*) there; the bpffs; and the exit
# trap, which removes the pins and work.
sandbox() {
    id=$1$$
    work=$(mktemp -d)
    root=$work/root
    export V6NODE_PIN_DIR=/sys/fs/bpf/$id V6NODE_STATE_DIR=$work/state V6NODE_CONFIG_ROOT=$root
    cleanup_paths+=("$V6NODE_PIN_DIR" "$work")
    cleanup_trap
    bpffs
}

# --- namespaces and wires ----------------------------------------------------------
# namespaces [--dad] NAME...: fresh network namespaces with loopback up,
# deleted at exit. Duplicate address detection goes off before any link
# exists, so that every link inherits that, and addresses (link-local ones
# too, which neighbour discovery uses) are usable at once; --dad leaves it on
# where what is tested must cope with it, as on a real node.
namespaces() {
    local dad='' ns
    [[ "$1" != --dad ]] || { dad=1; shift; }
    for ns in "$@"; do
        ip netns add "$ns" || return
        cleanup_netns+=("$ns")
        [[ -n "$dad" ]] || at "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
        ip -n "$ns" link set lo up
    done
}

# veth "NS DEVICE [ADDRESS/LEN...]" "NS DEVICE [ADDRESS/LEN...]": a veth pair
# between two namespaces, both ends up with their addresses. IPv6 ones
# without duplicate address detection even where the namespace has it, so
# that a check never races it; ip warns at the flag on IPv4 ones.
veth() {
    local near far
    read -ra near <<<"$1"
    read -ra far <<<"$2"
    ip -n "${near[0]}" link add name "${near[1]}" type veth peer name "${far[1]}" netns "${far[0]}" || return
    veth_end "${near[@]}"
    veth_end "${far[@]}"
}
veth_end() { # veth_end NS DEVICE ADDRESS/LEN...
    local ns=$1 dev=$2 address nodad
    for address in "${@:3}"; do
        nodad=()
        [[ "$address" != *:* ]] || nodad=(nodad)
        ip -n "$ns" address add "$address" dev "$dev" "${nodad[@]}"
    done
    ip -n "$ns" link set "$dev" up
}

# --- servers in the background ------------------------------------------------------
# bound NETNS tcp|udp PORT: a socket in the network namespace is bound to PORT
# (a server started in the background is there only then).
bound() {
    local kind=t
    [[ $2 == udp ]] && kind=u
    [[ -n "$(at "$1" ss -Hnl$kind "sport = :$3")" ]]
}

# wait_for WHAT COMMAND...: until the command succeeds, for up to 10 s, or die
# naming WHAT (and $work, where a benchmark keeps its logs).
wait_for() {
    local what=$1
    shift
    for _ in $(seq 200); do "$@" && return 0; sleep 0.05; done
    die "no $what after 10 s${work:+; logs in $work}"
}

# need TOOL...: a test bails out (TAP) without any of them.
need() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "Bail out! $tool missing (scripts/setup-host)"; exit 1; }
    done
}

# --- the agent ----------------------------------------------------------------------
# use_agent: for the tests that run the agent. Sets
#   bin   the agent binary: V6NODE_DATAPLANE, else the release build
#   caps  its unit's CapabilityBoundingSet= as a setpriv list (+bpf,...), so
#         that the tests run the agent with exactly the capabilities it ships with
use_agent() {
    bin=${V6NODE_DATAPLANE:-$top/dataplane/target/release/v6node-dataplane}
    [[ -x "$bin" ]] || { echo "Bail out! no agent binary at $bin (scripts/build-dataplane)"; exit 1; }
    caps=$(unit_caps v6node-dataplane.service) || exit 1
}
# unit_caps UNIT: its CapabilityBoundingSet= as a setpriv list.
unit_caps() {
    local list
    list=$(sed -n 's/^CapabilityBoundingSet=//p' "$top/units/$1" | tr ' ' '\n' | sed 's/^CAP_/+/' | tr 'A-Z' 'a-z' | paste -sd,)
    [[ -n "$list" ]] || { echo "Bail out! no CapabilityBoundingSet= in units/$1"; exit 1; }
    echo "$list"
}

# For tests with one agent in namespace $node, logging to $work/agent.log:
in_node() { at "$node" "$@"; }
# agent_start: the agent with its unit's capabilities; returns once it is
# ready (what systemd waits for: READY=1 comes after the last table is
# written). Status answers earlier, from the first attachment on: a packet
# sent then may meet programs whose tables are still being filled.
agent_start() {
    bash -c 'exec "$@"' _ nsenter --net="/run/netns/$node" \
        setpriv --bounding-set="-all,$caps" --inh-caps=-all "$bin" run >>"$work/agent.log" 2>&1 &
    agent_pid=$!
    retry 20 agent_ready
}
# agent_ready: the agent started last ($agent_pid) is ready.
agent_ready() { [[ "$(jq_status '"\(.agent.pid) \(.agent.ready_after_ms != null)"' 2>/dev/null)" == "$agent_pid true" ]]; }
agent_stop() { kill -TERM "$agent_pid"; wait "$agent_pid"; agent_pid=; }
status_json() { in_node "$bin" status --json; }
jq_status() { status_json | jq -r "$@"; }
# --- flows, as the stock hubble CLI sees them ---------------------------------------
# use_hubble: builds it (scripts/build-hubble); the agent's [flows] hubble
# is to be "unix:$work/hubble.sock".
use_hubble() {
    echo "# building the stock hubble CLI (scripts/build-hubble; warm Go caches: seconds)"
    "$top/scripts/build-hubble" >"$work/hubble-build.log" 2>&1 ||
        { tail -n 20 "$work/hubble-build.log" | sed 's/^/# /'; echo "Bail out! hubble build failed"; exit 1; }
}
hubble() { "$top/build/hubble/bin/hubble" "$@" --server "unix://$work/hubble.sock"; }
# observe ARGS...: the agent's recent flows, as `hubble observe ARGS` gives them, one JSON object a line.
observe() { hubble observe -o json --last 1000 "$@"; }
# observed JQ ARGS...: some flow of `observe ARGS` holds JQ.
observed() {
    local query=$1 out
    shift
    out=$(observe "$@" 2>&1) || { echo "# hubble observe $*: $out"; return 1; }
    jq -e -s "any(.[]; .flow | $query)" <<<"$out" >/dev/null ||
        { echo "# hubble observe $*: no flow with $query among $(wc -l <<<"$out") line(s): $(tail -n 2 <<<"$out")"; return 1; }
}

# end_connections_listen: `end-connections` per connection on the agent's
# end-connections.sock, with its unit's capabilities, as
# v6node-end-connections.socket (Accept=yes) starts it; logs to
# $work/end-connections.log.
end_connections_listen() {
    local end_caps
    end_caps=$(unit_caps v6node-end-connections@.service) || exit 1
    mkdir -p "$V6NODE_STATE_DIR"
    nsenter --net="/run/netns/$node" systemd-socket-activate --accept --inetd \
        -l "$V6NODE_STATE_DIR/end-connections.sock" -E V6NODE_PIN_DIR="$V6NODE_PIN_DIR" \
        setpriv --bounding-set="-all,$end_caps" --inh-caps=-all "$bin" end-connections >>"$work/end-connections.log" 2>&1 &
    retry 10 test -S "$V6NODE_STATE_DIR/end-connections.sock"
}
