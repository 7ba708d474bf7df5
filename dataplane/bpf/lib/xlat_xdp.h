/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The translator in the uplink's driver (native XDP), on the devices in
 * nat64.devices (v6n_xlat_devices), for the packets that make up nearly
 * all of a gateway's traffic: TCP, UDP and ICMP echo with no IPv4 options,
 * IPv6 extension headers or fragments, that leave by the uplink they came
 * in by (a one-armed gateway) or by another uplink that runs XDP (two
 * arms; lib/xdp_send.h). Stateless NAT46/64, stateful NAT64 and the NAT46
 * gateway make the same decisions on the same state as tc's v6n_nat64
 * (the *_binding and *_flow parts of lib/nat64_state.h and
 * lib/nat46_gw.h), so a packet left to tc finds what XDP made; the frame
 * leaves byte for byte as tc's would, but for the IPv4 identification of
 * packets up to 1260 bytes, which both draw at random.
 *
 * Left to tc, untouched: ICMP errors, fragments, options and extension
 * headers, padding after the packet, UDP without a checksum, hop limit
 * out, a packet too big for the next hop, a next hop on a device XDP does
 * not send by or with no neighbour yet, hairpinning, and whatever tc
 * would drop before the state is asked (tc counts those). XDP asks the
 * state only for a packet it can send: IPv6 -> IPv4, the route to the
 * IPv4 destination is looked up first; IPv4 -> IPv6, the NAT46 gateway's
 * new flows and whatever the state refuses go to tc. What the state
 * refuses IPv6 -> IPv4 (a pool or table full, no binding for a reply) is
 * dropped here, early, and counted.
 */
#ifndef V6NODE_LIB_XLAT_XDP_H
#define V6NODE_LIB_XLAT_XDP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "csum.h"
#include "nodeport_xdp.h"
#include "nat46_gw.h"
#include "xlat_headers.h"

#define V6N_XDP_TO_TC V6N_OUTCOME(XDP_PASS, V6N_REASON_PASS)
#define V6N_XDP_DROP(r) V6N_OUTCOME(XDP_DROP, (r))

/* The translator's FIB lookup (v6n_fib_lookup) from a frame: the next hop
 * must be out of an uplink XDP sends by (v6n_xdp_sends_by), its neighbour
 * known. Asked through this CPU's table of answers (xdp_fib.h). */
static __always_inline int v6n_xlat_xdp_next_hop(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	int rc = v6n_xdp_fib_lookup(ctx, fib);

	if (rc == BPF_FIB_LKUP_RET_FWD_DISABLED) {
		fib->ifindex = 1; /* LOOPBACK_IFINDEX */
		rc = v6n_xdp_fib_lookup(ctx, fib);
	}
	return rc == BPF_FIB_LKUP_RET_SUCCESS && v6n_xdp_sends_by(ctx->ingress_ifindex, fib->ifindex) ? 0 : -1;
}

/* Whether a packet for the IPv4 `daddr` of `len` bytes leaves by an
 * uplink XDP sends by, asked before the state is (its source, a pool address, may not
 * be chosen yet): what XDP cannot send, it leaves to tc with the state
 * untouched, so that tc makes the binding or flow, and reports it. The
 * answer, `fib`, is also where the packet goes: routing by source address
 * (ip rule from) is not asked about a pool address or a VIP. */
static __always_inline int v6n_xlat_xdp_leaves_here4(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __be32 daddr,
						     __u32 len)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->ifindex = ctx->ingress_ifindex;
	fib->ipv4_dst = daddr;
	fib->tot_len = len;
	return v6n_xlat_xdp_next_hop(ctx, fib);
}

/* bpf_l4_csum_replace of a 2-byte field (the kernel's csum_replace4 on the
 * zero-extended values), BPF_F_MARK_MANGLED_0 for UDP. */
static __always_inline void v6n_xlat_xdp_csum_replace2(__u16 *sum, __be16 from, __be16 to, int udp)
{
	v6n_xdp_csum_replace(sum, v6n_csum_add(~(__u32)from, (__u32)to), udp);
}

