// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Passes every frame. On the far end of a test's veth whose near end runs
 * v6node's XDP, it is what lets the far end take the frames XDP sends back
 * (XDP_TX): a veth receives its peer's XDP frames only while it runs an
 * XDP program itself (on this host's kernel, GRO alone is not enough).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp.frags")
int pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
