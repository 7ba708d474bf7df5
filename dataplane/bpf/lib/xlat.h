/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Pieces of the stateless translator shared by both directions: forwarding a
 * translated packet to its next hop, and turning a packet into the ICMP
 * error the translator owes its sender (Time Exceeded, Packet Too Big).
 */
#ifndef V6NODE_LIB_XLAT_H
#define V6NODE_LIB_XLAT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include "icmp.h"
#include <linux/icmpv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"
#include "fib.h"
#include "rate.h"


#define V6N_ETH_HLEN 14
#define V6N_IP6_HLEN 40
#define V6N_IP4_HLEN 20
/* Packets an IPv4 router may not fragment are kept to a size IPv6 can carry
 * unfragmented: RFC 7915 sets DF on translated packets above 1260 bytes. */
#define V6N_DF_THRESHOLD 1260
/* IPv4 errors quote at most what fits in 576 bytes (RFC 1812 4.3.2.3). */
#define V6N_ICMP4_QUOTE_MAX (576 - V6N_IP4_HLEN - 8)
#define V6N_ICMP6_QUOTE_MAX (V6N_IPV6_MIN_MTU - V6N_IP6_HLEN - 8)
#define V6N_CSUM_CHUNK 512

/* linux/ipv6.h leaves the fragment header to the kernel's private headers. */
struct v6n_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, bit 0 = more fragments */
	__be32 identification;
};

#define V6N_IP6_MF 0x0001
#define V6N_IP4_DF 0x4000
#define V6N_IP4_MF 0x2000
#define V6N_IP4_OFFSET 0x1fff

#ifndef V6N_CTX_XDP /* tc's alone, as the ICMP errors below */
/* Per-CPU room for checksumming quoted data: the BPF stack is 512 bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[V6N_CSUM_CHUNK]);
} v6n_csum_scratch SEC(".maps");

/*
 * Partial sum of `len` packet bytes from `off`, any length up to 9 KiB: the
 * data an ICMP error quotes, or a UDP datagram whose IPv4 checksum is zero.
 * Returns -1 when the bytes cannot be read. A global function, so the
 * verifier checks its loop once, not once per path that reaches it (which
 * also means a single object may include this header).
 */
__noinline __s64 v6n_csum_packet(struct __sk_buff *skb, __u32 off, __u32 len)
{
	__u32 zero = 0;
	__u8 *buf = bpf_map_lookup_elem(&v6n_csum_scratch, &zero);
	__u32 sum = 0;

	if (!buf)
		return -1;
	for (int i = 0; i < 19 && len; i++) {
		/* Whole words in chunks of at most 512 (what bpf_csum_diff
		 * takes), then the last 1-3 bytes padded with zeros. Two branches
		 * so the verifier sees each bound on its own. */
		__u32 n = len >= V6N_CSUM_CHUNK ? V6N_CSUM_CHUNK : len & 0x1fc;

		if (n == 0) {
			n = len & 3;
			__builtin_memset(buf, 0, 4);
			if (n == 0 || bpf_skb_load_bytes(skb, off, buf, n) < 0)
				return -1;
			n = 4;
		} else if (bpf_skb_load_bytes(skb, off, buf, n) < 0) {
			return -1;
		}
		sum = v6n_csum_add(sum, (__u32)bpf_csum_diff(NULL, 0, (__be32 *)buf, n, 0));
		if (n > len)
			break; /* the padded tail */
		off += n;
		len -= n;
	}
	return len > 3 ? -1 : sum;
}
#endif /* !V6N_CTX_XDP */

/*
 * Errors the translator sends are rate limited, as the kernel limits its own
 * (net.ipv4.icmp_msgs_per_sec, 1000/s with a burst of 50): otherwise a flood
 * of TTL-1 packets would be answered at line rate. One bucket for the node.
 */
#define V6N_ICMP_ERRORS_PER_SEC 1000
#define V6N_ICMP_ERRORS_BURST 50

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_token_bucket);
} v6n_icmp_rate SEC(".maps");

static __always_inline int v6n_icmp_error_allowed(void)
{
	__u32 zero = 0;
	struct v6n_token_bucket *bucket = bpf_map_lookup_elem(&v6n_icmp_rate, &zero);

	return bucket && v6n_take_token(bucket, V6N_ICMP_ERRORS_PER_SEC, V6N_ICMP_ERRORS_BURST, bpf_ktime_get_ns());
}

