/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Flow events (abi.h, "Flow events"): the agent reads them from the ring
 * v6n_events and turns them into flows. The one exit (verdict.h) sends
 * them: for every dropped packet, and for each new flow noted on the
 * packet's way (a pod's new connection, as policy tracks every pod's, in
 * either direction; a NodePort's backend chosen; a NAT64 binding made).
 * Decisions leave notes for the exit on this CPU rather
 * than send events themselves: the BPF stack of a call deep in a program
 * has no room for one, and the packet's fate is known only at the exit.
 */
#ifndef V6NODE_LIB_EVENTS_H
#define V6NODE_LIB_EVENTS_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "ctx.h"
#include "maps.h"
#include "rate.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, V6N_EVENTS_RING_BYTES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_event_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_event_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V6N_REASON_COUNT);
	__type(key, __u32);
	__type(value, struct v6n_token_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_event_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V6N_REASON_COUNT);
	__type(key, __u32);
	__type(value, struct v6n_event_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_event_stats SEC(".maps");

/* What policy made of the packet in hand, for the exit's events: per
 * enum v6n_policy_direction, the rules that judged it and what they did. */
enum { V6N_NOTE_NONE, V6N_NOTE_NEW_FLOW, V6N_NOTE_AUDITED, V6N_NOTE_DENIED };

struct v6n_event_note {
	__u32 policy_id[2];
	__u8 what[2]; /* V6N_NOTE_* */
	/* A new translated flow (a Service's backend chosen per packet, a
	 * NAT64 binding made): V6N_EVENT_SERVICE and/or V6N_EVENT_XLAT, the
	 * frontend, and the flow as it was before the translation. */
	__u8 translated;
	__u8 pad;
	__u32 frontend;
	__u16 xlat_sport;
	__u16 xlat_dport;
	__u8 xlat_saddr[16];
	__u8 xlat_daddr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_event_note);
} v6n_event_notes SEC(".maps");

/* Notes what the rules `policy_id` made of the packet in hand in `direction`. */
static __always_inline void v6n_event_note(__u8 direction, __u32 policy_id, __u8 what)
{
	__u32 zero = 0;
	struct v6n_event_note *note = bpf_map_lookup_elem(&v6n_event_notes, &zero);

	if (note && direction < 2) {
		note->policy_id[direction] = policy_id;
		note->what[direction] = what;
	}
}

/* Notes that the packet in hand starts a flow translated from
 * saddr:sport -> daddr:dport (network byte order), of `frontend` when
 * `translated` says V6N_EVENT_SERVICE. */
static __always_inline void v6n_event_note_xlat(__u8 translated, __u32 frontend, const __u8 *saddr, __u16 sport,
						const __u8 *daddr, __u16 dport)
{
	__u32 zero = 0;
	struct v6n_event_note *note = bpf_map_lookup_elem(&v6n_event_notes, &zero);

	if (!note)
		return;
	note->translated = translated | V6N_EVENT_XLAT;
	note->frontend = frontend;
	note->xlat_sport = sport;
	note->xlat_dport = dport;
	__builtin_memcpy(note->xlat_saddr, saddr, 16);
	__builtin_memcpy(note->xlat_daddr, daddr, 16);
}

/* Notes that the packet in hand made a NAT64 binding for the client's
 * flow from client:port to the IPv4 `server` (its port is the packet's). */
static __always_inline void v6n_event_note_nat64(const __u8 *client, __u16 port, __be32 server)
{
	__u32 zero = 0;
	struct v6n_event_note *note = bpf_map_lookup_elem(&v6n_event_notes, &zero);

	if (!note)
		return;
	note->translated = V6N_EVENT_XLAT;
	note->frontend = 0;
	note->xlat_sport = port;
	note->xlat_dport = 0;
	__builtin_memcpy(note->xlat_saddr, client, 16);
	__builtin_memset(note->xlat_daddr, 0, 10);
	note->xlat_daddr[10] = note->xlat_daddr[11] = 0xff;
	__builtin_memcpy(&note->xlat_daddr[12], &server, 4);
}

