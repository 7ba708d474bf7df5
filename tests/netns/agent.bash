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
