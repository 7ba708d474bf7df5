// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the node's uplinks in native XDP: what arrives is
 * decided here, in the driver, before the kernel allocates a packet for it,
 * where that needs no socket:
 *
 * - a denied source's frames (v6n_deny_src) are dropped;
 * - Services reached from outside whose backend is on another node, and a
 *   masquerading node's replies to their clients, are translated and sent
 *   back out of the uplink (lib/nodeport_xdp.h).
 *
 * What XDP decides is counted under V6N_DIRECTION_XDP, with the flow event
 * every verdict has. Everything else passes, unrecorded, to tc's
 * v6n_from_dev and the stack, which record it.
 *
 * Frames may come in several buffers (xdp.frags: the device keeps its MTU
 * and, on veth, its peer's GSO); only the first is read. A frame whose
 * headers do not fit in it passes: tc can pull them, XDP cannot.
 */
#define V6N_CTX_XDP
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/maps.h"
#include "lib/nodeport_xdp.h"
#include "lib/verdict.h"

SEC("xdp.frags")
int v6n_xdp_uplink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);

	if ((void *)(ip6 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6) || ip6->version != 6)
		return XDP_PASS;

	struct v6n_lpm6_key key = { .prefixlen = 128 };

	__builtin_memcpy(key.addr, &ip6->saddr, sizeof(key.addr));
	if (bpf_map_lookup_elem(&v6n_deny_src, &key))
		return v6n_exit(ctx, V6N_DIRECTION_XDP, V6N_REASON_DROP_DENIED_SOURCE, XDP_DROP);

	struct v6n_flow flow = {};
	int action = XDP_PASS;

	if (v6n_flow_parse(data, data_end, &flow) < 0)
		return XDP_PASS;
	enum v6n_reason reason = v6n_nodeport_xdp(ctx, &flow, &action);
	if (reason == V6N_REASON_PASS)
		return XDP_PASS;
	return v6n_exit(ctx, V6N_DIRECTION_XDP, reason, action);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
