/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The translator's IPv4 -> IPv6 direction (RFC 7915 4): a packet to an EAM
 * or translatable destination, an ICMPv4 error with the packet it quotes,
 * DF-clear packets too big for IPv6 handed to the kernel to fragment, and
 * what stateful NAT64 and the NAT46 gateway change of both on the way in.
 */
#ifndef V6NODE_LIB_XLAT_4TO6_H
#define V6NODE_LIB_XLAT_4TO6_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "ct.h"
#include "nat46_gw.h"
#include "nat64.h"
#include "nat64_state.h"
#include "xlat.h"
#include "xlat_headers.h"
#include "xlat_icmp.h"

/*
 * RFC 1191 7.1: the plateau under a datagram's length, the likely path MTU
 * when a router that predates RFC 1191 reports none.
 */
static __always_inline __u32 v6n_mtu_plateau_below(__u32 len)
{
	if (len > 32000)
		return 32000;
	if (len > 17914)
		return 17914;
	if (len > 8166)
		return 8166;
	if (len > 4352)
		return 4352;
	if (len > 2002)
		return 2002;
	if (len > 1492)
		return 1492;
	if (len > 1006)
		return 1006;
	if (len > 508)
		return 508;
	return len > 296 ? 296 : 68;
}

/*
 * RFC 7915 4.2: the MTU a Fragmentation Needed becomes in Packet Too Big:
 * minimum(advertised + 20, MTU of the IPv6 next hop, MTU of the IPv4 next
 * hop + 20), the plateau under the quoted datagram standing in for a missing
 * advertised MTU; never under IPv6's minimum (RFC 8200 5).
 */
static __always_inline __u32 v6n_ptb_mtu(struct __sk_buff *skb, struct bpf_fib_lookup *fib, __u16 advertised,
					 __u16 quoted_len, __be32 router, const struct in6_addr *dest)
{
	__u32 mtu = advertised ? advertised : v6n_mtu_plateau_below(quoted_len);
	__u32 mtu6 = v6n_route_mtu(skb, fib, AF_INET6, dest);
	__u32 mtu4 = v6n_route_mtu(skb, fib, AF_INET, &router);

	mtu += V6N_IP6_HLEN - V6N_IP4_HLEN;
	if (mtu6 && mtu6 < mtu)
		mtu = mtu6;
	if (mtu4 && mtu4 + V6N_IP6_HLEN - V6N_IP4_HLEN < mtu)
		mtu = mtu4 + V6N_IP6_HLEN - V6N_IP4_HLEN;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = skb->ingress_ifindex;
	return mtu < V6N_IPV6_MIN_MTU ? V6N_IPV6_MIN_MTU : mtu;
}

