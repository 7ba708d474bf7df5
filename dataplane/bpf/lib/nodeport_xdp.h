/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Services reached from outside, in the uplink's driver (native XDP): the
 * connections whose packets go straight back out of the uplink they came
 * in by, or out of another that runs XDP (lib/xdp_send.h), to a backend on
 * another node, or as a masquerading node's reply to its client. The decisions and the connection tracking are
 * lib/nodeport.h's, on the same maps, so a packet XDP leaves to tc (and any
 * later packet of the connection) finds the state XDP made; the frame
 * leaves byte for byte as tc's v6n_from_dev would send it.
 *
 * Left to tc, untouched, with nothing recorded: a backend on this node (a
 * pod, or the node itself), a next hop that is not out of an uplink XDP
 * sends by or whose neighbour the kernel has yet to resolve, a packet the FIB says
 * is too big or whose hop limit is out (the stack answers those), a
 * backend that left, SCTP (its checksum covers the whole packet), ICMPv6
 * errors, and direct server return's frontend header arriving here (for a
 * backend here). Direct server return's header is pushed here too. What
 * nothing admits, a Service VIP's port no frontend has, is dropped here.
 */
#ifndef V6NODE_LIB_NODEPORT_XDP_H
#define V6NODE_LIB_NODEPORT_XDP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "csum.h"
#include "ct.h"
#include "ctx.h"
#include "fib.h"
#include "nodeport_state.h"
#include "xdp_fib.h"
#include "xdp_send.h"

/* The kernel's bpf_l4_csum_replace on a packet without a partial
 * checksum: the sum is unfolded to 32 bits, complemented, added to `diff`
 * and folded; a UDP checksum of 0 (none) is left alone and a result of 0
 * written as 0xffff (BPF_F_MARK_MANGLED_0). The same arithmetic gives the
 * same bytes as tc's rewrite of the same packet. */
static __always_inline void v6n_xdp_csum_replace(__u16 *sum, __u32 diff, int udp)
{
	if (udp && *sum == 0)
		return;
	*sum = v6n_csum_fold(v6n_csum_add(diff, ~(__u32)*sum));
	if (udp && *sum == 0)
		*sum = 0xffff;
}

/* Where the transport header of a frame XDP rewrites starts: right after
 * the Ethernet and IPv6 headers (a jumbo option never reaches a driver). */
#define V6N_XDP_L4_OFFSET V6N_L4_OFFSET

/*
 * Rewrites the frame of `flow` to leave as `out`, as v6n_ct_rewrite does
 * a socket buffer: addresses, then ports, each step mending the transport
 * checksum. Returns 0, or -1 when the frame is not as `flow` read it.
 */
static __always_inline int v6n_xdp_rewrite(struct xdp_md *ctx, const struct v6n_flow *flow,
					   const struct v6n_ct_value *out)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;
	int udp = flow->key.proto == IPPROTO_UDP;
	__u32 l4 = flow->l4_offset;

	if (l4 != V6N_XDP_L4_OFFSET)
		return -1;
	__be16 *ports = data + V6N_XDP_L4_OFFSET;
	__u16 *sum = data + V6N_XDP_L4_OFFSET +
		     (udp ? __builtin_offsetof(struct udphdr, check) : __builtin_offsetof(struct tcphdr, check));
	if ((void *)(ip6 + 1) > data_end || (void *)(ports + 2) > data_end || (void *)(sum + 1) > data_end)
		return -1;

	v6n_xdp_csum_replace(sum, v6n_csum_diff((void *)flow->key.saddr, 32, (void *)out->saddr, 32), udp);
	__builtin_memcpy(&ip6->saddr, out->saddr, 32);
	if (out->sport != flow->key.sport || out->dport != flow->key.dport) {
		__u32 old_ports = flow->key.sport | (__u32)flow->key.dport << 16;
		__u32 new_ports = out->sport | (__u32)out->dport << 16;

		v6n_xdp_csum_replace(sum, v6n_csum_diff(&old_ports, 4, &new_ports, 4), udp);
		ports[0] = out->sport;
		ports[1] = out->dport;
	}
	return 0;
}