#ifndef V6N_CTX_XDP /* the error senders are tc's alone */
/* Per-CPU room for v6n_icmp6_error's route lookup: it is called from
 * programs whose own frames leave it little of BPF's 512-byte stack (the
 * uplink's, for direct server return inside IPv6). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_fib_lookup);
} v6n_icmp_error_fib SEC(".maps");

/*
 * Replaces the IPv6 packet in skb by an ICMPv6 error about it, addressed to
 * its source from the address the kernel would pick for that route, and sends
 * it back. Returns TC_ACT_SHOT when no error can be sent, or the rate limit
 * says not now (the caller counts the drop either way).
 */
static __noinline int v6n_icmp6_error(struct __sk_buff *skb, __u8 type, __u8 code, __u32 info)
{
	struct in6_addr orig_saddr;
	__u32 zero = 0;
	struct bpf_fib_lookup *fib = bpf_map_lookup_elem(&v6n_icmp_error_fib, &zero);

	if (!fib || !v6n_icmp_error_allowed())
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + offsetof(struct ipv6hdr, saddr), &orig_saddr, 16) < 0)
		return TC_ACT_SHOT;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET6;
	fib->ifindex = skb->ingress_ifindex;
	__u32 quote = skb->len - V6N_ETH_HLEN;

	if (quote > V6N_ICMP6_QUOTE_MAX)
		quote = V6N_ICMP6_QUOTE_MAX;
	quote &= ~3U;
	__builtin_memcpy(fib->ipv6_dst, &orig_saddr, 16);
	/* The error's own size: without it the kernel checks the MTU against
	 * the packet being answered, which may be the very one too big. */
	fib->tot_len = V6N_IP6_HLEN + 8 + quote;
	int rc = bpf_fib_lookup(skb, fib, sizeof(*fib), BPF_FIB_LOOKUP_SRC);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_SHOT;

	if (bpf_skb_change_tail(skb, V6N_ETH_HLEN + quote, 0) < 0 ||
	    bpf_skb_adjust_room(skb, V6N_IP6_HLEN + 8, BPF_ADJ_ROOM_MAC, 0) < 0)
		return TC_ACT_SHOT;

	struct {
		struct ipv6hdr ip6;
		struct icmp6hdr icmp6;
	} hdr = {};
	hdr.ip6.version = 6;
	hdr.ip6.payload_len = bpf_htons(8 + quote);
	hdr.ip6.nexthdr = IPPROTO_ICMPV6;
	hdr.ip6.hop_limit = 64;
	__builtin_memcpy(&hdr.ip6.saddr, fib->ipv6_src, 16);
	hdr.ip6.daddr = orig_saddr;
	hdr.icmp6.icmp6_type = type;
	hdr.icmp6.icmp6_code = code;
	hdr.icmp6.icmp6_dataun.un_data32[0] = bpf_htonl(info);

	__s64 data = v6n_csum_packet(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + 8, quote);
	if (data < 0)
		return TC_ACT_SHOT;
	/* Pseudo-header: the addresses as they sit in the header, then the
	 * length and next header, each a 32-bit word. */
	__u32 sum = v6n_csum_diff(NULL, 0, &hdr.ip6.saddr, 32);
	sum = v6n_csum_add(sum, bpf_htonl(8 + quote));
	sum = v6n_csum_add(sum, bpf_htonl(IPPROTO_ICMPV6));
	sum = v6n_csum_add(sum, v6n_csum_diff(NULL, 0, &hdr.icmp6, sizeof(hdr.icmp6)));
	hdr.icmp6.icmp6_cksum = v6n_csum_fold(v6n_csum_add(sum, (__u32)data));

	__be16 proto = bpf_htons(ETH_P_IPV6);
	if (bpf_skb_store_bytes(skb, 12, &proto, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN, &hdr, sizeof(hdr), 0) < 0)
		return TC_ACT_SHOT;
	return v6n_redirect(skb, fib, rc);
}

/* The IPv4 counterpart of v6n_icmp6_error. Unused where only IPv6 errors
 * are sent (the host and pod objects' direct server return). */
