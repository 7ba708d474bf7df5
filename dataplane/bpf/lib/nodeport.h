/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Services reached from outside the cluster: NodePorts on this node's
 * addresses, external and load-balancer IPs, hostPorts. Their packets come in
 * through an uplink, where no socket hook sees them, so they are translated
 * per packet and tracked (lib/ct.h):
 *
 * - a backend on this node (a pod, or the node itself) gets the packet with
 *   the client's own address as its source, and its replies are given the
 *   frontend's address back on their way out (pod device or uplink egress);
 * - a backend on another node gets it from this node's masquerade address
 *   (v6n_lb_cfg), so its replies come back here to be given the frontend's
 *   address and sent to the client; or, with direct server return
 *   (V6N_LB_DSR), with the client's own address and a header naming the
 *   frontend, and the backend's node gives the replies the frontend's
 *   address itself, so a flow that lands on yet another node (an ECMP
 *   change) still reaches the same backend with the same addresses.
 *
 * The backend is chosen by Maglev over a hash of the client's address and
 * port (address alone with ClientIP affinity), the same on every node.
 *
 * SCTP from this node's pods and its own processes to any frontend is
 * translated per packet too (v6n_service_sctp): no socket hook sees it.
 *
 * ICMPv6 errors about such a connection's packets (a Packet Too Big from the
 * client's path, a port unreachable from the backend) are rewritten to quote
 * the packet as the other side knows it and sent there, as a NAT must
 * (RFC 5508's rules, for IPv6): the backend learns the path MTU to its
 * client, the client hears of a backend that is gone.
 */
#ifndef V6NODE_LIB_NODEPORT_H
#define V6NODE_LIB_NODEPORT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include <linux/icmpv6.h>

#include "csum.h"
#include "ct.h"
#include "endpoint.h"
#include "fib.h"
#include "lb.h"
#include "nodeport_state.h"
#include "xlat.h" /* v6n_icmp6_error */

/* Rewrites a packet of a Service connection (TCP, UDP, SCTP) to leave as `out`. */
static __always_inline int v6n_service_rewrite(struct __sk_buff *skb, const struct v6n_flow *flow,
					       const struct v6n_ct_value *out)
{
	if (flow->key.proto == IPPROTO_SCTP)
		return v6n_ct_rewrite_sctp(skb, flow, out);
	return v6n_ct_rewrite(skb, flow, out);
}

/*
 * Hands a rewritten packet on: into the pod it is now for, to the next hop
 * the FIB names, or to this node's stack (a backend in the node's own
 * network namespace, a reply to be routed by the kernel).
 */
static __always_inline int v6n_nodeport_deliver(struct __sk_buff *skb, int at_ingress)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;

	if ((void *)(ip6 + 1) > data_end)
		return TC_ACT_SHOT;
	struct v6n_endpoint_value *pod = v6n_endpoint(&ip6->daddr);
	if (pod)
		return v6n_to_endpoint(skb, ip6, pod, at_ingress);

	return v6n_route6(skb, ip6);
}

/* ICMPv6 error types (RFC 4443): 1 Destination Unreachable, 2 Packet Too
 * Big, 3 Time Exceeded, 4 Parameter Problem. */
#define V6N_ICMP6_ERROR_LAST 4
#define V6N_ICMP6_HDR_LEN 8
#define V6N_TCP_CSUM_AT 16
#define V6N_UDP_CSUM_AT 6

/*
 * An ICMPv6 error quoting a packet of a tracked connection as it crossed this
 * node (one side's addresses) is rewritten to quote it as the other side
 * sent or received it, and addressed to that side. Either direction's entry
 * names the other side: it is the quoted packet's reverse, so both cases are
 * one lookup. The error's source is translated too when it is the quoted
 * packet's destination (that endpoint itself reports), as the other side
 * knows it. Returns 1 when rewritten, 0 for any other packet (left alone),
 * -1 when it could not be written.
 *
 * Its own frame: the checksum sums are taken straight from the packet and
 * the entry (a sum does not care where its words sit), as the programs that
 * call it leave little of BPF's 512-byte stack.
 */
