# SPDX-License-Identifier: Apache-2.0
# Sourced by tests/e2e/kubeadm-join (not a test itself): a real Kubernetes
# control plane on this host, IPv6 only, in the network namespace $gw_ns that
# nat64-gateway.bash made (the node's uplink network), set up the way kubeadm
# init sets one up: its own phases write the certificates, kubeconfigs,
# static pod manifests, cluster configuration, bootstrap token and RBAC. The
# manifests' commands run as plain processes (no registry, no container
# runtime on this host), so token discovery, TLS bootstrap and CSR approval
# are kubeadm's and the controller manager's own.
#
# Every file lives under $cp_dir; the processes see it as /etc/kubernetes
# through a private bind mount, so this host's /etc is left alone.
#
# control_plane_up DIR   starts etcd, kube-apiserver, kube-controller-manager,
#                        kube-scheduler; sets cp_token and cp_ca_hash
# control_plane_down     stops them
# kc ARGS...             kubectl as cluster admin
# dataplane_identity     the agent's ServiceAccount; prints its token
cp_bin=$V6NODE_TOP/build/kubernetes-control-plane
cp_api=fd00:9::1
cp_service_subnet=fd00:10:96::/112
cp_pids=()

# cp_run COMMAND...: in the gateway's network namespace, with $cp_dir/etc
# mounted on /etc/kubernetes (which must exist as a mount point).
cp_run() {
    nsenter --net="/run/netns/$gw_ns" unshare --mount --propagation private \
        bash -c 'mount --bind "$0" /etc/kubernetes && exec "$@"' "$cp_dir/etc" "$@"
}
kc() { cp_run "$cp_bin/kubectl" --kubeconfig=/etc/kubernetes/admin.conf "$@"; }

