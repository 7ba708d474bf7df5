// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the stateless NAT46/NAT64 translator (SIIT, RFC 7915),
 * attached at tc ingress of the devices in nat64.devices. IPv6 packets to
 * mapped destinations become IPv4, and IPv4 packets to EAM destinations or
 * into nat64.translatable ranges (IPv4-embedded under the prefix) become
 * IPv6; both are then sent to the FIB's next hop. Everything else passes
 * untouched. The translation itself keeps no per-flow state; in front of it
 * sit stateful NAT64 (lib/nat64_state.h: IPv6 clients borrowing a pool's
 * transport addresses) and the NAT46 gateway (lib/nat46_gw.h: IPv4 clients
 * to a VIP's IPv6 backends), which rewrite ports and hand the translator
 * the addresses to use.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/counters.h"
#include "lib/ct.h"
#include "lib/nat46_gw.h"
#include "lib/nat64.h"
#include "lib/nat64_state.h"
#include "lib/xlat.h"

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
 * at `at`, with the checksum mended where the quote holds it (UDP, ICMP
 * and ICMPv6; TCP's lies beyond).
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

/* Stateful NAT64: an ICMPv6 error (straight after the IPv6 header) about a
 * packet to a source that may use the pool. A router on the clients' side
 * sends those from an address of its own, which need not be such a source. */
static __noinline int v6n_nat64_error_to_client(struct __sk_buff *skb, __u8 nexthdr)
{
	struct in6_addr quoted_daddr;
	__u8 type;

	return nexthdr == IPPROTO_ICMPV6 && bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN, &type, 1) == 0 &&
	       v6n_is_icmp6_error(type) &&
	       bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + 8 + 24, &quoted_daddr, 16) == 0 &&
	       v6n_nat64_may_use_pool(&quoted_daddr);
}

/*
 * Stateful NAT64, an ICMPv6 error from a client or a router on its side
 * (RFC 6146 3.5.3): about a packet the client's binding brought in, so the
 * quote's destination and its port name the binding. The error leaves from
 * the pool address (returned), the quote's destination becomes the pool's
 * transport address. A drop reason is returned negated.
 */
static __noinline __s64 v6n_nat64_outbound_error(struct __sk_buff *skb)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	__u32 zero = 0;
	struct v6n_icmp_scratch *error = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();

	if (!cfg || !error || !s)
		return -V6N_REASON_DROP_UNMAPPED;
	__builtin_memset(&s->client_key, 0, sizeof(s->client_key));
	/* The quoted header and its first 8 bytes. */
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + 8, s->quote, V6N_IP6_HLEN + V6N_INNER_L4) < 0)
		return -V6N_REASON_DROP_MALFORMED;
	const struct ipv6hdr *inner = (const void *)s->quote;
	__u8 proto = inner->nexthdr;
	if (inner->version != 6 || (proto != IPPROTO_TCP && proto != IPPROTO_UDP))
		return -V6N_REASON_DROP_UNTRANSLATABLE;
	__builtin_memcpy(s->client_key.saddr, inner->daddr.s6_addr, 16);
	__builtin_memcpy(&s->client_key.sport, s->quote + V6N_IP6_HLEN + 2, 2);
	s->client_key.proto = proto;
	struct v6n_ct_value *out = bpf_map_lookup_elem(&v6n_nat64_state, &s->client_key);
	if (!out)
		return -V6N_REASON_DROP_NO_BINDING;
	v6n_nat64_pool_key(&s->pool_key, out->saddr + 12, out->sport, proto);
	struct v6n_ct_value *binding = v6n_nat64_live(cfg, &s->pool_key, bpf_ktime_get_ns());
	if (!binding || binding->dport != s->client_key.sport || !v6n_bytes_eq(binding->daddr, s->client_key.saddr, 16))
		return -V6N_REASON_DROP_NO_BINDING;
	__builtin_memcpy(&error->error_pool, s->pool_key.daddr + 12, 4);
	error->error_port = s->pool_key.dport;
	error->error_port_at = 2 + 1;
	return (__s64)(__u32)error->error_pool;
}

