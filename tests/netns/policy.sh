#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Kubernetes NetworkPolicy in the pods' BPF (bpf/lib/policy.h): the agent
# follows a real API server (tests/e2e/control-plane.bash) with the
# credential the image ships, and writes what the policies ask of its pods
# into the policy tables. Pods are namespaces behind node-a, made by
# v6node-cni as containerd would (so the agent attaches its pod programs),
# and Pod objects with the address the plugin gave them (no kubelet runs):
#
#   cp (fd00:9::1 API server, fd00:9::2) --wire-- node-a (fd00:9::a, the agent; HTTP :9090)
#      outside the cluster                          |-- team-a/server  app=server  HTTP :8080 (http) :8081, UDP :5353
#                                                   |-- team-a/client  app=client  HTTP :8080
#                                                   |-- team-a/probe   app=probe   (the apply latency's client)
#                                                   `-- team-b/other   app=client  (another namespace)
#
# Namespace bulk holds the 1,000, then 10,000, policies that select none of
# these pods (the cluster's other tenants). What the agent does is read off
# what users see: replies and curl's exit codes (a denied SYN is dropped:
# exit 28, a timeout), status --json (policy.pods, problems, denied),
# counters and metrics. Figures (requests across 20 policy changes, apply
# latency with 1,000 and 10,000 policies, sync time and RSS at both) are
# TAP comments. The API server (1.36) itself refuses host bits and an
# except outside its block; the agent's naming of what it cannot enforce as
# written is seen with an IPv4 block on a node whose NAT64 prefix is no /96.
# Flows are read with the stock hubble CLI on the agent's socket, and at the
# end through the stock Hubble Relay over mutual TLS (relay_listen).
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/policy.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need curl jq python3

sandbox v6pl
gw_ns=$id-cp node=$id-a
gateway_pod_prefix=fd00:10:244::/56
pods=(server client probe other)
declare -A pod_ns=([server]=team-a [client]=team-a [probe]=team-a [other]=team-b)
declare -A pod_app=([server]=server [client]=client [probe]=probe [other]=client)
declare -A pod_ip
. "$top/tests/e2e/control-plane.bash"
export V6NODE_CNI_CONF_DIR=$work/cni
cni_bin=$(dirname "$bin")/v6node-cni
agent_pid=
# The Service socket hooks on a cgroup of the test's own, where only the
# client of section 16's Service runs.
cgroup2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
cg=$cgroup2/$id
mkdir -p "$cg"
cleanup_netns+=("$node" "$gw_ns")
cleanup() {
    rmdir "$cg" 2>/dev/null
    ((tap_failed == 0)) || tail -n 40 "$work/agent.log" | sed 's/^/# agent: /'
    [[ -z "${relay_pid:-}" ]] || kill "$relay_pid" 2>/dev/null
    control_plane_down
    in_node "$bin" detach --force >/dev/null 2>&1
}
[[ -x "$cni_bin" ]] || { echo "Bail out! no v6node-cni beside the agent ($cni_bin)"; exit 1; }
use_hubble
echo "# building the test control plane (warm Go caches: seconds)"
"$top/scripts/build-kubernetes" --control-plane >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log" | sed 's/^/# /'; echo "Bail out! control plane build failed"; exit 1; }

control_plane_wire "$node"
wire_node "$node" fd00:9::a
# A second outside address, in the same /64 as the API server's.
ip -n "$gw_ns" address add fd00:9::2/64 dev wire nodad
ip -n "$gw_ns" route add fd00:10:244:a::/64 via fd00:9::a
namespaces "${pods[@]/#/$id-}"
control_plane_up "$work/cp" >"$work/cp.log" 2>&1 || { cat "$work/cp.log"; echo "Bail out! control plane did not start"; exit 1; }
cp "$work/cp/etc/pki/ca.crt" "$work/ca.crt"
dataplane_identity >"$work/token" || { echo "Bail out! no token for the dataplane's ServiceAccount"; exit 1; }
dataplane_kubeconfig "$work/ca.crt" "$work/token" >"$work/dataplane.conf"
make_node node-a fd00:9::a fd00:10:244:a::/64
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: { name: team-a, labels: { team: a } }
---
apiVersion: v1
kind: Namespace
metadata: { name: team-b, labels: { team: b } }
---
apiVersion: v1
kind: Namespace
metadata: { name: bulk }
EOF

mkdir -p "$root/usr/lib/v6node" "$work/state"
config() { # config MODE [TOML]: the agent's configuration with policy.mode MODE (and TOML)
    cat >"$root/usr/lib/v6node/dataplane.toml" <<EOF
[services]
cgroup = "$cg"
[attach]
devices = ["eth0"]
[bigtcp]
devices = []
[kubernetes]
kubeconfig = "$work/dataplane.conf"
node_name = "node-a"
[metrics]
listen = "unix:$work/metrics.sock"
[flows]
hubble = "unix:$work/hubble.sock"
log_path = "$work/flow-log/flows.jsonl"
${flows_relay:-}
[policy]
mode = "$1"
${2:-}
EOF
}
config enforce
# The unit's credentials directory, empty until the Hubble Relay checks
# (section 17) put the node's certificate there.
export CREDENTIALS_DIRECTORY=$work/credentials
mkdir -p "$CREDENTIALS_DIRECTORY"
agent_start
retry 30 test -e "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" || { echo "Bail out! the agent wrote no CNI configuration"; exit 1; }

# --- the pods ----------------------------------------------------------------------
# pod_yaml POD [HTTP_PORT]: its Pod object, container port "http" at HTTP_PORT (8080).
pod_yaml() {
    cat <<EOF
apiVersion: v1
kind: Pod
metadata: { name: $1, namespace: ${pod_ns[$1]}, labels: { app: ${pod_app[$1]} } }
spec:
  nodeName: node-a
  containers:
    - name: main
      image: v6node.test/none
      ports: [{ name: http, containerPort: ${2:-8080} }, { name: dns, containerPort: 5353, protocol: UDP }]
EOF
}
# make_pod POD [HTTP_PORT]: the Pod object, then its status as kubelet would report it.
make_pod() {
    pod_yaml "$@" | kc create -f - >/dev/null &&
        kc -n "${pod_ns[$1]}" patch pod "$1" --subresource=status --type=merge \
            -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"${pod_ip[$1]}\",\"podIPs\":[{\"ip\":\"${pod_ip[$1]}\"}]}}" >/dev/null
}
# Pods need their namespace's default ServiceAccount, which the controller manager makes.
for ns in team-a team-b; do retry 30 kc -n "$ns" get serviceaccount default >/dev/null 2>&1; done
for pod in "${pods[@]}"; do
    jq -c --arg data "$work/ipam" '.plugins[0] + {cniVersion: (.cniVersions | max), name, dataDir: $data}' \
        "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" |
        in_node env -i PATH="$PATH" CNI_COMMAND=ADD CNI_CONTAINERID="ctr-$pod" CNI_NETNS="/run/netns/$id-$pod" CNI_IFNAME=eth0 \
            CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod_ns[$pod]};K8S_POD_NAME=$pod" "$cni_bin" >"$work/$pod.json" ||
        { cat "$work/$pod.json"; echo "Bail out! v6node-cni ADD $pod failed"; exit 1; }
    pod_ip[$pod]=$(jq -r '.ips[0].address | sub("/128$"; "")' "$work/$pod.json")
    make_pod "$pod" || { echo "Bail out! Pod $pod not made"; exit 1; }
