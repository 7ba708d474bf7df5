# SPDX-License-Identifier: Apache-2.0
# Entry points; the work is done by scripts/ and tests/.

.PHONY: image test test-host test-image bench clean

## Install what is missing (host packages, pinned mkosi) and build the image.
image:
	scripts/setup-host
	scripts/mkosi -f build

## Every test tier: host-side tests, then image build and qemu boot tests.
test:
	tests/run

test-host:
	tests/run host

test-image:
	tests/run image

## Build and boot figures (not tests); recorded in tests/bench/RESULTS.md.
bench:
	tests/bench/image

clean:
	scripts/mkosi clean
	rm -rf mkosi.output
