/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The translator's headers, one version from the other (RFC 7915 4.1-4.2
 * and 5.1-5.2): IP headers and ICMP types and codes. No packet is read or
 * written here: tc (lib/xlat_6to4.h, lib/xlat_4to6.h) and XDP
 * (lib/xlat_xdp.h) put the results in place each their own way.
 */
#ifndef V6NODE_LIB_XLAT_HEADERS_H
#define V6NODE_LIB_XLAT_HEADERS_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include "icmp.h"
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"
#include "xlat.h"
#include "xlat_icmp.h"

/*
 * RFC 7915 5.2: ICMPv6 type/code -> ICMPv4, with the 32-bit field after the
 * checksum (MTU, pointer). Returns -1 for what must not be translated: MLD,
 * ND, unknown types and codes.
 */
static __always_inline int v6n_icmp6_to_icmp4(const struct icmp6hdr *in, struct icmphdr *out)
{
	__u8 code = in->icmp6_code;

	out->un.gateway = 0;
	switch (in->icmp6_type) {
	case ICMPV6_ECHO_REQUEST:
	case ICMPV6_ECHO_REPLY:
		out->type = in->icmp6_type == ICMPV6_ECHO_REQUEST ? ICMP_ECHO : ICMP_ECHOREPLY;
		out->code = 0;
		out->un.echo = *(typeof(out->un.echo) *)&in->icmp6_dataun;
		return 0;
	case ICMPV6_DEST_UNREACH:
		out->type = ICMP_DEST_UNREACH;
		switch (code) {
		case ICMPV6_NOROUTE:
		case ICMPV6_NOT_NEIGHBOUR:
		case ICMPV6_ADDR_UNREACH:
			out->code = ICMP_HOST_UNREACH;
			return 0;
		case ICMPV6_ADM_PROHIBITED:
			out->code = ICMP_HOST_ANO;
			return 0;
		case ICMPV6_PORT_UNREACH:
			out->code = ICMP_PORT_UNREACH;
			return 0;
		}
		return -1;
	case ICMPV6_PKT_TOOBIG: {
		__u32 mtu = bpf_ntohl(in->icmp6_mtu);

		if (mtu < V6N_IP6_HLEN - V6N_IP4_HLEN + 68)
			return -1;
		out->type = ICMP_DEST_UNREACH;
		out->code = ICMP_FRAG_NEEDED;
		mtu -= V6N_IP6_HLEN - V6N_IP4_HLEN;
		out->un.frag.mtu = bpf_htons(mtu > 0xffff ? 0xffff : mtu);
		return 0;
	}
	case ICMPV6_TIME_EXCEED:
		out->type = ICMP_TIME_EXCEEDED;
		out->code = code;
		return code <= ICMPV6_EXC_FRAGTIME ? 0 : -1;
	case ICMPV6_PARAMPROB:
		if (code == ICMPV6_UNK_NEXTHDR) {
			out->type = ICMP_DEST_UNREACH;
			out->code = ICMP_PROT_UNREACH;
			return 0;
		}
		if (code != ICMPV6_HDR_FIELD)
			return -1;
		out->type = ICMP_PARAMETERPROB;
		out->code = 0;
		/* Where the offending field sits in the translated header. */
		__u32 ptr = bpf_ntohl(in->icmp6_pointer), ptr4;
		if (ptr <= 1)
			ptr4 = ptr;
		else if (ptr == 4 || ptr == 5)
			ptr4 = 2;
		else if (ptr == 6)
			ptr4 = 9;
		else if (ptr == 7)
			ptr4 = 8;
		else if (ptr >= 8 && ptr <= 23)
			ptr4 = 12;
		else if (ptr >= 24 && ptr <= 39)
			ptr4 = 16;
		else
			return -1;
		out->un.gateway = bpf_htonl(ptr4 << 24);
		return 0;
	}
	return -1;
}

/*
 * The IPv4 header for a translated IPv6 packet. `frag` is the Fragment
 * header or NULL; `len` the IPv4 total length.
 */
static __always_inline void v6n_ip4_from_ip6(struct iphdr *ip, const struct ipv6hdr *ip6,
					      const struct v6n_frag_hdr *frag, __u8 protocol, __u32 len,
					      __be32 saddr, __be32 daddr)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	ip->tot_len = bpf_htons(len);
	ip->ttl = ip6->hop_limit - 1;
	ip->protocol = protocol;
	ip->saddr = saddr;
	ip->daddr = daddr;
	if (frag) {
		__u16 off = bpf_ntohs(frag->frag_off);

		ip->id = bpf_htons(bpf_ntohl(frag->identification) & 0xffff);
		ip->frag_off = bpf_htons((off >> 3) | ((off & V6N_IP6_MF) ? V6N_IP4_MF : 0));
	} else if (len > V6N_DF_THRESHOLD) {
		ip->id = 0; /* RFC 6864: atomic datagrams need no identification */
		ip->frag_off = bpf_htons(V6N_IP4_DF);
	} else {
		ip->id = (__u16)bpf_get_prandom_u32();
		ip->frag_off = 0;
	}
	ip->check = 0;
	ip->check = v6n_csum_fold(v6n_csum_diff(NULL, 0, ip, sizeof(*ip)));
}

/*
 * RFC 7915 4.2: ICMPv4 type/code -> ICMPv6, with the 32-bit field after the
 * checksum. Returns -1 for what must not be translated (timestamps, address
 * masks, redirects, source quench, unknown types and codes).
 */