static __noinline int v6n_nodeport_icmp_error(struct __sk_buff *skb)
{
	const __u32 inner_l3 = V6N_L4_OFFSET + V6N_ICMP6_HDR_LEN;
	const __u32 inner_l4 = inner_l3 + sizeof(struct ipv6hdr);
	const __u32 icmp_csum_at = V6N_L4_OFFSET + __builtin_offsetof(struct icmp6hdr, icmp6_cksum);
	__u32 need = inner_l4 + sizeof(struct udphdr);
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;

	/* Every packet that is not TCP or UDP comes here: leave all but
	 * ICMPv6 before pulling anything (the IPv6 header is linear). */
	if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_ICMPV6 || skb->len < need)
		return 0;
	if (data + need > data_end && bpf_skb_pull_data(skb, need) < 0)
		return 0;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip6 = data + V6N_L3_OFFSET;
	struct icmp6hdr *icmp = data + V6N_L4_OFFSET;
	struct ipv6hdr *inner = data + inner_l3;
	__be16 *ports = data + inner_l4;

	if ((void *)(ports + 2) > data_end || ip6->nexthdr != IPPROTO_ICMPV6 || icmp->icmp6_type == 0 ||
	    icmp->icmp6_type > V6N_ICMP6_ERROR_LAST)
		return 0;
	__u8 proto = inner->nexthdr;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP)
		return 0;
	struct v6n_ct_key key = { .sport = ports[1], .dport = ports[0], .proto = proto };
	__builtin_memcpy(key.saddr, &inner->daddr, 16);
	__builtin_memcpy(key.daddr, &inner->saddr, 16);
	struct v6n_ct_value *entry = bpf_map_lookup_elem(&v6n_ct, &key);
	if (!entry || v6n_ct_service_expired(entry, proto, bpf_ktime_get_ns()))
		return 0;

	/* The quote becomes (entry's destination -> entry's source). */
	__u32 diff = v6n_csum_diff(&inner->saddr, 32, entry->saddr, 32);
	diff = v6n_csum_add(diff, v6n_csum_diff(ports, 4, &entry->sport, 4));
	__u32 new_ports = entry->dport | (__u32)entry->sport << 16;
	/* The quoted transport checksum, when the quote reaches it, follows
	 * its addresses and ports; the ICMPv6 checksum covers that change too.
	 * SCTP's covers the whole packet, which a quote may cut short: it is
	 * left as it was (SCTP matches an error by ports and verification tag). */
	__u32 csum_at = inner_l4 + (proto == IPPROTO_TCP ? V6N_TCP_CSUM_AT : V6N_UDP_CSUM_AT);
	__u16 *quoted_csum = data + csum_at;
	__u32 old_csum = 0, new_csum = 0;
	int quoted_csum_follows =
		proto != IPPROTO_SCTP && (void *)(quoted_csum + 1) <= data_end && *quoted_csum != 0;
	if (quoted_csum_follows) {
		old_csum = *quoted_csum;
		new_csum = v6n_csum_update(old_csum, diff);
		diff = v6n_csum_add(diff, v6n_csum_diff(&old_csum, 4, &new_csum, 4));
	}
	/* The error goes to the entry's destination, from the entry's source
	 * when the quoted packet's destination sent it. */
	int source_too = v6n_same_addr((__u8 *)&ip6->saddr, (__u8 *)&inner->daddr);
	__u32 outer_diff = v6n_csum_diff(&ip6->daddr, 16, entry->daddr, 16);
	if (source_too)
		outer_diff = v6n_csum_add(outer_diff, v6n_csum_diff(&ip6->saddr, 16, entry->saddr, 16));

	const __u32 inner_saddr_at = inner_l3 + __builtin_offsetof(struct ipv6hdr, saddr);
	const __u32 outer_saddr_at = V6N_L3_OFFSET + __builtin_offsetof(struct ipv6hdr, saddr);
	if ((quoted_csum_follows && bpf_skb_store_bytes(skb, csum_at, &new_csum, sizeof(__u16), 0) < 0) ||
	    bpf_skb_store_bytes(skb, inner_saddr_at, entry->daddr, 16, 0) < 0 ||
	    bpf_skb_store_bytes(skb, inner_saddr_at + 16, entry->saddr, 16, 0) < 0 ||
	    bpf_skb_store_bytes(skb, inner_l4, &new_ports, 4, 0) < 0 ||
	    bpf_l4_csum_replace(skb, icmp_csum_at, 0, diff, 0) < 0 ||
	    (source_too && bpf_skb_store_bytes(skb, outer_saddr_at, entry->saddr, 16, 0) < 0) ||
	    bpf_skb_store_bytes(skb, outer_saddr_at + 16, entry->daddr, 16, 0) < 0 ||
	    bpf_l4_csum_replace(skb, icmp_csum_at, 0, outer_diff, BPF_F_PSEUDO_HDR) < 0)
		return -1;
	return 1;
}

