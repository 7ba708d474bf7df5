#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Kubernetes Services without kube-proxy: the agent follows a real API server
# (tests/e2e/control-plane.bash) and gives sockets in its cgroup a Service's
# backends (bpf/sock.bpf.c). Pods are namespaces behind node-a; every client
# runs in the test's own cgroup v2 directory, where the agent's
# services.cgroup points:
#
#   cp (fd00:9::1: API server) --wire-- node-a (fd00:9::a, the agent)
#                                         |-- pod-1 fd00:10:244:a::11  HTTP :8080, UDP :5353
#                                         |-- pod-2 fd00:10:244:a::12  HTTP :8080, UDP :5353
#                                         `-- pod-c fd00:10:244:a::20  the client
#
# Services and EndpointSlices are made with kubectl (selector-less, so the
# slices are the test's to write); what the agent does is read off replies
# (which pod answered, from which address), curl's exit codes, status --json
# and bpftool. A pod made by v6node-cni with port mappings checks hostPorts.
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/services.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need ethtool

sandbox v6s
gw_ns=$id-cp node=$id-a
gateway_pod_prefix=fd00:10:244::/56
pods=(pod-1 pod-2 pod-c)
declare -A pod_ip=([pod-1]=fd00:10:244:a::11 [pod-2]=fd00:10:244:a::12 [pod-c]=fd00:10:244:a::20)
. "$top/tests/e2e/control-plane.bash"
cgroup2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
cg=$cgroup2/$id
export V6NODE_CNI_CONF_DIR=$work/cni
agent_pid=
vip=fd00:10:96::80
kube_vip=fd00:10:96::1
cleanup_netns+=("$node" "$gw_ns" "${pods[@]/#/$id-}")
cleanup() {
    ((tap_failed == 0)) || tail -n 40 "$work/agent.log" | sed 's/^/# agent: /'
    control_plane_down
    in_node "$bin" detach --force >/dev/null 2>&1
    rmdir "$cg" 2>/dev/null
}

[[ -n "$cgroup2" ]] || { echo "1..0 # SKIP no cgroup v2 hierarchy mounted"; exit 0; }
echo "# building the test control plane (warm Go caches: seconds)"
"$top/scripts/build-kubernetes" --control-plane >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log" | sed 's/^/# /'; echo "Bail out! control plane build failed"; exit 1; }

# in_cgroup NETNS COMMAND...: a client as a pod's (or the node's) process,
# in the cgroup the agent's socket hooks are attached to.
in_cgroup() {
    local ns=$1
    shift
    bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" nsenter --net="/run/netns/$ns" "$@"
}
from_pod() { in_cgroup "$id-pod-c" "$@"; }

mkdir -p "$cg"
control_plane_wire "$node" "${pods[@]/#/$id-}"
wire_node "$node" fd00:9::a
ip -n "$gw_ns" route add fd00:10:244:a::/64 via fd00:9::a
for pod in "${pods[@]}"; do
    veth "$node $pod fe80::1/64" "$id-$pod eth0 ${pod_ip[$pod]}/128"
    ip -n "$node" route add "${pod_ip[$pod]}/128" dev "$pod"
    ip -n "$id-$pod" route add default via fe80::1 dev eth0
done

# Each backend pod answers HTTP on 8080 and UDP on 5353 with its own name.
cat >"$work/pod.py" <<'PY'
import http.server, socket, sys, threading
name, addr = sys.argv[1], sys.argv[2]
def udp():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind((addr, 5353))
    while True:
        data, peer = s.recvfrom(512)
        s.sendto(name.encode() + b" " + data, peer)
