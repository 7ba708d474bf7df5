#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The bandwidth manager (bpf/lib/bandwidth.h, agent/src/bandwidth.rs) on
# this host's kernel: the agent follows a real API server
# (tests/e2e/control-plane.bash) and gives pacers to the pods whose Pod
# objects carry kubernetes.io/egress-bandwidth or ingress-bandwidth. Pods
# are namespaces behind node-a made by v6node-cni as containerd would,
# after their Pod objects exist (as kubelet orders it); no kubelet runs.
#
# This host's kernel has no fq qdisc (CONFIG_NET_SCH_FQ is not set and no
# module can be loaded), and fq is what releases paced packets at their
# departure times: here the default mode, auto, has to find that and stay
# off, and mode "on" paces without a queue to hold the packets. What the
# limits do to a stream (rates within 2%) is tested where fq is, in the
# booted image: tests/e2e/cluster and tests/image.
#
#   cp (fd00:9::1, API server, iperf3 servers) --wire-- node-a (fd00:9::a, the agent; eth0 with 2 queues)
#      outside the cluster                                |-- tenant/p10   10 Mbit/s each way
#                                                         |-- tenant/p100  100 Mbit/s each way, then 50 egress
#                                                         |-- tenant/p1g   1 Gbit/s each way
#                                                         |-- tenant/free  no annotation
#                                                         `-- tenant/bad   annotations refused
#
#
#   V6NODE_DATAPLANE=path/to/v6node-dataplane tests/netns/bandwidth.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
use_agent
need iperf3 jq curl tc bpftool

sandbox v6bw
gw_ns=$id-cp node=$id-a
gateway_pod_prefix=fd00:10:244::/56
pods=(p10 p100 p1g free bad)
declare -A pod_ip host_dev
declare -A annotations=(
    [p10]='{"kubernetes.io/egress-bandwidth":"10M","kubernetes.io/ingress-bandwidth":"10M"}'
    [p100]='{"kubernetes.io/egress-bandwidth":"100M","kubernetes.io/ingress-bandwidth":"100M"}'
    [p1g]='{"kubernetes.io/egress-bandwidth":"1G","kubernetes.io/ingress-bandwidth":"1G"}'
    [free]='{}'
    [bad]='{"kubernetes.io/egress-bandwidth":"fast","kubernetes.io/ingress-bandwidth":"0"}'
)
. "$top/tests/e2e/control-plane.bash"
export V6NODE_CNI_CONF_DIR=$work/cni
cni_bin=$(dirname "$bin")/v6node-cni
agent_pid=
cleanup_netns+=("$node" "$gw_ns")
iperf3_pid=
cleanup() {
    ((tap_failed == 0)) || tail -n 40 "$work/agent.log" | sed 's/^/# agent: /'
    [[ -z $iperf3_pid ]] || kill "$iperf3_pid" 2>/dev/null
    control_plane_down
    in_node "$bin" detach --force >/dev/null 2>&1
}
[[ -x "$cni_bin" ]] || { echo "Bail out! no v6node-cni beside the agent ($cni_bin)"; exit 1; }
echo "# building the test control plane (warm Go caches: seconds)"
"$top/scripts/build-kubernetes" --control-plane >"$work/build.log" 2>&1 ||
    { tail -n 20 "$work/build.log" | sed 's/^/# /'; echo "Bail out! control plane build failed"; exit 1; }

control_plane_wire "$node"
wire_node "$node" fd00:9::a 2
ip -n "$gw_ns" route add fd00:10:244:a::/64 via fd00:9::a
namespaces "${pods[@]/#/$id-}"
control_plane_up "$work/cp" >"$work/cp.log" 2>&1 || { cat "$work/cp.log"; echo "Bail out! control plane did not start"; exit 1; }
cp "$work/cp/etc/pki/ca.crt" "$work/ca.crt"
dataplane_identity >"$work/token" || { echo "Bail out! no token for the dataplane's ServiceAccount"; exit 1; }
dataplane_kubeconfig "$work/ca.crt" "$work/token" >"$work/dataplane.conf"
make_node node-a fd00:9::a fd00:10:244:a::/64
kc create namespace tenant >/dev/null
mkdir -p "$root/usr/lib/v6node" "$work/state"
cat >"$root/usr/lib/v6node/dataplane.toml" <<EOF
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
agent_start
retry 30 test -e "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" || { echo "Bail out! the agent wrote no CNI configuration"; exit 1; }