/* The IPv6 header's payload length and next header (side by side), with a
 * CHECKSUM_COMPLETE packet's sum kept right. */
static __always_inline int v6n_set_length_and_next(struct __sk_buff *skb, __u16 payload_len, __u8 nexthdr)
{
	struct {
		__be16 payload_len;
		__u8 nexthdr;
	} __attribute__((packed)) fields = { .payload_len = bpf_htons(payload_len), .nexthdr = nexthdr };

	return bpf_skb_store_bytes(skb, V6N_L3_OFFSET + __builtin_offsetof(struct ipv6hdr, payload_len), &fields,
				   sizeof(fields), BPF_F_RECOMPUTE_CSUM);
}

/*
 * bpf_skb_adjust_room's `flags` for a header added to or taken from a
 * packet whose transport is `l4_proto`. A GSO TCP packet (the uplink's GRO
 * made it of a client's segments) has its segments cut by the difference,
 * so that each still fits; a GSO UDP packet's segment size is where its
 * datagrams end, so it must stay as it is (the kernel refuses to resize
 * such a packet otherwise), and each datagram gains the header.
 */
static __always_inline int v6n_gso_udp(const struct __sk_buff *skb, __u8 l4_proto)
{
	return skb->gso_size && l4_proto == IPPROTO_UDP;
}

static __always_inline __u64 v6n_room_flags(const struct __sk_buff *skb, __u8 l4_proto, __u64 flags)
{
	return v6n_gso_udp(skb, l4_proto) ? flags | BPF_F_ADJ_ROOM_FIXED_GSO : flags;
}

/* The length of the packet's largest datagram once grown by `added`: a GSO
 * UDP packet's datagrams are sent one by one. */
static __always_inline __u32 v6n_grown_datagram(const struct __sk_buff *skb, __u8 l4_proto, __u32 added)
{
	if (v6n_gso_udp(skb, l4_proto))
		return sizeof(struct ipv6hdr) + sizeof(struct udphdr) + skb->gso_size + added;
	return skb->len - V6N_L3_OFFSET + added;
}

/*
 * Direct server return, the receiving node's half: the packet of a
 * connection whose backend is on another node (rewritten for the backend,
 * the client's address kept) gets the header naming its frontend. Every TCP
 * SYN carries it; a UDP packet carries it while the result still fits
 * IPv6's minimum MTU, so the header never makes a packet too big for the
 * path (a TCP connection's later packets, and a UDP flow's larger ones, go
 * bare: the backend's node keeps what the first ones told it). Returns 0,
 * or -1 when the packet could not be written.
 */
