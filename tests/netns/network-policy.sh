#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# NetworkPolicy enforced by the agent's BPF at pods made by v6node-cni, the
# agent following a real API server (tests/e2e/control-plane.bash) with the
# credential the image ships (read-only, plus Events):
#
#   cp (fd00:9::1: API server) --wire-- node-a (fd00:9::a, the agent)
#                                         |-- web    default   role=web  HTTP :8080 (named http), :8081, UDP :5353
#                                         |-- client default   role=client
#                                         `-- other  team-b    role=client
#
# Pods are made by v6node-cni as containerd would, and as Pod objects with
# the address the plugin gave them (no kubelet runs). What the policies do is
# read off connections (TCP connect, HTTP, UDP answers), status --json,
# counters and Events.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/network-policy.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent

sandbox v6np
gw_ns=$id-cp node=$id-a
gateway_pod_prefix=fd00:10:244::/56
pods=(web client other)
declare -A pod_ns=([web]=default [client]=default [other]=team-b)
declare -A pod_role=([web]=web [client]=client [other]=client)
declare -A pod_ip
. "$top/tests/e2e/control-plane.bash"
export V6NODE_CNI_CONF_DIR=$work/cni
cni_bin=$(dirname "$bin")/v6node-cni
agent_pid=
cleanup_netns+=("$node" "$gw_ns" "${pods[@]/#/$id-}")
cleanup() {
    ((tap_failed == 0)) || tail -n 40 "$work/agent.log" | sed 's/^/# agent: /'
    control_plane_down
    in_node "$bin" detach --force >/dev/null 2>&1
}
[[ -x "$cni_bin" ]] || { echo "Bail out! no v6node-cni beside the agent"; exit 1; }
echo "# building the test control plane (warm Go caches: seconds)"
"$top/scripts/build-kubernetes" --control-plane >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log" | sed 's/^/# /'; echo "Bail out! control plane build failed"; exit 1; }

control_plane_wire "$node" "${pods[@]/#/$id-}"
wire_node "$node" fd00:9::a
ip -n "$gw_ns" route add fd00:10:244:a::/64 via fd00:9::a
control_plane_up "$work/cp" >"$work/cp.log" 2>&1 || { cat "$work/cp.log"; echo "Bail out! control plane did not start"; exit 1; }
cp "$work/cp/etc/pki/ca.crt" "$work/ca.crt"
dataplane_identity >"$work/token" || { echo "Bail out! no token for the dataplane's ServiceAccount"; exit 1; }
dataplane_kubeconfig "$work/ca.crt" "$work/token" >"$work/dataplane.conf"
make_node node-a fd00:9::a fd00:10:244:a::/64
kc create namespace team-b >/dev/null

mkdir -p "$root/usr/lib/v6node" "$work/state"
config() { # config MODE: the agent's configuration, policy.mode MODE
    cat >"$root/usr/lib/v6node/dataplane.toml" <<EOF
[services]
cgroup = ""
[attach]
devices = []
[bigtcp]
devices = []
[kubernetes]
kubeconfig = "$work/dataplane.conf"
node_name = "node-a"
[policy]
mode = "$1"
[nat64]
# Not a /96: an IPv4 ipBlock cannot be placed under it (a problem of the policy's).
prefix = "64:ff9b:1::/64"
EOF
}
config enforce
agent_start
retry 30 test -e "$work/cni/10-v6node.conflist" || { echo "Bail out! the agent wrote no CNI configuration"; exit 1; }