static __always_inline int v6n_icmp4_to_icmp6(const struct icmphdr *in, struct icmp6hdr *out)
{
	__u8 code = in->code;

	out->icmp6_dataun.un_data32[0] = 0;
	switch (in->type) {
	case ICMP_ECHO:
	case ICMP_ECHOREPLY:
		out->icmp6_type = in->type == ICMP_ECHO ? ICMPV6_ECHO_REQUEST : ICMPV6_ECHO_REPLY;
		out->icmp6_code = 0;
		out->icmp6_dataun.un_data32[0] = in->un.gateway; /* identifier, sequence */
		return 0;
	case ICMP_DEST_UNREACH:
		out->icmp6_type = ICMPV6_DEST_UNREACH;
		switch (code) {
		case ICMP_NET_UNREACH:
		case ICMP_HOST_UNREACH:
		case ICMP_SR_FAILED:
		case ICMP_NET_UNKNOWN:
		case ICMP_HOST_UNKNOWN:
		case ICMP_HOST_ISOLATED:
		case ICMP_NET_UNR_TOS:
		case ICMP_HOST_UNR_TOS:
			out->icmp6_code = ICMPV6_NOROUTE;
			return 0;
		case ICMP_NET_ANO:
		case ICMP_HOST_ANO:
		case ICMP_PKT_FILTERED:
		case ICMP_PREC_CUTOFF:
			out->icmp6_code = ICMPV6_ADM_PROHIBITED;
			return 0;
		case ICMP_PORT_UNREACH:
			out->icmp6_code = ICMPV6_PORT_UNREACH;
			return 0;
		case ICMP_PROT_UNREACH:
			out->icmp6_type = ICMPV6_PARAMPROB;
			out->icmp6_code = ICMPV6_UNK_NEXTHDR;
			out->icmp6_pointer = bpf_htonl(offsetof(struct ipv6hdr, nexthdr));
			return 0;
		case ICMP_FRAG_NEEDED:
			/* The MTU: v6n_ptb_mtu, which knows the quoted packet and the links. */
			out->icmp6_type = ICMPV6_PKT_TOOBIG;
			out->icmp6_code = 0;
			return 0;
		}
		return -1;
	case ICMP_TIME_EXCEEDED:
		out->icmp6_type = ICMPV6_TIME_EXCEED;
		out->icmp6_code = code;
		return code <= ICMP_EXC_FRAGTIME ? 0 : -1;
	case ICMP_PARAMETERPROB: {
		if (code != 0 && code != 2)
			return -1;
		__u32 ptr = bpf_ntohl(in->un.gateway) >> 24, ptr6;
		if (ptr <= 1)
			ptr6 = ptr;
		else if (ptr == 2 || ptr == 3)
			ptr6 = 4;
		else if (ptr == 8)
			ptr6 = 7;
		else if (ptr == 9)
			ptr6 = 6;
		else if (ptr >= 12 && ptr <= 15)
			ptr6 = 8;
		else if (ptr >= 16 && ptr <= 19)
			ptr6 = 24;
		else
			return -1;
		out->icmp6_type = ICMPV6_PARAMPROB;
		out->icmp6_code = ICMPV6_HDR_FIELD;
		out->icmp6_pointer = bpf_htonl(ptr6);
		return 0;
	}
	}
	return -1;
}

static __always_inline void v6n_ip6_from_ip4(struct ipv6hdr *ip6, const struct iphdr *ip, __u8 nexthdr,
					      __u32 payload_len, const struct in6_addr *saddr,
					      const struct in6_addr *daddr)
{
	ip6->version = 6;
	ip6->priority = ip->tos >> 4;
	ip6->flow_lbl[0] = (ip->tos & 0xf) << 4;
	ip6->flow_lbl[1] = 0;
	ip6->flow_lbl[2] = 0;
	ip6->payload_len = bpf_htons(payload_len);
	ip6->nexthdr = nexthdr;
	ip6->hop_limit = ip->ttl - 1;
	ip6->saddr = *saddr;
	ip6->daddr = *daddr;
}


/*
 * What translating an ICMP message changes of its checksum (RFC 7915 4.2,
 * 5.2): ICMPv6 sums a pseudo-header (the addresses, the message's length
 * `len`, next header 58) that ICMPv4 does not, and the type and code
 * differ. The difference from the ICMPv6 form to the ICMPv4 one, or, with
 * `to6`, the other way. XDP's translator uses it; tc's spells the same sum
 * out in place, where its frames sit at the verifier's 512 bytes and a
 * call's copy of the addresses would pass them.
 */
static __always_inline __u32 v6n_icmp_xlat_diff(const struct in6_addr *saddr, const struct in6_addr *daddr, __u32 len,
						__u8 type6, __u8 code6, __u8 type4, __u8 code4, int to6)
{
	struct {
		struct v6n_pseudo6 pseudo;
		__u8 type, code;
		__u16 zero;
	} six = { .pseudo = { *saddr, *daddr, bpf_htonl(len), bpf_htonl(IPPROTO_ICMPV6) }, .type = type6, .code = code6 };
	__u8 four[4] = { type4, code4, 0, 0 };

	return to6 ? v6n_csum_diff(four, 4, &six, sizeof(six)) : v6n_csum_diff(&six, sizeof(six), four, 4);
}

#endif /* V6NODE_LIB_XLAT_HEADERS_H */
