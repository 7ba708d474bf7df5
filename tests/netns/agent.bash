# SPDX-License-Identifier: Apache-2.0
# Sourced by the namespace tests that run the dataplane agent (not a test:
# tests/run runs *.sh). Sets:
#   bin   the agent binary: V6NODE_DATAPLANE, else the release build
#   caps  its unit's CapabilityBoundingSet= as a setpriv list (+bpf,...), so
#         the tests run the agent with exactly the capabilities it ships with
bin=${V6NODE_DATAPLANE:-$top/dataplane/target/release/v6node-dataplane}
[[ -x "$bin" ]] || { echo "Bail out! no agent binary at $bin (scripts/build-dataplane)"; exit 1; }
caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$top/units/v6node-dataplane.service" |
    tr ' ' '\n' | sed 's/^CAP_/+/' | tr 'A-Z' 'a-z' | paste -sd,)
[[ -n "$caps" ]] || { echo "Bail out! no CapabilityBoundingSet= in units/v6node-dataplane.service"; exit 1; }

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