static __noinline int v6n_dsr_push(struct __sk_buff *skb, const struct v6n_flow *flow)
{
	struct v6n_dsr_header opt = {
		.hdrlen = (sizeof(opt) - 8) / 8,
		.opt_type = V6N_DSR_OPT_TYPE,
		.opt_len = sizeof(opt) - 4,
		.port = flow->key.dport,
	};
	__u32 grown = v6n_grown_datagram(skb, flow->key.proto, sizeof(opt));

	if (flow->key.proto == IPPROTO_TCP ? !v6n_tcp_opens(flow->tcp_flags) : grown > V6N_IPV6_MIN_MTU)
		return 0;
	/* A jumbogram's hop-by-hop header comes first: such packets go bare. */
	if (flow->l4_offset != V6N_L4_OFFSET)
		return 0;
	/* The transport header follows the IPv6 header: it is the next header. */
	opt.nexthdr = flow->key.proto;
	__builtin_memcpy(opt.addr, flow->key.daddr, 16);
	__be16 payload_len;
	if (bpf_skb_load_bytes(skb, V6N_L3_OFFSET + __builtin_offsetof(struct ipv6hdr, payload_len), &payload_len,
			       sizeof(payload_len)) < 0 ||
	    bpf_skb_adjust_room(skb, sizeof(opt), BPF_ADJ_ROOM_NET, v6n_room_flags(skb, flow->key.proto, 0)) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_L4_OFFSET, &opt, sizeof(opt), BPF_F_RECOMPUTE_CSUM) < 0 ||
	    v6n_set_length_and_next(skb, bpf_ntohs(payload_len) + sizeof(opt), IPPROTO_DSTOPTS) < 0)
		return -1;
	return 0;
}

/* uapi's BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (Linux 6.3); older headers lack it. */
#define V6N_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)

/*
 * Direct server return inside IPv6 (V6N_CT_DSR_IP6IP6), the receiving
 * node's half: the packet v6n_dsr_push made goes inside an outer IPv6
 * header to the backend (v6n_ip6ip6_outer). Returns 0, or -1 when the
 * packet could not be grown.
 */
static __noinline int v6n_ip6ip6_push(struct __sk_buff *skb, __u8 l4_proto)
{
	__u32 zero = 0;
	struct v6n_lb_config *cfg = bpf_map_lookup_elem(&v6n_lb_cfg, &zero);
	struct ipv6hdr inner, outer;

	if (!cfg || bpf_skb_load_bytes(skb, V6N_L3_OFFSET, &inner, sizeof(inner)) < 0)
		return -1;
	v6n_ip6ip6_outer(&outer, &inner, cfg->masquerade_addr);
	if (bpf_skb_adjust_room(skb, sizeof(outer), BPF_ADJ_ROOM_MAC,
				v6n_room_flags(skb, l4_proto, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6)) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_L3_OFFSET, &outer, sizeof(outer), 0) < 0)
		return -1;
	return 0;
}

/*
 * Direct server return inside IPv6 adds an outer header to every packet:
 * whether the packet, so grown, still fits the route to the backend
 * `daddr`. Returns 0 when it does, or when the route is not known (routing
 * decides later), else the MTU a Packet Too Big gives the client: the
 * route's less the outer header, never under IPv6's minimum. A GSO TCP
 * packet always fits: bpf_skb_adjust_room cuts its segments by what it
 * adds. A GSO UDP packet's datagrams each grow by it (v6n_room_flags).
 */
static __noinline __u32 v6n_ip6ip6_too_big(struct __sk_buff *skb, const __u8 *daddr, __u8 l4_proto)
{
	struct bpf_fib_lookup fib = { .family = AF_INET6, .ifindex = skb->ingress_ifindex };

	if (skb->gso_size && l4_proto != IPPROTO_UDP)
		return 0;
	__builtin_memcpy(fib.ipv6_dst, daddr, 16);
	fib.tot_len = v6n_grown_datagram(skb, l4_proto, sizeof(struct ipv6hdr));
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return 0;
	if (fib.mtu_result < V6N_IPV6_MIN_MTU + sizeof(struct ipv6hdr))
		return V6N_IPV6_MIN_MTU;
	return fib.mtu_result - sizeof(struct ipv6hdr);
}

