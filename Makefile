# SPDX-License-Identifier: Apache-2.0
# Entry points; the work is done by scripts/ and tests/.

.PHONY: image dataplane test test-rust test-bpf test-host test-netns test-image bench clean

## Install what is missing (host packages, pinned mkosi) and build the image.
image:
	scripts/setup-host
	scripts/mkosi -f build

## The dataplane agent alone (release build, BPF embedded).
dataplane:
	scripts/setup-host
	scripts/build-dataplane

## Every test tier: Rust units, host scripts, the agent in network
## namespaces, then image build and qemu boot tests.
test:
	tests/run

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

## Figures (not tests), recorded in tests/bench/RESULTS.md: the dataplane
## agent against bpftool, the translator against plain forwarding and tayga,
## then the image's build and boot against stock.
bench:
	tests/bench/dataplane
	tests/bench/nat64 5 3
	tests/bench/pods
	tests/bench/image

clean:
	scripts/mkosi clean
	rm -rf mkosi.output
