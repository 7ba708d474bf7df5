/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Stateful NAT46 gateway (layout of the tables in abi.h): IPv4 clients reach
 * IPv6 backends through a VIP. In front of the stateless translator, as
 * stateful NAT64 is: IPv4 -> VIP, the flow's backend becomes the IPv6
 * destination and the client, embedded in the gateway's prefix, the source,
 * and the backend's port is written in; backend -> embedded client, the VIP
 * becomes the IPv4 source and its port is written back. The translator's
 * checksum updates cover the addresses, these helpers the ports. ICMP
 * errors about a flow's packets follow the flow both ways (the error
 * translation finds it by the quote, at the end of this file), so path MTU discovery
 * and "port unreachable" work through the gateway.
 *
 * A flow's backend comes from the frontend's Maglev table, so gateways
 * with the same configuration choose alike, and stays in the flow's state
 * while that backend is configured: a new table (a backend added, removed,
 * reweighted) moves new flows only, and the flows of a removed backend.
 */
#ifndef V6NODE_LIB_NAT46_GW_H
#define V6NODE_LIB_NAT46_GW_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "maglev.h"
#include "nat64.h"
#include "nat64_state.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT46_FRONTENDS_MAX);
	__type(key, struct v6n_nat46_frontend_key);
	__type(value, struct v6n_nat46_frontend);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat46_frontends SEC(".maps");

/* The VIPs (network order) and how many frontends each has: which IPv4
 * packets the gateway looks at, before their ports are read. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT46_VIPS_MAX);
	__type(key, __be32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat46_vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT46_BACKENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct v6n_l4_addr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat46_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT46_FRONTENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct v6n_maglev_table);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat46_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_NAT46_STATE_MAX);
	/* A plain hash, never LRU, that grows with use: see abi.h. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_ct_key);
	__type(value, struct v6n_ct_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat46_state SEC(".maps");

/* Returned by v6n_nat46_inbound for a VIP's port that no frontend serves:
 * the packet is the host's (the VIP may be its own address). */
#define V6N_NAT46_NOT_A_FRONTEND (-1)
/* Returned by v6n_nat46_inbound_flow, told not to make flows, for a packet
 * that would make one. */
#define V6N_NAT46_NEW_FLOW (-2)

static __always_inline int v6n_nat46_is_vip(__be32 addr)
{
	return bpf_map_lookup_elem(&v6n_nat46_vips, &addr) != NULL;
}

/* An IPv4 client embedded in the gateway's prefix: a backend's reply. */
static __always_inline int v6n_nat46_is_client(const struct v6n_nat64_config *cfg, const struct in6_addr *addr)
{
	return cfg && cfg->nat46_on && v6n_bytes_eq(addr->s6_addr, cfg->nat46_prefix, 12);
}

/* An IPv4 address as the backends see it: in the gateway's prefix. */
static __always_inline void v6n_nat46_embed(const struct v6n_nat64_config *cfg, __be32 addr, struct in6_addr *out)
{
	__builtin_memcpy(out->s6_addr, cfg->nat46_prefix, 12);
	__builtin_memcpy(out->s6_addr + 12, &addr, 4);
}

/* The flow's entry the other way: the forward entry's key from a reverse
 * entry, or the reverse entry's key from a forward key and its value. */
static __always_inline void v6n_nat46_forward_key(struct v6n_ct_key *key, const struct v6n_ct_value *reverse, __u8 proto)
{
	__builtin_memcpy(key->saddr, reverse->daddr, 16);
	__builtin_memcpy(key->daddr, reverse->saddr, 16);
	key->sport = reverse->dport;
	key->dport = reverse->sport;
	key->proto = proto;
	key->pad[0] = key->pad[1] = key->pad[2] = 0;
}

static __always_inline void v6n_nat46_reverse_key(struct v6n_ct_key *key, const struct v6n_nat64_config *cfg,
						  const struct v6n_ct_key *forward, const struct v6n_l4_addr *backend)
{
	__builtin_memcpy(key->saddr, backend->addr, 16);
	__builtin_memcpy(key->daddr, cfg->nat46_prefix, 12);
	__builtin_memcpy(key->daddr + 12, forward->saddr + 12, 4);
	key->sport = backend->port;
	key->dport = forward->sport;
	key->proto = forward->proto;
	key->pad[0] = key->pad[1] = key->pad[2] = 0;
}