/*
 * NAT46 gateway, an ICMPv6 error to an embedded client: about a packet the
 * client's flow brought to its backend, so the quote is the flow's reverse
 * entry read backwards. The error leaves from the VIP (returned), the
 * quote's destination becomes the VIP's transport address. A drop reason
 * is returned negated.
 */
static __noinline __s64 v6n_nat46_outbound_error(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct v6n_icmp_scratch *error = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);
	struct v6n_nat64_scratch *s = bpf_map_lookup_elem(&v6n_nat64_scratch, &zero);

	if (!error || !s)
		return -V6N_REASON_DROP_NAT46_NO_FLOW;
	/* The error's destination, then the quoted header and its first 8 bytes. */
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + 24, s->peer_key.daddr, 16) < 0 ||
	    bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP6_HLEN + 8, s->quote, V6N_IP6_HLEN + V6N_INNER_L4) < 0)
		return -V6N_REASON_DROP_MALFORMED;
	const struct ipv6hdr *inner = (const void *)s->quote;
	__u8 proto = inner->nexthdr;
	if (inner->version != 6 || (proto != IPPROTO_TCP && proto != IPPROTO_UDP) ||
	    !v6n_bytes_eq(inner->saddr.s6_addr, s->peer_key.daddr, 16))
		return -V6N_REASON_DROP_UNTRANSLATABLE;
	__builtin_memset(&s->pool_key, 0, sizeof(s->pool_key));
	__builtin_memcpy(s->pool_key.saddr, inner->daddr.s6_addr, 16);
	__builtin_memcpy(s->pool_key.daddr, inner->saddr.s6_addr, 16);
	__builtin_memcpy(&s->pool_key.sport, s->quote + V6N_IP6_HLEN + 2, 2);
	__builtin_memcpy(&s->pool_key.dport, s->quote + V6N_IP6_HLEN, 2);
	s->pool_key.proto = proto;
	struct v6n_ct_value *reverse = bpf_map_lookup_elem(&v6n_nat46_state, &s->pool_key);
	if (!reverse)
		return -V6N_REASON_DROP_NAT46_NO_FLOW;
	v6n_nat46_forward_key(&s->client_key, reverse, proto);
	struct v6n_ct_value *flow = bpf_map_lookup_elem(&v6n_nat46_state, &s->client_key);
	if (!flow || flow->dport != s->pool_key.sport || !v6n_bytes_eq(flow->daddr, s->pool_key.saddr, 16))
		return -V6N_REASON_DROP_NAT46_NO_FLOW;
	error->error_port = reverse->sport;
	error->error_port_at = 2 + 1;
	__be32 vip;
	__builtin_memcpy(&vip, reverse->saddr + 12, 4);
	return (__s64)(__u32)vip;
}

/*
 * Stateful NAT64 hairpinning (RFC 6146 3.8): a client's packet to the pool
 * address and port of another binding goes straight to that binding's
 * client, from the sender's pool address (under the prefix) and port, as
 * if it had gone out to IPv4 and come back. TCP and UDP; `pool_src` is the
 * sender's pool address, `pool_dst` the one it sent to.
 */