control_plane_up() {
    cp_dir=$1
    local phase name cmd
    cp_token=$(tr -dc 'a-z0-9' </dev/urandom | head -c 6).$(tr -dc 'a-z0-9' </dev/urandom | head -c 16)
    mkdir -p "$cp_dir/etc" "$cp_dir/etcd" /etc/kubernetes
    cat >"$cp_dir/kubeadm.yaml" <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: "$cp_api"
  bindPort: 6443
nodeRegistration:
  name: v6node-e2e-control-plane
  criSocket: unix:///run/containerd/containerd.sock
bootstrapTokens:
  - token: "$cp_token"
    ttl: 2h
    usages: [signing, authentication]
    groups: ["system:bootstrappers:kubeadm:default-node-token"]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: "$("$cp_bin/kubeadm" version -o short)"
clusterName: v6node-e2e
controlPlaneEndpoint: "[$cp_api]:6443"
certificatesDir: /etc/kubernetes/pki
dns:
  # scripts/build-coredns-image's name for kubeadm's CoreDNS version.
  imageRepository: localhost/v6node
networking:
  serviceSubnet: "$cp_service_subnet"
  podSubnet: "${cp_pod_subnet:-$gateway_pod_prefix}"
etcd:
  local:
    dataDir: "$cp_dir/etcd"
apiServer:
  extraArgs:
    - name: bind-address
      value: "::"
controllerManager:
  extraArgs:
    # The single node gets the whole pod prefix.
    - name: node-cidr-mask-size-ipv6
      value: "64"
    - name: bind-address
      value: "::1"
scheduler:
  extraArgs:
    - name: bind-address
      value: "::1"
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
YAML
    for phase in "certs all" "kubeconfig all" "etcd local" "control-plane all"; do
        # shellcheck disable=SC2086 # the phase is two words
        cp_run "$cp_bin/kubeadm" init phase $phase --config "$cp_dir/kubeadm.yaml" >>"$cp_dir/kubeadm.log" 2>&1 ||
            { tail -n 20 "$cp_dir/kubeadm.log"; return 1; }
    done
    # Each static pod manifest's command line, run as a process of this host.
    for name in etcd kube-apiserver kube-controller-manager kube-scheduler; do
        # The list under "- command:", one "    - arg" per line as kubeadm
        # writes it; YAML single-quotes arguments holding ':'.
        mapfile -t cmd < <(awk '/^  - command:$/ { on = 1; next }
            on && /^    - / { sub(/^    - /, ""); if ($0 ~ /^\x27.*\x27$/) { $0 = substr($0, 2, length($0) - 2); gsub(/\x27\x27/, "\x27") } print; next }
            { on = 0 }' "$cp_dir/etc/manifests/$name.yaml")
        ((${#cmd[@]} > 1)) || { echo "no command in the $name manifest"; return 1; }
        cmd[0]=$cp_bin/${cmd[0]}
        # Not through cp_run: a backgrounded function is a subshell, and $!
        # must be the process itself (nsenter, unshare and bash -c all exec).
        nsenter --net="/run/netns/$gw_ns" unshare --mount --propagation private \
            bash -c 'mount --bind "$0" /etc/kubernetes && exec "$@"' "$cp_dir/etc" "${cmd[@]}" >"$cp_dir/$name.log" 2>&1 &
        cp_pids+=($!)
        [[ $name != etcd ]] || sleep 2
    done
    local ready=
    for _ in $(seq 120); do
        kc get --raw /readyz >/dev/null 2>&1 && { ready=1; break; }
        sleep 1
    done
    [[ -n "$ready" ]] || { tail -n 20 "$cp_dir/kube-apiserver.log"; return 1; }
    # What kubeadm init does after the API server is up, minus the parts that
    # need a kubelet on this host (mark-control-plane, kubelet-finalize) and
    # kube-proxy (the nodes' dataplane serves Services). CoreDNS only when
    # asked (cp_addons=coredns): its pods need nodes, and its image on them.
    local phases=("upload-config kubeadm" "upload-config kubelet" "bootstrap-token")
    [[ " ${cp_addons:-} " != *" coredns "* ]] || phases+=("addon coredns")
    for phase in "${phases[@]}"; do
        # shellcheck disable=SC2086
        cp_run "$cp_bin/kubeadm" init phase $phase --config "$cp_dir/kubeadm.yaml" \
            --kubeconfig /etc/kubernetes/admin.conf >>"$cp_dir/kubeadm.log" 2>&1 ||
            { tail -n 20 "$cp_dir/kubeadm.log"; return 1; }
    done
    cp_ca_hash=sha256:$(openssl x509 -pubkey -noout -in "$cp_dir/etc/pki/ca.crt" |
        openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1)
}

# dataplane_identity: the agent's ServiceAccount and read-only ClusterRole as
# the image ships them; prints the long-lived token the control plane issues
# for it (the token controller fills the Secret within seconds).
dataplane_identity() {
    local token
    kc apply -f - <"$V6NODE_TOP/mkosi.extra/usr/share/v6node/kubernetes/dataplane-rbac.yaml" >/dev/null || return 1
    for _ in $(seq 30); do
        token=$(kc -n kube-system get secret v6node-dataplane-token -o jsonpath='{.data.token}' 2>/dev/null | base64 -d)
        [[ -n "$token" ]] && { echo "$token"; return 0; }
        sleep 1
    done
    return 1
}

# cluster_network_policy_crd: the ClusterNetworkPolicy CRD
# (policy.networking.k8s.io v1beta1, v1alpha2 served too) from its Go module
# through the machine's Go proxy. The experimental channel: a superset of the
# standard one, with the `nodes` peers and named ports v6node enforces.
network_policy_api=v0.3.0
cluster_network_policy_crd() {
    local dir
    dir=$(cd / && go mod download -json "sigs.k8s.io/network-policy-api@$network_policy_api" | jq -r .Dir) || return 1
    kc apply --server-side -f "$dir/config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml" >/dev/null || return 1
    kc wait --for condition=established --timeout=60s crd/clusternetworkpolicies.policy.networking.k8s.io >/dev/null
}

# dataplane_kubeconfig CA TOKEN_FILE: a kubeconfig for the agent, as the join
# writes one (the API server, its CA, the token read from a file).
dataplane_kubeconfig() {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: { server: "https://[$cp_api]:6443", certificate-authority: "$1" }
users:
  - name: v6node-dataplane
    user: { tokenFile: "$2" }
contexts:
  - name: test
    context: { cluster: test, user: v6node-dataplane }
current-context: test
EOF
}

# make_node NAME INTERNAL_IP POD_CIDR...: a Node as kubelet would register it,
# made with kubectl (no kubelet runs).
make_node() {
    local name=$1 ip=$2 cidrs
    shift 2
    cidrs=$(printf '"%s",' "$@")
    printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\nspec:\n  podCIDRs: [%s]\n' "$name" "${cidrs%,}" |
        kc apply -f - >/dev/null &&
        kc patch node "$name" --subresource=status --type=merge \
            -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$ip\"}]}}" >/dev/null
}

# control_plane_wire NS...: for the namespace tests, namespace $gw_ns and the
# given ones (loopback up, IPv6 forwarding on, no DAD), and in $gw_ns the
# bridge "wire" carrying the API server's address, [$cp_api].
control_plane_wire() {
    local ns
    for ns in "$gw_ns" "$@"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.accept_dad=0
    done
    ip -n "$gw_ns" link add wire type bridge
    ip -n "$gw_ns" address add "$cp_api/64" dev wire nodad
    ip -n "$gw_ns" link set wire up
}

# wire_node NS ADDRESS [QUEUES]: NS on the wire, its eth0 at ADDRESS/64 (a
# veth with QUEUES transmit and receive queues, 1 unless given, whose other
# end, portN, is a port of the bridge).
wire_ports=0
wire_node() {
    local ns=$1 address=$2 port=port$((wire_ports++)) queues=${3:-1}
    ip -n "$gw_ns" link add "$port" numtxqueues "$queues" numrxqueues "$queues" type veth \
        peer name eth0 netns "$ns" numtxqueues "$queues" numrxqueues "$queues"
    ip -n "$gw_ns" link set "$port" master wire up
    ip -n "$ns" address add "$address/64" dev eth0 nodad
    ip -n "$ns" link set eth0 up
}

control_plane_down() {
    local pid
    for pid in "${cp_pids[@]}"; do kill "$pid" 2>/dev/null; done
    # kube-apiserver drains for a while on SIGTERM; a test cluster need not.
    local alive
    for _ in $(seq 50); do
        alive=0
        for pid in "${cp_pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.2
    done
    for pid in "${cp_pids[@]}"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    cp_pids=()
    # /etc/kubernetes stays, empty: another control plane of these tests (a
    # cluster from make cluster, a test running beside) may mount over it.
    return 0
}