/* The flow's backend is still configured under the id it was given. */
static __always_inline int v6n_nat46_backend_stays(const struct v6n_ct_value *out)
{
	struct v6n_l4_addr *backend = bpf_map_lookup_elem(&v6n_nat46_backends, &out->backend_id);

	return backend && backend->port == out->dport && v6n_bytes_eq(backend->addr, out->daddr, 16);
}

/*
 * Whether the flow `out` is over for the packet s->l4 describes: a TCP SYN
 * opens a new connection from a client port whose last connection closed
 * or was reset (a FIN or RST seen; such a flow lives on for the closing
 * lifetime, minutes, and a client may take the port again after its own
 * TIME_WAIT). The packet opens a new flow, its backend picked anew from the
 * table as conntrack and IPVS reschedule a reused port: a backend
 * quarantined or draining since gets no new connection that way. A
 * retransmitted SYN of a live connection keeps its backend. (A flow past
 * its lifetime is the agent's sweep's, within seconds.)
 */
static __always_inline int v6n_nat46_flow_over(const struct v6n_ct_value *out, const struct v6n_nat64_l4 *l4)
{
	return l4->proto == IPPROTO_TCP && v6n_tcp_opens(l4->tcp_flags) &&
	       (out->flags & (V6N_CT_CLOSING | V6N_CT_FIN_OUT | V6N_CT_FIN_IN | V6N_CT_RESET));
}

/*
 * A new flow for the forward key in s->client_key to the frontend `fe`: a
 * backend from its Maglev table, the reverse entry written first (so that a
 * forward entry never names nothing), then the forward one. Returns 0 or a
 * drop reason.
 */
static __always_inline int v6n_nat46_open(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s,
					  const struct v6n_nat46_frontend *fe, __u64 now)
{
	struct v6n_maglev_table *table = bpf_map_lookup_elem(&v6n_nat46_maglev, &fe->id);

	if (!table || !fe->backends)
		return V6N_REASON_DROP_NO_BACKEND;
	__u32 id = v6n_maglev_pick(table, &s->client_key, 0);
	struct v6n_l4_addr *backend = bpf_map_lookup_elem(&v6n_nat46_backends, &id);
	if (!backend)
		return V6N_REASON_DROP_NO_BACKEND;

	v6n_nat46_reverse_key(&s->pool_key, cfg, &s->client_key, backend);

	/* The same client transport address may reach this backend through
	 * another frontend: two flows cannot share one reverse entry. */
	struct v6n_ct_value *held = bpf_map_lookup_elem(&v6n_nat46_state, &s->pool_key);
	if (held && (held->sport != s->client_key.dport || !v6n_bytes_eq(held->saddr, s->client_key.daddr, 16))) {
		v6n_nat46_forward_key(&s->peer_key, held, s->client_key.proto);
		struct v6n_ct_value *other = bpf_map_lookup_elem(&v6n_nat46_state, &s->peer_key);
		if (other && other->dport == backend->port && v6n_bytes_eq(other->daddr, backend->addr, 16))
			return V6N_REASON_DROP_NAT46_CLASH;
	}

	struct v6n_ct_value *value = &s->value;
	__builtin_memset(value, 0, sizeof(*value));
	__builtin_memcpy(value->saddr, s->client_key.daddr, 16);
	__builtin_memcpy(value->daddr, s->client_key.saddr, 16);
	value->sport = s->client_key.dport;
	value->dport = s->client_key.sport;
	value->frontend_id = fe->id;
	value->backend_id = id;
	value->last_seen_ns = now; /* made then: the agent leaves young entries alone */
	value->flags = V6N_CT_REPLY;
	if (bpf_map_update_elem(&v6n_nat46_state, &s->pool_key, value, BPF_ANY) < 0)
		return V6N_REASON_DROP_NAT46_STATE_FULL;

	__builtin_memset(value, 0, sizeof(*value));
	__builtin_memcpy(value->daddr, backend->addr, 16);
	value->dport = backend->port;
	value->frontend_id = fe->id;
	value->backend_id = id;
	value->last_seen_ns = now;
	if (bpf_map_update_elem(&v6n_nat46_state, &s->client_key, value, BPF_ANY) < 0) {
		bpf_map_delete_elem(&v6n_nat46_state, &s->pool_key);
		return V6N_REASON_DROP_NAT46_STATE_FULL;
	}
	return 0;
}

/* A flow's forward key, in s->client_key, from the packet s describes: the
 * client and the VIP as ::ffff:a.b.c.d (s->ipv4_addrs), its ports (the
 * source from s->l4_header, the destination s->l4.port). */