threading.Thread(target=udp, daemon=True).start()
class Name(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/hold":
            # Answers, then holds the connection until the client ends it.
            self.send_response(200)
            self.end_headers()
            self.wfile.write(name.encode() + b"\n")
            self.wfile.flush()
            try:
                self.rfile.read()
            except OSError:
                pass
            return
        # /peer: who the connection came from, as the pod sees it.
        body = ((self.client_address[0] if self.path == "/peer" else name) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
Server((addr, 8080), Name).serve_forever()
PY
# A UDP client as a resolver is one: sends, prints the reply and who it came from.
cat >"$work/udp.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(b"query", (sys.argv[1], int(sys.argv[2])))
data, peer = s.recvfrom(512)
print(data.decode(), "from", "[%s]:%d" % peer[:2])
PY
# hold.py STOP TARGET...: holds connections open until the file STOP exists.
# TARGET is tcp|udp,ADDRESS,PORT[,COUNT]: COUNT connections (TCP: /hold, UDP:
# a connected socket's query); prints "N PROTO ADDRESS BACKEND" for each, then
# "ready". Once STOP exists: "N PROTO ADDRESS BACKEND open", or "... ended
# HOW WALLCLOCK_NS" for one that ended (HOW: an errno name, or closed).
cat >"$work/hold.py" <<'PY'
import errno, os, socket, sys, time
held = []
for target in sys.argv[2:]:
    proto, addr, port, *count = target.split(",")
    for _ in range(int(count[0]) if count else 1):
        if proto == "tcp":
            s = socket.create_connection((addr, int(port)), timeout=3)
            s.sendall(b"GET /hold HTTP/1.0\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data or not data.split(b"\r\n\r\n", 1)[1].endswith(b"\n"):
                chunk = s.recv(512)
                if not chunk:
                    sys.exit("closed before the answer")
                data += chunk
            backend = data.split(b"\r\n\r\n", 1)[1].decode().strip()
        else:
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.connect((addr, int(port)))
            s.send(b"query")
            backend = s.recv(512).decode().split()[0]
        s.setblocking(False)
        held.append({"proto": proto, "addr": addr, "backend": backend, "sock": s, "end": None})
        print(len(held) - 1, proto, addr, backend, flush=True)
print("ready", flush=True)
def ended(e):
    return errno.errorcode.get(e.errno, str(e.errno)), time.time_ns()
while not os.path.exists(sys.argv[1]):
    for h in held:
        if h["end"] is None:
            try:
                if h["sock"].recv(512) == b"":
                    h["end"] = ("closed", time.time_ns())
            except BlockingIOError:
                pass
            except OSError as e:
                h["end"] = ended(e)
    time.sleep(0.01)
for i, h in enumerate(held):
    if h["end"] is None and h["proto"] == "udp":
        h["sock"].settimeout(2)
        try:
            h["sock"].send(b"query")
            h["sock"].recv(512)
        except OSError as e:
            h["end"] = ended(e)
    fate = "open" if h["end"] is None else "ended %s %d" % h["end"]
    print(i, h["proto"], h["addr"], h["backend"], fate, flush=True)
PY
for pod in pod-1 pod-2; do
    ip netns exec "$id-$pod" python3 "$work/pod.py" "$pod" "${pod_ip[$pod]}" &
done
# SCTP in raw packets (sctp-raw.py): the host's kernel has no SCTP sockets.
sctp_raw=$here/sctp-raw.py

mkdir -p "$root/usr/lib/v6node" "$work/state"
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
EOF

# get [ADDRESS]:PORT: one HTTP request from pod-c; prints the pod that answered.
get() { from_pod curl -sS -m 3 "http://$1/"; }
# within_ms LIMIT COMMAND...: polls every 20 ms; prints how long COMMAND took to hold.
within_ms() {
    local limit=$1 started now
    shift
    started=$(date +%s%N)
    while :; do
        "$@" && break
        now=$(date +%s%N)
        (((now - started) / 1000000 < limit)) || { echo "$limit+"; return 1; }
        sleep 0.02
    done
    echo $((($(date +%s%N) - started) / 1000000))
}
# The Services here are selector-less, their slices the test's to write.
# cluster_ip_service NAME ADDRESS PORTS: a ClusterIP Service's YAML and the
# document separator after it (PORTS in YAML's flow style).
cluster_ip_service() {
    cat <<EOF
apiVersion: v1
kind: Service
metadata: { name: $1, namespace: default }
spec:
  clusterIP: $2
  clusterIPs: ["$2"]
  ipFamilies: [IPv6]
  ports: $3
---
EOF
}
# endpoint_slice SERVICE NAME ADDRESS_TYPE PORTS ADDRESS...: a slice of
# SERVICE with one ready endpoint on node-a per ADDRESS.
endpoint_slice() {
    local service=$1 name=$2 type=$3 ports=$4 address
    shift 4
    cat <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $name
  namespace: default
  labels: { kubernetes.io/service-name: $service, endpointslice.kubernetes.io/managed-by: v6node-test }
addressType: $type
ports: $ports
endpoints:
EOF
    for address in "$@"; do
        echo "  - { addresses: [\"$address\"], nodeName: node-a, conditions: { ready: true } }"
    done
}
frontend_backends() { # frontend_backends "[addr]:port/tcp": its backends, space separated
    jq_status --arg f "$1" '.services.frontends[] | select("[\(.address.ip)]:\(.address.port)/\(.address.protocol)" == $f) | [.backends[] | "[\(.ip)]:\(.port)"] | join(" ")'
}

control_plane_up "$work/cp" >"$work/cp.log" 2>&1 || { cat "$work/cp.log"; echo "Bail out! control plane did not start"; exit 1; }
cp "$work/cp/etc/pki/ca.crt" "$work/ca.crt"
dataplane_identity >"$work/token" || { echo "Bail out! no token for the dataplane's ServiceAccount"; exit 1; }
dataplane_kubeconfig "$work/ca.crt" "$work/token" >"$work/dataplane.conf"
make_node node-a fd00:9::a fd00:10:244:a::/64
end_connections_listen
agent_start

# --- the hooks, and the API server's own Service ----------------------------
hooks_attached() {
    [[ "$(jq_status '[.socket_hooks[] | select(.error == null)] | length')" == 4 ]] &&
        bpftool cgroup show "$cg" | grep -c 'v6n_sock_' | grep -qx 4
}
pass_if "the agent attaches its 4 socket hooks to services.cgroup (status and bpftool agree)" retry 10 hooks_attached
kubernetes_served() { frontend_backends "[$kube_vip]:443/tcp" | grep -qx "\[$cp_api\]:6443"; }
pass_if "default/kubernetes: ClusterIP [$kube_vip]:443 -> the API server [$cp_api]:6443" retry 20 kubernetes_served
api_through_service() {
    code=$(from_pod curl -sk -m 5 -o /dev/null -w '%{http_code}' "https://[$kube_vip]/version")
    [[ "$code" =~ ^(200|401|403)$ ]] || { echo "HTTP $code"; return 1; }
}
pass_if "a pod reaches kubernetes.default through its ClusterIP (TLS to the API server)" api_through_service
outside_untranslated() { ! in_node curl -s -m 2 -o /dev/null "http://[$vip]/" 2>/dev/null; }

# --- a multiport Service: HTTP, and DNS-like UDP and TCP on one port number -----
{
    cluster_ip_service web "$vip" '[{ name: http, port: 80, targetPort: 8080, protocol: TCP },
        { name: dns, port: 53, targetPort: 5353, protocol: UDP }, { name: dns-tcp, port: 53, targetPort: 8080, protocol: TCP }]'
    endpoint_slice web web-1 IPv6 '[{ name: http, port: 8080, protocol: TCP }, { name: dns, port: 5353, protocol: UDP },
        { name: dns-tcp, port: 8080, protocol: TCP }]' "${pod_ip[pod-1]}" "${pod_ip[pod-2]}"
} | kc apply -f - >/dev/null
both_backends() { [[ "$(frontend_backends "[$vip]:80/tcp")" == "[${pod_ip[pod-1]}]:8080 [${pod_ip[pod-2]}]:8080" ]]; }
synced_ms=$(within_ms 5000 both_backends)
pass_if "web's frontend and both backends are in the tables ${synced_ms} ms after kubectl returned (under 1 s)" \
    test "${synced_ms%+}" -lt 1000
spread() {
    local i out
    out=$(for i in $(seq 40); do get "[$vip]:80"; done)
    echo "$out" | sort | uniq -c | sed 's/^/# /'
    [[ $(echo "$out" | grep -cx pod-1) -ge 5 && $(echo "$out" | grep -cx pod-2) -ge 5 ]]
}
pass_if "40 requests from a pod to the ClusterIP: both backends answer" spread
from_node() { in_cgroup "$node" curl -sS -m 3 "http://[$vip]/" | grep -qx 'pod-[12]'; }
pass_if "the node's own processes reach the ClusterIP too" from_node
pass_if "a process outside services.cgroup is not translated (the hooks are what serves the VIP)" outside_untranslated
udp_from_service() { from_pod python3 "$work/udp.py" "$vip" 53 | grep -E "^pod-[12] query from \[$vip\]:53$"; }
pass_if "UDP to [VIP]:53 reaches a backend's 5353, and the reply comes from [VIP]:53" udp_from_service
tcp_53() { get "[$vip]:53" | grep -qx 'pod-[12]'; }
pass_if "TCP to the same port 53 is its own Service port (HTTP behind it)" tcp_53
stats_counted() {
    local translated
    translated=$(jq_status --arg v "$vip" '(.services.frontends[] | select(.address.ip == $v and .address.port == 80 and .address.protocol == "tcp") | .id) as $id
        | .services.stats[($id | tostring)][0]')
    echo "# translated: $translated"
    [[ "$translated" -ge 40 ]]
}
pass_if "status counts the connections per frontend (>= 40 translated on [VIP]:80)" stats_counted
human_lists_web() { in_node "$bin" status | sed -n '/^services:/,/^$/p' | grep -q "default/web:http .*\[$vip\]:80/tcp .*\[${pod_ip[pod-1]}\]:8080"; }
pass_if "status (human): the services section lists web:http with its frontend and backends" human_lists_web
metric_for_web() {
    curl -s --unix-socket "$work/metrics.sock" http://agent/metrics |
        grep -E "^v6node_service_translated_total\{service=\"default/web\",port=\"http\",frontend=\"\[$vip\]:80/tcp\"\} [1-9]"
}
pass_if "metrics: v6node_service_translated_total for web:http" metric_for_web

# --- an endpoint leaves under traffic ----------------------------------------
(for i in $(seq 60); do get "[$vip]:80" || echo FAILED; sleep 0.05; done) >"$work/loop.log" 2>&1 &
loop=$!
sleep 1
kc patch endpointslice web-1 --type=json -p '[{"op":"remove","path":"/endpoints/1"}]' >/dev/null
one_backend() { [[ "$(frontend_backends "[$vip]:80/tcp")" == "[${pod_ip[pod-1]}]:8080" ]]; }
removed_ms=$(within_ms 5000 one_backend)
wait "$loop"
pass_if "pod-2 leaves the slice: out of the tables ${removed_ms} ms after kubectl returned (under 1 s)" test "${removed_ms%+}" -lt 1000
pass_if "60 requests across the change: none failed" bash -c "! grep -q FAILED '$work/loop.log' && test \$(wc -l <'$work/loop.log') = 60"
only_pod1() { local i; for i in $(seq 20); do [[ "$(get "[$vip]:80")" == pod-1 ]] || return 1; done; }
pass_if "new connections go only to pod-1" only_pod1

# --- session affinity ---------------------------------------------------------
kc patch endpointslice web-1 --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/endpoints/-\",\"value\":{\"addresses\":[\"${pod_ip[pod-2]}\"],\"nodeName\":\"node-a\",\"conditions\":{\"ready\":true}}}]" >/dev/null
retry 20 both_backends
kc patch service web --type=merge -p '{"spec":{"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":60}}}}' >/dev/null
affinity_on() { [[ "$(jq_status --arg v "$vip" '.services.frontends[] | select(.address.ip == $v and .address.port == 80) | .affinity_seconds')" == 60 ]]; }
retry 20 affinity_on
sticky() {
    local out
    out=$(for i in $(seq 20); do get "[$vip]:80"; done | sort -u)
    echo "# answered by: $out"
    [[ $(echo "$out" | wc -l) == 1 ]]
}
pass_if "sessionAffinity ClientIP: 20 requests from one pod, one backend" sticky

# --- an EndpointSlice flapping many times a second -------------------------------
# pod-2 turns unready and ready again 15 times (30 changes, as fast as kubectl
# goes) under a request loop: nothing fails, and the tables end as the API says.
# Routes, the CNI configuration and BGP follow Nodes alone: the route syncs
# (less the periodic repairs, which re-run everything) must not move.
route_syncs() { jq_status '.cluster.route_syncs - .agent.resyncs'; }
syncs_before=$(route_syncs)
(for i in $(seq 80); do get "[$vip]:80" || echo FAILED; sleep 0.02; done) >"$work/flap.log" 2>&1 &
loop=$!
flap_start=$(date +%s%N)
for i in $(seq 15); do
    for ready in false true; do
        kc patch endpointslice web-1 --type=json \
            -p "[{\"op\":\"replace\",\"path\":\"/endpoints/1/conditions/ready\",\"value\":$ready}]" >/dev/null
    done
done
flap_ms=$((($(date +%s%N) - flap_start) / 1000000))
wait "$loop"
pass_if "30 EndpointSlice changes in ${flap_ms} ms under 80 requests: none failed" \
    bash -c "! grep -q FAILED '$work/flap.log' && test \$(wc -l <'$work/flap.log') = 80"
pass_if "after the flapping the tables hold both backends, as the API does" retry 10 both_backends
pass_if "and the 30 changes re-ran no route sync ($syncs_before before, $(route_syncs) after)" \
    bash -c "[[ $syncs_before =~ ^[0-9]+\$ && \$1 == $syncs_before ]]" - "$(route_syncs)"

# --- no endpoints: refused at once, not a timeout ---------------------------------
kc patch endpointslice web-1 --type=json -p '[{"op":"replace","path":"/endpoints","value":[]}]' >/dev/null
no_backends() { [[ -z "$(frontend_backends "[$vip]:80/tcp")" ]]; }
retry 20 no_backends
refused_fast() {
    local started rc
    started=$(date +%s%N)
    from_pod curl -s -m 5 -o /dev/null "http://[$vip]/"
    rc=$?
    echo "# curl exit $rc after $((($(date +%s%N) - started) / 1000000)) ms"
    ((rc == 7 && $(date +%s%N) - started < 1000000000))
}
pass_if "a Service without endpoints refuses a connection at once (curl exit 7, connection refused)" refused_fast
refused_counted() { jq_status '.counters[] | select(.reason == "service_without_backend") | .packets' | grep -qx '[1-9][0-9]*'; }
pass_if "counted as service_without_backend" refused_counted

# --- hostPorts: a pod made by v6node-cni with the runtime's port mappings ----------
cni_bin=$(dirname "$bin")/v6node-cni
namespaces --dad "$id-pod-h" "$id-pod-s"
# cni_pod POD COMMAND MAPPINGS: the runtime's call for POD, the conflist's
# plugin with runtimeConfig.portMappings as containerd passes them.
cni_pod() {
    local pod=$1
    shift
    jq -c --arg data "$work/ipam" --argjson mappings "$2" \
        '.plugins[0] + {cniVersion: (.cniVersions | max), name, dataDir: $data, runtimeConfig: {portMappings: $mappings}}' \
        "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" |
        nsenter --net="/run/netns/$node" env -i PATH="$PATH" CNI_COMMAND="$1" CNI_CONTAINERID="ctr-$pod" \
            CNI_NETNS="/run/netns/$id-$pod" CNI_IFNAME=eth0 CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=$pod" \
            "$cni_bin"
}
cni_pod_h() { cni_pod pod-h "$@"; }
unknown_protocol_refused() {
    local answer devices_before
    devices_before=$(ip -n "$node" -o link | wc -l)
    answer=$(cni_pod_h ADD '[{"hostPort": 54325, "containerPort": 8080, "protocol": "dccp"}]')
    echo "# $answer"
    jq -e '.code == 7 and (.details | contains("dccp is not served"))' <<<"$answer" >/dev/null &&
        [[ "$(ip -n "$node" -o link | wc -l)" == "$devices_before" ]]
}
pass_if "a hostPort of a protocol v6node does not serve: CNI ADD fails with error 7 naming it, and no device is made" \
    unknown_protocol_refused
# As containerd 1.7 writes them: Go's field names, an empty HostIP for none.
cni_pod_h ADD '[{"HostPort": 54323, "ContainerPort": 8080, "Protocol": "tcp", "HostIP": "::1"},
    {"HostPort": 54324, "ContainerPort": 5353, "Protocol": "udp", "HostIP": ""},
    {"HostPort": 54325, "ContainerPort": 3868, "Protocol": "sctp", "HostIP": ""}]' >"$work/pod-h.json"
pod_h=$(jq -r '.ips[0].address | sub("/128$"; "")' "$work/pod-h.json")
ip netns exec "$id-pod-h" python3 "$work/pod.py" pod-h "$pod_h" &
ip netns exec "$id-pod-h" python3 "$sctp_raw" serve pod-h "$pod_h" 3868 &
host_ports_listed() {
    [[ "$(frontend_backends "[::1]:54323/tcp")" == "[$pod_h]:8080" &&
        "$(frontend_backends "[fd00:9::a]:54324/udp")" == "[$pod_h]:5353" &&
        "$(frontend_backends "[::1]:54324/udp")" == "[$pod_h]:5353" &&
        "$(frontend_backends "[fd00:9::a]:54325/sctp")" == "[$pod_h]:3868" &&
        -z "$(frontend_backends "[fd00:9::a]:54323/tcp")" ]] &&
        jq_status '.services.frontends[] | select(.kind == "host-port") | .service' | grep -qx default/pod-h
}
pass_if "pod-h ($pod_h) added with 3 port mappings: status has [::1]:54323/tcp, and 54324/udp and 54325/sctp on the node address" \
    retry 10 host_ports_listed
host_port_from_node() { in_cgroup "$node" curl -sS -m 3 "http://[::1]:54323/" | grep -qx pod-h; }
pass_if "the node's processes reach hostPort [::1]:54323 (hostIP ::1): pod-h answers" retry 5 host_port_from_node
only_its_host_ip() { in_cgroup "$node" curl -s -m 3 -o /dev/null "http://[fd00:9::a]:54323/"; [[ $? == 7 ]]; }
pass_if "54323 is not served on the node's other address (its hostIP is ::1)" only_its_host_ip
udp_host_port() { from_pod python3 "$work/udp.py" fd00:9::a 54324 | grep -E '^pod-h query from \[fd00:9::a\]:54324$'; }
pass_if "another pod -> UDP hostPort 54324 on the node's address (no hostIP: every address): pod-h answers from it" udp_host_port
# SCTP has no socket hook: a pod's device translates it, so its client is
# pod-s, made by v6node-cni like pod-h (pod-c's veth has no program).
cni_pod pod-s ADD '[]' >"$work/pod-s.json"
from_pod_s() { ip netns exec "$id-pod-s" "$@"; }
sctp_host_port() { from_pod_s python3 "$sctp_raw" ask fd00:9::a 54325 41001 | grep -E '^pod-h from \[fd00:9::a\]:54325$'; }
pass_if "another pod -> SCTP hostPort 54325 -> 3868: pod-h answers from the node's address, both checksums right" \
    retry 5 sctp_host_port
{
    cluster_ip_service diameter fd00:10:96::83 '[{ name: sctp, port: 2905, targetPort: 3868, protocol: SCTP }]'
    endpoint_slice diameter diameter-1 IPv6 '[{ name: sctp, port: 3868, protocol: SCTP }]' "$pod_h"
} | kc apply -f - >/dev/null
retry 20 eval '[[ "$(frontend_backends "[fd00:10:96::83]:2905/sctp")" == "[$pod_h]:3868" ]]'
sctp_cluster_ip() {
    local sport answers
    answers=$(for sport in 42001 42002 42003 42004 42005; do
        from_pod_s python3 "$sctp_raw" ask fd00:10:96::83 2905 "$sport" || echo "no answer on $sport"
    done)
    echo "$answers" | sort | uniq -c | sed 's/^/# /'
    [[ "$(echo "$answers" | grep -cxF 'pod-h from [fd00:10:96::83]:2905')" == 5 ]]
}
pass_if "SCTP from a pod to a ClusterIP (2905 -> 3868), 5 associations: each answered from the Service's address and port" \
    sctp_cluster_ip
# The node's own SCTP, routed to the wire for the Services' range, is sent
# on at the uplink's egress.
ip -n "$node" route add fd00:10:96::/112 via fd00:9::1
sctp_from_node() { in_node python3 "$sctp_raw" ask fd00:10:96::83 2905 42101 | grep -E '^pod-h from \[fd00:10:96::83\]:2905$'; }
pass_if "the node's own SCTP to the ClusterIP: pod-h answers from the Service's address and port" sctp_from_node
ip -n "$node" route del fd00:10:96::/112 via fd00:9::1
sctp_counted() {
    [[ "$(jq_status '(.services.frontends[] | select(.address.ip == "fd00:10:96::83") | .id) as $id
        | .services.stats[($id | tostring)][0]')" == 6 ]]
}
pass_if "status counts the 6 associations translated for it" sctp_counted
kc delete service diameter >/dev/null
kc delete endpointslice diameter-1 >/dev/null

# --- from outside the cluster: the uplink translates per packet ----------------
# The control plane's namespace is outside: no socket hook sees its
# connections, they reach node-a's eth0 as a router would bring them.
from_outside() { ip netns exec "$gw_ns" "$@"; }
udp_host_port_outside() { from_outside python3 "$work/udp.py" fd00:9::a 54324 | grep -E '^pod-h query from \[fd00:9::a\]:54324$'; }
pass_if "from outside -> UDP hostPort 54324 on the node's address: pod-h answers, from that address" udp_host_port_outside
sctp_host_port_outside() { from_outside python3 "$sctp_raw" ask fd00:9::a 54325 41002 | grep -E '^pod-h from \[fd00:9::a\]:54325$'; }
pass_if "from outside -> SCTP hostPort 54325 -> 3868: pod-h answers from the node's address, both checksums right" \
    sctp_host_port_outside
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: { name: edge, namespace: default }
spec:
  type: LoadBalancer
  clusterIP: fd00:10:96::90
  clusterIPs: ["fd00:10:96::90"]
  ipFamilies: [IPv6]
  externalTrafficPolicy: Local
  healthCheckNodePort: 32091
  ports: [{ name: http, port: 80, targetPort: 8080, nodePort: 30090, protocol: TCP }]
---
$(endpoint_slice edge edge-1 IPv6 '[{ name: http, port: 8080, protocol: TCP }]' "$pod_h")
EOF
# served_from_outside PORT: the frontend on PORT takes one backend from outside.
served_from_outside() { [[ "$(jq_status --argjson p "$1" '.services.frontends[] | select(.address.port == $p) | .from_outside | length')" == 1 ]]; }
retry 20 served_from_outside 30090
client_kept() {
    local peer
    peer=$(from_outside curl -sS -m 3 "http://[fd00:9::a]:30090/peer")
    echo "# pod-h saw the connection from $peer"
    [[ "$peer" == "$cp_api" ]]
}
pass_if "from outside -> NodePort 30090 (externalTrafficPolicy Local): pod-h answers and sees the client's own address" \
    client_kept
counted_from_outside() {
    jq_status '.counters[] | select(.direction == "ingress" and .reason == "service_translated") | .packets' | grep -qx '[1-9][0-9]*'
}
pass_if "counted on eth0 as service_translated (ingress)" counted_from_outside
nsenter --net="/run/netns/$node" "$bin" health-checks >"$work/health.log" 2>&1 &
health_check() { # health_check STATUS LOCAL_ENDPOINTS: what a load balancer is told
    local answer
    answer=$(from_outside curl -s -m 3 -w '\n%{http_code}' "http://[fd00:9::a]:32091/")
    echo "# $answer"
    [[ "$(tail -n 1 <<<"$answer")" == "$1" ]] &&
        head -n 1 <<<"$answer" | jq -e --argjson n "$2" \
            '.service == {namespace: "default", name: "edge"} and .localEndpoints == $n and .serviceProxyHealthy' >/dev/null
}
pass_if "healthCheckNodePort 32091 (v6node-dataplane health-checks): 200, one local endpoint, kube-proxy's JSON" \
    retry 10 health_check 200 1
kc patch endpointslice edge-1 --type=json -p '[{"op":"replace","path":"/endpoints","value":[]}]' >/dev/null
pass_if "edge's endpoint leaves: the health check says 503, no local endpoint" retry 10 health_check 503 0
refused_from_outside() { from_outside curl -s -m 3 -o /dev/null "http://[fd00:9::a]:30090/"; [[ $? == 7 ]]; }
pass_if "and a connection from outside to NodePort 30090 is refused (curl exit 7), not left to time out" \
    retry 10 refused_from_outside

# --- from outside to a backend on another node: in the uplink's XDP --------------
# node-b (fd00:9::b) is another node on the wire, its pod fd00:10:244:b::11
# serving HTTP on 8080 and UDP on 5353. A NodePort's connection to it from
# outside comes in on eth0 and goes back out of it from node-a's masquerade
# address, its replies the same way back: eth0 runs native XDP (attach.xdp
# is auto; veth has it), which sends both without the stack.
#
# Two things a veth is not like a wire in: the wire's port to node-a takes
# the frames XDP sends back only while it runs an XDP program of its own
# (xdp-pass.bpf.c), and the senders' checksums are made whole in software
# (tx off): over a veth a socket's packet carries a partial checksum, which
# XDP cannot tell from a whole one, where frames off a wire carry whole ones.
far=$id-b far_pod=fd00:10:244:b::11 masquerade=fd00:10:244:a:ffff:ffff:ffff:ffff
ip netns add "$far"
cleanup_netns+=("$far")
ip -n "$far" link set lo up
wire_node "$far" fd00:9::b
ip -n "$far" address add "$far_pod/128" dev lo
ip -n "$far" route add fd00:10:244:a::/64 via fd00:9::a
ip -n "$node" route add fd00:10:244:b::/64 via fd00:9::b
"$top/dataplane/bpf/cc" "$here/xdp-pass.bpf.c" "$work/xdp-pass.bpf.o"
ip -n "$gw_ns" link set dev port0 xdpdrv obj "$work/xdp-pass.bpf.o" sec xdp.frags
ip netns exec "$gw_ns" ethtool -K wire tx off >/dev/null
ip netns exec "$far" ethtool -K eth0 tx off >/dev/null
ip netns exec "$far" python3 "$work/pod.py" pod-far "$far_pod" &
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: { name: far, namespace: default }
spec:
  type: NodePort
  clusterIP: fd00:10:96::95
  clusterIPs: ["fd00:10:96::95"]
  ipFamilies: [IPv6]
  externalIPs: ["fd00:9:e::95"]
  ports:
    - { name: http, port: 80, targetPort: 8080, nodePort: 30095, protocol: TCP }
    - { name: dns, port: 53, targetPort: 5353, nodePort: 30096, protocol: UDP }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: far-1
  namespace: default
  labels: { kubernetes.io/service-name: far, endpointslice.kubernetes.io/managed-by: v6node-test }
addressType: IPv6
ports: [{ name: http, port: 8080, protocol: TCP }, { name: dns, port: 5353, protocol: UDP }]
endpoints:
  - { addresses: ["$far_pod"], nodeName: node-b, conditions: { ready: true } }
EOF
far_served() { [[ "$(jq_status '[.services.frontends[] | select(.address.port == 30095 or .address.port == 30096) | .from_outside | length] | add')" == 2 ]]; }
ip -n "$gw_ns" route add fd00:9:e::95/128 via fd00:9::a
retry 20 far_served
wait_for "pod-far's server" bound "$far" tcp 8080
# Known neighbours: a frame whose next hop the kernel has yet to resolve is tc's.
ip netns exec "$node" ping -q -c 1 -W 2 fd00:9::b >/dev/null
service_count() { jq_status --arg d "$1" --arg r "$2" '[.counters[] | select(.device == "eth0" and .direction == $d and .reason == $r) | .packets] | add // 0'; }
tc_before=$(service_count ingress service_translated)
xdp_before=$(service_count xdp service_translated)
tracked_before=$(service_count xdp service_tracked)
masqueraded() {
    local i peer
    for i in 1 2 3 4 5; do
        peer=$(from_outside curl -sS -m 3 "http://[fd00:9::a]:30095/peer") || return 1
        [[ "$peer" == "$masquerade" ]] || { echo "# pod-far saw $peer"; return 1; }
    done
}
pass_if "xdp: from outside -> NodePort 30095 (TCP), 5 connections to pod-far on node-b: it sees node-a's masquerade address" \
    masqueraded
udp_far() { from_outside python3 "$work/udp.py" fd00:9::a 30096 | grep -E '^pod-far query from \[fd00:9::a\]:30096$'; }
pass_if "xdp: UDP NodePort 30096: pod-far answers, from the NodePort" udp_far
eth0_xdp() { ip -n "$node" link show eth0 | grep -oE '\bxdp(generic)?\b' | head -1; }
pass_if "xdp: eth0 runs native XDP, and the 6 new connections were XDP's (service_translated under xdp), none tc's" \
    test "$(eth0_xdp)/$(($(service_count xdp service_translated) - xdp_before))/$(($(service_count ingress service_translated) - tc_before))" = xdp/6/0
pass_if "xdp: so were their later packets both ways (service_tracked under xdp)" \
    test "$(($(service_count xdp service_tracked) - tracked_before))" -ge 20
(for i in $(seq 100); do from_outside curl -sS -m 3 "http://[fd00:9::a]:30095/" || echo FAILED; sleep 0.03; done) >"$work/far-restart.log" 2>&1 &
loop=$!
sleep 0.5
kill -9 "$agent_pid"
wait "$agent_pid" 2>/dev/null
sleep 0.5
agent_start
wait "$loop"
pass_if "xdp: 100 requests to NodePort 30095 across a SIGKILL and restart of the agent: none failed" \
    bash -c "! grep -q FAILED '$work/far-restart.log' && test \$(grep -c pod-far '$work/far-restart.log') = 100"
pass_if "xdp: the restarted agent adopted eth0's XDP link" grep -q 'eth0 xdp: adopted' "$work/agent.log"
# The Service's external IP: its port 80 is served (in XDP, to pod-far);
# any other port is nobody's here, and is dropped at the uplink rather than
# routed back to the router that sent it.
external_far() { [[ "$(from_outside curl -sS -m 3 "http://[fd00:9:e::95]/")" == pod-far* ]]; }
pass_if "xdp: from outside -> external IP fd00:9:e::95:80: pod-far answers" external_far
unknown_before=$(service_count xdp service_port_unknown)
from_outside curl -sS -m 2 -o /dev/null "http://[fd00:9:e::95]:81/" 2>/dev/null
pass_if "xdp: its port 81, which no frontend serves: dropped in the driver (service_port_unknown under xdp)" \
    test "$(($(service_count xdp service_port_unknown) - unknown_before))" -ge 1
# Direct server return inside IPv6 (a reload into it): 40 bytes more per
# packet than the wire's 1500 carry. A datagram that does not fit with the
# outer header is answered with a Packet Too Big from node-a, and the
# client's kernel learns the MTU that fits.
mkdir -p "$root/etc/v6node/dataplane.d"
printf '[services]\nremote_backends = "dsr-ip6ip6"\n' >"$root/etc/v6node/dataplane.d/50-ip6ip6.toml"
kill -HUP "$agent_pid"
in_ip6ip6() { jq_status '.services.remote_backends' | grep -q 'inside IPv6'; }
retry 20 in_ip6ip6
too_big_before=$(service_count ingress too_big)
# The client's socket learns the MTU (IPV6_MTU on a connected socket) from
# the Packet Too Big, and refuses to send as much again.
from_outside python3 -c '
import errno, socket, time
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, IPV6_MTU = 23, 2, 24  # linux/in6.h
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)  # never fragment
s.connect(("fd00:9::a", 30096))
s.send(b"x" * (1461 - 48))
for _ in range(20):
    time.sleep(0.1)
    if s.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU) == 1460:
        break
try:
    s.send(b"x" * (1461 - 48))
    refused = "sent"
except OSError as e:
    refused = errno.errorcode[e.errno]
print(s.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU), refused)
' >"$work/too-big.log" 2>&1
learned() { [[ "$(cat "$work/too-big.log")" == "1460 EMSGSIZE" ]] && (($(service_count ingress too_big) > too_big_before)); }
pass_if "dsr-ip6ip6: a 1461-byte datagram to NodePort 30096 is answered with a Packet Too Big (counted too_big): the client's socket learns MTU 1460 and refuses to send 1461 again ($(cat "$work/too-big.log"))" \
    learned
# A GSO UDP packet, many datagrams in one (a sender's UDP_SEGMENT here; a
# node gets such packets from its uplink's GRO with rx-udp-gro-forwarding
# on), goes inside the outer header whole at tc, and leaves as one packet
# per datagram, each 40 bytes longer. A veth passes a GSO packet on as one
# only to a peer without XDP, so eth0 runs tc for this check, and the
# client has a port of its own on the wire (the wire's checksums are made
# in software, and a socket cannot segment there). node-b runs no agent to
# take the outer header off: its eth0 shows what arrives.
printf '[attach]\nxdp = "tc"\n' >"$root/etc/v6node/dataplane.d/50-tc.toml"
kill -HUP "$agent_pid"
eth0_on_xdp() { ip -n "$node" link show eth0 | grep -q 'prog/xdp'; }
eth0_on_tc() { ! eth0_on_xdp; }
retry 20 eth0_on_tc
gso_client=$id-gso
ip netns add "$gso_client"
cleanup_netns+=("$gso_client")
veth "$gw_ns gsoport" "$gso_client eth0 fd00:9::c/64"
ip -n "$gw_ns" link set gsoport master wire
# node-a finishes the datagrams' checksums itself (tx off), so node-b's
# eth0 shows whole ones rather than a veth's partial sums.
ip netns exec "$node" ethtool -K eth0 tx off >/dev/null
ip netns exec "$far" python3 -c '
import socket, struct
def csum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xffff) + (total >> 16)
    return total
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))
s.bind(("eth0", 0))
s.settimeout(3)
seen = []
try:
    while True:
        frame = s.recv(65535)
        outer, inner = frame[14:54], frame[54:94]
        l4, proto = 94, inner[6]
        if proto == 60:  # the frontend'"'"'s header (Destination Options)
            l4, proto = l4 + (frame[95] + 1) * 8, frame[94]
        udp = frame[l4:]
        if outer[6] != 41 or proto != 17 or udp[2:4] != b"\x14\xe9":  # IPv6 in IPv6, UDP to 5353
            continue
        whole = csum(inner[8:40] + struct.pack("!IxxxB", len(udp), 17) + udp) == 0xffff
        seen.append("%d%s%s" % (len(frame) - 14, "+option" if l4 > 94 else "", "" if whole else " (bad UDP checksum)"))
