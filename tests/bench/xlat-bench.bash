# SPDX-License-Identifier: Apache-2.0
# Sourced by the translator benchmarks with a client, a gateway and a server
# namespace (tests/bench/nat64-stateful, tests/bench/nat46-gateway); not a
# benchmark itself. Expects: client_ns, server_ns, gw (namespaces), work,
# bin, secs, reps, V6NODE_PIN_DIR, V6NODE_STATE_DIR, and tests/netns/lib.bash.
# Sets result[MODE,tx|rx|pps|cps] (medians) through `measure`.
stop() { kill "${!1}"; wait "${!1}" 2>/dev/null || true; printf -v "$1" ''; }
iperf() {
    local target=$1 out
    shift
    out=$(at "$client_ns" iperf3 -c "$target" -t "$secs" -J "$@") ||
        die "iperf3 -c $target $*: $(jq -r '.error // empty' <<<"$out" 2>/dev/null)"
    echo "$out"
}
declare -A result
# measure MODE TARGET SERVER_ADDRESS [cps-only]
measure() {
    local mode=$1 target=$2 bind=$3 tx=() rx=() pps=() cps=() failed
    nsenter --net="/run/netns/$server_ns" iperf3 -s -B "$bind" >"$work/iperf3-server.log" 2>&1 &
    server=$!
    nsenter --net="/run/netns/$server_ns" "$work/connrate" server "$bind" 7100 &
    connserver=$!
    wait_for "iperf3 server" bound "$server_ns" tcp 5201
    wait_for "connrate server" bound "$server_ns" tcp 7100
    at "$client_ns" ping -c1 -W2 "$target" >/dev/null || die "$mode: no reply from $target to a ping"
    for _ in $(seq "$reps"); do
        if [[ -z "${4:-}" ]]; then
            tx+=("$(iperf "$target" | jq '.end.sum_received.bits_per_second / 1e9')")
            rx+=("$(iperf "$target" -R | jq '.end.sum_received.bits_per_second / 1e9')")
            pps+=("$(iperf "$target" -u -l 64 -b 0 | jq '.end.sum_received | (.packets - .lost_packets) / .seconds / 1e3')")
        fi
        read -r rate failed < <(at "$client_ns" "$work/connrate" client "$target" 7100 "$secs" 4)
        ((failed * 100 <= rate * secs)) || die "$mode: $failed of the connections failed"
        cps+=("$rate")
    done
    for k in tx rx pps cps; do
        local -n values=$k
        ((${#values[@]})) && result[$mode,$k]=$(printf '%s\n' "${values[@]}" | median) || result[$mode,$k]=
    done
    stop server
    stop connserver
    log "$mode: tcp ${result[$mode,tx]} / ${result[$mode,rx]} Gbit/s, udp ${result[$mode,pps]} kpps, ${result[$mode,cps]} connections/s"
}

agent_run() { # config text
    mkdir -p "$work/root/usr/lib/v6node" "$work/state"
    echo "$1" >"$work/root/usr/lib/v6node/dataplane.toml"
    nsenter --net="/run/netns/$gw" env V6NODE_PIN_DIR="$V6NODE_PIN_DIR" V6NODE_STATE_DIR="$V6NODE_STATE_DIR" \
        V6NODE_CONFIG_ROOT="$V6NODE_CONFIG_ROOT" "$bin" run >>"$work/agent.log" 2>&1 &
    agent=$!
    rm -f "$V6NODE_STATE_DIR/dataplane.json"
    wait_for "READY from the agent" ready
}
ready() {
    kill -0 "$agent" 2>/dev/null || die "agent exited; see $work/agent.log"
    [[ -n "$(jq -r '.ready_after_ms // empty' "$V6NODE_STATE_DIR/dataplane.json" 2>/dev/null)" ]]
}
agent_gone() {
    stop agent
    at "$gw" "$bin" detach --force >/dev/null
    rm -rf "$V6NODE_PIN_DIR"
}

# Report cells: a figure (– when missing; ratio, tests/netns/lib.bash, gives - for a ratio).
fmt() { [[ -n "$1" ]] && awk -v v="$1" 'BEGIN {printf "%.2f", v}' || printf '–'; }