# pod_yaml POD [HTTP_PORT]: the Pod object, its container port "http" at HTTP_PORT (8080).
pod_yaml() {
    cat <<EOF
apiVersion: v1
kind: Pod
metadata: { name: $1, namespace: ${pod_ns[$1]}, labels: { role: ${pod_role[$1]} } }
spec: { nodeName: node-a, containers: [{ name: main, image: none, ports: [{ name: http, containerPort: ${2:-8080} }] }] }
EOF
}
pod_running() { # pod_running POD: its status as kubelet would report it
    kc -n "${pod_ns[$1]}" patch pod "$1" --subresource=status --type=merge \
        -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"${pod_ip[$1]}\",\"podIPs\":[{\"ip\":\"${pod_ip[$1]}\"}]}}" >/dev/null
}
for pod in "${pods[@]}"; do
    pod_yaml "$pod" | kc apply -f - >/dev/null
    jq -c --arg data "$work/ipam" '.plugins[0] + {cniVersion, name, dataDir: $data}' "$work/cni/10-v6node.conflist" |
        in_node env -i PATH="$PATH" CNI_COMMAND=ADD CNI_CONTAINERID="ctr-$pod" CNI_NETNS="/run/netns/$id-$pod" CNI_IFNAME=eth0 \
            CNI_ARGS="K8S_POD_NAMESPACE=${pod_ns[$pod]};K8S_POD_NAME=$pod" "$cni_bin" >"$work/$pod.json" ||
        { cat "$work/$pod.json"; echo "Bail out! v6node-cni ADD $pod failed"; exit 1; }
    pod_ip[$pod]=$(jq -r '.ips[0].address | sub("/128$"; "")' "$work/$pod.json")
    pod_running "$pod"
done
web=${pod_ip[web]}

# The web pod answers HTTP on 8080 and 8081 and UDP on 5353.
cat >"$work/web.py" <<'PY'
import http.server, socket, threading
def udp():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind(("::", 5353))
    while True:
        data, peer = s.recvfrom(512)
        s.sendto(b"web " + data, peer)