except socket.timeout:
    pass
print(len(seen), " ".join(sorted(set(seen))))
' >"$work/gso-wire.log" 2>&1 &
sniffer=$!
sleep 0.5
ip netns exec "$gso_client" python3 -c '
import socket
UDP_SEGMENT = 103  # linux/udp.h
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, 200)
s.sendto(b"d" * 600, ("fd00:9::a", 30096))  # one send: three datagrams of 200 bytes
'
wait "$sniffer"
each_datagram() { [[ "$(cat "$work/gso-wire.log")" == "3 312+option" ]]; }
pass_if "dsr-ip6ip6 at tc: one GSO send of 3 UDP datagrams to NodePort 30096 reaches node-b as 3 packets in IPv6 with the frontend's header, 312 bytes each (40 + 40 + 24 + 8 + 200), checksums whole ($(cat "$work/gso-wire.log"))" \
    each_datagram
rm "$root/etc/v6node/dataplane.d/50-tc.toml" "$root/etc/v6node/dataplane.d/50-ip6ip6.toml"
kill -HUP "$agent_pid"
in_masquerade() { jq_status '.services.remote_backends' | grep -q '^masquerade'; }
retry 20 in_masquerade
retry 20 eth0_on_xdp
from_outside ip -6 route flush cache
kc delete service far >/dev/null
kc delete endpointslice far-1 >/dev/null