/*
 * Direct server return inside IPv6, the backend's node's half (uplink
 * ingress, before v6n_dsr_accept): a packet inside an outer IPv6 header to
 * a backend here, whose inner destination is that backend too, is taken
 * out of it and goes on as the option mode's packet would. Returns
 * V6N_REASON_LB_TRACKED when taken out, V6N_REASON_PASS for any other
 * packet (someone else's tunnel, whose inner destination differs, too), or
 * the drop reason.
 */
static __noinline enum v6n_reason v6n_ip6ip6_accept(struct __sk_buff *skb)
{
	struct {
		struct ipv6hdr outer, inner;
	} h;

	if (bpf_skb_load_bytes(skb, V6N_L3_OFFSET, &h, sizeof(h)) < 0 || h.outer.nexthdr != IPPROTO_IPV6 ||
	    h.inner.version != 6 || !v6n_same_addr(h.inner.daddr.s6_addr, h.outer.daddr.s6_addr) ||
	    !(v6n_endpoint(&h.outer.daddr) || v6n_is_local(skb, h.outer.daddr.s6_addr)))
		return V6N_REASON_PASS;
	/* The transport, after the frontend's header if it has one: asked of
	 * GSO packets only, the one case where it matters. */
	__u8 l4_proto = h.inner.nexthdr;
	if (skb->gso_size && l4_proto == IPPROTO_DSTOPTS &&
	    bpf_skb_load_bytes(skb, V6N_L3_OFFSET + sizeof(h), &l4_proto, 1) < 0)
		return V6N_REASON_DROP_MALFORMED;
	if (bpf_skb_adjust_room(skb, -(__s32)sizeof(h.outer), BPF_ADJ_ROOM_MAC,
				v6n_room_flags(skb, l4_proto, V6N_ADJ_ROOM_DECAP_L3_IPV6)) < 0)
		return V6N_REASON_DROP_MALFORMED;
	return V6N_REASON_LB_TRACKED;
}

/*
 * Direct server return, the backend's node's half (uplink ingress): a packet
 * with v6node's frontend header, for a backend here (a pod, or the node's
 * own namespace) of a Service frontend, leaves behind the reply entry that
 * makes the backend's answers leave as the frontend's, straight to the
 * client; the header is taken off before the backend sees it. The frontend
 * need not be reached from outside here: a NodePort on the receiving
 * node's address is, on this node, only a frontend for its own pods.
 * Returns V6N_REASON_PASS for every other packet (someone else's options
 * too), V6N_REASON_LB_TRACKED when taken in, or the drop reason: a header
 * naming no frontend, or for no backend here, is refused, so that nobody
 * outside can make a backend answer as anything but a Service.
 */
static __noinline enum v6n_reason v6n_dsr_accept(struct __sk_buff *skb)
{
	const __u32 l4 = V6N_L4_OFFSET + sizeof(struct v6n_dsr_header);
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;

	if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_DSTOPTS || skb->len < l4 + 4)
		return V6N_REASON_PASS;
	if (data + l4 + 4 > data_end && bpf_skb_pull_data(skb, l4 + 4) < 0)
		return V6N_REASON_DROP_MALFORMED;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip6 = data + V6N_L3_OFFSET;
	struct v6n_dsr_header *opt = data + V6N_L4_OFFSET;
	__be16 *ports = data + l4;
	if ((void *)(ports + 2) > data_end)
		return V6N_REASON_DROP_MALFORMED;
	if (opt->hdrlen != (sizeof(*opt) - 8) / 8 || opt->opt_type != V6N_DSR_OPT_TYPE ||
	    opt->opt_len != sizeof(*opt) - 4)
		return V6N_REASON_PASS;

	__u8 proto = opt->nexthdr;
	struct v6n_service_key key = { .port = opt->port, .proto = proto };
	__builtin_memcpy(key.addr, opt->addr, 16);
	struct v6n_service_value *svc = v6n_lb_frontend(&key);
	if ((proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP) || !svc ||
	    !(v6n_endpoint(&ip6->daddr) || v6n_is_local(skb, (__u8 *)&ip6->daddr)))
		return V6N_REASON_DROP_DSR_REFUSED;

	struct v6n_ct_key reply_key = { .sport = ports[1], .dport = ports[0], .proto = proto };
	struct v6n_ct_value reply = {
		.sport = opt->port,
		.dport = ports[0],
		.frontend_id = svc->id,
		.last_seen_ns = bpf_ktime_get_ns(),
		.flags = V6N_CT_REPLY,
	};
	__builtin_memcpy(reply_key.saddr, &ip6->daddr, 16);
	__builtin_memcpy(reply_key.daddr, &ip6->saddr, 16);
	__builtin_memcpy(reply.saddr, opt->addr, 16);
	__builtin_memcpy(reply.daddr, &ip6->saddr, 16);
	if (bpf_map_update_elem(&v6n_ct, &reply_key, &reply, BPF_ANY) < 0)
		return V6N_REASON_DROP_DSR_REFUSED;

	if (v6n_set_length_and_next(skb, bpf_ntohs(ip6->payload_len) - sizeof(*opt), proto) < 0 ||
	    bpf_skb_adjust_room(skb, -(__s32)sizeof(struct v6n_dsr_header), BPF_ADJ_ROOM_NET,
				v6n_room_flags(skb, proto, 0)) < 0)
		return V6N_REASON_DROP_MALFORMED;
	return V6N_REASON_LB_TRACKED;
}

