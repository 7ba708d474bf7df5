/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The translator's IPv6 -> IPv4 direction (RFC 7915 5): a packet to a mapped
 * destination, an ICMPv6 error with the packet it quotes, and what stateful
 * NAT64 and the NAT46 gateway change of both on the way out.
 */
#ifndef V6NODE_LIB_XLAT_6TO4_H
#define V6NODE_LIB_XLAT_6TO4_H

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
 * ICMPv6 error -> ICMPv4 error, including the packet it quotes (RFC 7915
 * 5.3). The quoted packet went the other way through this translator, so its
 * addresses map the same way as any other, and its transport checksum is
 * mended like a packet's: in the first 8 bytes (UDP, ICMP) or, for TCP,
 * where the quote reaches it.
 */


static __noinline v6n_outcome v6n_6to4_icmp_error(struct __sk_buff *skb)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct bpf_fib_lookup fib_storage = { .ifindex = skb->ingress_ifindex }, *fib = &fib_storage;
	__u32 zero = 0;
	struct v6n_icmp_scratch *scratch = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);
	struct ipv6hdr ip6_storage, *ip6 = &ip6_storage;
	__be32 saddr, daddr;

	if (!scratch || bpf_skb_load_bytes(skb, V6N_ETH_HLEN, ip6, sizeof(*ip6)) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	/* v6n_6to4 checked both map, or the source may use the pool, or the
	 * destination is a NAT46 gateway's client, before handing the packet
	 * over. */
	scratch->error_port_at = 0;
	int nat46 = v6n_nat46_is_client(cfg, &ip6->daddr);
	if (nat46) {
		__s64 vip = v6n_nat46_outbound_error(skb);

		if (vip < 0)
			return V6N_DROP(-vip);
		saddr = (__be32)vip;
		__builtin_memcpy(&daddr, ip6->daddr.s6_addr + 12, 4);
	} else {
		if (v6n_map_6to4(cfg, &ip6->saddr, &saddr) < 0) {
			__s64 pool = v6n_nat64_outbound_error(skb);

			if (pool < 0)
				return V6N_DROP(-pool);
			saddr = (__be32)pool;
		}
		if (v6n_map_6to4(cfg, &ip6->daddr, &daddr) < 0)
			return V6N_DROP(V6N_REASON_DROP_UNMAPPED);
	}
	struct v6n_icmp6_error_in *in = &scratch->in6;
	struct v6n_icmp4_error_out *out = &scratch->out4;
	__builtin_memset(in, 0, sizeof(*in));
	__builtin_memset(out, 0, sizeof(*out));
	__u32 plen = bpf_ntohs(ip6->payload_len);

	if (plen < sizeof(in->icmp6) + sizeof(in->inner) + V6N_INNER_L4)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN, &in->icmp6,
			       sizeof(in->icmp6) + sizeof(in->inner) + V6N_INNER_L4) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	if (in->inner.version != 6)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	if (v6n_icmp6_to_icmp4(&in->icmp6, &out->icmp) < 0)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	if (out->icmp.type == ICMP_DEST_UNREACH && out->icmp.code == ICMP_FRAG_NEEDED) {
		/* RFC 7915 5.2: minimum(advertised - 20, MTU of the IPv4 next hop,
		 * MTU of the IPv6 next hop - 20): the path back through this
		 * translator is no wider than its own links. */
		__u32 mtu = bpf_ntohs(out->icmp.un.frag.mtu);
		__u32 mtu4 = v6n_route_mtu(skb, fib, AF_INET, &daddr);
		__u32 mtu6 = v6n_route_mtu(skb, fib, AF_INET6, &ip6->saddr);

		if (mtu4 && mtu4 < mtu)
			mtu = mtu4;
		if (mtu6 > V6N_IP6_HLEN - V6N_IP4_HLEN + 68 && mtu6 - (V6N_IP6_HLEN - V6N_IP4_HLEN) < mtu)
			mtu = mtu6 - (V6N_IP6_HLEN - V6N_IP4_HLEN);
		out->icmp.un.frag.mtu = bpf_htons(mtu);
		__builtin_memset(fib, 0, sizeof(*fib));
		fib->ifindex = skb->ingress_ifindex;
	}

	/* Stateful, the quote's destination is the pool address or the VIP;
	 * NAT46, its source is the client (v6n_nat46_outbound_error checked). */
	__be32 inner_saddr = daddr, inner_daddr = saddr;
	if ((!nat46 && v6n_map_6to4(cfg, &in->inner.saddr, &inner_saddr) < 0) ||
	    (!scratch->error_port_at && v6n_map_6to4(cfg, &in->inner.daddr, &inner_daddr) < 0))
		return V6N_DROP(V6N_REASON_DROP_UNMAPPED);

	__u8 inner_proto = in->inner.nexthdr;
	__builtin_memcpy(out->l4, in->l4, V6N_INNER_L4);
	/* TCP and UDP: the pseudo-header's addresses change (summed where
	 * the quoted header will have them). */
	out->inner.saddr = inner_saddr;
	out->inner.daddr = inner_daddr;
	__u32 pseudo_diff = v6n_csum_diff(&in->inner.saddr, 32, &out->inner.saddr, 8);
	if (inner_proto == IPPROTO_UDP) {
		struct udphdr *udp = (void *)out->l4;

		if (udp->check) {
			udp->check = v6n_csum_update(udp->check, pseudo_diff);
			if (!udp->check)
				udp->check = 0xffff;
		}
	} else if (inner_proto == IPPROTO_ICMPV6) {
		struct icmp6hdr *icmp6 = (void *)in->l4;
		struct icmphdr *icmp = (void *)out->l4;

		if (icmp6->icmp6_type != ICMPV6_ECHO_REQUEST && icmp6->icmp6_type != ICMPV6_ECHO_REPLY)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		inner_proto = IPPROTO_ICMP;
		icmp->type = icmp6->icmp6_type == ICMPV6_ECHO_REQUEST ? ICMP_ECHO : ICMP_ECHOREPLY;
		icmp->code = 0;
		/* Out goes the pseudo-header, in go the new type and code. */
		struct {
			struct v6n_pseudo6 pseudo;
			__u8 type, code;
			__u16 zero;
		} from = { .pseudo = { in->inner.saddr, in->inner.daddr, bpf_htonl(bpf_ntohs(in->inner.payload_len)),
				       bpf_htonl(IPPROTO_ICMPV6) },
			   .type = icmp6->icmp6_type };
		__u8 to[4] = { icmp->type, 0, 0, 0 };
		icmp->checksum = v6n_csum_update(icmp6->icmp6_cksum, v6n_csum_diff(&from, sizeof(from), to, 4));
	} else if (inner_proto == 0 || inner_proto == 43 || inner_proto == 44 || inner_proto == 60) {
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE); /* extension headers in the quote */
	}
	if (scratch->error_port_at)
		v6n_nat64_quote_port(out->l4, inner_proto, scratch->error_port_at - 1, scratch->error_port);
	__u32 tcp_diff = 0;
	if (inner_proto == IPPROTO_TCP)
		tcp_diff = v6n_quote_tcp_check(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + sizeof(in->icmp6) + V6N_IP6_HLEN,
					       plen - sizeof(in->icmp6) - V6N_IP6_HLEN,
					       v6n_csum_add(pseudo_diff, v6n_csum_diff(in->l4, 8, out->l4, 8)));

	__u32 inner_len = V6N_IP4_HLEN + bpf_ntohs(in->inner.payload_len);
	v6n_ip4_from_ip6(&out->inner, &in->inner, NULL, inner_proto, inner_len, inner_saddr, inner_daddr);
	out->inner.ttl = in->inner.hop_limit; /* quoted as it was when it failed */
	out->inner.check = 0;
	out->inner.check = v6n_csum_fold(v6n_csum_diff(NULL, 0, &out->inner, sizeof(out->inner)));

	/* The translated message is 20 bytes shorter (the quoted header). */
	__u32 len = V6N_IP4_HLEN + plen - (V6N_IP6_HLEN - V6N_IP4_HLEN);
	v6n_ip4_from_ip6(&out->ip, ip6, NULL, IPPROTO_ICMP, len, saddr, daddr);

	/* ICMPv4 checksums cover no pseudo-header: take the IPv6 one out-> */
	__builtin_memcpy(&in->pseudo.saddr, &ip6->saddr, 32);
	in->pseudo.len = bpf_htonl(plen);
	in->pseudo.nexthdr = bpf_htonl(IPPROTO_ICMPV6);
	__u16 old = in->icmp6.icmp6_cksum;
	in->icmp6.icmp6_cksum = 0;
	out->icmp.checksum = 0;
	out->icmp.checksum = v6n_csum_update(old, v6n_csum_add(v6n_csum_diff(in, sizeof(*in), &out->icmp,
											    sizeof(*out) - sizeof(out->ip)),
								    tcp_diff));

	fib->family = AF_INET;
	fib->ipv4_src = saddr;
	fib->ipv4_dst = daddr;
	fib->tot_len = len;
	/* Anything but a next hop (local, too big, no route) is the kernel's. */
	int rc = v6n_fib_lookup(skb, fib);

	/* Shrink by 40: the two header changes, both inside the rewritten range. */
	if (bpf_skb_change_proto(skb, bpf_htons(ETH_P_IP), 0) < 0 ||
	    bpf_skb_adjust_room(skb, -(V6N_IP6_HLEN - V6N_IP4_HLEN), BPF_ADJ_ROOM_NET, 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	__be16 proto = bpf_htons(ETH_P_IP);
	if (bpf_skb_store_bytes(skb, 12, &proto, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN, out, sizeof(*out), BPF_F_RECOMPUTE_CSUM) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	return v6n_deliver(skb, fib, rc);
}

/* Extension headers RFC 7915 5.1 lets the translator drop (or, for a
 * Fragment header, turn into IPv4 header fields). */
static __always_inline int v6n_is_ext_hdr(__u8 nexthdr)
{
	return nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING || nexthdr == IPPROTO_FRAGMENT ||
	       nexthdr == IPPROTO_DSTOPTS;
}

#define V6N_EXT_HDRS_MAX 4

static __noinline v6n_outcome v6n_6to4(struct __sk_buff *skb)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct ipv6hdr ip6;
	__be32 saddr, daddr;

	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN, &ip6, sizeof(ip6)) < 0)
		return V6N_NOT_OURS; /* runt frames are the host program's to count */
	if (ip6.version != 6)
		return V6N_NOT_OURS;
	int stateful = 0;
	if (v6n_nat46_is_client(cfg, &ip6.daddr)) {
		/* A NAT46 gateway backend's reply: TCP or UDP straight after the
		 * header, what the gateway's flows carry, or an ICMPv6 error about
		 * one (fragments and the rest are refused). Its VIP and port go in
		 * first: this frame has no byte to spare for remembering to. */
		if (ip6.nexthdr != IPPROTO_TCP && ip6.nexthdr != IPPROTO_UDP && ip6.nexthdr != IPPROTO_ICMPV6)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		__s64 vip = v6n_nat46_outbound(skb, V6N_NAT64_L4(V6N_ETH_HLEN + V6N_IP6_HLEN, ip6.nexthdr));
		if (vip < 0)
			return V6N_DROP(-vip);
		saddr = (__be32)vip; /* 0 for an error: v6n_6to4_icmp_error finds its VIP */
		__builtin_memcpy(&daddr, ip6.daddr.s6_addr + 12, 4);
	} else if (v6n_map_6to4_as(cfg, &ip6.daddr, &daddr, 1) < 0) {
		return V6N_NOT_OURS;
	} else if (v6n_map_6to4(cfg, &ip6.saddr, &saddr) < 0) {
		/* An EAM destination from an unmapped source is plain IPv6 routed
		 * through this box; a prefix destination can only mean translation,
		 * stateful where the source may borrow from the pool. */
		struct v6n_lpm6_key key = { .prefixlen = 128 };
		__builtin_memcpy(key.addr, &ip6.daddr, 16);
		if (bpf_map_lookup_elem(&v6n_eam6, &key))
			return V6N_NOT_OURS;
		if (!v6n_nat64_may_use_pool(&ip6.saddr) && !v6n_nat64_error_to_client(skb, ip6.nexthdr))
			return V6N_DROP(V6N_REASON_DROP_UNMAPPED);
		stateful = 1;
	}

	__u32 plen = bpf_ntohs(ip6.payload_len);
	if (plen == 0)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE); /* jumbogram */
	if (V6N_ETH_HLEN + V6N_IP6_HLEN + plen > skb->len)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	/* Bytes after the packet (Ethernet padding, or junk) would end up
	 * behind the IPv4 packet; the stack trims them on input, so do we. */
	if (V6N_ETH_HLEN + V6N_IP6_HLEN + plen < skb->len && skb->gso_segs <= 1 &&
	    bpf_skb_change_tail(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + plen, 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);

	/* Walk the extension headers: they are dropped, a Fragment header's
	 * fields move into the IPv4 header. */
	struct v6n_frag_hdr frag;
	int fragmented = 0;
	__u8 nexthdr = ip6.nexthdr;
	__u32 ext_len = 0;
#pragma unroll
	for (int i = 0; i < V6N_EXT_HDRS_MAX; i++) {
		if (!v6n_is_ext_hdr(nexthdr))
			break;
		__u32 off = V6N_ETH_HLEN + V6N_IP6_HLEN + ext_len;
		if (nexthdr == IPPROTO_FRAGMENT) {
			if (bpf_skb_load_bytes(skb, off, &frag, sizeof(frag)) < 0)
				return V6N_DROP(V6N_REASON_DROP_MALFORMED);
			fragmented = 1;
			nexthdr = frag.nexthdr;
			ext_len += sizeof(frag);
			if (bpf_ntohs(frag.frag_off) & ~7U)
				break; /* not the first fragment: no more headers here */
			continue;
		}
		__u8 opt[4];
		if (bpf_skb_load_bytes(skb, off, opt, sizeof(opt)) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		if (nexthdr == IPPROTO_ROUTING && opt[3] != 0)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE); /* segments left */
		nexthdr = opt[0];
		ext_len += (opt[1] + 1) * 8;
	}
	if (v6n_is_ext_hdr(nexthdr) || ext_len > plen)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	__u16 frag_off = fragmented ? bpf_ntohs(frag.frag_off) & ~7U : 0;

	if (ip6.hop_limit <= 1) {
		if (nexthdr == IPPROTO_ICMPV6) {
			__u8 type;
			if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + ext_len, &type, 1) < 0 ||
			    v6n_is_icmp6_error(type))
				return V6N_DROP(V6N_REASON_DROP_HOP_LIMIT); /* never an error about an error */
		}
		return V6N_OUTCOME(V6N_ACT_TIME_EXCEEDED, V6N_REASON_DROP_HOP_LIMIT);
	}
	if (stateful) {
		/* RFC 6146 reassembles fragments first; with nowhere to keep them,
		 * a fragment (ports only in the first) is refused, not guessed at. */
		if (fragmented)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		__u8 type = 0;
		if (nexthdr == IPPROTO_ICMPV6 &&
		    bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + ext_len, &type, 1) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		/* An error's binding is the one of the packet it quotes, which
		 * v6n_6to4_icmp_error finds. */
		if (nexthdr != IPPROTO_ICMPV6 || !v6n_is_icmp6_error(type)) {
			__s64 pool = v6n_nat64_outbound(skb, &ip6.saddr, daddr,
							V6N_NAT64_L4(V6N_ETH_HLEN + V6N_IP6_HLEN + ext_len, nexthdr));
			if (pool < 0)
				return V6N_DROP(-pool);
			saddr = (__be32)pool;
			if (v6n_nat64_is_pool(daddr))
				return v6n_nat64_hairpin(skb, saddr, daddr);
		}
	}

	struct bpf_fib_lookup fib = { .ifindex = skb->ingress_ifindex };
	__u32 l4_off = V6N_ETH_HLEN + V6N_IP6_HLEN + ext_len;
	__u32 l4_len = plen - ext_len;
	__u8 protocol = nexthdr;
	struct icmp6hdr icmp6;
	struct icmphdr icmp = {};

	if (nexthdr == IPPROTO_ICMPV6) {
		if (fragmented)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		if (bpf_skb_load_bytes(skb, l4_off, &icmp6, sizeof(icmp6)) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		if (v6n_is_icmp6_error(icmp6.icmp6_type)) {
			if (ext_len)
				return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
			return V6N_OUTCOME(V6N_ACT_XLAT_ICMP_ERROR, V6N_REASON_PASS);
		}
		if (v6n_icmp6_to_icmp4(&icmp6, &icmp) < 0)
			return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
		protocol = IPPROTO_ICMP;
	} else if (nexthdr == IPPROTO_UDP && frag_off == 0) {
		__be16 check;
		if (bpf_skb_load_bytes(skb, l4_off + offsetof(struct udphdr, check), &check, 2) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
		if (!check)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED); /* mandatory in IPv6 */
	}

	struct iphdr ip;
	__u32 len = V6N_IP4_HLEN + l4_len;
	v6n_ip4_from_ip6(&ip, &ip6, fragmented ? &frag : NULL, protocol, len, saddr, daddr);

	fib.family = AF_INET;
	fib.ipv4_src = saddr;
	fib.ipv4_dst = daddr;
	/* GSO packets are checked per segment by the kernel (tot_len 0). */
	fib.tot_len = skb->gso_segs > 1 ? 0 : len;
	int rc = v6n_fib_lookup(skb, &fib);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && (ip.frag_off & bpf_htons(V6N_IP4_DF))) {
		__u32 mtu = fib.mtu_result + V6N_IP6_HLEN - V6N_IP4_HLEN;
		if (mtu < V6N_IPV6_MIN_MTU)
			mtu = V6N_IPV6_MIN_MTU;
		return V6N_OUTCOME(V6N_ACT_TOO_BIG, V6N_REASON_DROP_TOO_BIG) | (mtu << 16);
	}

	if (bpf_skb_change_proto(skb, bpf_htons(ETH_P_IP), 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	if (ext_len && bpf_skb_adjust_room(skb, -(__s32)ext_len, BPF_ADJ_ROOM_NET, 0) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	__be16 proto = bpf_htons(ETH_P_IP);
	if (bpf_skb_store_bytes(skb, 12, &proto, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN, &ip, sizeof(ip), BPF_F_RECOMPUTE_CSUM) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);

	l4_off = V6N_ETH_HLEN + V6N_IP4_HLEN;
	if (protocol == IPPROTO_ICMP) {
		struct {
			struct v6n_pseudo6 pseudo;
			__u8 type, code;
			__u16 zero;
		} from = { .pseudo = { ip6.saddr, ip6.daddr, bpf_htonl(l4_len), bpf_htonl(IPPROTO_ICMPV6) },
			   .type = icmp6.icmp6_type,
			   .code = icmp6.icmp6_code };
		__u8 to[4] = { icmp.type, icmp.code, 0, 0 };
		icmp.checksum = v6n_csum_update(icmp6.icmp6_cksum, v6n_csum_diff(&from, sizeof(from), to, 4));
		if (bpf_skb_store_bytes(skb, l4_off, &icmp, 4, 0) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	} else if ((protocol == IPPROTO_TCP || protocol == IPPROTO_UDP) && frag_off == 0) {
		/* Only the pseudo-header changes; lengths and protocol sum alike in
		 * both versions, so the addresses are the whole difference. The
		 * checksum of a first fragment covers the whole datagram and takes
		 * the same update. */
		__be32 from[8], to[2] = { saddr, daddr };
		__builtin_memcpy(from, &ip6.saddr, 32);
		__u32 diff = v6n_csum_diff(from, 32, to, 8);
		__u32 off = l4_off + (protocol == IPPROTO_TCP ? offsetof(struct tcphdr, check)
							      : offsetof(struct udphdr, check));
		if (bpf_l4_csum_replace(skb, off, 0, diff,
					BPF_F_PSEUDO_HDR | (protocol == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0)) < 0)
			return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	}

	return v6n_deliver(skb, &fib, rc);
}

#endif /* V6NODE_LIB_XLAT_6TO4_H */