# --- an ICMPv6 error from a backend reaches the client as the frontend's -------------
# Nothing listens on pod-h's UDP 5399: its kernel answers port unreachable
# from its own address, quoting the datagram as it arrived (to pod-h). Only
# if the error is given the NodePort back does the client's connected
# socket learn of it (ECONNREFUSED); otherwise it waits in vain.
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: { name: quiet, namespace: default }
spec:
  type: NodePort
  clusterIP: fd00:10:96::91
  clusterIPs: ["fd00:10:96::91"]
  ipFamilies: [IPv6]
  externalTrafficPolicy: Local
  ports: [{ name: dns, port: 53, targetPort: 5399, nodePort: 30091, protocol: UDP }]
---
$(endpoint_slice quiet quiet-1 IPv6 '[{ name: dns, port: 5399, protocol: UDP }]' "$pod_h")
EOF
retry 20 served_from_outside 30091
refused_by_the_backend() {
    from_outside python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect(("fd00:9::a", 30091))
s.send(b"query")
try:
    s.recv(512)
except ConnectionRefusedError:
    print("refused"); sys.exit(0)
except socket.timeout:
    print("no answer, no error"); sys.exit(1)
sys.exit(1)'
}
pass_if "from outside -> UDP NodePort 30091, nothing listening in pod-h: the pod's port unreachable reaches the client as the NodePort's (ECONNREFUSED)" \
    refused_by_the_backend
