/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A connection from outside to a Service: whether a packet opens one, the
 * backend Maglev gives it, and the connection-tracking entries both of its
 * directions keep (lib/ct.h), with a masquerade port when the backend is on
 * another node. Over either context (lib/ctx.h): tc's uplink program
 * (lib/nodeport.h) and the uplink's XDP program (lib/nodeport_xdp.h) decide
 * alike and share the state.
 */
#ifndef V6NODE_LIB_NODEPORT_STATE_H
#define V6NODE_LIB_NODEPORT_STATE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "ct.h"
#include "ctx.h"
#include "events.h"
#include "fib.h"
#include "lb.h"
#include "maglev.h"
#include "maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_MAGLEV_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct v6n_maglev_table);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_lb_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_lb_cfg SEC(".maps");

/* The external and load-balancer IPs of the Services this node serves from
 * outside (not its own addresses), kept by the agent: a packet to one on a
 * port no frontend has is admitted by nothing here. The value is unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_LB_VIPS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct in6_addr);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_lb_vips SEC(".maps");

/* Masquerade ports are tried at random from here up; the client's own port
 * is tried first. */
#define V6N_MASQ_PORT_MIN 1024
#define V6N_MASQ_PORT_TRIES 8

/* Claims a source port on the masquerade address for the connection that
 * leaves as `out`: its reply entry goes in only while nobody holds it. */
static __always_inline int v6n_masquerade_port(struct v6n_ct_value *out, const struct v6n_ct_value *reply, __u8 proto)
{
	struct v6n_ct_key key = {};

	for (int i = 0; i < V6N_MASQ_PORT_TRIES; i++) {
		if (i > 0)
			out->sport = bpf_htons(V6N_MASQ_PORT_MIN + bpf_get_prandom_u32() % (65536 - V6N_MASQ_PORT_MIN));
		v6n_ct_reply_key(&key, out, proto);
		if (bpf_map_update_elem(&v6n_ct, &key, reply, BPF_NOEXIST) == 0)
			return 0;
		/* Taken: by a connection still alive, or one whose lifetime is over. */
		struct v6n_ct_value *holder = bpf_map_lookup_elem(&v6n_ct, &key);
		__u64 now = reply->last_seen_ns;
		if (holder && v6n_ct_service_expired(holder, proto, now)) {
			if (bpf_map_update_elem(&v6n_ct, &key, reply, BPF_ANY) == 0)
				return 0;
		}
	}
	return -1;
}

/* BPF has no memcmp. */
static __always_inline int v6n_same_addr(const __u8 a[16], const __u8 b[16])
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/* Whether `addr` is this node's own (the FIB delivers it locally). */
static __always_inline int v6n_is_local(struct v6n_ctx *ctx, const __u8 addr[16])
{
	struct bpf_fib_lookup fib = { .family = AF_INET6, .ifindex = v6n_ctx_ifindex(ctx) };

	__builtin_memcpy(fib.ipv6_dst, addr, 16);
	return bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH) == BPF_FIB_LKUP_RET_NOT_FWDED;
}

/*
 * A packet of `flow` (TCP, UDP or SCTP) from outside that no frontend took
 * (v6n_nodeport_pick failed): to a Service's external or load-balancer IP
 * on a port none of its frontends serves, it is admitted by nothing here,
 * and routed on it would go back to the router that sent it. Dropped early
 * (V6N_REASON_DROP_NO_FRONTEND). The agent leaves the node's own addresses
 * out of v6n_lb_vips (an externalIP may name one, whose other ports are the
 * node's): the FIB cannot tell a local address from one without a route.
 */
static __always_inline int v6n_nodeport_unserved(const struct v6n_flow *flow)
{
	return bpf_map_lookup_elem(&v6n_lb_vips, flow->key.daddr) != NULL;
}

/*
 * Whether a packet without an entry belongs to a socket of this node's own:
 * a reply to a connection the node opened from a port that is also a
 * hostPort's, say. A TCP SYN opens a connection, so it never does.
 */