/*
 * Where a frame leaving as `out` goes: the FIB's next hop, when it is out
 * of the uplink the frame came in by with its neighbour known, the frame
 * fits the route's MTU and has hop limit to spare; `fib` then holds the
 * MACs. Returns 0 so, -1 for anything tc and the stack must see.
 */
static __always_inline int v6n_xdp_next_hop(struct xdp_md *ctx, const struct v6n_flow *flow,
					    const struct v6n_ct_value *out, struct bpf_fib_lookup *fib)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;

	if ((void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1)
		return -1;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET6;
	fib->ifindex = ctx->ingress_ifindex;
	fib->l4_protocol = flow->key.proto;
	fib->tot_len = bpf_xdp_get_buff_len(ctx) - V6N_L3_OFFSET;
	/* Inside an outer header it must fit too: else tc sends the client
	 * a Packet Too Big. */
	if (out->flags & V6N_CT_DSR_IP6IP6)
		fib->tot_len += sizeof(struct ipv6hdr);
	__builtin_memcpy(fib->ipv6_src, out->saddr, 16);
	__builtin_memcpy(fib->ipv6_dst, out->daddr, 16);
	if (v6n_xdp_fib_lookup(ctx, fib) != BPF_FIB_LKUP_RET_SUCCESS ||
	    !v6n_xdp_sends_by(ctx->ingress_ifindex, fib->ifindex))
		return -1;
	return 0;
}

/*
 * Direct server return's frontend header on a frame XDP sends to a backend
 * on another node, as v6n_dsr_push puts it on a socket buffer (the same
 * packets get it: a TCP SYN, a UDP packet that still fits IPv6's minimum
 * MTU): the Ethernet and IPv6 headers move to the front of 24 new bytes,
 * which take the header. The transport checksum does not change: the
 * pseudo-header's length is the transport's. Returns 0, or -1 when the
 * frame could not be grown.
 */
static __always_inline int v6n_xdp_dsr_push(struct xdp_md *ctx, const struct v6n_flow *flow)
{
	struct v6n_dsr_header opt = {
		.hdrlen = (sizeof(opt) - 8) / 8,
		.nexthdr = flow->key.proto,
		.opt_type = V6N_DSR_OPT_TYPE,
		.opt_len = sizeof(opt) - 4,
		.port = flow->key.dport,
	};
	__u32 grown = bpf_xdp_get_buff_len(ctx) - V6N_L3_OFFSET + sizeof(opt);
	struct {
		struct ethhdr eth;
		struct ipv6hdr ip6;
	} __attribute__((packed)) head;

	if (flow->key.proto == IPPROTO_TCP ? !v6n_tcp_opens(flow->tcp_flags) : grown > V6N_IPV6_MIN_MTU)
		return 0;
	__builtin_memcpy(opt.addr, flow->key.daddr, 16);
	if (bpf_xdp_load_bytes(ctx, 0, &head, sizeof(head)) < 0 || bpf_xdp_adjust_head(ctx, -(int)sizeof(opt)) < 0)
		return -1;
	head.ip6.payload_len = bpf_htons(bpf_ntohs(head.ip6.payload_len) + sizeof(opt));
	head.ip6.nexthdr = IPPROTO_DSTOPTS;
	if (bpf_xdp_store_bytes(ctx, 0, &head, sizeof(head)) < 0 ||
	    bpf_xdp_store_bytes(ctx, sizeof(head), &opt, sizeof(opt)) < 0)
		return -1;
	return 0;
}

/* Direct server return inside IPv6 (V6N_CT_DSR_IP6IP6) on a frame XDP
 * sends, as v6n_ip6ip6_push does it on a socket buffer: Ethernet moves to
 * the front of 40 new bytes, which take the outer header. Returns 0, or
 * -1 when the frame could not be grown. */
static __always_inline int v6n_xdp_ip6ip6_push(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct v6n_lb_config *cfg = bpf_map_lookup_elem(&v6n_lb_cfg, &zero);
	struct ethhdr eth;
	struct ipv6hdr inner, outer;

	if (!cfg || bpf_xdp_load_bytes(ctx, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_xdp_load_bytes(ctx, V6N_L3_OFFSET, &inner, sizeof(inner)) < 0)
		return -1;
	v6n_ip6ip6_outer(&outer, &inner, cfg->masquerade_addr);
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(outer)) < 0 || bpf_xdp_store_bytes(ctx, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_xdp_store_bytes(ctx, V6N_L3_OFFSET, &outer, sizeof(outer)) < 0)
		return -1;
	return 0;
}