# --- auto, on a kernel without fq: off, and says why -----------------------------------
pass_if "auto mode on a kernel without fq: off, status says the uplink has no fq" \
    test "$(jq_status '[.bandwidth.enabled, .bandwidth.off_because] | @tsv')" \
    = "$(printf 'false\tuplink eth0: this kernel has no fq qdisc (CONFIG_NET_SCH_FQ)')"
pass_if "... the uplink's qdiscs left as the kernel had them (no mq of ours)" \
    bash -c '! tc -n "$1" qdisc show dev eth0 | grep -q 7600' _ "$node"
pass_if "... and that is no problem in status" bash -c '! grep -q bandwidth <<<"$1"' _ "$(jq_status '.problems | join("\n")')"

# --- mode on: pacers for the annotated pods --------------------------------------------
cat >>"$root/usr/lib/v6node/dataplane.toml" <<EOF
[bandwidth]
mode = "on"
EOF
kill -HUP "$agent_pid"
mode_on() { [[ $(jq_status '.bandwidth.enabled') == true ]]; }
retry 10 mode_on
pass_if "mode on: the uplink without fq is a problem in status" \
    bash -c 'grep -qF "bandwidth: uplink eth0: this kernel has no fq qdisc" <<<"$1"' _ "$(jq_status '.problems | join("\n")')"

# --- the pods: Pod objects first, then the plugin's ADD, as kubelet orders them ------
retry 30 kc -n tenant get serviceaccount default >/dev/null 2>&1
for pod in "${pods[@]}"; do
    kc create -f - >/dev/null <<EOF || { echo "Bail out! Pod $pod not made"; exit 1; }
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$pod", "namespace": "tenant", "annotations": ${annotations[$pod]}},
 "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "v6node.test/none"}]}}
EOF
done
# The agent has seen them before their sandboxes start.
pods_made() { [[ $(kc -n tenant get pods -o name | wc -l) == 5 ]]; }
retry 10 pods_made
sleep 1
for pod in "${pods[@]}"; do
    jq -c --arg data "$work/ipam" '.plugins[0] + {cniVersion: (.cniVersions | max), name, dataDir: $data}' \
        "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" |
        in_node env -i PATH="$PATH" CNI_COMMAND=ADD CNI_CONTAINERID="ctr-$pod" CNI_NETNS="/run/netns/$id-$pod" CNI_IFNAME=eth0 \
            CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant;K8S_POD_NAME=$pod" "$cni_bin" >"$work/$pod.json" ||
        { cat "$work/$pod.json"; echo "Bail out! v6node-cni ADD $pod failed"; exit 1; }
    pod_ip[$pod]=$(jq -r '.ips[0].address | sub("/128$"; "")' "$work/$pod.json")
    host_dev[$pod]=$(jq -r '.interfaces[0].name' "$work/$pod.json")
    if [[ $pod == p10 ]]; then
        # Limited as the plugin answers, before any container runs.
        limited_at_add=$(jq_status '[.bandwidth.pods[] | select(.pod == "tenant/p10") | .egress, .ingress] | @tsv')
    fi
    kc -n tenant patch pod "$pod" --subresource=status --type=merge \
        -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"${pod_ip[$pod]}\",\"podIPs\":[{\"ip\":\"${pod_ip[$pod]}\"}]}}" >/dev/null
done
pass_if "a pod is limited when its sandbox's ADD returns (10 Mbit/s each way)" test "$limited_at_add" = "$(printf '10000000\t10000000')"
pass_if "status lists the three limited pods with their rates, not free nor bad" \
    test "$(jq_status '[.bandwidth.pods[] | "\(.pod) \(.egress) \(.ingress)"] | join(",")')" \
    = "tenant/p10 10000000 10000000,tenant/p100 100000000 100000000,tenant/p1g 1000000000 1000000000"
pass_if "a pod limited on ingress is to get an fq on its own device: here a problem naming it" \
    bash -c 'grep -qF "bandwidth: pod tenant/p10: no fq on $2: this kernel has no fq qdisc" <<<"$1"' _ "$(jq_status '.problems | join("\n")')" "${host_dev[p10]}"
pass_if "a pod without a limit keeps its device's default qdisc" bash -c 'tc -n "$1" qdisc show dev "$2" | grep -q "^qdisc noqueue "' _ "$node" "${host_dev[free]}"