static __always_inline int v6n_own_socket(struct v6n_ctx *ctx, const struct v6n_flow *flow)
{
	struct bpf_sock_tuple tuple = {};
	struct bpf_sock *sk;

	if (flow->key.proto == IPPROTO_TCP && v6n_tcp_opens(flow->tcp_flags))
		return 0;
	/* BPF has no lookup of SCTP sockets. */
	if (flow->key.proto == IPPROTO_SCTP)
		return 0;
	__builtin_memcpy(tuple.ipv6.saddr, flow->key.saddr, 16);
	__builtin_memcpy(tuple.ipv6.daddr, flow->key.daddr, 16);
	tuple.ipv6.sport = flow->key.sport;
	tuple.ipv6.dport = flow->key.dport;
	if (flow->key.proto == IPPROTO_TCP)
		sk = bpf_skc_lookup_tcp(ctx, &tuple, sizeof(tuple.ipv6), BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_udp(ctx, &tuple, sizeof(tuple.ipv6), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

/* The frontend and backend a new connection from outside gets. */
struct v6n_nodeport_pick {
	__u32 frontend;
	__u32 backend_id;
	struct v6n_l4_addr *backend; /* NULL: a frontend without backends */
};

/*
 * The first packet of a connection from outside: whether it is for a
 * frontend reached from outside (and no socket of the node's own), and
 * then which backend Maglev gives it. Returns 0 with `pick` filled, or -1
 * for any other packet. Changes nothing: v6n_nodeport_new records it.
 */
static __always_inline int v6n_nodeport_pick(struct v6n_ctx *ctx, const struct v6n_flow *flow,
					     struct v6n_nodeport_pick *pick)
{
	struct v6n_service_key key = { .port = flow->key.dport, .proto = flow->key.proto };

	__builtin_memcpy(key.addr, flow->key.daddr, 16);
	struct v6n_service_value *svc = v6n_lb_frontend(&key);
	if (!svc || !(svc->flags & V6N_SERVICE_EXTERNAL) || v6n_own_socket(ctx, flow))
		return -1;
	pick->frontend = svc->id;
	pick->backend = NULL;
	pick->backend_id = 0;
	struct v6n_maglev_table *table = bpf_map_lookup_elem(&v6n_maglev, &pick->frontend);
	if (table && svc->count > 0) {
		pick->backend_id = v6n_maglev_pick(table, &flow->key, svc->flags & V6N_SERVICE_AFFINITY);
		pick->backend = bpf_map_lookup_elem(&v6n_backends, &pick->backend_id);
	}
	return 0;
}

/* The flags a connection from outside to a backend on another node gets
 * when direct server return is on (V6N_CT_DSR, V6N_CT_DSR_IP6IP6), else 0. */
static __always_inline __u8 v6n_lb_remote_flags(const struct v6n_lb_config *cfg)
{
	if (!cfg || !(cfg->flags & V6N_LB_DSR))
		return 0;
	return V6N_CT_DSR | ((cfg->flags & V6N_LB_DSR_IP6IP6) ? V6N_CT_DSR_IP6IP6 : 0);
}

/* This node's Services configuration (v6n_lb_cfg), or NULL. */
static __always_inline struct v6n_lb_config *v6n_lb_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&v6n_lb_cfg, &zero);
}

/*
 * A new connection from outside to the backend `pick` names (on this node,
 * or `remote`: on another): records both directions, fills `out` with what
 * the packet leaves as. Returns V6N_REASON_LB_TRANSLATED;
 * V6N_REASON_DROP_NO_BACKEND when the frontend has no backend (the stack
 * answers: a TCP reset, an ICMPv6 port unreachable).
 */
static __always_inline enum v6n_reason v6n_nodeport_new(const struct v6n_flow *flow, const struct v6n_nodeport_pick *pick,
							 int remote, struct v6n_ct_value *out, __u64 now)
{
	__u32 frontend = pick->frontend, backend_id = pick->backend_id;
	struct v6n_l4_addr *backend = pick->backend;

	v6n_lb_account(frontend, backend != NULL);
	if (!backend)
		return V6N_REASON_DROP_NO_BACKEND;

	__builtin_memcpy(out->saddr, flow->key.saddr, 16);
	__builtin_memcpy(out->daddr, backend->addr, 16);
	out->sport = flow->key.sport;
	out->dport = backend->port;
	out->backend_id = backend_id;
	out->frontend_id = frontend;
	out->last_seen_ns = now;
	out->flags = 0;

	struct v6n_ct_value reply = {
		.sport = flow->key.dport,
		.dport = flow->key.sport,
		.frontend_id = frontend,
		.last_seen_ns = now,
		.flags = V6N_CT_REPLY,
	};
	__builtin_memcpy(reply.saddr, flow->key.daddr, 16);
	__builtin_memcpy(reply.daddr, flow->key.saddr, 16);

	struct v6n_ct_key reply_key = {};
	if (!remote) {
		v6n_ct_reply_key(&reply_key, out, flow->key.proto);
		bpf_map_update_elem(&v6n_ct, &reply_key, &reply, BPF_ANY);
	} else {
		__u32 zero = 0;
		struct v6n_lb_config *cfg = bpf_map_lookup_elem(&v6n_lb_cfg, &zero);
		if (!cfg)
			return V6N_REASON_DROP_NAT_PORTS;
		if (cfg->flags & V6N_LB_DSR) {
			/* The backend's node answers the client: no reply comes here. */
			out->flags = v6n_lb_remote_flags(cfg);
		} else {
			__builtin_memcpy(out->saddr, cfg->masquerade_addr, 16);
			if (v6n_masquerade_port(out, &reply, flow->key.proto) < 0)
				return V6N_REASON_DROP_NAT_PORTS;
		}
	}
	bpf_map_update_elem(&v6n_ct, &flow->key, out, BPF_ANY);
	v6n_event_note_xlat(V6N_EVENT_SERVICE, frontend, flow->key.saddr, flow->key.sport, flow->key.daddr, flow->key.dport);
	return V6N_REASON_LB_TRANSLATED;
}

/*
 * The outer header direct server return inside IPv6 (V6N_CT_DSR_IP6IP6)
 * puts in front of `inner`, the packet as the option mode sends it: from
 * this node's masquerade address (which the cluster routes here) to the
 * backend, with the inner packet's traffic class, flow label and hop limit
 * (RFC 2473 6.3, 6.5), next header IPv6.
 */
static __always_inline void v6n_ip6ip6_outer(struct ipv6hdr *outer, const struct ipv6hdr *inner,
					      const __u8 source[16])
{
	__builtin_memcpy(outer, inner, 4); /* version, traffic class, flow label */
	outer->payload_len = bpf_htons(bpf_ntohs(inner->payload_len) + sizeof(*outer));
	outer->nexthdr = IPPROTO_IPV6;
	outer->hop_limit = inner->hop_limit;
	__builtin_memcpy(&outer->saddr, source, 16);
	outer->daddr = inner->daddr;
}

#endif /* V6NODE_LIB_NODEPORT_STATE_H */
