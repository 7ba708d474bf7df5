/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Stateful NAT64 (RFC 6146) in front of the stateless translator (layout of
 * the state in abi.h). Outbound, a client's source port (or echo
 * identifier) is rewritten to its binding's pool port and the translator
 * is handed the pool address as the IPv4 source; inbound, the pool port is
 * rewritten back and the translator is handed the client as the IPv6
 * destination. The translator's checksum updates then cover the addresses,
 * these helpers the ports.
 */
#ifndef V6NODE_LIB_NAT64_STATE_H
#define V6NODE_LIB_NAT64_STATE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include "icmp.h"
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <v6node/abi.h>

#include "ct.h"
#include "fib.h"
#include "nat64.h"
#include "xlat.h"
#include "xlat_icmp.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT64_STATE_MAX);
	/* Grows with use: a gateway that translates little pays little. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_ct_key);
	__type(value, struct v6n_ct_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat64_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_NAT64_SOURCES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_lpm6_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat64_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT64_POOL_MAX);
	__type(key, __be32);
	__type(value, struct v6n_nat64_pool_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat64_pool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, V6N_NAT64_POOL_MAX);
	__type(key, __u32);
	__type(value, __be32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat64_pool_addrs SEC(".maps");

/* A new binding first tries random ports (RFC 6056): with a share f of
 * the paired address's ports held by live bindings, all 8 miss with
 * probability f^8 (17% at f = 0.8). Then it scans consecutive ports from
 * a random one: a range of up to V6N_NAT64_SCAN_PORTS ports is filled to
 * its last port, and a larger one nearly so; a pool that is really full
 * refuses a new flow at a bounded cost. */
#define V6N_NAT64_BIND_TRIES 8
#define V6N_NAT64_SCAN_PORTS 256
/* Addresses other than the paired one a new flow may borrow from, each
 * chosen at random, when the paired address has no port left: with k of
 * n addresses full, all miss with probability about ((k - 1) / (n - 1))^3. */
#define V6N_NAT64_OVERFLOW_ADDRESSES 3

/* The transport fields of a packet the stateful path rewrites. */
struct v6n_nat64_l4 {
	__u32 port_offset; /* the client's port (outbound: source; inbound: destination) or echo id */
	__u32 csum_offset;
	__be16 port;
	__u8 proto;        /* IPv4's number: TCP, UDP, ICMP */
	__u8 tcp_flags;
	__u8 may_bind;     /* outbound: a TCP SYN, a UDP datagram, an echo request */
	__u8 is_udp;
	__u8 pad[2];
};

/* Per-CPU room for the stateful path's keys and values, which would not
 * fit the BPF stack beside the translator's own headers. */