/*
 * The uplink's part (tc ingress): a packet of a tracked connection, or the
 * first of a new one to a frontend reached from outside, is rewritten and
 * handed on. Returns V6N_REASON_PASS with *action untouched for any other
 * packet, else the reason to count and the action in *action.
 */
static __always_inline enum v6n_reason v6n_nodeport_ingress(struct __sk_buff *skb, int *action)
{
	struct v6n_flow flow = {};
	__u64 now = 0;

	enum v6n_reason dsr = v6n_ip6ip6_accept(skb);
	if (dsr == V6N_REASON_PASS || dsr == V6N_REASON_LB_TRACKED)
		dsr = v6n_dsr_accept(skb);
	if (dsr != V6N_REASON_PASS && dsr != V6N_REASON_LB_TRACKED) {
		*action = TC_ACT_SHOT;
		return dsr;
	}
	if (v6n_flow_of(skb, &flow) < 0) {
		int rewritten = v6n_nodeport_icmp_error(skb);

		if (rewritten == 0)
			return V6N_REASON_PASS;
		int delivered = rewritten < 0 ? TC_ACT_SHOT : v6n_nodeport_deliver(skb, 1);
		*action = v6n_tc_action(delivered);
		return v6n_delivered_reason(delivered, V6N_REASON_LB_TRACKED);
	}
	struct v6n_ct_value *entry = v6n_ct_lookup(&flow, &now);
	if (entry && !(entry->flags & V6N_CT_REPLY)) {
		/* A backend that left ends its connections: they start over. */
		struct v6n_l4_addr *backend = bpf_map_lookup_elem(&v6n_backends, &entry->backend_id);
		if (!backend || !v6n_same_addr(backend->addr, entry->daddr) || backend->port != entry->dport) {
			v6n_ct_forget(&flow.key, entry);
			entry = NULL;
		}
	}
	enum v6n_reason reason = V6N_REASON_LB_TRACKED;
	struct v6n_ct_value out;
	if (entry) {
		v6n_ct_touch(entry, &flow, v6n_now(&now));
		__builtin_memcpy(&out, entry, sizeof(out));
	} else {
		struct v6n_nodeport_pick pick;

		if (v6n_nodeport_pick(skb, &flow, &pick) < 0) {
			if (!v6n_nodeport_unserved(&flow))
				return V6N_REASON_PASS;
			*action = TC_ACT_SHOT;
			return V6N_REASON_DROP_NO_FRONTEND;
		}
		int remote = pick.backend && !v6n_endpoint((const struct in6_addr *)pick.backend->addr) &&
			     !v6n_is_local(skb, pick.backend->addr);
		reason = v6n_nodeport_new(&flow, &pick, remote, &out, v6n_now(&now));
		if (reason != V6N_REASON_LB_TRANSLATED) {
			*action = reason == V6N_REASON_DROP_NO_BACKEND ? TC_ACT_UNSPEC : TC_ACT_SHOT;
			return reason;
		}
	}
	if (out.flags & V6N_CT_DSR_IP6IP6) {
		/* Too big with the outer header: the client learns what fits
		 * (RFC 8201), about the packet it sent. */
		__u32 mtu = v6n_ip6ip6_too_big(skb, out.daddr, flow.key.proto);

		if (mtu) {
			*action = v6n_icmp6_error(skb, ICMPV6_PKT_TOOBIG, 0, mtu);
			return V6N_REASON_DROP_TOO_BIG;
		}
	}
	if (v6n_service_rewrite(skb, &flow, &out) < 0 || ((out.flags & V6N_CT_DSR) && v6n_dsr_push(skb, &flow) < 0) ||
	    ((out.flags & V6N_CT_DSR_IP6IP6) && v6n_ip6ip6_push(skb, flow.key.proto) < 0)) {
		*action = TC_ACT_SHOT;
		return V6N_REASON_DROP_MALFORMED;
	}
	int delivered = v6n_nodeport_deliver(skb, 1);
	*action = v6n_tc_action(delivered);
	return v6n_delivered_reason(delivered, reason);
}