/* Sends the rewritten frame out of the next hop's uplink, as v6n_route6
 * would route it: hop limit decremented, the next hop's MACs. */
static __always_inline int v6n_xdp_transmit(struct xdp_md *ctx, const struct bpf_fib_lookup *fib)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;

	if ((void *)(ip6 + 1) > data_end)
		return XDP_DROP;
	ip6->hop_limit--;
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	return v6n_xdp_send(ctx, fib->ifindex);
}

/*
 * The uplink's NodePort in XDP for the frame of `flow`. Returns
 * V6N_REASON_PASS for every frame it leaves to tc (untouched, nothing
 * recorded), else the reason to count with the action in *action.
 */
static __always_inline enum v6n_reason v6n_nodeport_xdp(struct xdp_md *ctx, const struct v6n_flow *flow, int *action)
{
	struct bpf_fib_lookup fib;
	struct v6n_ct_value out;
	__u64 now = 0;
	enum v6n_reason reason = V6N_REASON_LB_TRACKED;

	/* SCTP's checksum is a CRC over the whole packet: tc rewrites it. */
	if (flow->key.proto == IPPROTO_SCTP)
		return V6N_REASON_PASS;
	struct v6n_ct_value *entry = v6n_ct_lookup(flow, &now);
	if (entry) {
		if (!(entry->flags & V6N_CT_REPLY)) {
			/* A pod here: tc delivers it, and looks the entry up itself. */
			if (v6n_endpoint((const struct in6_addr *)entry->daddr))
				return V6N_REASON_PASS;
			/* A backend that left: tc ends the connection. */
			struct v6n_l4_addr *backend = bpf_map_lookup_elem(&v6n_backends, &entry->backend_id);
			if (!backend || !v6n_same_addr(backend->addr, entry->daddr) || backend->port != entry->dport)
				return V6N_REASON_PASS;
		}
		__builtin_memcpy(&out, entry, sizeof(out));
		if (v6n_xdp_next_hop(ctx, flow, &out, &fib) < 0)
			return V6N_REASON_PASS;
		v6n_ct_touch(entry, flow, v6n_now(&now));
	} else {
		struct v6n_nodeport_pick pick;

		if (v6n_nodeport_pick(ctx, flow, &pick) < 0) {
			if (!v6n_nodeport_unserved(flow))
				return V6N_REASON_PASS;
			*action = XDP_DROP;
			return V6N_REASON_DROP_NO_FRONTEND;
		}
		if (!pick.backend)
			return V6N_REASON_PASS;
		/* What the packet will leave as, for the FIB to place the backend
		 * (a next hop out of an uplink is on another node) and to say
		 * whether it fits, an outer header included. */
		__builtin_memcpy(out.saddr, flow->key.saddr, 16);
		__builtin_memcpy(out.daddr, pick.backend->addr, 16);
		out.flags = v6n_lb_remote_flags(v6n_lb_config()) & V6N_CT_DSR_IP6IP6;
		if (v6n_endpoint((const struct in6_addr *)pick.backend->addr) || v6n_xdp_next_hop(ctx, flow, &out, &fib) < 0)
			return V6N_REASON_PASS;
		reason = v6n_nodeport_new(flow, &pick, 1, &out, v6n_now(&now));
		if (reason != V6N_REASON_LB_TRANSLATED) {
			*action = XDP_DROP;
			return reason;
		}
	}
	if (v6n_xdp_rewrite(ctx, flow, &out) < 0 || ((out.flags & V6N_CT_DSR) && v6n_xdp_dsr_push(ctx, flow) < 0) ||
	    ((out.flags & V6N_CT_DSR_IP6IP6) && v6n_xdp_ip6ip6_push(ctx) < 0)) {
		*action = XDP_DROP;
		return V6N_REASON_DROP_MALFORMED;
	}
	*action = v6n_xdp_transmit(ctx, &fib);
	return reason;
}

#endif /* V6NODE_LIB_NODEPORT_XDP_H */
