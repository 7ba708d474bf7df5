# SPDX-License-Identifier: Apache-2.0
# Entry points; the work is done by scripts/ and tests/.

.PHONY: image kubernetes dataplane cluster cluster-down test test-cluster test-lint test-rust test-bpf test-host test-netns test-image test-e2e test-e2e-more test-conformance conformance conformance-services conformance-netpol conformance-cnp bench clean

## Install what is missing (host packages, pinned mkosi) and build the image
## and the Kubernetes sysext (mkosi.output/v6node_*.raw, kubernetes.raw).
## V6NODE_SECURE_BOOT_KEY=... V6NODE_SECURE_BOOT_CERTIFICATE=... sign it.
image:
	scripts/setup-host
	scripts/mkosi -f build

## Kubernetes binaries for the sysext, from the Go module (the image target
## runs this too). KUBERNETES_RELEASE_URL=... takes the release binaries instead.
kubernetes:
	scripts/build-kubernetes $(if $(KUBERNETES_RELEASE_URL),--release $(KUBERNETES_RELEASE_URL))

## The dataplane agent alone (release build, BPF embedded).
dataplane:
	scripts/setup-host
	scripts/build-dataplane

## A local cluster: the control plane on this machine and NODES nodes
## booted from the image under qemu, all Ready; admin kubeconfig in
## mkosi.output/cluster/admin.conf (scripts/cluster kubectl get nodes).
NODES ?= 2
cluster:
	scripts/cluster up $(NODES)

cluster-down:
	scripts/cluster down

## The test tiers CI runs: style (rustfmt, clippy, the config reference),
## Rust units, host scripts, the agent in network namespaces, image build,
## qemu boot and A/B update tests, then a two-node cluster end to end
## (test-e2e-more has the runs left out for time, Kubernetes' conformance
## specs among them).
test:
	tests/run

## test-e2e's checks and test-conformance's specs on one two-node cluster.
test-cluster:
	tests/run cluster

## rustfmt and clippy over the dataplane (warnings fail), and the
## configuration reference against the keys the config crate accepts.
test-lint:
	tests/run lint

test-rust:
	tests/run rust

test-bpf:
	tests/run bpf

test-netns:
	tests/run netns

test-host:
	tests/run host

test-image:
	tests/run image

test-e2e:
	tests/run e2e

## Not in make test, which would outgrow CI's 90 minutes with them
## (tests/run says more): one node joining with wrong, then right join
## credentials (tests/e2e/kubeadm-join), the two-node cluster routed by BGP,
## and Kubernetes' [sig-network] [Conformance] specs (test-conformance).
test-e2e-more:
	tests/run e2e-more

## Every [sig-network] [Conformance] spec of the pinned release's e2e.test
## against a two-node make cluster of its own; report in
## mkosi.output/conformance/report/report.md.
test-conformance conformance:
	tests/run conformance

## The wider selection: [sig-network] Services, DNS, Conntrack, HostPort,
## KubeProxy and Networking specs that are not [Conformance] and need no
## cloud, serial run or feature gate (tests/conformance/run --services).
conformance-services:
	tests/conformance/run --services

## Kubernetes' own NetworkPolicy specs ([sig-network] Netpol) against a
## two-node make cluster (tests/conformance/run --netpol).
conformance-netpol:
	tests/conformance/run --netpol

## sigs.k8s.io/network-policy-api's ClusterNetworkPolicy conformance suite,
## standard and experimental, against a two-node make cluster
## (tests/conformance/run --cnp).
conformance-cnp:
	tests/conformance/run --cnp

## Figures (not tests), recorded in tests/bench/RESULTS.md: the dataplane
## agent against bpftool, the translator against plain forwarding and tayga,
## stateful NAT64 against the kernel's NAT44 and the NAT46 gateway against
## its DNAT,
## pod to pod on one node and across two (against the kernel's routing path
## and a single veth pair), a ClusterIP against kube-proxy (nftables and
## iptables) and the pod's own address, a NodePort from outside against the
## pod's own address, stateful NAT64 under a minute of churn against
## NAT44, NodePort, NAT64 and the NAT46 gateway in XDP (one arm and two)
## against tc and the kernel's, pod bandwidth limits against the CNI bandwidth plugin's TBF (on
## this host's kernel, then on the image's, which has fq, in a VM), then
## the image's build and boot against stock.
bench:
	tests/bench/dataplane
	tests/bench/nat64 5 3
	tests/bench/nat64-stateful 5 3
	tests/bench/nat64-churn 60 8
	tests/bench/nat46-gateway 5 3
	tests/bench/pods
	tests/bench/nodes
	tests/bench/services
	tests/bench/nodeport
	tests/bench/xdp
	tests/bench/xdp-nat64
	ARMS=2 tests/bench/xdp-nat64
	tests/bench/bandwidth
	tests/bench/in-image bandwidth
	tests/bench/image

clean:
	scripts/mkosi clean
	rm -rf mkosi.output