kc delete service quiet >/dev/null
kc delete endpointslice quiet-1 >/dev/null

# --- connections to a backend that leaves end; while it is listed, they stay -------
# pod-h (made by v6node-cni, so the agent knows its namespace) and the node's
# own processes hold connections through web's ClusterIP, over both backends
# (affinity off, so that they spread).
kc patch service web --type=merge -p '{"spec":{"sessionAffinity":"None"}}' >/dev/null
affinity_off() { [[ "$(jq_status --arg v "$vip" '.services.frontends[] | select(.address.ip == $v and .address.port == 80) | .affinity_seconds')" == null ]]; }
retry 20 affinity_off
kc patch endpointslice web-1 --type=json \
    -p "[{\"op\":\"replace\",\"path\":\"/endpoints\",\"value\":[{\"addresses\":[\"${pod_ip[pod-1]}\"],\"conditions\":{\"ready\":true}},{\"addresses\":[\"${pod_ip[pod-2]}\"],\"conditions\":{\"ready\":true}}]}]" >/dev/null
retry 20 both_backends
rm -f "$work/hold.stop"
in_cgroup "$id-pod-h" python3 "$work/hold.py" "$work/hold.stop" "tcp,$vip,80,16" "udp,$vip,53,16" \
    "tcp,${pod_ip[pod-2]},8080" >"$work/hold-pod.log" 2>&1 &