static __noinline v6n_outcome v6n_nat64_hairpin(struct __sk_buff *skb, __be32 pool_src, __be32 pool_dst)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	struct v6n_flow flow;

	if (!cfg || !s)
		return V6N_DROP(V6N_REASON_DROP_NO_BINDING);
	if (v6n_flow_of(skb, &flow) < 0)
		return V6N_DROP(V6N_REASON_DROP_UNTRANSLATABLE);
	v6n_nat64_pool_key(&s->pool_key, (const __u8 *)&pool_dst, flow.key.dport, flow.key.proto);
	struct v6n_ct_value *binding = v6n_nat64_live(cfg, &s->pool_key, bpf_ktime_get_ns());
	if (!binding)
		return V6N_DROP(V6N_REASON_DROP_NO_BINDING);
	if (cfg->filtering == V6N_NAT64_FILTER_ADDRESS_DEPENDENT) {
		v6n_v4mapped(s->pool_key.saddr, (const __u8 *)&pool_src);
		if (!bpf_map_lookup_elem(&v6n_nat64_state, &s->pool_key))
			return V6N_DROP(V6N_REASON_DROP_FILTERED);
	}
	struct v6n_ct_value *out = &s->value;
	if (v6n_map_4to6(cfg, pool_src, (struct in6_addr *)out->saddr) < 0)
		return V6N_DROP(V6N_REASON_DROP_UNMAPPED);
	__builtin_memcpy(out->daddr, binding->daddr, 16);
	out->sport = flow.key.sport; /* the sender's pool port, written by v6n_nat64_outbound */
	out->dport = binding->dport;
	s->l4.proto = flow.key.proto;
	s->l4.tcp_flags = flow.tcp_flags;
	v6n_nat64_touch(binding, &s->l4, 1, bpf_ktime_get_ns());
	if (v6n_ct_rewrite(skb, &flow, out) < 0)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);

	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + V6N_ETH_HLEN;
	if ((void *)(ip6 + 1) > data_end)
		return V6N_DROP(V6N_REASON_DROP_MALFORMED);
	int action = v6n_route6(skb, ip6);
	return V6N_OUTCOME(action == TC_ACT_UNSPEC ? TC_ACT_OK : action,
			   action == TC_ACT_UNSPEC ? V6N_REASON_XLAT_TO_STACK : V6N_REASON_XLAT_FORWARDED);
}

/* --- IPv6 -> IPv4 --------------------------------------------------------------- */

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
 * ICMPv6 error -> ICMPv4 error, including the packet it quotes (RFC 7915
 * 5.3). The quoted packet went the other way through this translator, so its
 * addresses map the same way as any other. Its transport checksum is fixed
 * only where it lies in the first 8 bytes (UDP, ICMP); a quoted TCP checksum
 * is left as it was, as receivers do not check it.
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
	if (inner_proto == IPPROTO_UDP) {
		struct udphdr *udp = (void *)out->l4;

		if (udp->check) {
			__be32 from[8], to[2] = { inner_saddr, inner_daddr };

			__builtin_memcpy(from, &in->inner.saddr, 32);
			udp->check = v6n_csum_update(udp->check, v6n_csum_diff(from, 32, to, 8));
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
	out->icmp.checksum = v6n_csum_update(old, v6n_csum_diff(in, sizeof(*in), &out->icmp,
								 sizeof(*out) - sizeof(out->ip)));

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
	} else if (v6n_map_6to4(cfg, &ip6.daddr, &daddr) < 0) {
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

/* --- IPv4 -> IPv6 --------------------------------------------------------------- */

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

/*
 * Stateful NAT64, an ICMPv4 error to a pool address (RFC 6146 3.5.3): the
 * binding is the one of the packet it quotes, which left from the pool. Its
 * client becomes the error's destination and the quote's source, with its
 * own port. Returns 0 or the reason to drop.
 */
static __noinline int v6n_nat64_inbound_error(struct __sk_buff *skb)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	__u32 zero = 0;
	struct v6n_icmp_scratch *error = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);
	/* One key for both scratch maps: this frame sits under the translator's
	 * largest with nothing to spare. */
	struct v6n_nat64_scratch *s = bpf_map_lookup_elem(&v6n_nat64_scratch, &zero);

	if (!cfg || !error || !s)
		return V6N_REASON_DROP_NO_BINDING;
	/* The outer destination, then the quoted header and its first 8 bytes. */
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + 16, s->ipv4_addrs, 4) < 0 ||
	    bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP4_HLEN + 8, s->quote, V6N_IP4_HLEN + V6N_INNER_L4) < 0)
		return V6N_REASON_DROP_MALFORMED;
	const struct iphdr *inner = (const void *)s->quote;
	if (inner->version != 4 || inner->ihl != 5 || inner->saddr != s->ipv4_addrs[0])
		return V6N_REASON_DROP_UNTRANSLATABLE;
	__u8 proto = inner->protocol;
	__u32 at = 0;
	if (proto == IPPROTO_ICMP) {
		if (s->quote[V6N_IP4_HLEN] != ICMP_ECHO)
			return V6N_REASON_DROP_UNTRANSLATABLE;
		at = 4;
	} else if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) {
		return V6N_REASON_DROP_UNTRANSLATABLE;
	}
	__be16 port;
	__builtin_memcpy(&port, s->quote + V6N_IP4_HLEN + at, 2);
	v6n_nat64_pool_key(&s->pool_key, (const __u8 *)&s->ipv4_addrs[0], port, proto);
	struct v6n_ct_value *binding = v6n_nat64_live(cfg, &s->pool_key, bpf_ktime_get_ns());
	if (!binding)
		return V6N_REASON_DROP_NO_BINDING;
	__builtin_memcpy(&error->error_daddr, binding->daddr, 16);
	__builtin_memcpy(&error->error_client, binding->daddr, 16);
	error->error_port = binding->dport;
	error->error_port_at = at + 1;
	return 0;
}

