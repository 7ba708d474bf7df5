/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Translating ICMP errors (RFC 7915 4.3, 5.3): the headers an error and the
 * packet it quotes are copied through in either direction, and where the
 * stateful paths (stateful NAT64, the NAT46 gateway) leave what the quote
 * must say of their bindings and flows.
 */
#ifndef V6NODE_LIB_XLAT_ICMP_H
#define V6NODE_LIB_XLAT_ICMP_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include "icmp.h"
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>

#include "csum.h"
#include "xlat.h"

/* ICMP errors may carry an IP header plus this much of what followed it. */
#define V6N_INNER_L4 8

/* Pseudo-header of an ICMPv6 message, summed into its checksum. */
struct v6n_pseudo6 {
	struct in6_addr saddr, daddr;
	__be32 len, nexthdr;
};

struct v6n_icmp6_error_in {
	struct v6n_pseudo6 pseudo; /* summed, never stored */
	struct icmp6hdr icmp6;
	struct ipv6hdr inner;
	__u8 l4[V6N_INNER_L4];
};

struct v6n_icmp4_error_out {
	struct iphdr ip;
	struct icmphdr icmp;
	struct iphdr inner;
	__u8 l4[V6N_INNER_L4];
};

struct v6n_icmp4_error_in {
	struct icmphdr icmp;
	struct iphdr inner;
	__u8 l4[V6N_INNER_L4];
};

struct v6n_icmp6_error_out {
	struct ipv6hdr ip6;
	struct v6n_pseudo6 pseudo; /* summed, never stored */
	struct icmp6hdr icmp6;
	struct ipv6hdr inner;
	__u8 l4[V6N_INNER_L4];
};

/* Per-CPU room for the ICMP error translations' header copies, which would
 * not fit the BPF stack beside everything else. */
struct v6n_icmp_scratch {
	struct v6n_icmp6_error_in in6;
	struct v6n_icmp4_error_out out4;
	struct v6n_icmp4_error_in in4;
	struct v6n_icmp6_error_out out6;
	/* An ICMPv4 error's mapped destination, from v6n_4to6 (which chose to
	 * translate by it) to v6n_4to6_icmp_error, whose stack is full. */
	struct in6_addr error_daddr;
	/* Stateful NAT64 and the NAT46 gateway: where in the quote's transport
	 * header the port (echo identifier) of one side of the binding or flow
	 * sits, plus one (0: nothing to replace), and the other side's that
	 * replaces it; likewise the address: the client (NAT46: the backend)
	 * for an ICMPv4 error, the pool address for an ICMPv6 one. */
	__u8 error_port_at;
	__be16 error_port;
	struct in6_addr error_client;
	__be32 error_pool;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_icmp_scratch);
} v6n_icmp_scratch SEC(".maps");

static __always_inline int v6n_is_icmp6_error(__u8 type)
{
	return type < 128;
}

/*
 * Stateful NAT64: the quoted transport header `l4` (its first 8 bytes, in
 * the error's new version) as the other side of the binding sees it: `port`
 * at `at`, with the checksum mended where it lies in those 8 bytes (UDP,
 * ICMP and ICMPv6; TCP's beyond is v6n_quote_tcp_check's).
 */
static __always_inline void v6n_nat64_quote_port(__u8 *l4, __u8 proto, __u32 at, __be16 port)
{
	__be32 before, after;

	at &= 4 | 2; /* 0, 2 or 4: inside the 8 bytes */
	__builtin_memcpy(&before, l4 + (at & 4), 4);
	__builtin_memcpy(l4 + at, &port, 2);
	__builtin_memcpy(&after, l4 + (at & 4), 4);
	if (proto == IPPROTO_TCP)
		return;
	__u16 *check = (__u16 *)(l4 + (proto == IPPROTO_UDP ? 6 : 2));
	if (proto == IPPROTO_UDP && !*check)
		return; /* IPv4 UDP without a checksum */
	*check = v6n_csum_update(*check, v6n_csum_diff(&before, 4, &after, 4));
	if (!*check && proto == IPPROTO_UDP)
		*check = 0xffff;
}

/*
 * A quoted TCP segment's checksum, translated like a packet's (RFC 7915 4.3
 * and 5.2, RFC 5508 REQ-3): `len` bytes of the segment are quoted from `at`
 * in the packet; where they reach its checksum (offset 16), it is mended in
 * place by `diff`, what the translation changed of the pseudo-header and
 * the first 8 bytes. Returns the change to sum into the error's own
 * checksum (0: none, the quote being too short to hold it).
 */
static __always_inline __u32 v6n_quote_tcp_check(struct __sk_buff *skb, __u32 at, __u32 len, __u32 diff)
{
	__u16 before[2] = {}, after[2] = {};

	if (len < 18 || bpf_skb_load_bytes(skb, at + 16, before, 2) < 0)
		return 0;
	after[0] = v6n_csum_update(before[0], diff);
	if (bpf_skb_store_bytes(skb, at + 16, after, 2, BPF_F_RECOMPUTE_CSUM) < 0)
		return 0;
	return v6n_csum_diff(before, 4, after, 4);
}

#endif /* V6NODE_LIB_XLAT_ICMP_H */