/* ICMPv4 error -> ICMPv6 error with the quoted packet translated (RFC 7915 4.3). */
static __noinline v6n_outcome v6n_4to6_icmp_error(struct __sk_buff *skb)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct bpf_fib_lookup fib_storage = { .ifindex = skb->ingress_ifindex }, *fib = &fib_storage;
	__u32 zero = 0;
	struct v6n_icmp_scratch *scratch = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);
	struct iphdr ip_storage, *ip = &ip_storage;
	struct in6_addr saddr_storage, daddr_storage, *saddr = &saddr_storage, *daddr = &daddr_storage;

	if (!scratch || bpf_skb_load_bytes(skb, V6N_ETH_HLEN, ip, sizeof(*ip)) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	/* v6n_4to6 mapped the destination (EAM or a translatable range) and
	 * checked the source maps before handing the packet over. */
	scratch->error_port_at = 0;
	int nat46 = cfg && v6n_nat46_is_vip(ip->daddr);
	if (nat46) {
		int reason = v6n_nat46_inbound_error(skb);

		if (reason == V6N_NAT46_NOT_A_FRONTEND)
			return V6N_NOT_OURS;
		if (reason)
			return V6N_DROP(reason);
		v6n_nat46_embed(cfg, ip->saddr, saddr);
	} else {
		if (v6n_map_4to6(cfg, ip->saddr, saddr) < 0)
			return V6N_DROP(V6N_REASON_DROP_UNMAPPED);
		if (v6n_nat64_is_pool(ip->daddr)) {
			int reason = v6n_nat64_inbound_error(skb);

			if (reason)
				return V6N_DROP(reason);
		}
	}
	*daddr = scratch->error_daddr;
	struct v6n_icmp4_error_in *in = &scratch->in4;
	struct v6n_icmp6_error_out *out = &scratch->out6;
	__builtin_memset(in, 0, sizeof(*in));
	__builtin_memset(out, 0, sizeof(*out));
	__u32 icmp_len = bpf_ntohs(ip->tot_len) - V6N_IP4_HLEN;

	if (icmp_len < sizeof(*in))
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP4_HLEN, in, sizeof(*in)) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	if (in->inner.version != 4 || in->inner.ihl != 5)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	if (v6n_icmp4_to_icmp6(&in->icmp, &out->icmp6) < 0)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	if (out->icmp6.icmp6_type == ICMPV6_PKT_TOOBIG)
		out->icmp6.icmp6_mtu = bpf_htonl(v6n_ptb_mtu(skb, fib, bpf_ntohs(in->icmp.un.frag.mtu),
							     bpf_ntohs(in->inner.tot_len), ip->saddr, daddr));

	/* Stateful or NAT46, the quote's source is the client or the backend. */
	struct in6_addr inner_saddr = scratch->error_client, inner_daddr;
	if (nat46)
		v6n_nat46_embed(cfg, in->inner.daddr, &inner_daddr);
	else if ((!scratch->error_port_at && v6n_map_4to6(cfg, in->inner.saddr, &inner_saddr) < 0) ||
		 v6n_map_4to6(cfg, in->inner.daddr, &inner_daddr) < 0)
		return V6N_DROP(V6N_REASON_DROP_UNMAPPED);

	__u8 inner_proto = in->inner.protocol;
	__u32 inner_plen = bpf_ntohs(in->inner.tot_len) - V6N_IP4_HLEN;
	__builtin_memcpy(out->l4, in->l4, V6N_INNER_L4);
	/* TCP and UDP: the pseudo-header's addresses change (summed where
	 * the quoted header will have them: the stack is full). */
	out->inner.saddr = inner_saddr;
	out->inner.daddr = inner_daddr;
	__u32 pseudo_diff = v6n_csum_diff(&in->inner.saddr, 8, &out->inner.saddr, 32);
	if (inner_proto == IPPROTO_UDP) {
		struct udphdr *udp = (void *)out->l4;

		if (udp->check) {
			udp->check = v6n_csum_update(udp->check, pseudo_diff);
			if (!udp->check)
				udp->check = 0xffff;
		}
	} else if (inner_proto == IPPROTO_ICMP) {
		struct icmphdr *icmp = (void *)in->l4;
		struct icmp6hdr *icmp6 = (void *)out->l4;

		if (icmp->type != ICMP_ECHO && icmp->type != ICMP_ECHOREPLY)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		inner_proto = IPPROTO_ICMPV6;
		icmp6->icmp6_type = icmp->type == ICMP_ECHO ? ICMPV6_ECHO_REQUEST : ICMPV6_ECHO_REPLY;
		icmp6->icmp6_code = 0;
		struct {
			struct v6n_pseudo6 pseudo;
			__u8 type, code;
			__u16 zero;
		} to = { .pseudo = { inner_saddr, inner_daddr, bpf_htonl(inner_plen), bpf_htonl(IPPROTO_ICMPV6) },
			 .type = icmp6->icmp6_type };
		__u8 from[4] = { icmp->type, 0, 0, 0 };
		icmp6->icmp6_cksum = v6n_csum_update(icmp->checksum, v6n_csum_diff(from, 4, &to, sizeof(to)));
	}
	if (scratch->error_port_at)
		v6n_nat64_quote_port(out->l4, inner_proto, scratch->error_port_at - 1, scratch->error_port);
	__u32 tcp_diff = 0;
	if (inner_proto == IPPROTO_TCP)
		tcp_diff = v6n_quote_tcp_check(skb, V6N_ETH_HLEN + V6N_IP4_HLEN + sizeof(in->icmp) + V6N_IP4_HLEN,
					       icmp_len - sizeof(in->icmp) - V6N_IP4_HLEN,
					       v6n_csum_add(pseudo_diff, v6n_csum_diff(in->l4, 8, out->l4, 8)));
	v6n_ip6_from_ip4(&out->inner, &in->inner, inner_proto, inner_plen, &inner_saddr, &inner_daddr);
	out->inner.hop_limit = in->inner.ttl; /* quoted as it was when it failed */

	/* The translated message is 20 bytes longer (the quoted header). */
	__u32 plen = icmp_len + V6N_IP6_HLEN - V6N_IP4_HLEN;
	v6n_ip6_from_ip4(&out->ip6, ip, IPPROTO_ICMPV6, plen, saddr, daddr);
	out->pseudo.saddr = *saddr;
	out->pseudo.daddr = *daddr;
	out->pseudo.len = bpf_htonl(plen);
	out->pseudo.nexthdr = bpf_htonl(IPPROTO_ICMPV6);
	__u16 old = in->icmp.checksum;
	in->icmp.checksum = 0;
	out->icmp6.icmp6_cksum = v6n_csum_update(
		old, v6n_csum_add(v6n_csum_diff(in, sizeof(*in), &out->pseudo, sizeof(*out) - sizeof(out->ip6)), tcp_diff));

	fib->family = AF_INET6;
	__builtin_memcpy(fib->ipv6_src, saddr, 16);
	__builtin_memcpy(fib->ipv6_dst, daddr, 16);
	fib->tot_len = V6N_IP6_HLEN + plen;
	/* Anything but a next hop (local, too big, no route) is the kernel's. */
	int rc = v6n_fib_lookup(skb, fib);

	if (bpf_skb_change_proto(skb, bpf_htons(ETH_P_IPV6), 0) < 0 ||
	    bpf_skb_adjust_room(skb, V6N_IP6_HLEN - V6N_IP4_HLEN, BPF_ADJ_ROOM_NET, 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	__be16 proto = bpf_htons(ETH_P_IPV6);
	if (bpf_skb_store_bytes(skb, 12, &proto, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN, &out->ip6, sizeof(out->ip6), BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN + sizeof(out->ip6), &out->icmp6,
				sizeof(*out) - sizeof(out->ip6) - sizeof(out->pseudo), BPF_F_RECOMPUTE_CSUM) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	return v6n_deliver(skb, fib, rc);
}

/*
 * IPv4 options RFC 7915 4.1 forbids translating: source routes. Options are
 * rare, so they are read a byte pair at a time rather than copied whole; a
 * global function, so the verifier walks this loop once.
 */
__noinline int v6n_has_source_route(struct __sk_buff *skb, __u32 len)
{
	__u32 i = 0;

	for (int n = 0; n < 40 && i < len; n++) {
		__u8 opt[2] = {};

		if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP4_HLEN + i, opt, i + 1 < len ? 2 : 1) < 0)
			return 1;
		if (opt[0] == IPOPT_END)
			break;
		if (opt[0] == IPOPT_NOOP) {
			i++;
			continue;
		}
		if (opt[0] == IPOPT_LSRR || opt[0] == IPOPT_SSRR)
			return 1;
		if (opt[1] < 2)
			return 1; /* malformed: refuse rather than guess */
		i += opt[1];
	}
	return 0;
}