/*
 * A reply leaving a backend on this node (pod device, or the uplink's egress
 * for the node's own sockets): given the frontend's address back; so is an
 * ICMPv6 error about a connection's packet (from the backend, or from this
 * node's stack). Returns 1 when the packet was rewritten, 0 when it belongs
 * to no tracked connection, -1 when it could not be written.
 */
static __always_inline int v6n_nodeport_reply(struct __sk_buff *skb)
{
	struct v6n_flow flow = {};
	/* Read up front, not on first use: reading it lazily here makes clang
	 * spill skb->data as 32 bits, which the verifier refuses. */
	__u64 now = bpf_ktime_get_ns();

	if (v6n_flow_of(skb, &flow) < 0)
		return v6n_nodeport_icmp_error(skb);
	struct v6n_ct_value *entry = v6n_ct_lookup(&flow, &now);
	if (!entry || !(entry->flags & V6N_CT_REPLY))
		return 0;
	v6n_ct_touch(entry, &flow, now);
	struct v6n_ct_value out;
	__builtin_memcpy(&out, entry, sizeof(out));
	return v6n_service_rewrite(skb, &flow, &out) < 0 ? -1 : 1;
}

/*
 * SCTP from a pod (at its device, `from_pod`) or from the node's own
 * processes (at the uplink's egress) to a Service: any frontend, ClusterIP,
 * NodePort, external IP, hostPort. The kernel runs no cgroup connect hook
 * for SCTP sockets (sctp_inet_connect goes straight to the association),
 * so the socket hooks never see it: its packets are translated here and
 * tracked like a connection from outside, with the client's own address
 * kept. The reply entry is this node's: the backend's answers come back
 * through its pod device (a backend here) or the uplink (one elsewhere),
 * and both give them the frontend's address back.
 *
 * A pod that reaches itself goes in from the masquerade address
 * (v6n_lb_cfg), as kube-proxy masquerades a hairpin: an answer to its own
 * address would never leave its namespace to be given the frontend's
 * address back. The node reaching a host-network backend of its own is
 * refused for the same reason (V6N_REASON_DROP_NO_BACKEND, counted).
 *
 * Returns V6N_REASON_PASS for any other packet, untouched;
 * V6N_REASON_LB_TRANSLATED or _TRACKED when rewritten; else the reason to
 * drop it (V6N_REASON_DROP_NO_BACKEND: the association's INIT goes
 * unanswered, as kube-proxy's rules leave it).
 */