threading.Thread(target=udp, daemon=True).start()
class Web(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"web\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
for port in (8081, 8080):
    threading.Thread(target=Server(("::", port), Web).serve_forever, daemon=True).start()
threading.Event().wait()
PY
ip netns exec "$id-web" python3 "$work/web.py" &
retry 10 bound "$id-web" tcp 8080 && retry 10 bound "$id-web" tcp 8081 || { echo "Bail out! the web pod did not start"; exit 1; }
# A client's connections: "tcp PORT" connects (a denied SYN is dropped, so
# a short timeout), "udp" asks 5353 once.
cat >"$work/ask.py" <<'PY'
import socket, sys
addr, what = sys.argv[1], sys.argv[2]
if what == "udp":
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.settimeout(0.5)
    s.sendto(b"query", (addr, 5353))
    print(s.recvfrom(512)[0].decode())
else:
    socket.create_connection((addr, int(sys.argv[3])), timeout=0.5).close()
    print("connected")
PY
can() { ip netns exec "$id-$1" python3 "$work/ask.py" "$web" "${@:2}" >/dev/null 2>&1; }
cannot() { ! can "$@"; }
from_node_can() { in_node python3 "$work/ask.py" "$web" tcp 8080 >/dev/null 2>&1; }
# policy NAME NAMESPACE SPEC: a NetworkPolicy (SPEC in YAML's flow style).
policy() {
    printf 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: { name: %s, namespace: %s }\nspec: %s\n' "$1" "$2" "$3" |
        kc apply -f - >/dev/null
}
web_ingress() { jq_status --arg w "$web" '.policy.pods[]? | select(.address == $w) | .ingress.policies // [] | join(",")'; }
counted() { jq_status --arg r "$1" '[.counters[] | select(.reason == $r) | .packets] | add // 0'; }

both_ways_in() { can "$1" tcp "${2:-8080}" && can "$1" udp; }
isolated_pods() { [[ $(jq_status 'if .policy == null then "no policy state" else (.policy.pods | length) end') == "$1" ]]; }
pass_if "no policy: client -> web over TCP 8080 and UDP 5353" both_ways_in client
pass_if "the agent has written its policy state, no pod isolated" retry 10 isolated_pods 0

policy deny-web default '{ podSelector: { matchLabels: { role: web } }, policyTypes: [Ingress] }'
denied_before=$(counted policy_denied_ingress)
pass_if "default deny (ingress, no rule) on web: the client's new TCP connections are dropped, within 2 s" retry 2 cannot client tcp 8080
isolated_by() { [[ $(web_ingress) == "$1" ]]; }
web_denied() { jq_status --arg w "$web" '.policy as $p | $p.pods[] | select(.address == $w) | .ingress | .denied_before + ($p.denied[.id | tostring] // 0)'; }
denied_counted() { (($(counted policy_denied_ingress) > denied_before && $(web_denied) > 0)); }
pass_if "status lists web isolated for ingress by default/deny-web" retry 5 isolated_by default/deny-web
pass_if "the drops are counted as policy_denied_ingress, and against web's rules" denied_counted
pass_if "with default deny: the node itself (kubelet's probes) still reaches web" from_node_can

policy allow-client default '{ podSelector: { matchLabels: { role: web } }, ingress: [{ from: [{ podSelector: { matchLabels: { role: client } } }], ports: [{ protocol: TCP, port: http }] }] }'
pass_if "allow from role=client in web's namespace on the named port http (8080): TCP 8080 passes" retry 2 can client tcp 8080
only_http() { cannot client tcp 8081 && cannot client udp; }
pass_if "... and nothing else: TCP 8081 and UDP 5353 are dropped" only_http
pass_if "... nor role=client in another namespace (team-b)" cannot other tcp 8080

# The named port follows the pod: web made again with http at 8081.
kc delete pod web --grace-period=0 --force >/dev/null 2>&1
pod_yaml web 8081 | kc apply -f - >/dev/null
pod_running web
http_moved() { can client tcp 8081 && cannot client tcp 8080; }
pass_if "web's container port http moves to 8081: the same policy now lets 8081 in and drops 8080" retry 3 http_moved

policy allow-team default '{ podSelector: { matchLabels: { role: web } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: b } }, podSelector: { matchLabels: { role: client } } }] }] }'
pass_if "namespaceSelector team=b AND podSelector role=client: not before team-b has the label" cannot other tcp 8080
kc label namespace team-b team=b >/dev/null
pass_if "the namespace labelled team=b: other (team-b) reaches web on any port" retry 2 can other tcp 8080
kc label pod other -n team-b role=guest --overwrite >/dev/null
pass_if "other's label changed to role=guest: dropped again" retry 2 cannot other tcp 8080
kc label pod other -n team-b role=client --overwrite >/dev/null
pass_if "and back to role=client: in again" retry 2 can other tcp 8080

# ipBlock: the control plane's namespace (fd00:9::1) as a client from outside the pods.
from_cp_can() { ip netns exec "$gw_ns" python3 "$work/ask.py" "$web" tcp 8080 >/dev/null 2>&1; }
from_cp_cannot() { ! from_cp_can; }
pass_if "fd00:9::1 (no rule names it) cannot reach web" from_cp_cannot
policy allow-wire default '{ podSelector: { matchLabels: { role: web } }, ingress: [{ from: [{ ipBlock: { cidr: "fd00:9::/64", except: ["fd00:9::1/128"] } }] }] }'
sleep 1
pass_if "ipBlock fd00:9::/64 except fd00:9::1/128: fd00:9::1 still cannot" from_cp_cannot
policy allow-wire default '{ podSelector: { matchLabels: { role: web } }, ingress: [{ from: [{ ipBlock: { cidr: "fd00:9::/64" } }] }] }'
pass_if "the except removed: fd00:9::1 reaches web" retry 2 from_cp_can

# Egress: the client isolated with no rule; its node still reaches it.
policy client-out default '{ podSelector: { matchLabels: { role: client } }, policyTypes: [Egress] }'
egress_counted_before=$(counted policy_denied_egress)
egress_denied() { cannot client tcp 8081 && (($(counted policy_denied_egress) > egress_counted_before)); }
pass_if "egress default deny on role=client: the client's new connections are dropped, counted as policy_denied_egress" \
    retry 2 egress_denied
ip netns exec "$id-client" python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::", 9000)); s.listen(); s.accept()' &
listener=$!
retry 5 bound "$id-client" tcp 9000
node_reaches_client() { in_node python3 -c "import socket; socket.create_connection(('${pod_ip[client]}', 9000), timeout=1).close()"; }
pass_if "... while the node still reaches the client (a pod's own node always may)" node_reaches_client
kill "$listener" 2>/dev/null
kc delete networkpolicy client-out >/dev/null

# Policies replaced under a request loop: every request is allowed by the
# policies in force before and after each change, so none may fail.
cat >"$work/loop.py" <<'PY'
import os, socket, sys, time
addr, stop = sys.argv[1], sys.argv[2]
ok = failed = 0
while not os.path.exists(stop):
    try:
        socket.create_connection((addr, 8081), timeout=1).close()
        ok += 1
    except OSError:
        failed += 1
    time.sleep(0.01)
print(ok, failed)
PY
ip netns exec "$id-client" python3 "$work/loop.py" "$web" "$work/stop" >"$work/loop.out" &
loop=$!
for i in $(seq 10); do
    policy "extra-$((i % 2))" default '{ podSelector: { matchLabels: { role: web } }, ingress: [{ from: [{ podSelector: { matchLabels: { role: client } } }], ports: [{ protocol: TCP, port: 8081 }] }] }'
    sleep 0.2
    kc delete networkpolicy "extra-$(((i + 1) % 2))" --ignore-not-found >/dev/null
    sleep 0.2
done
touch "$work/stop"
wait "$loop"
read -r loop_ok loop_failed <"$work/loop.out"
loop_clean() { echo "$loop_ok requests, $loop_failed failed"; ((loop_ok > 50 && loop_failed == 0)); }
pass_if "20 policy changes (web's rules rewritten under a new id each time) under a request loop: $loop_ok requests, none failed" loop_clean

# Bad input the API server takes but this node cannot enforce as written:
# named, the block matching nothing, the rest enforced. (Host bits, excepts
# outside their block and unknown operators the API server refuses itself.)
policy ipv4-block default '{ podSelector: { matchLabels: { role: web } }, ingress: [{ from: [{ ipBlock: { cidr: "198.51.100.0/24" } }] }] }'
problem() { jq_status '.policy.problems[] | select(.name == "ipv4-block") | .message' | grep -q "198.51.100.0/24"; }
pass_if "an IPv4 ipBlock where the NAT64 prefix is no /96: status names default/ipv4-block and why" retry 5 problem
event() { kc get events -n default --field-selector reason=NotEnforced -o jsonpath='{.items[*].message}' | grep -q "198.51.100.0/24"; }
pass_if "... and a Warning Event (NotEnforced) on the policy says it" retry 10 event
pass_if "... while the other policies are still enforced (client on 8081, not on 8080)" http_moved

# Audit mode: nothing dropped, counted as what would have been.
config audit
kill -HUP "$agent_pid"
audit_before=$(counted policy_audit_would_deny)
pass_if "policy.mode audit (reload): what no rule allows (client -> 8080) passes" retry 5 can client tcp 8080
audit_counted() { (($(counted policy_audit_would_deny) > audit_before)); }
pass_if "... counted as policy_audit_would_deny" audit_counted
config enforce
kill -HUP "$agent_pid"
pass_if "back to enforce: dropped again" retry 5 cannot client tcp 8080

kc delete networkpolicy --all >/dev/null
open_again() {
    local tcp=no udp=no
    can client tcp 8080 && tcp=yes
    can client udp && udp=yes
    echo "TCP 8080: $tcp, UDP: $udp, isolated: $(jq_status '.policy.pods | length'), policies left: $(kc get networkpolicy -A -o name | wc -l)"
    [[ $tcp == yes && $udp == yes ]] && isolated_pods 0
}
pass_if "every policy deleted: client -> web on 8080 and UDP again, no pod isolated" retry 10 open_again
tap_done