done
pod_ip[cp]=$cp_api

# Every pod answers HTTP on 8080 and 8081 (its name, or on /peer who the
# connection came from) and UDP on 5353 (its name).
cat >"$work/pod.py" <<'PY'
import http.server, socket, sys, threading
name = sys.argv[1]
def udp():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind(("::", 5353))
    while True:
        data, peer = s.recvfrom(512)
        s.sendto(name.encode(), peer)
threading.Thread(target=udp, daemon=True).start()
class Name(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ((self.client_address[0] if self.path == "/peer" else name) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    request_queue_size = 128
for port in (8081, 8080):
    threading.Thread(target=Server(("::", port), Name).serve_forever, daemon=True).start()
threading.Event().wait()
PY
# udp.py ADDRESS PORT: one query; prints the answer (exit 0), or exits 1 on no answer in 0.5 s.
cat >"$work/udp.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(0.5)
s.sendto(b"query", (sys.argv[1], int(sys.argv[2])))
try:
    print(s.recvfrom(512)[0].decode())
except socket.timeout:
    sys.exit(1)
except OSError as e:
    print(e)
    sys.exit(2)
PY
for pod in server client; do ip netns exec "$id-$pod" python3 "$work/pod.py" "$pod" & done
# The node's own HTTP server (what a pod reaches of its node).
mkdir -p "$work/www" && echo node >"$work/www/index.html"
nsenter --net="/run/netns/$node" python3 -m http.server --bind :: --directory "$work/www" 9090 >/dev/null 2>&1 &
for pod in server client; do wait_for "$pod's server" bound "$id-$pod" tcp 8080; done
wait_for "the node's server" bound "$node" tcp 9090

# --- helpers -------------------------------------------------------------------------
# in_ns WHO COMMAND...: in a pod's namespace, the node's ("node") or outside ("cp", "cp2").
in_ns() {
    local who=$1
    shift
    case $who in
    cp | cp2) at "$gw_ns" "$@" ;;
    node) at "$node" "$@" ;;
    *) at "$id-$who" "$@" ;;
    esac
}
# http FROM TO PORT [CURL_ARGS...]: one HTTP request; prints the answer. A
# dropped SYN makes curl give up after 0.5 s with exit 28. Outside, "cp"
# is fd00:9::1 and "cp2" fd00:9::2 (each chosen: either may be the default).
http() {
    local from=()
    case $1 in cp) from=(--interface "$cp_api") ;; cp2) from=(--interface fd00:9::2) ;; esac
    in_ns "$1" curl -sS --connect-timeout 0.5 -m 2 "${from[@]}" "${@:4}" "http://[${pod_ip[$2]}]:$3/"
}
reaches() { # reaches FROM TO PORT [CURL_ARGS...]: TO answers
    local out
    out=$(http "$@" 2>&1)
    [[ "$out" == "$2" ]] || { echo "# $1 -> $2:$3: ${out:-no answer}"; return 1; }
}
dropped() { # dropped FROM TO PORT [CURL_ARGS...]: the connection times out (no answer, no refusal)
    local out rc
    out=$(http "$@" 2>&1)
    rc=$?
    ((rc == 28)) || { echo "# $1 -> $2:$3: curl exit $rc: $out"; return 1; }
}
udp_reaches() { # udp_reaches FROM TO: TO answers on UDP 5353
    local out
    out=$(in_ns "$1" python3 "$work/udp.py" "${pod_ip[$2]}" 5353 2>&1)
    [[ "$out" == "$2" ]] || { echo "# $1 -> $2 UDP: ${out:-no answer}"; return 1; }
}
udp_dropped() { # udp_dropped FROM TO: no answer at all (no ICMPv6 error either)
    local out rc
    out=$(in_ns "$1" python3 "$work/udp.py" "${pod_ip[$2]}" 5353 2>&1)
    rc=$?
    ((rc == 1)) || { echo "# $1 -> $2 UDP: exit $rc: $out"; return 1; }
}
# eventually COMMAND...: until COMMAND holds, polling every 20 ms for up to 5 s; its last output otherwise.
eventually() {
    local deadline=$(($(date +%s%N) + 5000000000)) out
    until out=$("$@" 2>&1); do
        (($(date +%s%N) < deadline)) || { printf '%s\n' "$out"; return 1; }
        sleep 0.02
    done
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# policy NAMESPACE NAME SPEC: a NetworkPolicy applied (SPEC in YAML's flow style).
policy() {
    printf 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: { name: %s, namespace: %s }\nspec: %s\n' "$2" "$1" "$3" |
        kc apply -f - >/dev/null
}
unpolicy() { kc -n "$1" delete networkpolicy "${@:2}" >/dev/null; }
server_ingress() { # server_ingress NAME RULES: a policy of team-a on the server, ingress RULES (a YAML flow list)
    policy team-a "$1" "{ podSelector: { matchLabels: { app: server } }, policyTypes: [Ingress], ingress: $2 }"
}
status_holds() { status_json | jq -e "$@" >/dev/null; }
# rules POD DIRECTION: "ID POLICY,..." of its rules in status, "none" when not isolated.
rules() {
    jq_status --arg a "${pod_ip[$1]}" --arg d "$2" \
        'first(.policy.pods[]? | select(.address == $a) | .[$d] | select(. != null) | "\(.id) \(.policies | join(","))") // "none"'
}
rules_id() { local r; r=$(rules "$@"); echo "${r%% *}"; }
isolated_by() { # isolated_by POD DIRECTION POLICY,...: exactly those, rules written, no error
    status_holds --arg a "${pod_ip[$1]}" --arg d "$2" --arg p "$3" \
        '.policy.pods[] | select(.address == $a) | .[$d] | select(.policies == ($p | split(",")) and .id > 0 and .error == null)' ||
        { echo "# ${pod_ns[$1]}/$1 $2: $(rules "$1" "$2")"; return 1; }
}
# after_change POD DIRECTION OLD_ID COMMAND...: once POD's rules for DIRECTION
# are no longer OLD_ID (up to 5 s), COMMAND.
rewritten() { [[ "$(rules_id "$1" "$2")" != "$3" ]]; }
after_change() {
    eventually rewritten "$1" "$2" "$3" || { echo "# ${pod_ns[$1]}/$1 $2 rules still $3"; return 1; }
    "${@:4}"
}
counter() { jq_status --arg r "$1" '[.counters[] | select(.reason == $r) | .packets] | add // 0'; }
denied() { # denied POD DIRECTION: packets its rules denied (its retired rules' too)
    jq_status --arg a "${pod_ip[$1]}" --arg d "$2" \
        '.policy as $p | [$p.pods[] | select(.address == $a) | .[$d] | select(. != null) | .denied_before + ($p.denied[.id | tostring] // 0)] | add // 0'
}
metrics() { curl -s --unix-socket "$work/metrics.sock" http://agent/metrics; }
rss_mib() { awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$agent_pid/status"; }
percentile() { sort -n | awk -v p="$1" '{ a[NR] = $1 } END { i = int((NR * p + 99) / 100); if (i < 1) i = 1; print a[i] }'; }

# --- 1. no policy ----------------------------------------------------------------------
policy_written() { status_holds '.policy != null and .policy.mode == "enforce" and (.policy.pods | length) == 0'; }
pass_if "the agent has listed Pods, Namespaces and NetworkPolicies: status --json has a policy object, mode enforce, no pod isolated" \
    retry 20 policy_written
open_to() { reaches "$1" server 8080 && udp_reaches "$1" server; }
pass_if "no policy: client -> server over HTTP :8080 and UDP :5353" open_to client
pod_flow='.source.pod_name == "client" and .destination.pod_name == "server" and .verdict == "FORWARDED"'
pass_if "hubble observe --pod team-a/server --protocol tcp --to-port 8080: the client's connection, both pods named, TCP SYN, forwarded" \
    eventually observed "$pod_flow and .l4.TCP.flags.SYN and .l4.TCP.destination_port == 8080 and .source.namespace == \"team-a\"" \
    --pod team-a/server --protocol tcp --to-port 8080
udp_once_per_side() { # the UDP query and its answer: one flow leaving the client, one entering the server
    local sides
    sides=$(observe --protocol udp --namespace team-a |
        jq -r -s "[.[].flow | select($pod_flow and .l4.UDP.destination_port == 5353) | .traffic_direction] | sort | join(\",\")")
    [[ "$sides" == "EGRESS,INGRESS" ]] || { echo "# UDP flows client -> server :5353 by direction: ${sides:-none}"; return 1; }
}
pass_if "... --protocol udp --namespace team-a: its UDP query and answer are two flows, the client's egress and the server's ingress (new flows, not packets)" \
    eventually udp_once_per_side

# --- 2. default deny ----------------------------------------------------------------
policy team-a deny-all '{ podSelector: {}, policyTypes: [Ingress] }'
pass_if "deny-all (team-a, empty podSelector, Ingress): status --json lists team-a/server isolated for ingress by team-a/deny-all (rules written, no error)" \
    eventually isolated_by server ingress team-a/deny-all
counted_before=$(counter policy_denied_ingress) denied_before=$(denied server ingress)
closed_to() { dropped "$1" server 8080 && udp_dropped "$1" server; }
pass_if "... and the client's new connections to it are dropped: HTTP :8080 (curl exit 28) and UDP :5353 (no answer)" closed_to client
counted_now=$(counter policy_denied_ingress) denied_now=$(denied server ingress)
echo "# policy_denied_ingress $counted_before -> $counted_now; the server's denied packets $denied_before -> $denied_now"
pass_if "counters: policy_denied_ingress went up" test "$counted_now" -gt "$counted_before"
metric_counted() {
    metrics | grep -E '^v6node_policy_denied_packets_total\{pod="team-a/server",direction="ingress",policies="team-a/deny-all",mode="enforce"\} [1-9]'
}
pass_if "status: the server's denied packets went up; metrics: v6node_policy_denied_packets_total for team-a/server ingress too" \
    eval '((denied_now > denied_before)) && metric_counted'
pass_if "hubble observe --pod team-a/server --verdict DROPPED: the client's SYN, dropped POLICY_DENIED, ingress denied by team-a/deny-all" \
    eventually observed '.source.pod_name == "client" and .drop_reason_desc == "POLICY_DENIED" and .traffic_direction == "INGRESS"
        and any(.ingress_denied_by[]; .namespace == "team-a" and .name == "deny-all" and .kind == "NetworkPolicy")' \
    --pod team-a/server --verdict DROPPED
logged_drop() {
    jq -e -s 'any(.[]; .verdict == "DROPPED" and .reason == "policy_denied_ingress" and .source.pod == "client"
        and .destination.pod == "server" and .destination.port == 8080 and .denied_by == ["team-a/deny-all"])' \
        "$work/flow-log/flows.jsonl" >/dev/null
}
pass_if "the flow log (log_path): the same drop as a JSON line, both pods, port 8080, denied_by team-a/deny-all" eventually logged_drop
flow_metrics() {
    metrics | grep -E '^v6node_flows_total\{verdict="dropped",reason="policy_denied_ingress",protocol="tcp",direction="from_pod"\} [1-9]' &&
        metrics | grep -E '^v6node_flow_events_total\{reason="policy_denied_ingress",outcome="sent"\} [1-9]'
}
pass_if "metrics: v6node_flows_total counts the drop by verdict, reason, protocol and direction; v6node_flow_events_total the events sent" \
    flow_metrics
only_drops() { # some flows, every one of them a drop (a failed observe is no pass)
    local verdicts
    verdicts=$(observe --pod team-a/server --verdict DROPPED | jq -r '.flow.verdict' | sort -u) || return 1
    [[ "$verdicts" == DROPPED ]] || { echo "# verdicts: ${verdicts:-none}"; return 1; }
}
pass_if "... and --verdict DROPPED gives drops, and only drops" only_drops
bad_filter() {
    local out
    out=$(observe --protocol http 2>&1) && { echo "# accepted: $out"; return 1; }
    grep -q "InvalidArgument.*unknown protocol" <<<"$out" || { echo "# $out"; return 1; }
    hubble status | grep -q 'Flows/s'
}
pass_if "bad input: a filter the agent cannot judge (--protocol http) gets gRPC InvalidArgument naming it; hubble status answers after" \
    bad_filter
node_listed() { hubble list nodes | grep -E '^node-a +Connected'; }
pass_if "hubble list nodes on the node's own socket (GetNodes): node-a, Connected" node_listed

# --- 3. allow by podSelector, on TCP 8080 only ---------------------------------------
server_ingress allow-client '[{ from: [{ podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: 8080 }] }]'
pass_if "allow-client (podSelector app=client, TCP 8080): the client's HTTP to :8080 passes" eventually reaches client server 8080
only_8080() { udp_dropped client server && dropped client server 8081; }
pass_if "... and only that: UDP :5353 and TCP :8081 are still dropped" only_8080
pass_if "... and only from team-a: other (team-b, also app=client) is dropped" dropped other server 8080

# --- 4. namespaceSelector ------------------------------------------------------------
server_ingress allow-team '[{ from: [{ namespaceSelector: { matchLabels: { access: granted } } }], ports: [{ protocol: TCP, port: 8080 }] }]'
pass_if "allow-team (namespaceSelector access=granted): status lists it on the server; other (team-b, unlabelled) still dropped" \
    eval 'eventually isolated_by server ingress team-a/allow-client,team-a/allow-team,team-a/deny-all && dropped other server 8080'
kc label namespace team-b access=granted >/dev/null
pass_if "kubectl label namespace team-b access=granted: other reaches the server" eventually reaches other server 8080
before=$(rules_id server ingress)
kc label namespace team-b access- >/dev/null
pass_if "the label removed: other's new connections are dropped again" after_change server ingress "$before" dropped other server 8080

# --- 5. a pod's labels ------------------------------------------------------------------
before=$(rules_id server ingress)
kc -n team-a label pod client app=visitor --overwrite >/dev/null
pass_if "kubectl label pod client app=visitor: out of allow-client, its new connections are dropped" \
    after_change server ingress "$before" dropped client server 8080
kc -n team-a label pod client app=client --overwrite >/dev/null
pass_if "labelled app=client again: in again" eventually reaches client server 8080

# --- 6. a named port ---------------------------------------------------------------------
server_ingress allow-client '[{ from: [{ podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: http }] }]'
named_at() { reaches client server "$1" && dropped client server "$2"; }
pass_if "allow-client on the named port http (the server's container port 8080): :8080 passes, :8081 dropped" named_at 8080 8081
kc -n team-a delete pod server --grace-period=0 --force >/dev/null 2>&1
make_pod server 8081
pass_if "the server Pod made again with http at 8081: the rule follows it, :8081 passes and :8080 is dropped" \
    eventually named_at 8081 8080
server_ingress allow-client '[{ from: [{ podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: 8080 }] }]'
eventually named_at 8080 8081 >/dev/null

# --- 7. ipBlock and except -------------------------------------------------------------
xdp_denied() { jq_status '[.counters[] | select(.device == "eth0" and .direction == "xdp" and .reason == "policy_denied_ingress") | .packets] | add // 0'; }
xdp_denied_before=$(xdp_denied)
pass_if "outside (fd00:9::1, the control plane's namespace) -> server :8080: dropped under deny-all" dropped cp server 8080
pass_if "... in the uplink's driver: the SYNs counted policy_denied_ingress under xdp on eth0 ($xdp_denied_before -> $(xdp_denied))" \
    test "$(xdp_denied)" -gt "$xdp_denied_before"
server_ingress allow-outside '[{ from: [{ ipBlock: { cidr: "fd00:9::/64" } }], ports: [{ protocol: TCP, port: 8080 }] }]'
seen_from() { [[ "$(http "$1" server 8080 | head -n 1)" == server && "$(in_ns "$1" curl -sS -m 2 --interface "$2" "http://[${pod_ip[server]}]:8080/peer")" == "$2" ]]; }
pass_if "allow-outside (ipBlock fd00:9::/64): fd00:9::1 reaches the server, which sees it as the client" eventually seen_from cp "$cp_api"
before=$(rules_id server ingress)
server_ingress allow-outside '[{ from: [{ ipBlock: { cidr: "fd00:9::/64", except: ["fd00:9::1/128"] } }], ports: [{ protocol: TCP, port: 8080 }] }]'
excepted() { dropped cp server 8080 && reaches cp2 server 8080; }
pass_if "except fd00:9::1/128 added: fd00:9::1 is dropped, fd00:9::2 (same /64) still reaches the server" \
    after_change server ingress "$before" excepted

# --- 8. egress default deny --------------------------------------------------------------
policy team-a client-egress '{ podSelector: { matchLabels: { app: client } }, policyTypes: [Egress] }'
pass_if "client-egress (Egress, no rule): status lists team-a/client isolated for egress by it" \
    eventually isolated_by client egress team-a/client-egress
counted_before=$(counter policy_denied_egress)
egress_closed() { dropped client server 8080 && udp_dropped client server && (($(counter policy_denied_egress) > counted_before)); }
pass_if "... its new connections are dropped (HTTP :8080, which the server lets in, and UDP), counted as policy_denied_egress" \
    egress_closed
node_probes_client() {
    local peer
    peer=$(http node client 8080 -s 2>&1 && in_ns node curl -sS -m 2 "http://[${pod_ip[client]}]:8080/peer")
    [[ "$peer" == $'client\nfd00:9::a' ]] || { echo "# $peer"; return 1; }
}
pass_if "... while the node (kubelet's probes) reaches the client's :8080, which sees the node's InternalIP fd00:9::a" node_probes_client
pod_to_node() { [[ "$(in_ns client curl -sS --connect-timeout 0.5 -m 2 "http://[fd00:9::a]:9090/")" == node ]]; }
pass_if "... and the client reaches its node (fd00:9::a :9090)" pod_to_node
unpolicy team-a client-egress
pass_if "client-egress deleted: the client reaches the server again" eventually reaches client server 8080

# --- 9. policies replaced under a request loop ------------------------------------------
# Fresh TCP connections from the client every 20 ms while allow-client and
# allow-client-b (the same client, other ports) replace each other 10 times:
# the new one applied (and in force) before the old one goes, so every
# request is allowed by the rules before and after each change.
cat >"$work/loop.py" <<'PY'
import os, socket, sys, time
addr, stop = sys.argv[1], sys.argv[2]
n = failed = 0
while not os.path.exists(stop):
    n += 1
    try:
        s = socket.create_connection((addr, 8080), timeout=1)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(512):
            data += chunk
        s.close()
        if b" 200 " not in data.split(b"\r\n", 1)[0] or not data.endswith(b"server\n"):
            raise OSError("answer %r" % data[:60])
    except OSError as e:
        failed += 1
        print("# request %d failed: %s" % (n, e), flush=True)
    time.sleep(0.02)
print(n, failed, flush=True)
PY
allow_client_b='[{ from: [{ namespaceSelector: { matchLabels: { team: a } }, podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: 8080, endPort: 8081 }] }]'
base_policies=team-a/allow-outside,team-a/allow-team,team-a/deny-all
rm -f "$work/stop"
ip netns exec "$id-client" python3 "$work/loop.py" "${pod_ip[server]}" "$work/stop" >"$work/loop.out" 2>&1 &
loop=$!
sleep 0.3
old=allow-client new=allow-client-b ids=$(rules_id server ingress) swap_start=$(now_ms) swapped=0
for i in $(seq 10); do
    if [[ $new == allow-client-b ]]; then server_ingress "$new" "$allow_client_b"; else
        server_ingress "$new" '[{ from: [{ podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: 8080 }] }]'
    fi
    eventually isolated_by server ingress "$(tr , '\n' <<<"$base_policies,team-a/allow-client,team-a/allow-client-b" | LC_ALL=C sort | paste -sd,)" >/dev/null &&
        ids+=" $(rules_id server ingress)"
    unpolicy team-a "$old"
    eventually isolated_by server ingress "$(tr , '\n' <<<"$base_policies,team-a/$new" | LC_ALL=C sort | paste -sd,)" >/dev/null &&
        ids+=" $(rules_id server ingress)" && swapped=$((swapped + 1))
    old=$new new=$([[ $new == allow-client ]] && echo allow-client-b || echo allow-client)
done
swap_ms=$(($(now_ms) - swap_start))
sleep 0.3
touch "$work/stop"
wait "$loop"
loop_n=0 loop_failed=unknown
read -r loop_n loop_failed < <(grep -v '^#' "$work/loop.out")
grep '^#' "$work/loop.out" | head -5
rewrites=$(($(tr ' ' '\n' <<<"$ids" | sort -u | wc -l) - 1))
echo "# request loop: $loop_n requests over ${swap_ms} ms of 20 policy changes ($swapped of 10 swaps seen in force, $rewrites rule rewrites), $loop_failed failed"
loop_clean() { [[ "$loop_n" -ge 50 && "$loop_failed" == 0 && "$swapped" == 10 && "$rewrites" -ge 20 ]]; }
pass_if "20 policy changes under a request loop (each seen in force, the server's rules rewritten each time): $loop_n requests, none failed" \
    loop_clean

# --- 9b. a storm of updates ---------------------------------------------------------------------
# One policy (storm, on the server, letting the probe in on one TCP port)
# patched as fast as the API server takes it, aiming at 1,000 a second for
# 10 s, through kubectl proxy, while the client's request loop (allowed by
# the other policies throughout) runs; the last patch opens :8080 to the
# probe. The agent takes what the watch delivers in bursts: no request
# fails, and the last version is in force soon after the storm.
cat >"$work/storm.py" <<'PY'
import http.client, json, socket, sys, threading, time
sock, seconds, rate, threads = sys.argv[1], 10.0, 1000, 8
path = "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies/storm"
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sock)
def body(port):
    return json.dumps({"spec": {"ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "probe"}}}],
                                             "ports": [{"protocol": "TCP", "port": port}]}]}})
done, failed, lock = [0], [0], threading.Lock()
start = time.time()
def patch(connection, port):
    connection.request("PATCH", path, body(port), {"Content-Type": "application/merge-patch+json"})
    response = connection.getresponse()
    response.read()
    return response.status == 200
def worker(n):
    connection, i = Unix("localhost"), n
    while time.time() - start < seconds:
        due = start + i / rate  # this thread's share of the schedule
        if due > time.time():
            time.sleep(due - time.time())
        ok = patch(connection, 20000 + i % 20000)
        with lock:
            done[0] += 1
            failed[0] += not ok
        i += threads
workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
elapsed = time.time() - start
last_ok = patch(Unix("localhost"), 8080)
print(done[0], failed[0] + (not last_ok), "%.1f" % elapsed, int(time.time() * 1000))
PY
agent_cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$agent_pid/stat"; }
server_ingress storm '[{ from: [{ podSelector: { matchLabels: { app: probe } } }], ports: [{ protocol: TCP, port: 19999 }] }]'
cp_run "$cp_bin/kubectl" --kubeconfig=/etc/kubernetes/admin.conf proxy --unix-socket="$work/proxy.sock" >"$work/proxy.log" 2>&1 &
proxy=$!
retry 10 test -S "$work/proxy.sock"
rm -f "$work/stop"
ip netns exec "$id-client" python3 "$work/loop.py" "${pod_ip[server]}" "$work/stop" >"$work/loop.out" 2>&1 &
loop=$!
cpu_before=$(agent_cpu_ticks)
read -r storm_n storm_failed storm_s storm_end_ms < <(python3 "$work/storm.py" "$work/proxy.sock")
in_force_ms=never
eventually reaches probe server 8080 >/dev/null && in_force_ms=$(($(now_ms) - storm_end_ms))
cpu_s=$(awk -v t=$(($(agent_cpu_ticks) - cpu_before)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz }')
touch "$work/stop"
wait "$loop"
read -r loop_n loop_failed < <(grep -v '^#' "$work/loop.out")
kill "$proxy" 2>/dev/null
pkill -f "proxy --unix-socket=$work/proxy.sock"
echo "# update storm: ${storm_n:-0} patches of one policy in ${storm_s:-?} s ($(awk -v n="${storm_n:-0}" -v s="${storm_s:-1}" 'BEGIN { printf "%d", n / s }')/s, the API server's pace here; aimed at 1,000/s), ${storm_failed:-?} refused; the last one in force ${in_force_ms} ms after it was accepted; agent CPU ${cpu_s} s; the client's loop ${loop_n} requests, ${loop_failed} failed"
pass_if "a storm of updates to one policy (${storm_n:-0} in ${storm_s:-?} s, none refused): the client's request loop, allowed throughout, lost nothing" \
    eval '[[ ${storm_n:-0} -ge 1000 && ${storm_failed:-x} == 0 && ${loop_n:-0} -ge 50 && ${loop_failed:-x} == 0 ]]'
storm_settled() { [[ $in_force_ms != never ]] && dropped probe server 8081 && isolated_by server ingress "$(rules server ingress | cut -d' ' -f2)"; }
pass_if "... and the last version (the probe on :8080, not :8081) is in force within 5 s of the storm's end (${in_force_ms} ms), no error in status" \
    storm_settled
unpolicy team-a storm

# --- 10. apply latency with 1,000 policies in the cluster --------------------------------------
# bulk FIRST LAST: NetworkPolicies bulk-FIRST..LAST in namespace bulk, each
# selecting pods that do not exist (app=other-N), with pod and ipBlock peers.
bulk() {
    local i
    for ((i = $1; i <= $2; i++)); do
        printf -- '---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: { name: bulk-%d, namespace: bulk }\n' "$i"
        printf 'spec:\n  podSelector: { matchLabels: { app: other-%d } }\n  policyTypes: [Ingress, Egress]\n' "$i"
        printf '  ingress: [{ from: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: client } } }, { ipBlock: { cidr: "fd00:98:%x:%x::/64", except: ["fd00:98:%x:%x::/96"] } }], ports: [{ protocol: TCP, port: %d }, { protocol: UDP, port: dns }] }]\n' \
            $((i >> 16)) $((i & 0xffff)) $((i >> 16)) $((i & 0xffff)) $((1024 + i % 50000))
        printf '  egress: [{ to: [{ namespaceSelector: { matchLabels: { team: a } }, podSelector: { matchLabels: { app: server } } }, { ipBlock: { cidr: "2001:db8:%x::/48" } }], ports: [{ protocol: TCP, port: 8080 }] }]\n' "$i"
    done
}
# bulk_create FIRST LAST: made with kubectl create, in 4 parallel parts; prints how long it took.
bulk_create() {
    local first=$1 last=$2 parts=4 part start pids=() ok=0
    start=$(now_ms)
    for ((part = 0; part < parts; part++)); do
        bulk $((first + (last - first + 1) * part / parts)) $((first + (last - first + 1) * (part + 1) / parts - 1)) >"$work/bulk-$part.yaml"
        kc create -f "$work/bulk-$part.yaml" >/dev/null 2>"$work/bulk-$part.err" &
        pids+=($!)
    done
    for part in "${!pids[@]}"; do wait "${pids[$part]}" || { ok=1; head -n 3 "$work/bulk-$part.err" | sed 's/^/# /' >&2; }; done
    echo $(($(now_ms) - start))
    return $ok
}
# synced_ms MARKER: the marker policy (on the server) applied now; prints
# the ms until status shows it in force.
synced_ms() {
    local start want
    start=$(now_ms)
    server_ingress "$1" '[{ from: [{ ipBlock: { cidr: "fd00:77::/64" } }] }]'
    want=$(status_json | jq -r --arg a "${pod_ip[server]}" --arg m "team-a/$1" \
        '.policy.pods[] | select(.address == $a) | .ingress.policies + [$m] | sort | join(",")')
    for _ in $(seq 1800); do
        isolated_by server ingress "$want" >/dev/null && { echo $(($(now_ms) - start)); return 0; }
        sleep 0.1
    done
    return 1
}
made_ms=$(bulk_create 1 1000)
made_rc=$?
sync1000=$(synced_ms marker-1000)
sync_rc=$?
rss1000=$(rss_mib)
echo "# 1,000 policies made in ${made_ms} ms (kubectl create, 4 in parallel); a marker applied next in force ${sync1000:-never} ms later; agent RSS ${rss1000} MiB"
pass_if "1,000 NetworkPolicies in namespace bulk created, and a marker applied after them in force (status) within 180 s" \
    test "$made_rc$sync_rc" = 00
# latency.py ADDRESS: a new connection to :8080 every 10 ms (each given
# 10 ms); prints the wall clock (ns) of the first that connects.
cat >"$work/latency.py" <<'PY'
import socket, sys, time
deadline = time.time() + 10
while time.time() < deadline:
    started = time.time()
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(0.01)
    try:
        s.connect((sys.argv[1], 8080))
        print(time.time_ns())
        sys.exit(0)
    except OSError:
        pass
    finally:
        s.close()
    time.sleep(max(0, 0.01 - (time.time() - started)))
sys.exit(1)
PY
# apply_latency: allow-probe applied while the probe polls; prints the ms
# from kubectl's return to the first connection through, and kubectl's own ms.
apply_latency() {
    local probe asked returned through
    nsenter --net="/run/netns/$id-probe" python3 "$work/latency.py" "${pod_ip[server]}" >"$work/latency.out" &
    probe=$!
    sleep 0.05
    asked=$(date +%s%N)
    server_ingress allow-probe '[{ from: [{ podSelector: { matchLabels: { app: probe } } }], ports: [{ protocol: TCP, port: 8080 }] }]'
    returned=$(date +%s%N)
    wait "$probe" || { echo "x x"; unpolicy team-a allow-probe; return; }
    through=$(cat "$work/latency.out")
    echo "$(((through - returned) / 1000000)) $(((returned - asked) / 1000000))"
    unpolicy team-a allow-probe
    eventually isolated_by server ingress "$probe_policies" >/dev/null
}
dropped_probe() { dropped probe server 8080; }
pass_if "the probe (team-a/probe) is dropped before each change" dropped_probe
# latencies N POLICIES: N changes; sets lat_ok, p50, p99 and kubectl_p50 and prints them.
latencies() {
    local i
    probe_policies=$(rules server ingress | cut -d' ' -f2)
    for ((i = 0; i < $1; i++)); do apply_latency; done >"$work/latencies"
    lat_ok=$(awk '$1 != "x"' "$work/latencies" | wc -l)
    p50=$(awk '$1 != "x" { print $1 }' "$work/latencies" | percentile 50)
    p99=$(awk '$1 != "x" { print $1 }' "$work/latencies" | percentile 99)
    kubectl_p50=$(awk '$2 != "x" { print $2 }' "$work/latencies" | percentile 50)
    echo "# apply latency with $2 policies (kubectl apply returned -> the probe's first connection through, polled every 10 ms): p50 ${p50:-?} ms, p99 ${p99:-?} ms over $lat_ok of $1 changes (goal 50 ms; kubectl apply itself p50 ${kubectl_p50:-?} ms)"
}
latencies 20 1,000
echo "# agent RSS with 1,000 policies: $(rss_mib) MiB"
pass_if "apply latency with 1,000 policies: all 20 changes let the probe through, p99 ${p99:-?} ms < 500 ms" \
    eval '[[ $lat_ok == 20 && ${p99:-999999} -lt 500 ]]'

# --- 11. 10,000 policies ------------------------------------------------------------------
made_ms=$(bulk_create 1001 10000)
made_rc=$?
sync10000=$(synced_ms marker-10000)
sync_rc=$?
rss10000=$(rss_mib)
last_sync=$(jq_status '.policy.sync_ms * 10 | round / 10')
echo "# 9,000 more policies (10,000 in all) made in ${made_ms} ms; a marker applied next in force ${sync10000:-never} ms later; agent RSS ${rss10000} MiB (${rss1000} MiB at 1,000); the last table sync took ${last_sync} ms"
pass_if "10,000 NetworkPolicies: all created, and a marker applied after them in force (status) within 180 s" \
    test "$made_rc$sync_rc" = 00
still_enforced() { reaches client server 8080 && udp_dropped client server && dropped other server 8080 && dropped probe server 8080; }
pass_if "with 10,000 policies still enforced: client -> :8080 passes; client's UDP, other and the probe are dropped" still_enforced
latencies 5 10,000

# --- 12. audit mode --------------------------------------------------------------------------
config audit
in_node "$bin" reload --pid "$agent_pid" >"$work/reload.log" 2>&1
audit_before=$(counter policy_audit_would_deny)
pass_if "policy.mode = \"audit\" (reload): status says mode audit" eventually status_holds '.policy.mode == "audit"'
pass_if "... and what no rule allows passes: client -> server UDP :5353, other -> server :8080" \
    eval 'eventually udp_reaches client server && reaches other server 8080'
audit_counted() {
    local now
    now=$(counter policy_audit_would_deny)
    echo "# policy_audit_would_deny $audit_before -> $now"
    ((now > audit_before)) && metrics | grep -E '^v6node_policy_denied_packets_total\{pod="team-a/server",direction="ingress",.*mode="audit"\} [1-9]'
}
pass_if "... counted as policy_audit_would_deny, and against the server's policies in metrics (mode audit)" audit_counted
config enforce
in_node "$bin" reload --pid "$agent_pid" >>"$work/reload.log" 2>&1
enforced_again() { status_holds '.policy.mode == "enforce"' && udp_dropped client server && dropped other server 8080; }
pass_if "back to enforce (reload): dropped again" eventually enforced_again

# --- 13. bad input ------------------------------------------------------------------------
# This API server (1.36) refuses host bits and an except outside its cidr,
# which the agent would otherwise name (and clamp or drop): what it accepts
# and the agent cannot enforce as written is an IPv4 block on a node whose
# NAT64 prefix is no /96.
# bad NAME RULES PROBLEM REFUSAL: the policy applied; status names it with
# PROBLEM if the API server took it, or the API server refused it with REFUSAL.
bad() {
    local out
    if out=$(server_ingress "$1" "$2" 2>&1); then
        eventually problem "$1" "$3"
    else
        echo "# $out"
        grep -qF "$4" <<<"$out"
    fi
}
problem() { # problem NAME TEXT: status --json policy.problems names team-a/NAME with TEXT
    status_holds --arg n "$1" --arg t "$2" '.policy.problems[] | select(.namespace == "team-a" and .name == $n and (.message | contains($t)))' ||
        { jq_status '.policy.problems[] | "# \(.namespace)/\(.name): \(.message)"'; return 1; }
}
pass_if "an ipBlock with host bits (fd00:9::1/64): named in status --json policy.problems (\"host bits\"), or refused by the API server" \
    bad host-bits '[{ from: [{ ipBlock: { cidr: "fd00:9::1/64" } }], ports: [{ protocol: TCP, port: 8081 }] }]' \
    "host bits are set" "must not have bits set beyond the prefix length"
pass_if "an except outside its cidr (fd00:8::/64 in fd00:9::/64): named in status --json policy.problems, or refused by the API server" \
    bad except-outside '[{ from: [{ ipBlock: { cidr: "fd00:9::/64", except: ["fd00:8::/64"] } }], ports: [{ protocol: TCP, port: 8081 }] }]' \
    "outside the cidr" "must be a strict subset of"
# Over capacity: 70 rules, each on its own port, are 70 classes of the 64 a
# direction may have (docs/policy.md).
rules=$(for port in $(seq 10001 10070); do printf '{ from: [{ podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: %d }] }, ' "$port"; done)
before=$(rules_id server ingress)
server_ingress too-many-ports "[${rules%, }]"
over_capacity() {
    local id error
    id=$(rules_id server ingress)
    error=$(jq_status --arg a "${pod_ip[server]}" '.policy.pods[] | select(.address == $a) | .ingress.error // ""')
    [[ "$id" == "$before" && "$error" == *classes* ]] || { echo "# rules id before: $before; now: $id; error: $error"; return 1; }
}
pass_if "a policy of 70 rules on 70 ports (64 classes a direction): status --json shows the server's ingress error, its rules id unchanged (the last good rules)" \
    eventually over_capacity
pass_if "... which stay enforced: client -> :8080 passes, other and the client's UDP are dropped" \
    eval 'reaches client server 8080 && dropped other server 8080 && udp_dropped client server'
capacity_event() { kc -n team-a get events --field-selector reason=NotEnforced,involvedObject.name=too-many-ports -o jsonpath='{.items[*].message}' | grep -q "last good rules stay"; }
pass_if "... and a Warning Event (NotEnforced) on team-a/too-many-ports says so" eventually capacity_event
unpolicy team-a too-many-ports
config enforce $'[nat64]\nprefix = "64:ff9b:1::/64"'
reloaded() { in_node "$bin" reload --pid "$agent_pid"; }
pass_if "reload with nat64.prefix 64:ff9b:1::/64 (no /96) accepted" reloaded
server_ingress ipv4-block '[{ from: [{ ipBlock: { cidr: "198.51.100.0/24" } }], ports: [{ protocol: TCP, port: 8081 }] }]'
pass_if "an IPv4 ipBlock (198.51.100.0/24) without a NAT64 /96: status --json policy.problems names team-a/ipv4-block and why" \
    eventually problem ipv4-block "IPv4 needs the cluster's NAT64 prefix"
policy_event() { kc -n team-a get events --field-selector reason=NotEnforced -o jsonpath='{.items[*].message}' | grep -q "198.51.100.0/24"; }
pass_if "... and a Warning Event (NotEnforced) on team-a/ipv4-block says it, for kubectl describe" eventually policy_event
pass_if "... while the other policies are enforced: client -> :8080 passes, its UDP and other's :8080 are dropped" \
    eval 'reaches client server 8080 && udp_dropped client server && dropped other server 8080'

# --- 14. every policy removed ----------------------------------------------------------------
kc delete --raw /apis/networking.k8s.io/v1/namespaces/bulk/networkpolicies >/dev/null
kc -n team-a delete networkpolicy --all >/dev/null
none_isolated() { status_holds '(.policy.pods | length) == 0 and (.policy.problems | length) == 0' || { echo "# $(jq_status -c '.policy.pods | map(.pod)')"; return 1; }; }
pass_if "every NetworkPolicy deleted: status --json shows no isolated pod and no problem" retry 60 none_isolated
open_again() {
    reaches client server 8080 && reaches client server 8081 && udp_reaches client server &&
        reaches other server 8080 && reaches probe server 8080 && reaches cp server 8080
}
pass_if "... and everything is reachable again: client (HTTP :8080 :8081, UDP), other, probe and outside -> server" eventually open_again

# --- 15. ClusterNetworkPolicy: the Admin and Baseline tiers -----------------------------------
# The CRD installed now, from its Go module: until this point the agent ran
# (and enforced NetworkPolicies) in a cluster without it.
# cnp NAME TIER PRIORITY SPEC: a ClusterNetworkPolicy applied (SPEC: subject and rules, YAML flow style).
cnp() {
    printf 'apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: { name: %s }\nspec: { tier: %s, priority: %s, %s }\n' \
        "$1" "$2" "$3" "$4" | kc apply -f - >/dev/null
}
team_a='subject: { namespaces: { matchLabels: { team: a } } }'
pass_if "the ClusterNetworkPolicy CRD (network-policy-api $network_policy_api, from its Go module) installed while the agent runs" \
    cluster_network_policy_crd
cnp baseline-deny Baseline 10 "$team_a, ingress: [{ action: Deny, from: [{ namespaces: {} }] }]"
pass_if "Baseline Deny from every namespace's pods to team-a: status lists Baseline:baseline-deny on the server's ingress (the CRD taken up within 15 s)" \
    retry 15 isolated_by server ingress Baseline:baseline-deny
baseline_denies() { dropped client server 8080 && dropped other server 8080 && reaches cp server 8080; }
pass_if "... client and other (pods) are dropped; outside (fd00:9::1, no pod) still reaches the server" baseline_denies
server_ingress allow-client '[{ from: [{ podSelector: { matchLabels: { app: client } } }], ports: [{ protocol: TCP, port: 8080 }] }]'
np_decides() { reaches client server 8080 && dropped client server 8081 && dropped other server 8080; }
pass_if "a NetworkPolicy allowing the client on :8080 decides for the server: client :8080 passes (over the Baseline Deny), :8081 and other dropped" \
    eventually np_decides
admin_client='pods: { namespaceSelector: { matchLabels: { team: a } }, podSelector: { matchLabels: { app: client } } }'
counted_before=$(counter policy_denied_ingress)
cnp admin-deny Admin 20 "$team_a, ingress: [{ action: Deny, from: [{ $admin_client }], protocols: [{ tcp: { destinationPort: { number: 8080 } } }] }]"
admin_denies() { dropped client server 8080 && (($(counter policy_denied_ingress) > counted_before)); }
pass_if "Admin Deny of team-a's client on TCP 8080 (priority 20) comes before the NetworkPolicy: the client is dropped, counted as policy_denied_ingress" \
    eventually admin_denies
cnp admin-pass Admin 10 "$team_a, ingress: [{ action: Pass, from: [{ $admin_client }] }]"
pass_if "Admin Pass of the client (priority 10, before the Deny): handed to the NetworkPolicy, which allows it" eventually reaches client server 8080
cnp admin-accept Admin 30 "$team_a, ingress: [{ action: Accept, from: [{ namespaces: { matchLabels: { team: b } } }], protocols: [{ tcp: { destinationPort: { range: { start: 8080, end: 8081 } } } }] }]"
admin_accepts() { reaches other server 8081 && dropped client server 8081; }
pass_if "Admin Accept from team-b on TCP 8080-8081 (a range): other reaches the server's :8081, which no NetworkPolicy allows; the client still not" \
    eventually admin_accepts
pass_if "status lists the server's ingress policies in order of name: Admin:admin-accept, Admin:admin-deny, Admin:admin-pass, Baseline:baseline-deny, team-a/allow-client" \
    eventually isolated_by server ingress Admin:admin-accept,Admin:admin-deny,Admin:admin-pass,Baseline:baseline-deny,team-a/allow-client
client_subject='subject: { pods: { namespaceSelector: { matchLabels: { team: a } }, podSelector: { matchLabels: { app: client } } } }'
cnp client-egress Admin 40 "$client_subject, egress: [{ action: Deny, to: [{ nodes: {} }] }, { action: Deny, to: [{ networks: [\"fd00:9::/64\"] }] }]"
egress_denied() { ! pod_to_node && dropped client cp 8080 2>/dev/null; }
pass_if "Admin Deny egress to every Node (nodes: {}) and to fd00:9::/64 (networks): the client no longer reaches its node (fd00:9::a :9090)" \
    eventually egress_denied
pass_if "... and reaches the server still (a pod: neither a node nor in fd00:9::/64)" reaches client server 8080
cnp domain-names Admin 50 "$team_a, egress: [{ action: Accept, to: [{ domainNames: [\"*.example.com\"] }] }]"
cnp_problem() {
    status_holds '.policy.problems[] | select(.namespace == "" and .name == "domain-names" and (.message | contains("domainNames are not supported")))'
}
pass_if "an Accept to domainNames (not supported): status --json policy.problems names the ClusterNetworkPolicy domain-names and why" \
    eventually cnp_problem
cnp_event() { kc get events -A --field-selector reason=NotEnforced,involvedObject.name=domain-names -o name | grep -q .; }
pass_if "... and a Warning Event (NotEnforced) on it" eventually cnp_event
kc delete clusternetworkpolicies --all >/dev/null
unpolicy team-a allow-client
pass_if "every ClusterNetworkPolicy and NetworkPolicy deleted: status shows no pod with rules and no problem" retry 60 none_isolated
pass_if "... and everything is reachable again, the client's node too" eventually eval 'open_again && pod_to_node'

# --- 16. the kernel's own drops -------------------------------------------------------
# A SYN to a port nothing listens on: the server's kernel answers with a
# reset and frees the SYN with the reason NO_SOCKET (skb:kfree_skb).
pass_if "status: the kernel's drops are flows (trace.bpf.c on skb:kfree_skb, loaded with the kernel's BTF)" \
    eventually status_holds '.flows.kernel_drops | startswith("on (")'
kernel_drop_seen() {
    http client server 9999 >/dev/null 2>&1
    observed '.verdict == "DROPPED" and .Summary == "kernel_drop: NO_SOCKET" and .source.pod_name == "client"
        and .destination.pod_name == "server" and .l4.TCP.destination_port == 9999 and .l4.TCP.flags.SYN' \
        --pod team-a/server --verdict DROPPED
}
pass_if "hubble observe: the client's SYN to a closed port of the server, dropped by the server's kernel: kernel_drop: NO_SOCKET" \
    eventually kernel_drop_seen

# A pod's connection to a ClusterIP: the socket hook gives it the backend
# at connect, and its flow names the Service through the socket's cookie.
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: { name: web, namespace: team-a }
spec: { clusterIP: fd00:10:96::80, clusterIPs: ["fd00:10:96::80"], ipFamilies: [IPv6], ports: [{ name: http, port: 80, protocol: TCP }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-1, namespace: team-a, labels: { kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: v6node-test } }
addressType: IPv6
ports: [{ name: http, port: 8080, protocol: TCP }]
endpoints: [{ addresses: ["${pod_ip[server]}"], nodeName: node-a, conditions: { ready: true } }]
EOF
service_flow_seen() {
    local answer
    answer=$(bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" nsenter --net="/run/netns/$id-client" \
        curl -sS --connect-timeout 0.5 -m 2 "http://[fd00:10:96::80]/" 2>&1)
    [[ "$answer" == server ]] || { echo "# client -> team-a/web: ${answer:-no answer}"; return 1; }
    observed '.source.pod_name == "client" and .destination.pod_name == "server" and .l4.TCP.destination_port == 8080
        and .destination_service.name == "web" and .destination_service.namespace == "team-a"' --to-service team-a/web
}
pass_if "the client (its socket in the hooks' cgroup) -> ClusterIP team-a/web: the server answers; hubble observe --to-service team-a/web: the flow to the backend names the Service" \
    eventually service_flow_seen

# --- 17. Hubble Relay: this node's flows over mutual TLS ------------------------------
# The stock Relay (scripts/build-hubble) in the control plane's namespace
# asks the node's Peer service for the nodes (node-a, at its InternalIP),
# then node-a for its flows, as in a cluster.
flows_relay='relay_listen = "[fd00:9::a]:4244"'
config enforce
in_node "$bin" reload --pid "$agent_pid" >>"$work/reload.log" 2>&1
relay_status() { # relay_status EXIT JQ: status --json exits EXIT (1: a problem) and its .flows holds JQ
    local out rc
    out=$(in_node "$bin" status --json)
    rc=$?
    ((rc == $1)) && jq -e ".flows | $2" >/dev/null <<<"$out" ||
        { echo "# status exit $rc; flows: $(jq -c '.flows | {relay, relay_error}' <<<"$out"); problems: $(jq -c .problems <<<"$out")"; return 1; }
}
no_credentials() {
    relay_status 1 '.relay == "[fd00:9::a]:4244 (mutual TLS)" and (.relay_error | contains("credential v6node.hubble.tls-cert"))' &&
        grep -q "Hubble Relay's API: not served on" <<<"$(in_node "$bin" status)" && hubble status | grep -q 'Flows/s'
}
pass_if "relay_listen with mutual TLS and no credentials: status exits 1 naming the missing credential; the local API still answers" \
    eventually no_credentials
hubble_tls "$work/hubble-tls" node-a >"$work/hubble-tls.log" 2>&1 || { echo "Bail out! openssl failed"; exit 1; }
cp "$work/hubble-tls/node-a.crt" "$CREDENTIALS_DIRECTORY/v6node.hubble.tls-cert"
cp "$work/hubble-tls/node-a.key" "$CREDENTIALS_DIRECTORY/v6node.hubble.tls-key"
cp "$work/hubble-tls/ca.crt" "$CREDENTIALS_DIRECTORY/v6node.hubble.tls-client-ca"
in_node "$bin" reload --pid "$agent_pid" >>"$work/reload.log" 2>&1
pass_if "... with the credentials in place (reload): served, no error" \
    eventually relay_status 0 '.relay == "[fd00:9::a]:4244 (mutual TLS)" and .relay_error == null'
# nsenter itself, not the at function: $! must be the relay, not a subshell,
# or the cleanup's kill would leave the relay running.
nsenter --net="/run/netns/$gw_ns" "$top/build/hubble/bin/hubble-relay" serve --peer-service "[fd00:9::a]:4244" \
    --listen-address "[::1]:4245" --health-listen-address "[::1]:4222" --disable-server-tls --gops=false \
    --tls-hubble-server-ca-files "$work/hubble-tls/ca.crt" --tls-hubble-client-cert-file "$work/hubble-tls/hubble-relay.crt" \
    --tls-hubble-client-key-file "$work/hubble-tls/hubble-relay.key" >"$work/hubble-relay.log" 2>&1 &
relay_pid=$!
relay() { at "$gw_ns" "$top/build/hubble/bin/hubble" --server "[::1]:4245" "$@"; }
relay_nodes() { relay list nodes | grep -E '^node-a +Connected'; }
pass_if "Hubble Relay, told only the Peer service's address: hubble list nodes shows node-a Connected" eventually relay_nodes
through_relay() {
    reaches client server 8080 &&
        relay observe -o json --last 1000 --pod team-a/server --protocol tcp |
        jq -e -s 'any(.[]; .node_name == "node-a" and .flow.source.pod_name == "client" and .flow.destination.pod_name == "server")' >/dev/null
}
pass_if "hubble observe through Relay: the client's connection to the server, from node-a, both pods named" eventually through_relay
no_client_certificate() {
    ! at "$gw_ns" "$top/build/hubble/bin/hubble" --server "[fd00:9::a]:4244" --tls --tls-allow-insecure --timeout 5s status >"$work/no-cert.log" 2>&1 &&
        ! at "$gw_ns" "$top/build/hubble/bin/hubble" --server "[fd00:9::a]:4244" --timeout 5s status >>"$work/no-cert.log" 2>&1 &&
        relay_nodes
}
pass_if "bad input: a client without a certificate of the CA is refused, with TLS and without; Relay stays connected" no_client_certificate
kill "$relay_pid"
wait "$relay_pid" 2>/dev/null

agent_stop
tap_done