static __noinline enum v6n_reason v6n_service_sctp(struct __sk_buff *skb, int from_pod)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;
	struct v6n_flow flow = {};
	__u64 now = bpf_ktime_get_ns();

	if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_SCTP)
		return V6N_REASON_PASS;
	if (v6n_flow_of(skb, &flow) < 0)
		return V6N_REASON_DROP_MALFORMED;
	struct v6n_ct_value out;
	struct v6n_ct_value *entry = v6n_ct_lookup(&flow, &now);
	if (entry && !(entry->flags & V6N_CT_REPLY)) {
		/* A backend that left ends its associations: they start over. */
		struct v6n_l4_addr *backend = bpf_map_lookup_elem(&v6n_backends, &entry->backend_id);
		if (backend && v6n_same_addr(backend->addr, entry->daddr) && backend->port == entry->dport) {
			v6n_ct_note_time(entry, now);
			__builtin_memcpy(&out, entry, sizeof(out));
			return v6n_service_rewrite(skb, &flow, &out) < 0 ? V6N_REASON_DROP_MALFORMED : V6N_REASON_LB_TRACKED;
		}
		v6n_ct_forget(&flow.key, entry);
	}

	struct v6n_service_key key = { .port = flow.key.dport, .proto = IPPROTO_SCTP };
	__builtin_memcpy(key.addr, flow.key.daddr, 16);
	struct v6n_service_value *svc = v6n_lb_frontend(&key);
	if (!svc)
		return V6N_REASON_PASS;
	__u32 frontend = svc->id, backend_id = 0;
	/* ClientIP affinity keys on the client's address (the socket hooks'
	 * on its network namespace). */
	const __u32 *client = (const __u32 *)flow.key.saddr;
	struct v6n_l4_addr *backend =
		v6n_lb_select(&key, svc, ((__u64)(client[0] ^ client[1]) << 32) | (client[2] ^ client[3]), &backend_id);
	int hairpin = backend && v6n_same_addr(backend->addr, flow.key.saddr);
	if (hairpin && !from_pod)
		backend = NULL;
	v6n_lb_account(frontend, backend != NULL);
	if (!backend)
		return V6N_REASON_DROP_NO_BACKEND;

	/* The reply direction first (the frontend's answer to the pod), then
	 * the forward one that uses it. */
	struct v6n_ct_value reply = {
		.sport = flow.key.dport,
		.dport = flow.key.sport,
		.frontend_id = frontend,
		.last_seen_ns = now,
		.flags = V6N_CT_REPLY,
	};
	__builtin_memcpy(reply.saddr, flow.key.daddr, 16);
	__builtin_memcpy(reply.daddr, flow.key.saddr, 16);
	__builtin_memset(&out, 0, sizeof(out));
	__builtin_memcpy(out.saddr, flow.key.saddr, 16);
	__builtin_memcpy(out.daddr, backend->addr, 16);
	out.sport = flow.key.sport;
	out.dport = backend->port;
	out.backend_id = backend_id;
	out.frontend_id = frontend;
	out.last_seen_ns = now;
	if (hairpin) {
		__u32 zero = 0;
		struct v6n_lb_config *cfg = bpf_map_lookup_elem(&v6n_lb_cfg, &zero);
		if (!cfg)
			return V6N_REASON_DROP_NAT_PORTS;
		__builtin_memcpy(out.saddr, cfg->masquerade_addr, 16);
		if (v6n_masquerade_port(&out, &reply, IPPROTO_SCTP) < 0)
			return V6N_REASON_DROP_NAT_PORTS;
	} else {
		struct v6n_ct_key reply_key = {};
		v6n_ct_reply_key(&reply_key, &out, IPPROTO_SCTP);
		if (bpf_map_update_elem(&v6n_ct, &reply_key, &reply, BPF_ANY) < 0)
			return V6N_REASON_DROP_NAT_PORTS;
	}
	if (bpf_map_update_elem(&v6n_ct, &flow.key, &out, BPF_ANY) < 0)
		return V6N_REASON_DROP_NAT_PORTS;
	return v6n_service_rewrite(skb, &flow, &out) < 0 ? V6N_REASON_DROP_MALFORMED : V6N_REASON_LB_TRANSLATED;
}

#endif /* V6NODE_LIB_NODEPORT_H */