/* The IPv4 destination of the packet in hand from `from` to `to`, its
 * header checksum with it. The transport checksum is left as it is. */
static __always_inline int v6n_ip4_set_daddr(struct __sk_buff *skb, __be32 from, __be32 to)
{
	if (bpf_skb_store_bytes(skb, V6N_ETH_HLEN + __builtin_offsetof(struct iphdr, daddr), &to, 4, 0) < 0 ||
	    bpf_l3_csum_replace(skb, V6N_ETH_HLEN + __builtin_offsetof(struct iphdr, check), from, to, 4) < 0)
		return -1;
	return 0;
}

/*
 * RFC 7915 4.1: a DF-clear packet too big for the IPv6 next hop is
 * fragmented, not refused. A BPF program sends one packet, so the kernel
 * does it: readdressed to cfg->fragment_addr, which the main table routes
 * out of the agent's fragmentation link (agent/src/nat/fragmenter.rs), its
 * own destination kept in its mark (copied to each fragment, and kept
 * across the veth), the packet's fragments are translated one by one as
 * they come back in (v6n_fragment_back). Returns 1 when the packet is sent
 * so, 0 when it is not to be (no link; the stateful paths' packets, whose
 * ports are rewritten already and whose fragments are refused), -1 when
 * it could not be written. The transport checksum is right again once the
 * destination is back.
 */