/*
 * NAT46 gateway, an ICMPv4 error to a VIP: about a packet that left from
 * the VIP to a client, so the quote's ports are the flow's VIP port and
 * client port. The flow's backend becomes the error's destination and the
 * quote's source, with its own port. Returns 0, the reason to drop, or
 * V6N_NAT46_NOT_A_FRONTEND for an error about the host's own packet.
 */
static __noinline int v6n_nat46_inbound_error(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct v6n_icmp_scratch *error = bpf_map_lookup_elem(&v6n_icmp_scratch, &zero);
	struct v6n_nat64_scratch *s = bpf_map_lookup_elem(&v6n_nat64_scratch, &zero);

	if (!error || !s)
		return V6N_REASON_DROP_NAT46_NO_FLOW;
	/* The VIP, then the quoted header and its first 8 bytes. */
	if (bpf_skb_load_bytes(skb, V6N_ETH_HLEN + 16, s->ipv4_addrs, 4) < 0 ||
	    bpf_skb_load_bytes(skb, V6N_ETH_HLEN + V6N_IP4_HLEN + 8, s->quote, V6N_IP4_HLEN + V6N_INNER_L4) < 0)
		return V6N_REASON_DROP_MALFORMED;
	const struct iphdr *inner = (const void *)s->quote;
	__u8 proto = inner->protocol;
	if (inner->version != 4 || inner->ihl != 5 || inner->saddr != s->ipv4_addrs[0] ||
	    (proto != IPPROTO_TCP && proto != IPPROTO_UDP))
		return V6N_NAT46_NOT_A_FRONTEND;
	struct v6n_nat46_frontend_key fkey = { .proto = proto };
	__builtin_memcpy(fkey.addr, &inner->saddr, 4);
	__builtin_memcpy(&fkey.port, s->quote + V6N_IP4_HLEN, 2);
	struct v6n_nat46_frontend *fe = bpf_map_lookup_elem(&v6n_nat46_frontends, &fkey);
	if (!fe)
		return V6N_NAT46_NOT_A_FRONTEND;

	__builtin_memset(&s->client_key, 0, sizeof(s->client_key));
	v6n_v4mapped(s->client_key.saddr, (const __u8 *)&inner->daddr);
	v6n_v4mapped(s->client_key.daddr, (const __u8 *)&inner->saddr);
	__builtin_memcpy(&s->client_key.sport, s->quote + V6N_IP4_HLEN + 2, 2);
	s->client_key.dport = fkey.port;
	s->client_key.proto = proto;
	struct v6n_ct_value *flow = bpf_map_lookup_elem(&v6n_nat46_state, &s->client_key);
	if (!flow || flow->frontend_id != fe->id)
		return V6N_REASON_DROP_NAT46_NO_FLOW;
	__builtin_memcpy(&error->error_daddr, flow->daddr, 16);
	__builtin_memcpy(&error->error_client, flow->daddr, 16);
	error->error_port = flow->dport;
	error->error_port_at = 0 + 1;
	return 0;
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
	if (inner_proto == IPPROTO_UDP) {
		struct udphdr *udp = (void *)out->l4;

		if (udp->check) {
			__be32 from[2] = { in->inner.saddr, in->inner.daddr }, to[8];

			__builtin_memcpy(to, &inner_saddr, 16);
			__builtin_memcpy(to + 4, &inner_daddr, 16);
			udp->check = v6n_csum_update(udp->check, v6n_csum_diff(from, 8, to, 32));
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
		old, v6n_csum_diff(in, sizeof(*in), &out->pseudo, sizeof(*out) - sizeof(out->ip6)));

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

/*
 * RFC 7915 4.1: a DF-clear packet too big for the IPv6 next hop is
 * fragmented, not refused. A BPF program sends one packet, so the kernel
 * does it: marked, the packet is routed out of the agent's fragmentation
 * link (agent/src/fragmenter.rs) and its fragments are translated one by one as they come
 * back in. Returns 1 when the packet is marked so. Never twice (a
 * fragment still too big gets the Fragmentation Needed), and not the
 * stateful paths' packets: their ports are rewritten already and their
 * fragments are refused.
 */
static __noinline int v6n_fragment_by_kernel(struct __sk_buff *skb, __be32 daddr)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();

	if (!cfg || !cfg->fragment_mark || skb->mark == cfg->fragment_mark)
		return 0;
	if (v6n_nat46_is_vip(daddr) || v6n_nat64_is_pool(daddr))
		return 0;
	skb->mark = cfg->fragment_mark;
	return 1;
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

	if (h.ip.ttl <= 1) {
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
		if (!(h.ip.frag_off & bpf_htons(V6N_IP4_DF)) && protocol != IPPROTO_ICMPV6 && !udp_no_csum &&
		    v6n_fragment_by_kernel(skb, h.ip.daddr))
			return V6N_OUTCOME(TC_ACT_OK, V6N_REASON_XLAT_TO_FRAGMENT);
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

/* --- entry ------------------------------------------------------------------------ */

SEC("classifier")
int v6n_nat64(struct __sk_buff *skb)
{
	v6n_outcome outcome;
	__u8 direction;

	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		direction = V6N_DIRECTION_XLAT_6TO4;
		outcome = v6n_6to4(skb);
		switch (V6N_OUTCOME_ACTION(outcome)) {
		case V6N_ACT_XLAT_ICMP_ERROR:
			outcome = v6n_6to4_icmp_error(skb);
			break;
		case V6N_ACT_TIME_EXCEEDED:
			outcome = V6N_OUTCOME(v6n_icmp6_error(skb, ICMPV6_TIME_EXCEED, ICMPV6_EXC_HOPLIMIT, 0),
					      V6N_OUTCOME_REASON(outcome));
			break;
		case V6N_ACT_TOO_BIG:
			outcome = V6N_OUTCOME(v6n_icmp6_error(skb, ICMPV6_PKT_TOOBIG, 0, V6N_OUTCOME_MTU(outcome)),
					      V6N_OUTCOME_REASON(outcome));
			break;
		}
	} else if (skb->protocol == bpf_htons(ETH_P_IP)) {
		direction = V6N_DIRECTION_XLAT_4TO6;
		outcome = v6n_4to6(skb);
		switch (V6N_OUTCOME_ACTION(outcome)) {
		case V6N_ACT_XLAT_ICMP_ERROR:
			outcome = v6n_4to6_icmp_error(skb);
			break;
		case V6N_ACT_TIME_EXCEEDED:
			outcome = V6N_OUTCOME(v6n_icmp4_error(skb, ICMP_TIME_EXCEEDED, ICMP_EXC_TTL, 0),
					      V6N_OUTCOME_REASON(outcome));
			break;
		case V6N_ACT_TOO_BIG:
			outcome = V6N_OUTCOME(v6n_icmp4_error(skb, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED,
							      V6N_OUTCOME_MTU(outcome)),
					      V6N_OUTCOME_REASON(outcome));
			break;
		}
	} else {
		return TC_ACT_UNSPEC;
	}
	/* Traffic outside the mapping is the host program's to count. */
	if (V6N_OUTCOME_ACTION(outcome) == TC_ACT_UNSPEC)
		return TC_ACT_UNSPEC;
	v6n_count(skb, direction, V6N_OUTCOME_REASON(outcome));
	return V6N_OUTCOME_ACTION(outcome);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
