# SPDX-License-Identifier: Apache-2.0
# Sourced by the namespace tests that run the dataplane agent (not a test:
# tests/run runs *.sh). Sets:
#   bin   the agent binary: V6NODE_DATAPLANE, else the release build
#   caps  its unit's CapabilityBoundingSet= as a setpriv list (+bpf,...), so
#         the tests run the agent with exactly the capabilities it ships with
# end_connections_listen does what v6node-end-connections.socket does.
bin=${V6NODE_DATAPLANE:-$top/dataplane/target/release/v6node-dataplane}
[[ -x "$bin" ]] || { echo "Bail out! no agent binary at $bin (scripts/build-dataplane)"; exit 1; }
# unit_caps UNIT: its CapabilityBoundingSet= as a setpriv list.
unit_caps() {
    local list
    list=$(sed -n 's/^CapabilityBoundingSet=//p' "$top/units/$1" | tr ' ' '\n' | sed 's/^CAP_/+/' | tr 'A-Z' 'a-z' | paste -sd,)
    [[ -n "$list" ]] || { echo "Bail out! no CapabilityBoundingSet= in units/$1"; exit 1; }
    echo "$list"
}
caps=$(unit_caps v6node-dataplane.service) || exit 1

# For tests with one agent in namespace $node, logging to $work/agent.log:
in_node() { nsenter --net="/run/netns/$node" "$@"; }
# agent_start: the agent with its unit's capabilities; returns once status answers.
agent_start() {
    bash -c 'exec "$@"' _ nsenter --net="/run/netns/$node" \
        setpriv --bounding-set="-all,$caps" --inh-caps=-all "$bin" run >>"$work/agent.log" 2>&1 &
    agent_pid=$!
    retry 20 in_node "$bin" status --json >/dev/null 2>&1
}
agent_stop() { kill -TERM "$agent_pid"; wait "$agent_pid"; agent_pid=; }
status_json() { in_node "$bin" status --json; }
jq_status() { status_json | jq -r "$@"; }
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