static __noinline int v6n_fragment_by_kernel(struct __sk_buff *skb, const struct v6n_nat64_config *cfg, __be32 daddr)
{
	if (!cfg->fragment_addr || v6n_nat46_is_vip(daddr) || v6n_nat64_is_pool(daddr))
		return 0;
	if (v6n_ip4_set_daddr(skb, daddr, cfg->fragment_addr) < 0)
		return -1;
	skb->mark = bpf_ntohl(daddr);
	return 1;
}

/*
 * A packet to the fragmentation address (cfg->fragment_addr): a fragment
 * back from the fragmentation link gets its destination back from its
 * mark, and *ip is read again. Returns 0, or a drop reason: for a packet
 * that did not come that way (no destination kept: translating it could
 * only guess, and letting it on would send it round the link until its
 * TTL ran out), or one that could not be written.
 */
static __noinline int v6n_fragment_back(struct __sk_buff *skb, struct iphdr *ip)
{
	__be32 daddr = bpf_htonl(skb->mark);

	if (!daddr)
		return V6N_REASON_DROP_UNTRANSLATABLE;
	if (v6n_ip4_set_daddr(skb, ip->daddr, daddr) < 0 || bpf_skb_load_bytes(skb, V6N_ETH_HLEN, ip, sizeof(*ip)) < 0)
		return V6N_REASON_DROP_MALFORMED;
	skb->mark = 0;
	return 0;
}