static __always_inline int v6n_reason_is_drop(__u8 reason)
{
	return reason < 64 && !(V6N_REASONS_FORWARDING & (1ULL << reason));
}

/* The transport's ports, flags or ICMP type of the packet at `l4`, read
 * straight into the event (BPF's stack is short here). */
static __always_inline void v6n_event_read_l4(struct v6n_ctx *ctx, struct v6n_flow_event *event, __u32 l4)
{
	if (event->protocol == IPPROTO_TCP) {
		if (v6n_ctx_load_bytes(ctx, l4, &event->sport, 4) == 0)
			v6n_ctx_load_bytes(ctx, l4 + 13, &event->tcp_flags, 1);
	} else if (event->protocol == IPPROTO_UDP || event->protocol == IPPROTO_SCTP) {
		v6n_ctx_load_bytes(ctx, l4, &event->sport, 4);
	} else if (event->protocol == IPPROTO_ICMPV6 || event->protocol == IPPROTO_ICMP) {
		/* Type and code; an echo's identifier stands for both ports. */
		if (v6n_ctx_load_bytes(ctx, l4, &event->icmp_type, 2) == 0 &&
		    v6n_ctx_load_bytes(ctx, l4 + 4, &event->sport, 2) == 0)
			event->dport = event->sport;
	}
}

/* The packet's addresses and transport, as far as it has them: an IPv6
 * packet's next header is taken as its transport (extension headers are
 * named, not skipped); an IPv4 packet's addresses are IPv4-mapped. */
static __always_inline void v6n_event_read_packet(struct v6n_ctx *ctx, struct v6n_flow_event *event)
{
	const __u32 l3 = sizeof(struct ethhdr);
	__be16 ethertype;

	if (v6n_ctx_load_bytes(ctx, offsetof(struct ethhdr, h_proto), &ethertype, 2) < 0)
		return;
	if (ethertype == bpf_htons(ETH_P_IPV6)) {
		if (v6n_ctx_load_bytes(ctx, l3 + offsetof(struct ipv6hdr, saddr), event->saddr, 16) < 0 ||
		    v6n_ctx_load_bytes(ctx, l3 + offsetof(struct ipv6hdr, daddr), event->daddr, 16) < 0 ||
		    v6n_ctx_load_bytes(ctx, l3 + offsetof(struct ipv6hdr, nexthdr), &event->protocol, 1) < 0)
			return;
		v6n_event_read_l4(ctx, event, l3 + sizeof(struct ipv6hdr));
	} else if (ethertype == bpf_htons(ETH_P_IP)) {
		__u8 version_ihl;
		__be16 frag_off;

		if (v6n_ctx_load_bytes(ctx, l3, &version_ihl, 1) < 0 ||
		    v6n_ctx_load_bytes(ctx, l3 + offsetof(struct iphdr, frag_off), &frag_off, 2) < 0 ||
		    v6n_ctx_load_bytes(ctx, l3 + offsetof(struct iphdr, saddr), &event->saddr[12], 4) < 0 ||
		    v6n_ctx_load_bytes(ctx, l3 + offsetof(struct iphdr, daddr), &event->daddr[12], 4) < 0 ||
		    v6n_ctx_load_bytes(ctx, l3 + offsetof(struct iphdr, protocol), &event->protocol, 1) < 0)
			return;
		event->saddr[10] = event->saddr[11] = event->daddr[10] = event->daddr[11] = 0xff;
		/* A later fragment has no transport header. */
		if (!(frag_off & bpf_htons(0x1fff)))
			v6n_event_read_l4(ctx, event, l3 + (version_ihl & 0xf) * 4);
	}
}

/* The rate limit's clock. A program dropping a flood asks it for every
 * frame, and the precise clock (read_tsc) cost XDP about as much as the
 * rest of the drop. On the tick a bucket earns a tick's tokens at once, up
 * to its burst: more than burst per tick of one reason is not sent
 * (docs/configuration.md, flows.burst). Tracing programs (an entry object that
 * defines V6N_CTX_TRACING) keep the precise clock: the verifier refuses
 * them the coarse one. */