struct v6n_nat64_scratch {
	struct v6n_ct_key client_key;
	struct v6n_ct_key pool_key;
	struct v6n_ct_key peer_key; /* NAT46 gateway: another flow's; NAT64: a reclaimed binding's client side */
	struct v6n_ct_value value;
	struct v6n_nat64_l4 l4;
	__be32 pool_addr; /* the address a new binding borrows from */
	__u8 l4_header[16]; /* the transport header's first bytes */
	__be32 ipv4_addrs[2]; /* inbound: the server, the pool address */
	__be16 port_out;      /* the port the packet leaves with */
	__u8 made;            /* the packet made its binding (NAT64) or flow (NAT46) */
	__u8 quote[48];       /* an ICMP error's quoted header and 8 bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_nat64_scratch);
} v6n_nat64_scratch SEC(".maps");

static __always_inline struct v6n_nat64_scratch *v6n_nat64_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&v6n_nat64_scratch, &zero);
}

/* The transport offset and protocol, in one argument (BPF functions take
 * five). */
#define V6N_NAT64_L4(offset, protocol) (((__u32)(offset) << 8) | (protocol))

/* The source may borrow from the pool (nat64.stateful.sources). */
static __always_inline int v6n_nat64_may_use_pool(const struct in6_addr *addr)
{
	struct v6n_lpm6_key key = { .prefixlen = 128 };

	__builtin_memcpy(key.addr, addr, 16);
	return bpf_map_lookup_elem(&v6n_nat64_src, &key) != NULL;
}

static __always_inline int v6n_nat64_is_pool(__be32 addr)
{
	return bpf_map_lookup_elem(&v6n_nat64_pool, &addr) != NULL;
}

/* ::ffff:a.b.c.d, how IPv4 addresses sit in the state table's keys. */
static __always_inline void v6n_v4mapped(__u8 out[16], const __u8 addr[4])
{
	__builtin_memset(out, 0, 10);
	out[10] = 0xff;
	out[11] = 0xff;
	__builtin_memcpy(out + 12, addr, 4);
}

/* The key of a binding's pool side; `pool` is the IPv4 address. */
static __always_inline void v6n_nat64_pool_key(struct v6n_ct_key *key, const __u8 pool[4], __be16 port, __u8 proto)
{
	__builtin_memset(key, 0, sizeof(*key));
	v6n_v4mapped(key->daddr, pool);
	key->dport = port;
	key->proto = proto;
}

/* The pool side of a binding, if it is live: an expired one is never
 * brought back, so the agent may remove what it finds expired. */
static __always_inline struct v6n_ct_value *v6n_nat64_live(const struct v6n_nat64_config *cfg, const struct v6n_ct_key *key,
							   __u64 now)
{
	struct v6n_ct_value *binding = bpf_map_lookup_elem(&v6n_nat64_state, key);

	if (!binding || v6n_ct_expired(&cfg->lifetimes, binding, key->proto, now))
		return NULL;
	return binding;
}

/* Notes a packet of the binding: its time and the TCP state RFC 6146 3.5.2.2
 * times it by (answered: established; a FIN from one side only: still
 * established, the connection is half-closed; FINs from both sides:
 * closing; a RST: transitory, until a segment that is not one makes it
 * established again; a new SYN on the same port: a new connection). */
static __always_inline void v6n_nat64_touch(struct v6n_ct_value *binding, const struct v6n_nat64_l4 *l4, int inbound,
					    __u64 now)
{
	__u8 flags = binding->flags;

	if (l4->proto == IPPROTO_TCP) {
		if (v6n_tcp_opens(l4->tcp_flags) && !inbound)
			flags &= ~(V6N_CT_ESTABLISHED | V6N_CT_CLOSING | V6N_CT_FIN_OUT | V6N_CT_FIN_IN | V6N_CT_RESET);
		if (inbound)
			flags |= V6N_CT_ESTABLISHED;
		if (l4->tcp_flags & V6N_TCP_RST) {
			/* Back to established after it, its FINs forgotten. */
			flags &= ~(V6N_CT_FIN_OUT | V6N_CT_FIN_IN);
			flags |= V6N_CT_RESET;
		} else {
			flags &= ~V6N_CT_RESET;
			if (l4->tcp_flags & V6N_TCP_FIN)
				flags |= inbound ? V6N_CT_FIN_IN : V6N_CT_FIN_OUT;
			if ((flags & (V6N_CT_FIN_OUT | V6N_CT_FIN_IN)) == (V6N_CT_FIN_OUT | V6N_CT_FIN_IN))
				flags |= V6N_CT_CLOSING;
		}
	}
	if (flags != binding->flags)
		binding->flags = flags;
	v6n_ct_note_time(binding, now);
}

/*
 * The transport fields of a TCP, UDP or ICMP echo packet at l4_offset from
 * `h`, its header's first v6n_nat64_l4_bytes(nexthdr) bytes; `nexthdr` is
 * the packet's own protocol number (ICMPv6 outbound, ICMP inbound). Returns
 * 0 or a drop reason. Reads no packet: tc and XDP fetch the bytes each
 * their own way.
 */
static __always_inline int v6n_nat64_parse_l4(__u8 nexthdr, __u32 l4_offset, int inbound, struct v6n_nat64_l4 *l4,
					      const __u8 *h)
{
	__builtin_memset(l4, 0, sizeof(*l4));
	l4->port_offset = l4_offset + (inbound ? 2 : 0);
	if (nexthdr == IPPROTO_TCP) {
		l4->proto = IPPROTO_TCP;
		l4->tcp_flags = h[13];
		l4->may_bind = (h[13] & (V6N_TCP_SYN | V6N_TCP_ACK | V6N_TCP_RST)) == V6N_TCP_SYN;
		l4->csum_offset = l4_offset + 16;
	} else if (nexthdr == IPPROTO_UDP) {
		l4->proto = IPPROTO_UDP;
		l4->may_bind = 1;
		l4->is_udp = 1;
		l4->csum_offset = l4_offset + 6;
	} else if (nexthdr == IPPROTO_ICMPV6 || nexthdr == IPPROTO_ICMP) {
		__u8 request = nexthdr == IPPROTO_ICMPV6 ? ICMPV6_ECHO_REQUEST : ICMP_ECHO;
		__u8 reply = nexthdr == IPPROTO_ICMPV6 ? ICMPV6_ECHO_REPLY : ICMP_ECHOREPLY;

		if (h[0] != request && h[0] != reply)
			return V6N_REASON_DROP_UNTRANSLATABLE; /* errors and the rest: no session to speak of */
		l4->proto = IPPROTO_ICMP;
		l4->may_bind = h[0] == request && !inbound;
		l4->port_offset = l4_offset + 4; /* the identifier, both ways */
		l4->csum_offset = l4_offset + 2;
		__builtin_memcpy(&l4->port, h + 4, 2);
		return 0;
	} else {
		return V6N_REASON_DROP_UNTRANSLATABLE;
	}
	__builtin_memcpy(&l4->port, h + (inbound ? 2 : 0), 2);
	return 0;
}

/* How many bytes of the transport header v6n_nat64_parse_l4 reads: TCP's
 * flags are its 14th byte. */
static __always_inline __u32 v6n_nat64_l4_bytes(__u8 nexthdr)
{
	return nexthdr == IPPROTO_TCP ? 14 : 8;
}

/* v6n_nat64_parse_l4 on a socket buffer's packet, read into `h`. */
static __always_inline int v6n_nat64_read_l4(struct __sk_buff *skb, __u8 nexthdr, __u32 l4_offset, int inbound,
					     struct v6n_nat64_l4 *l4, __u8 *h)
{
	if (nexthdr != IPPROTO_TCP && nexthdr != IPPROTO_UDP && nexthdr != IPPROTO_ICMPV6 && nexthdr != IPPROTO_ICMP) {
		__builtin_memset(l4, 0, sizeof(*l4));
		return V6N_REASON_DROP_UNTRANSLATABLE;
	}
	if (bpf_skb_load_bytes(skb, l4_offset, h, v6n_nat64_l4_bytes(nexthdr)) < 0)
		return V6N_REASON_DROP_MALFORMED;
	return v6n_nat64_parse_l4(nexthdr, l4_offset, inbound, l4, h);
}

/* Writes the client's or the pool's port in place of the other. The
 * address change is the translator's to sum in. */
static __always_inline int v6n_nat64_write_port(struct __sk_buff *skb, const struct v6n_nat64_l4 *l4, __be16 port)
{
	if (port == l4->port)
		return 0;
	if (bpf_l4_csum_replace(skb, l4->csum_offset, l4->port, port,
				sizeof(port) | (l4->is_udp ? BPF_F_MARK_MANGLED_0 : 0)) < 0 ||
	    bpf_skb_store_bytes(skb, l4->port_offset, &port, sizeof(port), 0) < 0)
		return V6N_REASON_DROP_MALFORMED;
	return 0;
}

/* The place in the pool of the address a client's bindings borrow from:
 * the same for all of them (paired pooling, RFC 4787 REQ-2: an IPv4 server
 * that ties a session to its client's address sees one address), spread
 * over the pool by a hash of the client's address. */
static __always_inline __u32 v6n_nat64_paired_place(const struct v6n_nat64_config *cfg, const __u8 client[16])
{
	__u32 words[4], hash = 0;
	int i;

	__builtin_memcpy(words, client, 16);
	/* MurmurHash3's finaliser on each word: clients that differ in any
	 * bit of their address land apart. */
	for (i = 0; i < 4; i++) {
		hash ^= words[i];
		hash ^= hash >> 16;
		hash *= 0x85ebca6b;
		hash ^= hash >> 13;
		hash *= 0xc2b2ae35;
		hash ^= hash >> 16;
	}
	return hash % cfg->pool_size;
}

/* The protocol's range of ports (ICMP: echo identifiers), host order. */
static __always_inline void v6n_nat64_range(const struct v6n_nat64_config *cfg, __u8 proto, __u16 *first, __u32 *span)
{
	__u16 last = cfg->icmp_last;

	*first = cfg->icmp_first;
	if (proto == IPPROTO_TCP)
		*first = cfg->tcp_first, last = cfg->tcp_last;
	else if (proto == IPPROTO_UDP)
		*first = cfg->udp_first, last = cfg->udp_last;
	*span = (__u32)last - *first + 1;
}

/* Frees the port under s->pool_key when its binding has expired (an
 * expired binding is never brought back): its pool side and its client
 * side are removed here, before any sweep, so the port is bound again at
 * once and the table does not fill with what the sweep has yet to find.
 * 0: free now. Two clients racing for the same random port of the same
 * address at once both may remove; then the later insert fails for one
 * of them, which tries another port. */
static __always_inline int v6n_nat64_reclaim(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s, __u64 now)
{
	struct v6n_ct_value *held = bpf_map_lookup_elem(&v6n_nat64_state, &s->pool_key);

	if (!held)
		return 0;
	if (!v6n_ct_expired(&cfg->lifetimes, held, s->pool_key.proto, now))
		return -1;
	__builtin_memset(&s->peer_key, 0, sizeof(s->peer_key));
	__builtin_memcpy(s->peer_key.saddr, held->daddr, 16);
	s->peer_key.sport = held->dport;
	s->peer_key.proto = s->pool_key.proto;
	bpf_map_delete_elem(&v6n_nat64_state, &s->pool_key);
	const struct v6n_ct_value *client_side = bpf_map_lookup_elem(&v6n_nat64_state, &s->peer_key);
	/* Unless the client has since been bound to another port. */
	if (client_side && client_side->sport == s->pool_key.dport && v6n_bytes_eq(client_side->saddr, s->pool_key.daddr, 16))
		bpf_map_delete_elem(&v6n_nat64_state, &s->peer_key);
	return 0;
}

/* Puts the binding in s->value under the pool side of `port` (network
 * order) when the port is free or its binding has expired. 0: bound;
 * else -1, or -2 when the table is full. */
static __always_inline int v6n_nat64_try_port(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s, __be16 port,
					      __u64 now)
{
	v6n_nat64_pool_key(&s->pool_key, (const __u8 *)&s->pool_addr, port, s->client_key.proto);
	if (v6n_nat64_reclaim(cfg, s, now) < 0)
		return -1;
	long err = bpf_map_update_elem(&v6n_nat64_state, &s->pool_key, &s->value, BPF_NOEXIST);
	if (err == -17 /* EEXIST: another client's, made just now */)
		return -1;
	return err ? -2 : 0;
}

/* bpf_loop's state for the scan of consecutive ports. */
struct v6n_nat64_scan {
	__u64 now;
	__u32 start; /* offset in the range of the first port scanned */
	__u32 span;
	__u16 first;
	__s16 result; /* as v6n_nat64_try_port's; 1 while nothing was found */
};

static long v6n_nat64_scan_step(__u32 i, void *ctx)
{
	struct v6n_nat64_scan *scan = ctx;
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();

	if (!cfg || !s || !scan->span)
		return 1;
	int result = v6n_nat64_try_port(cfg, s, bpf_htons(scan->first + (scan->start + i) % scan->span), scan->now);
	if (result == -1)
		return 0;
	scan->result = result;
	return 1;
}

/*
 * A new binding for the client `client_key` names: a port of its paired
 * pool address, free or freed from an expired binding, its pool side
 * written first (so that a client side never names nothing). Returns 0 or
 * a drop reason, with the pool side's key in pool_key.
 */
static __always_inline int v6n_nat64_bind(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s, __u64 now)
{
	const struct v6n_ct_key *client_key = &s->client_key;
	struct v6n_ct_value *value = &s->value;
	struct v6n_nat64_scan scan = { .now = now };
	int i, round, result = -1;

	if (!cfg->pool_size)
		return V6N_REASON_DROP_POOL_EXHAUSTED;
	__builtin_memset(value, 0, sizeof(*value));
	__builtin_memcpy(value->daddr, client_key->saddr, 16);
	value->dport = client_key->sport;
	value->last_seen_ns = now;
	value->flags = V6N_CT_REPLY;
	value->backend_id = bpf_get_prandom_u32() | 1; /* the generation its permits carry */
	v6n_nat64_range(cfg, client_key->proto, &scan.first, &scan.span);
	__u32 paired = v6n_nat64_paired_place(cfg, client_key->saddr);
	/* The paired address first; when it has no port left, other addresses
	 * chosen at random rather than a refusal: pairing yields to a pool
	 * that is full only where many clients hashed alike. */
	for (round = 0; round <= V6N_NAT64_OVERFLOW_ADDRESSES && result == -1; round++) {
		__u32 place = paired;
		if (round > 0) {
			if (cfg->pool_size < 2)
				break;
			place = (paired + 1 + bpf_get_prandom_u32() % (cfg->pool_size - 1)) % cfg->pool_size;
		}
		__be32 *addr = bpf_map_lookup_elem(&v6n_nat64_pool_addrs, &place);
		if (!addr)
			break;
		s->pool_addr = *addr;
		for (i = 0; i < V6N_NAT64_BIND_TRIES && result == -1; i++)
			result = v6n_nat64_try_port(cfg, s, bpf_htons(scan.first + bpf_get_prandom_u32() % scan.span), now);
		if (result == -1) {
			scan.start = bpf_get_prandom_u32() % scan.span;
			scan.result = 1;
			bpf_loop(scan.span < V6N_NAT64_SCAN_PORTS ? scan.span : V6N_NAT64_SCAN_PORTS, v6n_nat64_scan_step, &scan, 0);
			result = scan.result == 1 ? -1 : scan.result;
		}
	}
	if (result == -1)
		return V6N_REASON_DROP_POOL_EXHAUSTED;
	if (result < 0)
		return V6N_REASON_DROP_STATE_FULL;

	__builtin_memset(value, 0, sizeof(*value));
	v6n_v4mapped(value->saddr, (const __u8 *)&s->pool_addr);
	value->sport = s->pool_key.dport;
	value->last_seen_ns = now; /* made then: the agent leaves young entries alone */
	if (bpf_map_update_elem(&v6n_nat64_state, client_key, value, BPF_ANY) < 0) {
		bpf_map_delete_elem(&v6n_nat64_state, &s->pool_key);
		return V6N_REASON_DROP_STATE_FULL;
	}
	return 0;
}

/* Address-dependent filtering: the permit under `permit_key` (the
 * binding's pool side, from a server) was made for this binding, not for
 * the port's previous client. */
static __always_inline int v6n_nat64_permitted(const struct v6n_ct_key *permit_key, const struct v6n_ct_value *binding)
{
	const struct v6n_ct_value *permit = bpf_map_lookup_elem(&v6n_nat64_state, permit_key);

	return permit && permit->backend_id == binding->backend_id;
}

/*
 * IPv6 client -> IPv4 server, the state: finds or makes the binding of the
 * client whose packet s->l4 describes. Returns the pool address (a
 * non-negative value) or a drop reason negated; the packet's port becomes
 * s->pool_key.dport, and s->made says whether this packet made the binding.
 * Touches no packet: tc and XDP write the port each their own way.
 */
static __always_inline __s64 v6n_nat64_outbound_binding(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s,
							const struct in6_addr *client, __be32 server, __u64 now)
{
	int reason;

	s->made = 0;
	__builtin_memset(&s->client_key, 0, sizeof(s->client_key));
	__builtin_memcpy(s->client_key.saddr, client, 16);
	s->client_key.sport = s->l4.port;
	s->client_key.proto = s->l4.proto;

	struct v6n_ct_value *binding = NULL;
	struct v6n_ct_value *out = bpf_map_lookup_elem(&v6n_nat64_state, &s->client_key);
	if (out) {
		v6n_nat64_pool_key(&s->pool_key, out->saddr + 12, out->sport, s->l4.proto);
		binding = v6n_nat64_live(cfg, &s->pool_key, now);
		/* A pool side that names another client: this side is stale. */
		if (binding && (binding->dport != s->l4.port || !v6n_bytes_eq(binding->daddr, s->client_key.saddr, 16)))
			binding = NULL;
	}
	if (!binding) {
		if (!s->l4.may_bind)
			return -V6N_REASON_DROP_NO_BINDING;
		reason = v6n_nat64_bind(cfg, s, now);
		if (reason)
			return -reason;
		binding = bpf_map_lookup_elem(&v6n_nat64_state, &s->pool_key);
		if (!binding)
			return -V6N_REASON_DROP_STATE_FULL;
		s->made = 1;
	}
	v6n_nat64_touch(binding, &s->l4, 0, now);
	if (cfg->filtering == V6N_NAT64_FILTER_ADDRESS_DEPENDENT) {
		/* The permit's key: the binding's pool side, from the server. */
		v6n_v4mapped(s->pool_key.saddr, (const __u8 *)&server);
		if (!v6n_nat64_permitted(&s->pool_key, binding)) {
			__builtin_memset(&s->value, 0, sizeof(s->value));
			s->value.last_seen_ns = now; /* made then */
			s->value.backend_id = binding->backend_id;
			if (bpf_map_update_elem(&v6n_nat64_state, &s->pool_key, &s->value, BPF_ANY) < 0)
				return -V6N_REASON_DROP_STATE_FULL;
		}
	}
	__be32 pool;
	__builtin_memcpy(&pool, s->pool_key.daddr + 12, 4);
	return (__s64)(__u32)pool;
}

/*
 * IPv4 server -> pool address, the state: the binding of the pool port
 * s->l4 describes, for the packet from s->ipv4_addrs[0] to
 * s->ipv4_addrs[1]. Its client becomes *client and its port s->port_out.
 * Returns 0 or the reason to drop. Touches no packet.
 */
static __always_inline int v6n_nat64_inbound_binding(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s,
						     struct in6_addr *client, __u64 now)
{
	v6n_nat64_pool_key(&s->pool_key, (const __u8 *)&s->ipv4_addrs[1], s->l4.port, s->l4.proto);
	struct v6n_ct_value *binding = v6n_nat64_live(cfg, &s->pool_key, now);
	if (!binding)
		return V6N_REASON_DROP_NO_BINDING;
	if (cfg->filtering == V6N_NAT64_FILTER_ADDRESS_DEPENDENT) {
		v6n_v4mapped(s->client_key.saddr, (const __u8 *)&s->ipv4_addrs[0]);
		__builtin_memcpy(s->client_key.daddr, s->pool_key.daddr, 16);
		s->client_key.sport = 0;
		s->client_key.dport = s->pool_key.dport;
		s->client_key.proto = s->pool_key.proto;
		s->client_key.pad[0] = s->client_key.pad[1] = s->client_key.pad[2] = 0;
		if (!v6n_nat64_permitted(&s->client_key, binding))
			return V6N_REASON_DROP_FILTERED;
	}
	__builtin_memcpy(client, binding->daddr, 16);
	v6n_nat64_touch(binding, &s->l4, 1, now);
	s->port_out = binding->dport;
	return 0;
}

/* --- tc's alone ------------------------------------------------------------------ */

/* What follows reads and writes socket buffers; an XDP object
 * (V6N_CTX_XDP, lib/xlat_xdp.h) takes the state parts above only. */
#ifndef V6N_CTX_XDP

/*
 * IPv6 client -> IPv4 server at tc: v6n_nat64_outbound_binding, and the
 * pool port written into the packet. `l4` is V6N_NAT64_L4(offset, the
 * packet's protocol). Returns the pool address (a non-negative value), or a
 * drop reason negated. Out of line, with its keys in per-CPU scratch: the
 * translator's stack is full.
 */
static __noinline __s64 v6n_nat64_outbound(struct __sk_buff *skb, const struct in6_addr *client, __be32 server, __u32 l4)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	__u64 now = bpf_ktime_get_ns();
	int reason;