static __noinline v6n_outcome v6n_4to6(struct __sk_buff *skb)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	union {
		struct iphdr ip;
		__u8 raw[64];
	} h = {};
	struct in6_addr saddr, daddr;

	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN, &h.ip, sizeof(h.ip)) < 0)
		return V6N_NOT_OURS;
	if (h.ip.version != 4)
		return V6N_NOT_OURS;
	/* Checked here, not in the call: every IPv4 packet asks. */
	int back = cfg && cfg->fragment_addr && h.ip.daddr == cfg->fragment_addr;
	if (back) {
		int reason = v6n_fragment_back(skb, &h.ip);
		if (reason)
			return V6N_DROP(reason);
	}
	/* Looked up once: every IPv4 packet the translator sees asks. */
	int vip = v6n_nat46_is_vip(h.ip.daddr);
	if (!vip && !v6n_nat64_is_pool(h.ip.daddr) && v6n_map_4to6_dst(cfg, h.ip.daddr, &daddr) < 0)
		return V6N_NOT_OURS;

	__u32 hlen = h.ip.ihl * 4, tot_len = bpf_ntohs(h.ip.tot_len);
	if (hlen < V6N_IP4_HLEN || tot_len < hlen || V6N_ETH_HLEN + tot_len > skb->len)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	/* Ethernet pads short IPv4 packets; the padding must not follow the
	 * IPv6 packet. */
	if (V6N_ETH_HLEN + tot_len < skb->len && skb->gso_segs <= 1 &&
	    bpf_skb_change_tail(skb, V6N_ETH_HLEN + tot_len, 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	if (hlen > V6N_IP4_HLEN) {
		if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN, h.raw, hlen & 0x3c) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		if (v6n_has_source_route(skb, hlen - V6N_IP4_HLEN))
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	}
	if (v6n_csum_fold(v6n_csum_diff(NULL, 0, h.raw, hlen & 0x3c)) != 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	/* A VIP's client is embedded in the gateway's prefix by v6n_nat46_inbound. */
	if (!vip && v6n_map_4to6(cfg, h.ip.saddr, &saddr) < 0)
		return V6N_DROP(V6N_REASON_DROP_UNMAPPED);

	__u16 frag_field = bpf_ntohs(h.ip.frag_off);
	__u16 frag_off = frag_field & V6N_IP4_OFFSET;
	int fragmented = (frag_field & V6N_IP4_MF) || frag_off;
	__u8 protocol = h.ip.protocol;
	__u32 l4_off = V6N_ETH_HLEN + hlen, l4_len = tot_len - hlen;
	struct icmphdr icmp;
	struct icmp6hdr icmp6 = {};
	int udp_no_csum = 0;

	if (protocol == IPPROTO_ICMP) {
		if (fragmented)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		if (bpf_skb_load_bytes(skb, l4_off, &icmp, sizeof(icmp)) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	}
	int is_error = protocol == IPPROTO_ICMP && icmp.type != ICMP_ECHO && icmp.type != ICMP_ECHOREPLY;

	/* RFC 7915 4.1/5.1: the translator takes one hop, fragmenting or not.
	 * A fragment back from the fragmentation link has had it taken: the
	 * kernel decremented its TTL forwarding it there, after this check
	 * passed it with TTL 2 or more on the way in. Its fragments keep their
	 * TTL (at least 1). Not compensated the other way (one more TTL before
	 * the kernel forwards): TTL 255 has no room for it, and the header
	 * checksum would change twice. */
	__u8 hop = back ? 0 : 1;
	if (h.ip.ttl <= hop) {
		if (is_error)
			return V6N_DROP(V6N_REASON_DROP_HOP_LIMIT); /* never an error about an error */
		return V6N_OUTCOME(V6N_ACT_TIME_EXCEEDED, V6N_REASON_DROP_HOP_LIMIT);
	}
	/* The pool asked again rather than kept: this frame has no byte to spare. */
	if (vip && !is_error) {
		/* Ports are in first fragments only: refused, not guessed at. */
		if (fragmented)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		int reason = v6n_nat46_inbound(skb, V6N_NAT64_L4(l4_off, protocol), &saddr, &daddr);
		if (reason == V6N_NAT46_NOT_A_FRONTEND)
			return V6N_NOT_OURS;
		if (reason)
			return V6N_DROP(reason);
	} else if (v6n_nat64_is_pool(h.ip.daddr) && !is_error) {
		if (fragmented)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		int reason = v6n_nat64_inbound(skb, V6N_NAT64_L4(l4_off, protocol), &daddr);
		if (reason)
			return V6N_DROP(reason);
	}

	struct bpf_fib_lookup fib = { .ifindex = skb->ingress_ifindex };
	if (protocol == IPPROTO_ICMP) {
		if (is_error) {
			__u32 zero = 0;
			struct v6n_icmp_scratch *scratch = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);

			if (hlen != V6N_IP4_HLEN) /* to a VIP: maybe the host's own */
				return vip ? V6N_NOT_OURS : V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
			if (!scratch)
				return V6N_DROP(V6N_REASON_DROP_MALFORMED);
			/* To the pool or a VIP: v6n_4to6_icmp_error finds the
			 * destination by the binding or flow of the quoted packet. */
			if (!vip && !v6n_nat64_is_pool(h.ip.daddr))
				scratch->error_daddr = daddr;
			return V6N_OUTCOME(V6N_ACT_XLAT_ICMP_ERROR, V6N_REASON_PASS);
		}
		if (v6n_icmp4_to_icmp6(&icmp, &icmp6) < 0)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		protocol = IPPROTO_ICMPV6;
	} else if (protocol == IPPROTO_UDP && frag_off == 0) {
		__be16 check;
		if (bpf_skb_load_bytes(skb, l4_off + offsetof(struct udphdr, check), &check, 2) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		if (!check) {
			/* RFC 7915 4.5: a stateless translator cannot checksum a
			 * datagram it sees in pieces. */
			if (fragmented)
				return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
			udp_no_csum = 1;
		}
	}

	__u32 frag_len = fragmented ? sizeof(struct v6n_frag_hdr) : 0;
	struct {
		struct ipv6hdr ip6;
		struct v6n_frag_hdr frag;
	} out = {};
	v6n_ip6_from_ip4(&out.ip6, &h.ip, fragmented ? IPPROTO_FRAGMENT : protocol, l4_len + frag_len, &saddr,
			 &daddr);
	out.ip6.hop_limit = h.ip.ttl - hop;
	if (fragmented) {
		out.frag.nexthdr = protocol;
		out.frag.frag_off = bpf_htons((frag_off << 3) | ((frag_field & V6N_IP4_MF) ? V6N_IP6_MF : 0));
		out.frag.identification = bpf_htonl(bpf_ntohs(h.ip.id));
	}

	fib.family = AF_INET6;
	__builtin_memcpy(fib.ipv6_src, &saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &daddr, 16);
	fib.tot_len = skb->gso_segs > 1 ? 0 : V6N_IP6_HLEN + frag_len + l4_len;
	int rc = v6n_fib_lookup(skb, &fib);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* ICMP is translated whole (ICMPv6 sums a pseudo-header), and so
		 * is UDP without a checksum: neither may be cut up. */
		if (cfg && !(h.ip.frag_off & bpf_htons(V6N_IP4_DF)) && protocol != IPPROTO_ICMPV6 && !udp_no_csum &&
		    !back) {
			int sent = v6n_fragment_by_kernel(skb, cfg, h.ip.daddr);
			if (sent < 0)
				return V6N_DROP(V6N_REASON_DROP_MALFORMED);
			if (sent)
				return V6N_OUTCOME(TC_ACT_OK, V6N_REASON_XLAT_TO_FRAGMENT);
		}
		__u32 mtu = fib.mtu_result - (V6N_IP6_HLEN - V6N_IP4_HLEN) - frag_len;
		return V6N_OUTCOME(V6N_ACT_TOO_BIG, V6N_REASON_DROP_TOO_BIG) | ((mtu & 0xffff) << 16);
	}

	if (bpf_skb_change_proto(skb, bpf_htons(ETH_P_IPV6), 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	/* Room is made or taken right after the 40-byte IPv6 header, which is
	 * still inside the old IPv4 header: both get rewritten whole. */
	__s32 delta = (__s32)(V6N_IP6_HLEN - V6N_IP4_HLEN + frag_len) - (__s32)hlen;
	if (delta && bpf_skb_adjust_room(skb, delta, BPF_ADJ_ROOM_NET, 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	__be16 proto = bpf_htons(ETH_P_IPV6);
	if (bpf_skb_store_bytes(skb, 12, &proto, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN, &out, sizeof(out.ip6), BPF_F_RECOMPUTE_CSUM) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	if (fragmented && bpf_skb_store_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN, &out.frag, sizeof(out.frag),
					      BPF_F_RECOMPUTE_CSUM) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);

	l4_off = V6N_ETH_HLEN + V6N_IP6_HLEN + frag_len;
	if (protocol == IPPROTO_ICMPV6) {
		/* As the packet has it now: stateful NAT64 may have rewritten the
		 * identifier, and the checksum with it. */
		if (bpf_skb_load_bytes(skb, l4_off + offsetof(struct icmphdr, checksum), &icmp.checksum, 2) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		struct {
			struct v6n_pseudo6 pseudo;
			__u8 type, code;
			__u16 zero;
		} to = { .pseudo = { saddr, daddr, bpf_htonl(l4_len), bpf_htonl(IPPROTO_ICMPV6) },
			 .type = icmp6.icmp6_type,
			 .code = icmp6.icmp6_code };
		__u8 from[4] = { icmp.type, icmp.code, 0, 0 };
		icmp6.icmp6_cksum = v6n_csum_update(icmp.checksum, v6n_csum_diff(from, 4, &to, sizeof(to)));
		if (bpf_skb_store_bytes(skb, l4_off, &icmp6, 4, 0) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	} else if (udp_no_csum) {
		struct v6n_pseudo6 pseudo = { saddr, daddr, bpf_htonl(l4_len), bpf_htonl(IPPROTO_UDP) };
		__s64 data = v6n_csum_packet(skb, l4_off, l4_len);
		if (data < 0)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		__u16 check = v6n_csum_fold(v6n_csum_add(v6n_csum_diff(NULL, 0, &pseudo, sizeof(pseudo)), (__u32)data));
		if (!check)
			check = 0xffff;
		if (bpf_skb_store_bytes(skb, l4_off + offsetof(struct udphdr, check), &check, 2, 0) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	} else if ((protocol == IPPROTO_TCP || protocol == IPPROTO_UDP) && frag_off == 0) {
		__be32 from[2] = { h.ip.saddr, h.ip.daddr }, to[8];
		__builtin_memcpy(to, &saddr, 16);
		__builtin_memcpy(to + 4, &daddr, 16);
		__u32 diff = v6n_csum_diff(from, 8, to, 32);
		__u32 off = l4_off + (protocol == IPPROTO_TCP ? offsetof(struct tcphdr, check)
							      : offsetof(struct udphdr, check));
		if (bpf_l4_csum_replace(skb, off, 0, diff,
					BPF_F_PSEUDO_HDR | (protocol == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0)) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	}

	return v6n_deliver(skb, &fib, rc);
}

#endif /* V6NODE_LIB_XLAT_4TO6_H */
