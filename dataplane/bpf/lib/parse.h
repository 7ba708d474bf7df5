/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef V6NODE_LIB_PARSE_H
#define V6NODE_LIB_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <v6node/abi.h>

/*
 * Finds the IPv6 header of an Ethernet frame. Returns V6N_REASON_PASS with
 * *ip6 set, V6N_REASON_PASS with *ip6 NULL for frames that are not IPv6, or
 * a drop reason. Bounds are checked against data_end because the verifier
 * rejects any packet access it cannot prove in range.
 */
static __always_inline enum v6n_reason v6n_parse_ipv6(struct __sk_buff *skb, struct ipv6hdr **ip6)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	*ip6 = NULL;
	if ((void *)(eth + 1) > data_end)
		return V6N_REASON_PASS; /* runt frames are the driver's business */
	if (eth->h_proto != bpf_htons(ETH_P_IPV6))
		return V6N_REASON_PASS;

	struct ipv6hdr *hdr = (void *)(eth + 1);
	if ((void *)(hdr + 1) > data_end) {
		/* Headers may sit in paged fragments; pull before calling it short. */
		if (bpf_skb_pull_data(skb, sizeof(*eth) + sizeof(*hdr)) < 0)
			return V6N_REASON_DROP_MALFORMED;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		eth = data;
		hdr = (void *)(eth + 1);
		if ((void *)(hdr + 1) > data_end)
			return V6N_REASON_DROP_MALFORMED;
	}
	if (hdr->version != 6)
		return V6N_REASON_DROP_MALFORMED;
	*ip6 = hdr;
	return V6N_REASON_PASS;
}

/* Link-local and multicast addresses belong to the link's own stack
 * (neighbour discovery with the host, on veth): never to host routing, nor
 * to policy. */
static __always_inline int v6n_link_scoped(const struct in6_addr *addr)
{
	return addr->s6_addr[0] == 0xff || (addr->s6_addr[0] == 0xfe && (addr->s6_addr[1] & 0xc0) == 0x80);
}

#endif /* V6NODE_LIB_PARSE_H */