/* The first bytes of the transport header into s->l4_header, as
 * v6n_nat64_read_l4 reads them at tc; -1 when the frame's first buffer is
 * shorter (tc translates such a frame). Read from the frame itself:
 * bpf_xdp_load_bytes' copy was 3.6% of a core translating. */
static __always_inline int v6n_xlat_xdp_l4_header(struct xdp_md *ctx, __u32 l4_offset, __u8 nexthdr,
						  struct v6n_nat64_scratch *s)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *l4 = (void *)(long)ctx->data + l4_offset;

	if (nexthdr == IPPROTO_TCP) {
		if ((void *)(l4 + 14) > data_end)
			return -1;
		__builtin_memcpy(s->l4_header, l4, 14);
		return 0;
	}
	if ((void *)(l4 + 8) > data_end)
		return -1;
	__builtin_memcpy(s->l4_header, l4, 8);
	return 0;
}

/*
 * The transport header's checksum (and, for stateful NAT64 and the NAT46
 * gateway, its port or echo identifier `port_at` - 1 bytes in) after the address
 * change `addr_diff`, in the order tc's translation makes them: the port
 * first, then the addresses; for ICMP (`icmp_out`: its new type and code),
 * `addr_diff` is the type and pseudo-header change (v6n_icmp_xlat_diff).
 * Returns 0, or -1 when the frame is too short.
 */
static __always_inline int v6n_xlat_xdp_transport(struct xdp_md *ctx, __u32 l4_offset, __u8 proto, __u32 port_at,
						  __be16 port, __u32 addr_diff, const struct icmphdr *icmp_out)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *l4 = data + l4_offset;
	int udp = proto == IPPROTO_UDP;
	__u16 *sum;

	if (proto == IPPROTO_TCP) {
		if ((void *)(l4 + 20) > data_end)
			return -1;
		sum = (void *)(l4 + 16);
	} else {
		if ((void *)(l4 + 8) > data_end)
			return -1;
		sum = (void *)(l4 + (udp ? 6 : 2));
	}
	__be16 *port_field = (void *)(l4 + ((port_at - 1) & 6));
	if ((void *)(port_field + 1) > data_end)
		return -1;

	if (port_at && *port_field != port) {
		v6n_xlat_xdp_csum_replace2(sum, *port_field, port, udp);
		*port_field = port;
	}
	if (icmp_out) {
		/* The ICMP type and code, and the checksum tc's v6n_csum_update
		 * makes of the one the packet has now. */
		*sum = v6n_csum_update(*sum, addr_diff);
		l4[0] = icmp_out->type;
		l4[1] = icmp_out->code;
		return 0;
	}
	v6n_xdp_csum_replace(sum, addr_diff, udp);
	return 0;
}

/*
 * IPv6 -> IPv4 in XDP (tc: v6n_6to4). Returns V6N_XDP_TO_TC, or the XDP
 * action and the reason to count.
 */