static __always_inline __u64 v6n_event_clock(void)
{
#ifdef V6N_CTX_TRACING
	return bpf_ktime_get_ns();
#else
	return bpf_ktime_get_coarse_ns();
#endif
}

/*
 * An event of `reason` reserved in the ring, its time and reason set and
 * the rest zero; NULL if `reason`'s rate is used up on this CPU or the
 * ring is full (each counted). What is reserved must be submitted.
 */
static __always_inline struct v6n_flow_event *v6n_event_reserve(const struct v6n_event_config *config, __u8 reason)
{
	__u32 slot = reason;
	struct v6n_event_stats *stats = bpf_map_lookup_elem(&v6n_event_stats, &slot);
	struct v6n_token_bucket *bucket = bpf_map_lookup_elem(&v6n_event_rate, &slot);

	if (!stats || !bucket)
		return NULL;
	if (!v6n_take_token(bucket, config->per_second, config->burst, v6n_event_clock())) {
		stats->rate_limited++;
		return NULL;
	}
	struct v6n_flow_event *event = bpf_ringbuf_reserve(&v6n_events, sizeof(*event), 0);
	if (!event) {
		stats->ring_full++;
		return NULL;
	}
	stats->sent++;
	__builtin_memset(event, 0, sizeof(*event));
	event->time_ns = bpf_ktime_get_ns();
	event->reason = reason;
	return event;
}

/* Hands a reserved event to the agent. It is woken once a batch waits,
 * not for every event: a wake-up per new connection would cost the
 * datapath more than the event. It reads what is there on its own every
 * few milliseconds too. */
static __always_inline void v6n_event_submit(struct v6n_flow_event *event)
{
	bpf_ringbuf_submit(event, bpf_ringbuf_query(&v6n_events, BPF_RB_AVAIL_DATA) >= V6N_EVENTS_WAKE_BYTES ?
					  BPF_RB_FORCE_WAKEUP :
					  BPF_RB_NO_WAKEUP);
}

/* Sends an event of `kind` for the packet in hand, as v6n_event_reserve
 * allows. */
static __always_inline void v6n_event_send(struct v6n_ctx *ctx, const struct v6n_event_config *config,
					   const struct v6n_event_note *note, __u8 kind, __u8 direction, __u8 reason,
					   __u32 policy_id)
{
	struct v6n_flow_event *event = v6n_event_reserve(config, reason);

	if (!event)
		return;
	event->kind = kind;
	event->direction = direction;
	event->ifindex = v6n_ctx_ifindex(ctx);
	event->len = v6n_ctx_len(ctx);
	event->policy_id = policy_id;
	event->cookie = v6n_ctx_socket_cookie(ctx);
	v6n_event_read_packet(ctx, event);
	if (note->translated) {
		event->translated = note->translated;
		event->frontend = note->frontend;
		event->xlat_sport = note->xlat_sport;
		event->xlat_dport = note->xlat_dport;
		__builtin_memcpy(event->xlat_saddr, note->xlat_saddr, 16);
		__builtin_memcpy(event->xlat_daddr, note->xlat_daddr, 16);
	}
	/* A socket the hooks sent to a backend at connect (sock.bpf.c): its new
	 * flow is the Service's. Its packets carry the backend's address from
	 * the first; the socket's cookie names the frontend. */
	if (kind == V6N_EVENT_FLOW && event->cookie && !event->translated) {
		struct v6n_sock_revnat_key key = { .cookie = event->cookie, .port = event->dport };

		__builtin_memcpy(key.addr, event->daddr, 16);
		struct v6n_sock_revnat_value *service = bpf_map_lookup_elem(&v6n_sock_revnat, &key);
		if (service) {
			event->translated = V6N_EVENT_SERVICE;
			event->frontend = service->frontend;
		}
	}
	v6n_event_submit(event);
}

/* The events of the packet the exit records with `reason`: its drop, and
 * each new flow (or audited one) policy noted on its way. */
