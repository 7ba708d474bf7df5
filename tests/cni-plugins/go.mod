// SPDX-License-Identifier: Apache-2.0
// Kubernetes' CNI bandwidth plugin (TBF on the pod's host-side device, an
// ifb device and TBF for what the pod sends), built from the
// containernetworking/plugins Go module (scripts/build-cni-plugins): the
// peer tests/bench/bandwidth sets v6node's bandwidth manager beside.
module v6node.test/cni-plugins

go 1.26.8

require (
	github.com/containernetworking/cni v1.3.1 // indirect
	github.com/containernetworking/plugins v1.10.0 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/nftables v0.3.0 // indirect
	github.com/mdlayher/netlink v1.11.2 // indirect
	github.com/mdlayher/socket v0.6.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.7.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	sigs.k8s.io/knftables v0.0.22 // indirect
)

tool github.com/containernetworking/plugins/plugins/meta/bandwidth