static __noinline v6n_outcome v6n_xlat_xdp_6to4(struct xdp_md *ctx)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr ip6;
	__be32 saddr = 0, daddr = 0;
	const __u32 l4_offset = V6N_ETH_HLEN + V6N_IP6_HLEN;

	if (!cfg || !s || data + l4_offset > data_end)
		return V6N_XDP_TO_TC;
	__builtin_memcpy(&ip6, data + V6N_ETH_HLEN, sizeof(ip6));
	__u8 nexthdr = ip6.nexthdr;
	__u32 plen = bpf_ntohs(ip6.payload_len);
	if ((nexthdr != IPPROTO_TCP && nexthdr != IPPROTO_UDP && nexthdr != IPPROTO_ICMPV6) || ip6.hop_limit <= 1 ||
	    plen == 0 || l4_offset + plen != bpf_xdp_get_buff_len(ctx) || v6n_xlat_xdp_l4_header(ctx, l4_offset, nexthdr, s) < 0)
		return V6N_XDP_TO_TC;
	/* Errors and the rest of ICMPv6 are tc's; a UDP checksum is mandatory. */
	if (nexthdr == IPPROTO_ICMPV6 && s->l4_header[0] != ICMPV6_ECHO_REQUEST && s->l4_header[0] != ICMPV6_ECHO_REPLY)
		return V6N_XDP_TO_TC;
	if (nexthdr == IPPROTO_UDP && !s->l4_header[6] && !s->l4_header[7])
		return V6N_XDP_TO_TC;

	int nat46 = v6n_nat46_is_client(cfg, &ip6.daddr), stateful = 0, dst_eam = 0;
	__u32 port_at = 0;
	struct bpf_fib_lookup fib;
	if (nat46) {
		if (nexthdr == IPPROTO_ICMPV6)
			return V6N_XDP_TO_TC;
		__builtin_memcpy(&daddr, ip6.daddr.s6_addr + 12, 4);
		if (v6n_xlat_xdp_leaves_here4(ctx, &fib, daddr, V6N_IP4_HLEN + plen) < 0)
			return V6N_XDP_TO_TC;
		v6n_nat64_parse_l4(nexthdr, l4_offset, 0, &s->l4, s->l4_header);
		__builtin_memset(&s->pool_key, 0, sizeof(s->pool_key));
		__builtin_memcpy(s->pool_key.saddr, &ip6.saddr, 32);
		/* The clock is read where state is: stateless frames, most of a
		 * translator's, need none. */
		__s64 vip = v6n_nat46_outbound_flow(s, bpf_ktime_get_ns());
		if (vip < 0)
			return V6N_XDP_DROP(-vip);
		saddr = (__be32)vip;
		port_at = s->l4.port_offset - l4_offset + 1;
	} else if (v6n_map_6to4_by(cfg, &ip6.daddr, &daddr, 1, &dst_eam) < 0) {
		return V6N_XDP_TO_TC;
	} else if (v6n_map_6to4(cfg, &ip6.saddr, &saddr) < 0) {
		/* An EAM destination from an unmapped source is routed, not translated. */
		if (dst_eam || !v6n_nat64_may_use_pool(&ip6.saddr) ||
		    v6n_xlat_xdp_leaves_here4(ctx, &fib, daddr, V6N_IP4_HLEN + plen) < 0)
			return V6N_XDP_TO_TC;
		v6n_nat64_parse_l4(nexthdr, l4_offset, 0, &s->l4, s->l4_header);
		__s64 pool = v6n_nat64_outbound_binding(cfg, s, &ip6.saddr, daddr, bpf_ktime_get_ns());
		if (pool < 0)
			return V6N_XDP_DROP(-pool);
		saddr = (__be32)pool;
		if (v6n_nat64_is_pool(daddr))
			return V6N_XDP_TO_TC; /* hairpinning */
		stateful = 1;
		s->port_out = s->pool_key.dport;
		port_at = s->l4.port_offset - l4_offset + 1;
	}

	__u8 protocol = nexthdr == IPPROTO_ICMPV6 ? IPPROTO_ICMP : nexthdr;
	struct iphdr ip;
	v6n_ip4_from_ip6(&ip, &ip6, NULL, protocol, V6N_IP4_HLEN + plen, saddr, daddr);
	/* Where the state was asked, the route was looked up before it: once
	 * per frame is what the translator's rate is bound by. */
	if (!port_at) {
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET;
		fib.ifindex = ctx->ingress_ifindex;
		fib.ipv4_src = saddr;
		fib.ipv4_dst = daddr;
		fib.tot_len = V6N_IP4_HLEN + plen;
		if (v6n_xlat_xdp_next_hop(ctx, &fib) < 0)
			return V6N_XDP_TO_TC;
	}

	__u32 diff;
	struct icmphdr icmp = {};
	if (protocol == IPPROTO_ICMP) {
		struct icmp6hdr icmp6 = { .icmp6_type = s->l4_header[0] };
		v6n_icmp6_to_icmp4(&icmp6, &icmp);
		diff = v6n_icmp_xlat_diff(&ip6.saddr, &ip6.daddr, plen, s->l4_header[0], s->l4_header[1], icmp.type,
					  icmp.code, 0);
	} else {
		__be32 to[2] = { saddr, daddr };
		diff = v6n_csum_diff(&ip6.saddr, 32, to, 8);
	}
	if (v6n_xlat_xdp_transport(ctx, l4_offset, protocol, port_at, s->port_out, diff,
				   protocol == IPPROTO_ICMP ? &icmp : NULL) < 0)
		return V6N_XDP_TO_TC;

	/* 20 bytes shorter: Ethernet and the IPv4 header end where the IPv6
	 * header did. */
	if (bpf_xdp_adjust_head(ctx, V6N_IP6_HLEN - V6N_IP4_HLEN) < 0)
		return V6N_XDP_DROP(V6N_REASON_DROP_MALFORMED);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (data + V6N_ETH_HLEN + V6N_IP4_HLEN > data_end)
		return V6N_XDP_DROP(V6N_REASON_DROP_MALFORMED);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	__builtin_memcpy(data + V6N_ETH_HLEN, &ip, sizeof(ip));
	if (stateful && s->made)
		v6n_event_note_nat64(s->client_key.saddr, s->client_key.sport, daddr);
	return V6N_OUTCOME(v6n_xdp_send(ctx, fib.ifindex), V6N_REASON_XLAT_FORWARDED);
}