static __always_inline void v6n_nat46_client_key(struct v6n_nat64_scratch *s)
{
	__builtin_memset(&s->client_key, 0, sizeof(s->client_key));
	v6n_v4mapped(s->client_key.saddr, (const __u8 *)&s->ipv4_addrs[0]);
	v6n_v4mapped(s->client_key.daddr, (const __u8 *)&s->ipv4_addrs[1]);
	__builtin_memcpy(&s->client_key.sport, s->l4_header, 2);
	s->client_key.dport = s->l4.port;
	s->client_key.proto = s->l4.proto;
}

/*
 * IPv4 client -> VIP, the state: finds or makes the flow of the packet
 * from s->ipv4_addrs[0] to s->ipv4_addrs[1] that s->l4 describes (TCP or
 * UDP). The embedded client becomes *client, the backend *backend and its
 * port s->port_out; s->made says whether this packet made the flow.
 * Returns 0, a drop reason, or V6N_NAT46_NOT_A_FRONTEND; with !may_open
 * (XDP: tc makes new flows, and reports them), V6N_NAT46_NEW_FLOW for a
 * packet that would make one, and nothing is changed. Touches no packet:
 * tc and XDP write the port each their own way.
 */
static __always_inline int v6n_nat46_inbound_flow(const struct v6n_nat64_config *cfg, struct v6n_nat64_scratch *s,
						  struct in6_addr *client, struct in6_addr *backend, __u64 now,
						  int may_open)
{
	__u8 proto = s->l4.proto;
	int reason;

	s->made = 0;
	struct v6n_nat46_frontend_key fkey = { .port = s->l4.port, .proto = proto };
	__builtin_memcpy(fkey.addr, &s->ipv4_addrs[1], 4);
	struct v6n_nat46_frontend *fe = bpf_map_lookup_elem(&v6n_nat46_frontends, &fkey);
	if (!fe)
		return V6N_NAT46_NOT_A_FRONTEND;

	v6n_nat46_client_key(s);

	struct v6n_ct_value *out = bpf_map_lookup_elem(&v6n_nat46_state, &s->client_key);
	if (!out || out->frontend_id != fe->id || !v6n_nat46_backend_stays(out) || v6n_nat46_flow_over(out, &s->l4)) {
		if (!may_open)
			return V6N_NAT46_NEW_FLOW;
		reason = v6n_nat46_open(cfg, s, fe, now);
		if (reason)
			return reason;
		s->made = 1;
		out = bpf_map_lookup_elem(&v6n_nat46_state, &s->client_key);
		if (!out)
			return V6N_REASON_DROP_NAT46_STATE_FULL;
	}
	v6n_nat64_touch(out, &s->l4, 0, now);
	v6n_nat46_embed(cfg, s->ipv4_addrs[0], client);
	__builtin_memcpy(backend, out->daddr, 16);
	s->port_out = out->dport;
	return 0;
}

/* The flow event's note for a packet that made its flow (s->made). */
static __always_inline void v6n_nat46_note(const struct v6n_nat64_scratch *s)
{
	v6n_event_note_xlat(V6N_EVENT_NAT46, 0, s->client_key.saddr, s->client_key.sport, s->client_key.daddr,
			    s->client_key.dport);
}

/*
 * Backend -> embedded client, the state: the flow of the reply whose
 * addresses are in s->pool_key (saddr, daddr) and whose transport s->l4
 * describes (TCP or UDP). Returns the VIP (positive) for the translator's
 * IPv4 source or a drop reason negated; the flow's VIP port becomes
 * s->port_out. Touches no packet.
 */
static __always_inline __s64 v6n_nat46_outbound_flow(struct v6n_nat64_scratch *s, __u64 now)
{
	s->pool_key.sport = s->l4.port;
	__builtin_memcpy(&s->pool_key.dport, s->l4_header + 2, 2);
	s->pool_key.proto = s->l4.proto;

	struct v6n_ct_value *reverse = bpf_map_lookup_elem(&v6n_nat46_state, &s->pool_key);
	if (!reverse)
		return -V6N_REASON_DROP_NAT46_NO_FLOW;
	v6n_nat46_forward_key(&s->client_key, reverse, s->l4.proto);
	struct v6n_ct_value *flow = bpf_map_lookup_elem(&v6n_nat46_state, &s->client_key);
	/* A flow moved to another backend leaves its old reverse entry behind
	 * until the agent's sweep: its packets are no longer the flow's. */
	if (!flow || flow->dport != s->pool_key.sport || !v6n_bytes_eq(flow->daddr, s->pool_key.saddr, 16))
		return -V6N_REASON_DROP_NAT46_NO_FLOW;
	v6n_nat64_touch(flow, &s->l4, 1, now);
	s->port_out = reverse->sport;
	__be32 vip;
	__builtin_memcpy(&vip, reverse->saddr + 12, 4);
	return (__s64)(__u32)vip;
}