	if (!cfg || !s)
		return -V6N_REASON_DROP_UNMAPPED;
	reason = v6n_nat64_read_l4(skb, l4 & 0xff, l4 >> 8, 0, &s->l4, s->l4_header);
	if (reason)
		return -reason;
	__s64 pool = v6n_nat64_outbound_binding(cfg, s, client, server, now);
	if (pool < 0)
		return pool;
	reason = v6n_nat64_write_port(skb, &s->l4, s->pool_key.dport);
	if (reason)
		return -reason;
	if (s->made)
		v6n_event_note_nat64(s->client_key.saddr, s->client_key.sport, server);
	return pool;
}

/*
 * IPv4 server -> pool address at tc: v6n_nat64_inbound_binding, and the
 * client's port written back into the packet. `l4` as for
 * v6n_nat64_outbound; the addresses are read from the packet, which keeps
 * this frame small enough to sit under the translator's largest.
 * Returns 0 or the reason to drop.
 */
static __noinline int v6n_nat64_inbound(struct __sk_buff *skb, __u32 l4, struct in6_addr *client)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	__u64 now = bpf_ktime_get_ns();
	int reason;

	if (!cfg || !s)
		return V6N_REASON_DROP_NO_BINDING;
	if (bpf_skb_load_bytes(skb, V6N_L3_OFFSET + 12, s->ipv4_addrs, 8) < 0)
		return V6N_REASON_DROP_MALFORMED;
	reason = v6n_nat64_read_l4(skb, l4 & 0xff, l4 >> 8, 1, &s->l4, s->l4_header);
	if (reason)
		return reason;
	reason = v6n_nat64_inbound_binding(cfg, s, client, now);
	if (reason)
		return reason;
	return v6n_nat64_write_port(skb, &s->l4, s->port_out);
}

/* --- ICMP errors about a binding's packets, and hairpinning ---------------------- */

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
		if (!v6n_nat64_permitted(&s->pool_key, binding))
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

#endif /* !V6N_CTX_XDP */

#endif /* V6NODE_LIB_NAT64_STATE_H */