pass_if "pods' TCP, whatever the mode: bbr, no slow start after idle, TSO by the kernel's rule, set in the pod's namespace" \
    test "$(at "$id-p10" sysctl -n net.ipv4.tcp_congestion_control net.ipv4.tcp_slow_start_after_idle net.ipv4.tcp_tso_rtt_log | paste -sd' ')" = "bbr 0 9"

# --- bad annotations: refused, named, an Event on the pod; the pod unlimited ------------
problems() { in_node "$bin" status --json | jq -r '.problems | join("\n")'; }
bad_named() {
    local out
    out=$(problems)
    grep -qF 'pod tenant/bad: kubernetes.io/egress-bandwidth: "fast" is no quantity' <<<"$out" &&
        grep -qF 'pod tenant/bad: kubernetes.io/ingress-bandwidth: "0" is unreasonably small (< 1kbit)' <<<"$out" || { echo "$out"; return 1; }
}
pass_if "malformed and zero annotations: status names the pod, the annotation and why" bad_named
events() { kc -n tenant get events --field-selector "involvedObject.name=$1,reason=BandwidthNotLimited" -o jsonpath='{range .items[*]}{.message}{"\n"}{end}'; }
event_says() { events bad | grep -qF "$1"; }
pass_if "... and an Event on the pod says the same" retry 15 event_says 'egress-bandwidth: "fast" is no quantity'
kc -n tenant annotate pod bad --overwrite kubernetes.io/egress-bandwidth=-10M kubernetes.io/ingress-bandwidth=10E >/dev/null
negative_absurd() {
    local out
    out=$(problems)
    grep -qF '"-10M" is unreasonably small' <<<"$out" && grep -qF '"10E" is unreasonably large (> 1Pbit)' <<<"$out" || { echo "$out"; return 1; }
}
pass_if "negative and absurd annotations: refused with kubelet's reasons" retry 10 negative_absurd
limited_pods() { jq_status '[.bandwidth.pods[].pod] | join(",")'; }
pass_if "... the pod stays unlimited" bash -c '[[ $1 != *tenant/bad* ]]' _ "$(limited_pods)"

# --- the pacers at work ----------------------------------------------------------------
# Not through at(): a function in the background is a subshell, whose
# child the exit's kill of the job would leave running.
nsenter --net="/run/netns/$gw_ns" iperf3 -s -B "$cp_api" -p 5201 >"$work/iperf3.log" 2>&1 &
iperf3_pid=$!
retry 10 bound "$gw_ns" tcp 5201
# A second of p1g's stream: without fq nothing holds its packets, but each
# got its departure time on p1g's schedule (BPF counts it).
at "$id-p1g" iperf3 -c "$cp_api" -p 5201 -t 1 -J >"$work/p1g.json"
paced=$(jq_status '.bandwidth.counts | to_entries[] | .value[0] | "\(.packets) \(.bytes)"' | sort -n | tail -n 1)
echo "# p1g's egress pacer: $paced (packets bytes)"
pass_if "a limited pod's packets are paced: its egress pacer counted them" \
    awk -v p="${paced% *}" -v b="${paced#* }" -v sent="$(jq '.end.sum_sent.bytes' "$work/p1g.json")" 'BEGIN { exit !(p > 100 && b >= sent) }'
free_rate=$(at "$id-free" iperf3 -c "$cp_api" -p 5201 -t 2 -J | jq '.end.sum_received.bits_per_second | floor')
echo "# free: $free_rate bit/s"
pass_if "a pod without annotations has no pacer (status lists it nowhere)" bash -c '[[ $1 != *tenant/free* ]]' _ "$(jq_status '[.bandwidth.pods[].pod] | join(",")')"

# --- the limit changed live, the pod left running --------------------------------------
kc -n tenant annotate pod p100 --overwrite kubernetes.io/egress-bandwidth=50M >/dev/null
egress_is() { [[ $(jq_status ".bandwidth.pods[] | select(.pod == \"$1\") | .egress") == "$2" ]]; }
pass_if "a changed annotation is in force without restarting the pod (status: 50 Mbit/s egress)" retry 10 egress_is tenant/p100 50000000
pass_if "... the same pod, same address, its ingress limit kept" \
    test "$(jq_status '.bandwidth.pods[] | select(.pod == "tenant/p100") | "\(.device) \(.ingress)"')" = "${host_dev[p100]} 100000000"