hold_pod=$!
in_cgroup "$node" python3 "$work/hold.py" "$work/hold.stop" "tcp,$vip,80,16" >"$work/hold-node.log" 2>&1 &
hold_node=$!
holding() { grep -qx ready "$work/hold-pod.log" && grep -qx ready "$work/hold-node.log"; }
retry 20 holding
ended_before=$(jq_status '.services.ended_connections.connections // 0')
# pod-2 not ready: out of the tables, still in the slice.
kc patch endpointslice web-1 --type=json -p '[{"op":"replace","path":"/endpoints/1/conditions/ready","value":false}]' >/dev/null
retry 20 one_backend
sleep 1.5
left_at=$(date +%s%N)
kc patch endpointslice web-1 --type=json -p '[{"op":"remove","path":"/endpoints/1"}]' >/dev/null
ended_recorded() { (($(jq_status '.services.ended_connections.connections // 0') > ended_before)); }
retry 10 ended_recorded
sleep 1
touch "$work/hold.stop"
wait "$hold_pod" "$hold_node"
sed 's/^/# /' "$work/hold-pod.log" "$work/hold-node.log" | grep -v ' open$' | grep -v ' ready$'
# fates LOG PROTO ADDRESS BACKEND: the fate of each such connection, one per line.
fates() { awk -v p="$2" -v a="$3" -v b="$4" '$2 == p && $3 == a && $4 == b && NF > 4 { print ($5 == "open" ? "open" : $6 " " $7) }' "$1"; }
# all_ended_after_leaving LOG PROTO: every connection of LOG's PROTO on pod-2
# through the VIP ended with ECONNABORTED, after pod-2 left the slice
# (none while it was only not ready), within 2 s; prints the slowest.
all_ended_after_leaving() {
    local how at count=0 slowest=0 ms
    while read -r how at; do
        [[ "$how" == ECONNABORTED ]] && ((at > left_at)) || { echo "# $how at $at (left at $left_at)"; return 1; }
        ms=$(((at - left_at) / 1000000))
        ((ms > slowest)) && slowest=$ms
        count=$((count + 1))
    done < <(fates "$1" "$2" "$vip" pod-2)
    echo "# $count $2 connection(s) ended; the last $slowest ms after kubectl returned"
    ((count > 0 && slowest < 2000))
}
# end_ms LOG PROTO: when the last of them ended, in ms after kubectl returned.
end_ms() { fates "$1" "$2" "$vip" pod-2 | awk -v t="$left_at" '$1 != "open" { ms = ($2 - t) / 1e6; if (ms > m) m = ms } END { printf "%d", m }'; }
all_open() { [[ -n "$(fates "$@")" ]] && ! fates "$@" | grep -vqx open; }
pass_if "pod-2 not ready (still in the slice): its connections stay; gone from the slice: pod-h's TCP connections to it through [VIP]:80 end (ECONNABORTED), $(end_ms "$work/hold-pod.log" tcp) ms after kubectl returned (under 2 s)" \
    all_ended_after_leaving "$work/hold-pod.log" tcp