static __noinline void v6n_event_exit(struct v6n_ctx *ctx, struct v6n_event_note *note, __u8 direction, __u8 reason)
{
	__u32 zero = 0;
	struct v6n_event_config *config = bpf_map_lookup_elem(&v6n_event_config, &zero);

	if (config && config->enabled) {
		if (v6n_reason_is_drop(reason)) {
			__u32 denied_by = note->what[V6N_POLICY_EGRESS] == V6N_NOTE_DENIED ? note->policy_id[V6N_POLICY_EGRESS] :
					  note->what[V6N_POLICY_INGRESS] == V6N_NOTE_DENIED ? note->policy_id[V6N_POLICY_INGRESS] :
											       0;
			v6n_event_send(ctx, config, note, V6N_EVENT_DROP, direction, reason, denied_by);
		} else {
			/* A translation no pod's policy saw (from outside, or
			 * the node's own) is the packet's one new flow. */
			if (note->translated && !note->what[V6N_POLICY_EGRESS] && !note->what[V6N_POLICY_INGRESS])
				v6n_event_send(ctx, config, note, V6N_EVENT_FLOW, direction, reason, 0);
			/* The sender's side first, as the packet went. */
			if (note->what[V6N_POLICY_EGRESS] == V6N_NOTE_NEW_FLOW)
				v6n_event_send(ctx, config, note, V6N_EVENT_FLOW, V6N_DIRECTION_FROM_POD, reason,
					       note->policy_id[V6N_POLICY_EGRESS]);
			else if (note->what[V6N_POLICY_EGRESS] == V6N_NOTE_AUDITED)
				v6n_event_send(ctx, config, note, V6N_EVENT_FLOW, V6N_DIRECTION_FROM_POD,
					       V6N_REASON_POLICY_AUDIT, note->policy_id[V6N_POLICY_EGRESS]);
			if (note->what[V6N_POLICY_INGRESS] == V6N_NOTE_NEW_FLOW)
				v6n_event_send(ctx, config, note, V6N_EVENT_FLOW, V6N_DIRECTION_TO_POD, reason,
					       note->policy_id[V6N_POLICY_INGRESS]);
			else if (note->what[V6N_POLICY_INGRESS] == V6N_NOTE_AUDITED)
				v6n_event_send(ctx, config, note, V6N_EVENT_FLOW, V6N_DIRECTION_TO_POD,
					       V6N_REASON_POLICY_AUDIT, note->policy_id[V6N_POLICY_INGRESS]);
		}
	}
	note->what[V6N_POLICY_INGRESS] = note->what[V6N_POLICY_EGRESS] = V6N_NOTE_NONE;
	note->translated = 0;
}

/* Whether a drop of `reason`, with nothing noted on its way, finds its
 * rate used up on this CPU: then it is counted as held back here, without
 * the rest of the exit's work. A flood of drops is what asks, for every
 * frame. Out of line: inlined, its keys on a program's main frame pushed
 * one of the deepest chains of calls past the verifier's 512 bytes. */
static __noinline int v6n_event_drop_held_back(__u8 reason)
{
	__u32 slot = reason, zero = 0;
	struct v6n_event_config *config = bpf_map_lookup_elem(&v6n_event_config, &zero);
	struct v6n_token_bucket *bucket = bpf_map_lookup_elem(&v6n_event_rate, &slot);

	if (!config || !config->enabled || !bucket || !v6n_bucket_empty(bucket, v6n_event_clock()))
		return 0;
	struct v6n_event_stats *stats = bpf_map_lookup_elem(&v6n_event_stats, &slot);
	if (stats)
		stats->rate_limited++;
	return 1;
}

/* At the exit: the packet's events, if it has any (a drop, or a note). */
static __always_inline void v6n_event_at_exit(struct v6n_ctx *ctx, __u8 direction, __u8 reason)
{
	__u32 zero = 0;
	struct v6n_event_note *note = bpf_map_lookup_elem(&v6n_event_notes, &zero);

	if (!note)
		return;
	if (!note->what[V6N_POLICY_INGRESS] && !note->what[V6N_POLICY_EGRESS] && !note->translated &&
	    (!v6n_reason_is_drop(reason) || v6n_event_drop_held_back(reason)))
		return;
	v6n_event_exit(ctx, note, direction, reason);
}

#endif /* V6NODE_LIB_EVENTS_H */