/* --- tc's alone ------------------------------------------------------------------ */

/* What follows reads and writes socket buffers; an XDP object
 * (V6N_CTX_XDP, lib/xlat_xdp.h) takes the state parts above only. */
#ifndef V6N_CTX_XDP

/*
 * IPv4 client -> VIP at tc: v6n_nat46_inbound_flow, and the backend's port
 * written into the packet. `l4` is V6N_NAT64_L4(offset, protocol). Returns
 * 0, a drop reason, or V6N_NAT46_NOT_A_FRONTEND. Out of line, with its keys
 * in per-CPU scratch: the translator's stack is full.
 */
static __noinline int v6n_nat46_inbound(struct __sk_buff *skb, __u32 l4, struct in6_addr *client, struct in6_addr *backend)
{
	const struct v6n_nat64_config *cfg = v6n_nat64_config();
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	__u8 proto = l4 & 0xff;
	__u64 now = bpf_ktime_get_ns();
	int reason;

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return V6N_NAT46_NOT_A_FRONTEND; /* ICMP to a VIP: the host answers */
	if (!cfg || !cfg->nat46_on)
		return V6N_REASON_DROP_NO_BACKEND;
	if (!s)
		return V6N_REASON_DROP_NAT46_STATE_FULL;
	if (bpf_skb_load_bytes(skb, V6N_L3_OFFSET + 12, s->ipv4_addrs, 8) < 0)
		return V6N_REASON_DROP_MALFORMED;
	/* As stateful NAT64's inbound: the destination port is rewritten. */
	reason = v6n_nat64_read_l4(skb, proto, l4 >> 8, 1, &s->l4, s->l4_header);
	if (reason)
		return reason;
	reason = v6n_nat46_inbound_flow(cfg, s, client, backend, now, 1);
	if (reason)
		return reason;
	if (s->made)
		v6n_nat46_note(s);
	return v6n_nat64_write_port(skb, &s->l4, s->port_out);
}

/*
 * Backend -> embedded client at tc (TCP, UDP or ICMPv6 at V6N_NAT64_L4(
 * offset, protocol) `l4`, no extension headers before it): the flow's VIP
 * port goes into the packet. Returns the VIP (positive) for the
 * translator's IPv4 source, 0 for an ICMPv6 error (whose VIP the error
 * translation finds by the flow it quotes), or a drop reason negated.
 */
static __noinline __s64 v6n_nat46_outbound(struct __sk_buff *skb, __u32 l4)
{
	struct v6n_nat64_scratch *s = v6n_nat64_scratch_get();
	__u64 now = bpf_ktime_get_ns();
	int reason;

	if (!s)
		return -V6N_REASON_DROP_NAT46_NO_FLOW;
	if ((l4 & 0xff) == IPPROTO_ICMPV6) {
		/* Errors about a flow's packets are; echoes are no flow's. */
		if (bpf_skb_load_bytes(skb, l4 >> 8, s->l4_header, 1) < 0)
			return -V6N_REASON_DROP_MALFORMED;
		return s->l4_header[0] < ICMPV6_ECHO_REQUEST ? 0 : -V6N_REASON_DROP_UNTRANSLATABLE;
	}
	reason = v6n_nat64_read_l4(skb, l4 & 0xff, l4 >> 8, 0, &s->l4, s->l4_header);
	if (reason)
		return -reason;
	__builtin_memset(&s->pool_key, 0, sizeof(s->pool_key));
	if (bpf_skb_load_bytes(skb, V6N_L3_OFFSET + 8, s->pool_key.saddr, 32) < 0)
		return -V6N_REASON_DROP_MALFORMED;
	__s64 vip = v6n_nat46_outbound_flow(s, now);
	if (vip < 0)
		return vip;
	reason = v6n_nat64_write_port(skb, &s->l4, s->port_out);
	if (reason)
		return -reason;
	return vip;
}

/* --- ICMP errors about a flow's packets ------------------------------------------- */

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

#endif /* !V6N_CTX_XDP */

#endif /* V6NODE_LIB_NAT46_GW_H */