/*
 * IPv4 -> IPv6 in XDP (tc: v6n_4to6). Returns V6N_XDP_TO_TC, or the XDP
 * action and the reason to count.
 */
static __noinline v6n_outcome v6n_xlat_xdp_4to6(struct xdp_md *ctx)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr ip;
	struct in6_addr saddr = {}, daddr = {};
	const __u32 l4_offset = V6N_ETH_HLEN + V6N_IP4_HLEN;

	if (!cfg || !s || data + l4_offset > data_end)
		return V6N_XDP_TO_TC;
	__builtin_memcpy(&ip, data + V6N_ETH_HLEN, sizeof(ip));
	if (ip.version != 4 || ip.ihl != 5)
		return V6N_XDP_TO_TC;
	int vip = v6n_nat46_is_vip(ip.daddr);
	int pool = !vip && v6n_nat64_is_pool(ip.daddr);
	if (!vip && !pool && v6n_map_4to6_dst(cfg, ip.daddr, &daddr) < 0)
		return V6N_XDP_TO_TC;
	__u32 tot_len = bpf_ntohs(ip.tot_len);
	__u8 protocol = ip.protocol;
	if (V6N_ETH_HLEN + tot_len != bpf_xdp_get_buff_len(ctx) || tot_len <= V6N_IP4_HLEN ||
	    (ip.frag_off & bpf_htons(V6N_IP4_MF | V6N_IP4_OFFSET)) || ip.ttl <= 1 ||
	    v6n_csum_fold(v6n_csum_diff(NULL, 0, &ip, sizeof(ip))) != 0 ||
	    (protocol != IPPROTO_TCP && protocol != IPPROTO_UDP && protocol != IPPROTO_ICMP) ||
	    v6n_xlat_xdp_l4_header(ctx, l4_offset, protocol, s) < 0)
		return V6N_XDP_TO_TC;
	if (protocol == IPPROTO_ICMP && s->l4_header[0] != ICMP_ECHO && s->l4_header[0] != ICMP_ECHOREPLY)
		return V6N_XDP_TO_TC;
	if (protocol == IPPROTO_UDP && !s->l4_header[6] && !s->l4_header[7])
		return V6N_XDP_TO_TC;
	if (!vip && v6n_map_4to6(cfg, ip.saddr, &saddr) < 0)
		return V6N_XDP_TO_TC;

	__u32 port_at = 0;
	if (vip || pool) {
		__u64 now = bpf_ktime_get_ns();

		s->ipv4_addrs[0] = ip.saddr;
		s->ipv4_addrs[1] = ip.daddr;
		if (vip && (protocol == IPPROTO_ICMP || !cfg->nat46_on))
			return V6N_XDP_TO_TC; /* the host answers echoes to a VIP */
		v6n_nat64_parse_l4(protocol, l4_offset, 1, &s->l4, s->l4_header);
		/* What the state refuses, tc refuses and counts: whether this
		 * packet would have left by the uplink is not known. A new
		 * gateway flow is tc's too: whether its packets can leave by
		 * this uplink is known only once its backend is chosen, and tc
		 * reports new flows. */
		if (vip ? v6n_nat46_inbound_flow(cfg, s, &saddr, &daddr, now, 0) : v6n_nat64_inbound_binding(cfg, s, &daddr, now))
			return V6N_XDP_TO_TC;
		port_at = s->l4.port_offset - l4_offset + 1;
	}

	__u32 l4_len = tot_len - V6N_IP4_HLEN;
	__u8 nexthdr = protocol == IPPROTO_ICMP ? IPPROTO_ICMPV6 : protocol;
	struct ipv6hdr ip6;
	v6n_ip6_from_ip4(&ip6, &ip, nexthdr, l4_len, &saddr, &daddr);
	struct bpf_fib_lookup fib = {
		.family = AF_INET6,
		.ifindex = ctx->ingress_ifindex,
		.tot_len = V6N_IP6_HLEN + l4_len,
	};
	__builtin_memcpy(fib.ipv6_src, &saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &daddr, 16);
	if (v6n_xlat_xdp_next_hop(ctx, &fib) < 0)
		return V6N_XDP_TO_TC;

	__u32 diff;
	struct icmphdr icmp6_as = {};
	if (protocol == IPPROTO_ICMP) {
		struct icmphdr icmp = { .type = s->l4_header[0] };
		struct icmp6hdr icmp6 = {};
		v6n_icmp4_to_icmp6(&icmp, &icmp6);
		diff = v6n_icmp_xlat_diff(&saddr, &daddr, l4_len, icmp6.icmp6_type, icmp6.icmp6_code, s->l4_header[0],
					  s->l4_header[1], 1);
		icmp6_as.type = icmp6.icmp6_type;
		icmp6_as.code = icmp6.icmp6_code;
	} else {
		__be32 from[2] = { ip.saddr, ip.daddr }, to[8];
		__builtin_memcpy(to, &saddr, 16);
		__builtin_memcpy(to + 4, &daddr, 16);
		diff = v6n_csum_diff(from, 8, to, 32);
	}
	if (v6n_xlat_xdp_transport(ctx, l4_offset, protocol, port_at, s->port_out, diff,
				   protocol == IPPROTO_ICMP ? &icmp6_as : NULL) < 0)
		return V6N_XDP_TO_TC;

	/* 20 bytes longer: Ethernet and the IPv6 header end where the IPv4
	 * header did. */
	if (bpf_xdp_adjust_head(ctx, -(V6N_IP6_HLEN - V6N_IP4_HLEN)) < 0)
		return V6N_XDP_DROP(V6N_REASON_DROP_MALFORMED);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (data + V6N_ETH_HLEN + V6N_IP6_HLEN > data_end)
		return V6N_XDP_DROP(V6N_REASON_DROP_MALFORMED);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	__builtin_memcpy(data + V6N_ETH_HLEN, &ip6, sizeof(ip6));
	return V6N_OUTCOME(v6n_xdp_send(ctx, fib.ifindex), V6N_REASON_XLAT_FORWARDED);
}

/*
 * The translator in XDP for the frame in hand, on a device in
 * nat64.devices. Returns V6N_XDP_TO_TC for every frame it leaves to tc,
 * else the XDP action and the reason to count.
 */
static __always_inline v6n_outcome v6n_xlat_xdp(struct xdp_md *ctx, __be16 h_proto)
{
	__u32 ifindex = ctx->ingress_ifindex;

	if (!bpf_map_lookup_elem(&v6n_xlat_devices, &ifindex))
		return V6N_XDP_TO_TC;
	if (h_proto == bpf_htons(ETH_P_IPV6))
		return v6n_xlat_xdp_6to4(ctx);
	if (h_proto == bpf_htons(ETH_P_IP))
		return v6n_xlat_xdp_4to6(ctx);
	return V6N_XDP_TO_TC;
}

#endif /* V6NODE_LIB_XLAT_XDP_H */