# --- what operators read ----------------------------------------------------------------
text=$(in_node "$bin" status 2>&1)
pass_if "status names the limited pods, their rates and drops" \
    bash -c 'grep -q "^bandwidth:   on (horizon 2000 ms; no uplink); 3 pod(s) limited; pods.* TCP: bbr, slow start after idle off, TSO sized by rate and round trip (the kernel.s default)$" <<<"$1" &&
             grep -q "tenant/p100 on .*: egress 50 Mbit/s (.* packets, .* beyond the horizon); ingress 100 Mbit/s" <<<"$1"' _ "$text"
metrics=$(curl -sf --unix-socket "$work/metrics.sock" http://node/metrics)
pass_if "Prometheus: each limited pod's limit, packets, bytes and drops per direction" \
    bash -c 'grep -q "^v6node_bandwidth_limit_bits_per_second{pod=\"tenant/p10\",direction=\"ingress\"} 10000000$" <<<"$1" &&
             grep -q "^v6node_bandwidth_bytes_total{pod=\"tenant/p1g\",direction=\"egress\"} [1-9]" <<<"$1" &&
             grep -q "^v6node_bandwidth_drops_total{pod=\"tenant/p10\",direction=\"egress\"} [0-9]" <<<"$1" &&
             ! grep -q "pod=\"tenant/free\"" <<<"$1"' _ "$metrics"

# --- thousands of annotated pods in the cluster ----------------------------------------
# 2,000 Pods on another node, every tenth with an annotation this node would
# refuse: the agent keeps only its own, and says nothing of the others.
cpu_before=$(awk '{ print $14 + $15 }' "/proc/$agent_pid/stat")
python3 - "$work/bulk.json" <<'PY'
import json, sys
items = []
for i in range(2000):
    value = "fast" if i % 10 == 0 else f"{i + 1}M"
    items.append({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"bulk-{i}", "namespace": "tenant",
                               "annotations": {"kubernetes.io/egress-bandwidth": value}},
                  "spec": {"nodeName": "node-b", "containers": [{"name": "main", "image": "v6node.test/none"}]}})
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(sys.argv[1], "w"))
PY
start=$SECONDS
kc create -f "$work/bulk.json" >/dev/null
echo "# 2,000 Pods created in $((SECONDS - start)) s"
sleep 3
cpu_after=$(awk '{ print $14 + $15 }' "/proc/$agent_pid/stat")
echo "# the agent's CPU over the 2,000 Pods: $(((cpu_after - cpu_before) * 10)) ms; RSS $(awk '/VmRSS/ { print $2 / 1024 " MiB" }' "/proc/$agent_pid/status")"
pass_if "2,000 annotated Pods elsewhere: still the same three pods limited, no problem of another node's" \
    test "$(jq_status '[(.bandwidth.pods | length), ([.problems[] | select(test("bulk-"))] | length)] | @tsv')" = "$(printf '3\t0')"

# --- a pod gone takes its pacer --------------------------------------------------------
jq -c --arg data "$work/ipam" '.plugins[0] + {cniVersion: (.cniVersions | max), name, dataDir: $data}' \
    "$V6NODE_CNI_CONF_DIR/10-v6node.conflist" |
    in_node env -i PATH="$PATH" CNI_COMMAND=DEL CNI_CONTAINERID=ctr-p10 CNI_NETNS="/run/netns/$id-p10" CNI_IFNAME=eth0 \
        CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant;K8S_POD_NAME=p10" "$cni_bin" >/dev/null
pass_if "a deleted pod's pacer is gone from status" test "$(limited_pods)" = "tenant/p100,tenant/p1g"
pass_if "... and from the map" test "$(bpftool map dump pinned "$V6NODE_PIN_DIR/v6n_bandwidth" -j | jq length)" = 2

# --- mode off: the pacers go -----------------------------------------------------------
sed -i 's/^mode = "on"/mode = "off"/' "$root/usr/lib/v6node/dataplane.toml"
kill -HUP "$agent_pid"
mode_off() { [[ $(jq_status '.bandwidth.enabled') == false ]]; }
retry 10 mode_off
pass_if "mode off: no pod limited, the map empty" \
    test "$(jq_status '.bandwidth.pods | length') $(bpftool map dump pinned "$V6NODE_PIN_DIR/v6n_bandwidth" -j | jq length)" = "0 0"

tap_done