pass_if "and pod-h's connected UDP sockets to it through [VIP]:53 end too (ECONNABORTED)" \
    all_ended_after_leaving "$work/hold-pod.log" udp
pass_if "the node's own processes' connections to it through [VIP]:80 end too" \
    all_ended_after_leaving "$work/hold-node.log" tcp
pod1_open() {
    all_open "$work/hold-pod.log" tcp "$vip" pod-1 && all_open "$work/hold-pod.log" udp "$vip" pod-1 &&
        all_open "$work/hold-node.log" tcp "$vip" pod-1
}
pass_if "connections through the VIP to pod-1 stay open (TCP from pod-h and the node; UDP answered)" pod1_open
pass_if "a connection to pod-2's own address (not through the Service) stays open" \
    all_open "$work/hold-pod.log" tcp "${pod_ip[pod-2]}" pod-2
ended_counted() {
    local expected now
    expected=$(cat "$work/hold-pod.log" "$work/hold-node.log" | grep -c " $vip pod-2 ended ECONNABORTED ")
    now=$(jq_status '.services.ended_connections.connections')
    echo "# status: $((now - ended_before)) ended, $expected seen ended; error: $(jq_status '.services.ended_connections.error')"
    ((now - ended_before == expected)) && [[ "$(jq_status '.services.ended_connections.error')" == null ]]
}
pass_if "status counts exactly those connections as ended, without error" ended_counted
ended_metric() {
    local metrics
    metrics=$(curl -s --unix-socket "$work/metrics.sock" http://agent/metrics)
    grep -x "v6node_service_connections_ended_total $(jq_status '.services.ended_connections.connections')" <<<"$metrics" &&
        grep -x 'v6node_service_connections_end_failures_total 0' <<<"$metrics"
}
pass_if "metrics: v6node_service_connections_ended_total says the same, no failures" ended_metric

cni_pod_h DEL '[]' >/dev/null
cni_pod pod-s DEL '[]' >/dev/null
host_ports_gone() { ! jq_status '.services.frontends[].kind' | grep -qx host-port; }
pass_if "CNI DEL: pod-h's hostPorts leave the tables" retry 10 host_ports_gone

# --- the agent restarts under a request loop --------------------------------------
kc patch endpointslice web-1 --type=json \
    -p "[{\"op\":\"replace\",\"path\":\"/endpoints\",\"value\":[{\"addresses\":[\"${pod_ip[pod-1]}\"],\"conditions\":{\"ready\":true}},{\"addresses\":[\"${pod_ip[pod-2]}\"],\"conditions\":{\"ready\":true}}]}]" >/dev/null
retry 20 both_backends
(for i in $(seq 100); do get "[$vip]:80" || echo FAILED; sleep 0.03; done) >"$work/restart.log" 2>&1 &
loop=$!
sleep 0.5
agent_stop
sleep 0.5
agent_start
wait "$loop"
pass_if "100 requests across a restart of the agent: none failed ($(grep -c . "$work/restart.log") answered)" \
    bash -c "! grep -q FAILED '$work/restart.log'"
adopted() { [[ "$(jq_status '[.socket_hooks[] | select(.action == "adopted")] | length')" == 4 ]]; }
pass_if "the restarted agent adopts the 4 hooks (same programs, links kept)" adopted

# --- bad input --------------------------------------------------------------------
endpoint_slice web web-v4 IPv4 '[{ name: http, port: 8080, protocol: TCP }]' 192.0.2.7 | kc apply -f - >/dev/null
ipv4_named() { jq_status '.services.problems[] | "\(.service): \(.reason)"' | grep -q 'default/web: EndpointSlice web-v4: IPv4 endpoints'; }
pass_if "IPv4 endpoints are named in status and ignored" retry 20 ipv4_named
pass_if "and the Service keeps its IPv6 backends" both_backends
# not_served_events SERVICE: the Warning Events the agent put on it.
not_served_events() {
    kc get events -n default --field-selector "involvedObject.name=$1,reason=NotServed,type=Warning" \
        -o jsonpath='{range .items[*]}{.reportingComponent}/{.reportingInstance}: {.message}{"\n"}{end}'
}
ipv4_event() { not_served_events web | grep '^v6node-dataplane/node-a: node node-a: EndpointSlice web-v4: IPv4 endpoints'; }
pass_if "and a Warning Event on Service web says so (reason NotServed, reported by v6node-dataplane on node-a)" \
    retry 20 ipv4_event
{
    cluster_ip_service signalling fd00:10:96::81 '[{ name: sctp, port: 2905, protocol: SCTP }, { name: tcp, port: 2905, protocol: TCP }]'
    endpoint_slice signalling signalling-1 IPv6 '[{ name: sctp, port: 3868, protocol: SCTP }, { name: tcp, port: 8080, protocol: TCP }]' \
        "${pod_ip[pod-1]}" "${pod_ip[pod-2]}"
} | kc apply -f - >/dev/null
both_served() {
    [[ "$(frontend_backends "[fd00:10:96::81]:2905/sctp")" == "[${pod_ip[pod-1]}]:3868 [${pod_ip[pod-2]}]:3868" &&
        "$(frontend_backends "[fd00:10:96::81]:2905/tcp")" == "[${pod_ip[pod-1]}]:8080 [${pod_ip[pod-2]}]:8080" ]]
}
pass_if "an SCTP and a TCP port on one number: both served, each with its own backends' port" retry 20 both_served
no_sctp_problem() { ! jq_status '.services.problems[].service' | grep -qx default/signalling; }
pass_if "and status names no problem with the Service" no_sctp_problem
kc delete service signalling >/dev/null
kc delete endpointslice signalling-1 >/dev/null

# One node publishes Events for the cluster: the first Ready Node by name.
# node-0 (Ready, no agent) sorts before node-a: node-a stays quiet until
# node-0 is gone.
make_node node-0 fd00:9::b fd00:10:244:b::/64
route_synced() { [[ "$(route_syncs)" -gt "$syncs_before" ]]; }
pass_if "a new Node does re-run the route sync" retry 10 route_synced
kc patch node node-0 --subresource=status --type=merge \
    -p '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"a test Node"}]}}' >/dev/null
{
    cluster_ip_service signalling-2 fd00:10:96::82 '[{ name: tcp, port: 2906, protocol: TCP }]'
    endpoint_slice signalling-2 signalling-2-v4 IPv4 '[{ name: tcp, port: 2906, protocol: TCP }]' 10.0.0.2
} | kc apply -f - >/dev/null
problem_2_named() { jq_status '.services.problems[] | "\(.service): \(.reason)"' | grep -q 'default/signalling-2: .*signalling-2-v4'; }
retry 20 problem_2_named
sleep 3
quiet_while_another_reports() { [[ -z "$(not_served_events signalling-2)" ]]; }
pass_if "with node-0 Ready and first by name, node-a publishes no Event for a new problem (status still names it)" \
    quiet_while_another_reports
kc delete node node-0 >/dev/null
problem_2_event() { not_served_events signalling-2 | grep '^v6node-dataplane/node-a: .*signalling-2-v4'; }
pass_if "node-0 deleted: node-a publishes it" retry 20 problem_2_event
kc delete service signalling-2 >/dev/null
kc delete endpointslice signalling-2-v4 >/dev/null

# --- the Service goes ---------------------------------------------------------------
kc delete service web >/dev/null
kc delete endpointslice web-1 web-v4 >/dev/null
gone() { [[ -z "$(frontend_backends "[$vip]:80/tcp")" ]] && ! jq_status '.services.frontends[].address.ip' | grep -qx "$vip"; }
pass_if "a deleted Service leaves the tables; only kubernetes.default stays" retry 20 gone
untranslated_again() { ! from_pod curl -s -m 2 -o /dev/null "http://[$vip]/"; }
pass_if "its ClusterIP no longer leads anywhere" untranslated_again

agent_stop
tap_done