static __noinline __attribute__((unused)) int v6n_icmp4_error(struct __sk_buff *skb, __u8 type, __u8 code, __u32 info)
{
	struct bpf_fib_lookup fib = {
		.family = AF_INET,
		.ifindex = skb->ingress_ifindex,
	};

	if (!v6n_icmp_error_allowed())
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + offsetof(struct iphdr, saddr), &fib.ipv4_dst, 4) < 0)
		return TC_ACT_SHOT;
	__be32 orig_saddr = fib.ipv4_dst;
	__u32 quote = skb->len - V6N_ETH_HLEN;

	if (quote > V6N_ICMP4_QUOTE_MAX)
		quote = V6N_ICMP4_QUOTE_MAX;
	quote &= ~3U;
	fib.tot_len = V6N_IP4_HLEN + 8 + quote;
	int rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SRC);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_SHOT;

	if (bpf_skb_change_tail(skb, V6N_ETH_HLEN + quote, 0) < 0 ||
	    bpf_skb_adjust_room(skb, V6N_IP4_HLEN + 8, BPF_ADJ_ROOM_MAC, 0) < 0)
		return TC_ACT_SHOT;

	struct {
		struct iphdr ip;
		struct icmphdr icmp;
	} hdr = {};
	hdr.ip.version = 4;
	hdr.ip.ihl = 5;
	hdr.ip.tos = 0xc0; /* internetwork control, as Linux sends its errors */
	hdr.ip.tot_len = bpf_htons(V6N_IP4_HLEN + 8 + quote);
	hdr.ip.ttl = 64;
	hdr.ip.protocol = IPPROTO_ICMP;
	hdr.ip.saddr = fib.ipv4_src;
	hdr.ip.daddr = orig_saddr;
	hdr.ip.check = v6n_csum_fold(v6n_csum_diff(NULL, 0, &hdr.ip, sizeof(hdr.ip)));
	hdr.icmp.type = type;
	hdr.icmp.code = code;
	hdr.icmp.un.gateway = bpf_htonl(info);

	__s64 data = v6n_csum_packet(skb, V6N_ETH_HLEN + V6N_IP4_HLEN + 8, quote);
	if (data < 0)
		return TC_ACT_SHOT;
	hdr.icmp.checksum =
		v6n_csum_fold(v6n_csum_add(v6n_csum_diff(NULL, 0, &hdr.icmp, sizeof(hdr.icmp)), (__u32)data));

	__be16 proto = bpf_htons(ETH_P_IP);
	if (bpf_skb_store_bytes(skb, 12, &proto, 2, 0) < 0 ||
	    bpf_skb_store_bytes(skb, V6N_ETH_HLEN, &hdr, sizeof(hdr), 0) < 0)
		return TC_ACT_SHOT;
	return v6n_redirect(skb, &fib, rc);
}

#endif /* !V6N_CTX_XDP */

/*
 * Result of translating one packet: a tc action and the counter's reason,
 * packed in one register so that out-of-line parts can return it (BPF
 * functions return a single 64-bit value).
 */
typedef __u32 v6n_outcome;
#define V6N_OUTCOME(action, reason) ((((__u32)(action) + 1) << 8) | (reason))
#define V6N_OUTCOME_ACTION(o) ((int)(((o) >> 8) & 0xff) - 1)
#define V6N_OUTCOME_REASON(o) ((o) & 0xff)
/* Bits 16-31: the MTU a V6N_ACT_TOO_BIG error reports. */
#define V6N_OUTCOME_MTU(o) ((o) >> 16)

#define V6N_NOT_OURS V6N_OUTCOME(TC_ACT_UNSPEC, V6N_REASON_PASS)
#define V6N_DROP(r) V6N_OUTCOME(TC_ACT_SHOT, (r))

/*
 * Work the entry function finishes itself, so that no call chain holds more
 * than two big stack frames (the verifier allows 512 bytes for all of them).
 */
enum {
	V6N_ACT_XLAT_ICMP_ERROR = 64, /* translate an ICMP error and its quote */
	V6N_ACT_TIME_EXCEEDED = 65,   /* answer with Time Exceeded */
	V6N_ACT_TOO_BIG = 66,         /* answer with Packet Too Big / Fragmentation Needed */
};

#ifndef V6N_CTX_XDP
/*
 * The last step of every translation: to the next hop the FIB found, or to
 * the kernel (local destinations, DF-clear packets the next hop must
 * fragment, no route: the stack answers those).
 */
static __always_inline v6n_outcome v6n_deliver(struct __sk_buff *skb, struct bpf_fib_lookup *fib, int rc)
{
	if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return V6N_OUTCOME(v6n_redirect(skb, fib, rc), V6N_REASON_XLAT_FORWARDED);
	return V6N_OUTCOME(TC_ACT_OK, V6N_REASON_XLAT_TO_STACK);
}
#endif /* !V6N_CTX_XDP */

#endif /* V6NODE_LIB_XLAT_H */
