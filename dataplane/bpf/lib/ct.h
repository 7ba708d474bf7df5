/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Connection tracking for translation per packet (layout in abi.h): each
 * direction of a translated connection has an entry keyed by its packets as
 * they arrive, naming the addresses and ports they leave with. Entries live
 * in an LRU table and count as gone once their lifetime has passed since the
 * last packet, so nothing has to sweep them.
 */
#ifndef V6NODE_LIB_CT_H
#define V6NODE_LIB_CT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "maps.h"
#include "sctp.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, V6N_CT_MAX);
	__type(key, struct v6n_ct_key);
	__type(value, struct v6n_ct_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_ct SEC(".maps");

#define V6N_NS_PER_SECOND 1000000000ULL
/* A live entry's last_seen is written at most this often: every packet of a
 * busy connection would otherwise bounce its cache line between CPUs. */
#define V6N_CT_TOUCH_NS (1 * V6N_NS_PER_SECOND)

/* A TCP, UDP or SCTP packet's tuple as connection tracking keys it, and
 * where its transport checksum sits. */
struct v6n_flow {
	struct v6n_ct_key key;
	__u32 l4_offset;   /* from the start of the frame */
	__u32 csum_offset;
	__u8 tcp_flags;    /* TCP: the FIN/SYN/RST/... byte */
};

#define V6N_L3_OFFSET 14 /* Ethernet */
#define V6N_L4_OFFSET (V6N_L3_OFFSET + sizeof(struct ipv6hdr))
/* A BIG TCP packet over 64 KiB carries a hop-by-hop header with only the
 * jumbo payload option (RFC 2675) while in the stack, until the device
 * strips it: 8 bytes, payload length 0 in the IPv6 header. */
#define V6N_JUMBO_HBH_LEN 8
#define V6N_IPV6_TLV_JUMBO 0xc2
#define V6N_TCP_FIN 0x01
#define V6N_TCP_SYN 0x02
#define V6N_TCP_RST 0x04
#define V6N_TCP_ACK 0x10

/* A TCP segment that opens a connection (`flags`, the header's flag byte):
 * SYN without ACK. A new connection may reuse the ports of one that
 * closed, so each table treats it as its own. */
static __always_inline int v6n_tcp_opens(__u8 flags)
{
	return (flags & (V6N_TCP_SYN | V6N_TCP_ACK)) == V6N_TCP_SYN;
}

/*
 * Reads the flow of an IPv6 packet whose transport header (TCP, UDP, SCTP)
 * follows the IPv6 header directly, or a BIG TCP packet's jumbo option,
 * from the frame's bytes in [data, data_end): a socket buffer's linear part
 * or an XDP frame's first buffer. Returns 0, or -1 for anything else (other
 * protocols, other extension headers, a transport header cut short): left
 * untracked.
 */
static __always_inline int v6n_flow_parse(void *data, void *data_end, struct v6n_flow *flow)
{
	__u32 l4 = V6N_L4_OFFSET;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	__u8 proto = ip6->nexthdr;
	if (proto == IPPROTO_HOPOPTS) {
		__u8 *hbh = data + V6N_L4_OFFSET;

		if ((void *)(hbh + V6N_JUMBO_HBH_LEN) > data_end || ip6->payload_len != 0 || hbh[1] != 0 ||
		    hbh[2] != V6N_IPV6_TLV_JUMBO)
			return -1;
		proto = hbh[0];
		l4 += V6N_JUMBO_HBH_LEN;
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = data + l4;
		if ((void *)(tcp + 1) > data_end)
			return -1;
		flow->key.sport = tcp->source;
		flow->key.dport = tcp->dest;
		flow->tcp_flags = ((__u8 *)tcp)[13];
		flow->csum_offset = l4 + __builtin_offsetof(struct tcphdr, check);
	} else if (proto == IPPROTO_UDP && l4 == V6N_L4_OFFSET) {
		struct udphdr *udp = data + l4;
		if ((void *)(udp + 1) > data_end)
			return -1;
		flow->key.sport = udp->source;
		flow->key.dport = udp->dest;
		flow->tcp_flags = 0;
		flow->csum_offset = l4 + __builtin_offsetof(struct udphdr, check);
	} else if (proto == IPPROTO_SCTP && l4 == V6N_L4_OFFSET) {
		struct v6n_sctphdr *sctp = data + l4;
		if ((void *)(sctp + 1) > data_end)
			return -1;
		flow->key.sport = sctp->source;
		flow->key.dport = sctp->dest;
		flow->tcp_flags = 0;
		flow->csum_offset = l4 + V6N_SCTP_CSUM_AT;
	} else {
		return -1;
	}
	__builtin_memcpy(flow->key.saddr, &ip6->saddr, 16);
	__builtin_memcpy(flow->key.daddr, &ip6->daddr, 16);
	flow->key.proto = proto;
	flow->l4_offset = l4;
	return 0;
}

/* v6n_flow_parse of a socket buffer, its headers pulled into the linear
 * part first: they may sit in paged fragments. */
static __always_inline int v6n_flow_of(struct __sk_buff *skb, struct v6n_flow *flow)
{
	__u32 need = V6N_L4_OFFSET + V6N_JUMBO_HBH_LEN + sizeof(struct tcphdr);

	if ((void *)(long)skb->data + need > (void *)(long)skb->data_end &&
	    bpf_skb_pull_data(skb, need < skb->len ? need : skb->len) < 0)
		return -1;
	return v6n_flow_parse((void *)(long)skb->data, (void *)(long)skb->data_end, flow);
}

/* How long an entry with `flags` (V6N_CT_*) outlives its last packet: the
 * one rule of every stateful table, each with its own lifetimes (the
 * agent's sweeps read them alike). */
static __always_inline __u64 v6n_ct_lifetime_ns(const struct v6n_ct_lifetimes *lifetimes, __u8 flags, __u8 proto)
{
	__u32 seconds = lifetimes->icmp_seconds;

	if (proto == IPPROTO_TCP) {
		if (flags & V6N_CT_CLOSING)
			seconds = lifetimes->tcp_closing_seconds;
		else if ((flags & (V6N_CT_ESTABLISHED | V6N_CT_RESET)) == V6N_CT_ESTABLISHED)
			seconds = lifetimes->tcp_established_seconds;
		else
			seconds = lifetimes->tcp_transitory_seconds;
	} else if (proto == IPPROTO_UDP) {
		seconds = lifetimes->udp_seconds;
	}
	return seconds * V6N_NS_PER_SECOND;
}

/* Whether `entry` has outlived its lifetime at `now`. */
static __always_inline int v6n_ct_expired(const struct v6n_ct_lifetimes *lifetimes, const struct v6n_ct_value *entry,
					  __u8 proto, __u64 now)
{
	return now - entry->last_seen_ns > v6n_ct_lifetime_ns(lifetimes, entry->flags, proto);
}

/* NodePort's entries (v6n_ct): TCP kept as long as kube-proxy keeps it. */
#define V6N_CT_SERVICE_LIFETIMES                                                                  \
	{                                                                                         \
		.udp_seconds = V6N_CT_UDP_SECONDS, .tcp_established_seconds = V6N_CT_TCP_SECONDS, \
		.tcp_transitory_seconds = V6N_CT_TCP_SECONDS, .icmp_seconds = V6N_CT_UDP_SECONDS, \
		.tcp_closing_seconds = V6N_CT_CLOSING_SECONDS,                                    \
	}

/* How long a connection of a Service (v6n_ct), or one policy let through
 * (v6n_policy_ct), outlives its last packet with `flags`. */
static __always_inline __u64 v6n_ct_service_lifetime_ns(__u8 flags, __u8 proto)
{
	const struct v6n_ct_lifetimes lifetimes = V6N_CT_SERVICE_LIFETIMES;

	/* An SCTP association lives as long as established TCP: its
	 * heartbeats (every 30 s by default) keep it. */
	if (proto == IPPROTO_SCTP)
		return V6N_CT_TCP_SECONDS * V6N_NS_PER_SECOND;
	return v6n_ct_lifetime_ns(&lifetimes, flags, proto);
}

/* Whether NodePort's `entry` has outlived its lifetime at `now`. */
static __always_inline int v6n_ct_service_expired(const struct v6n_ct_value *entry, __u8 proto, __u64 now)
{
	return now - entry->last_seen_ns > v6n_ct_service_lifetime_ns(entry->flags, proto);
}

/* The packet's time, read on first use: most frames a NodePort lookup sees
 * belong to no connection (translator traffic, the node's own), and the
 * clock read was 4% of a core translating NAT64 in XDP. Zero is "not read
 * yet". */
static __always_inline __u64 v6n_now(__u64 *now)
{
	if (!*now)
		*now = bpf_ktime_get_ns();
	return *now;
}

/* The live entry for `flow`, or NULL (none, or its lifetime is over);
 * reads the clock into *now (v6n_now) only when there is an entry. */
static __always_inline struct v6n_ct_value *v6n_ct_lookup(const struct v6n_flow *flow, __u64 *now)
{
	struct v6n_ct_value *entry = bpf_map_lookup_elem(&v6n_ct, &flow->key);

	if (!entry || v6n_ct_service_expired(entry, flow->key.proto, v6n_now(now)))
		return NULL;
	return entry;
}

/* Notes the time of a packet of the entry's connection (at most once per
 * V6N_CT_TOUCH_NS); every stateful table of the node keeps time so. */
static __always_inline void v6n_ct_note_time(struct v6n_ct_value *entry, __u64 now)
{
	if (now - entry->last_seen_ns > V6N_CT_TOUCH_NS)
		entry->last_seen_ns = now;
}

/* Notes a packet of the entry's connection: its time, and a TCP FIN or RST. */
static __always_inline void v6n_ct_touch(struct v6n_ct_value *entry, const struct v6n_flow *flow, __u64 now)
{
	if (flow->tcp_flags & (V6N_TCP_FIN | V6N_TCP_RST) && !(entry->flags & V6N_CT_CLOSING))
		entry->flags |= V6N_CT_CLOSING;
	v6n_ct_note_time(entry, now);
}

/* The key of the reply direction of a packet that leaves as `out`. */
static __always_inline void v6n_ct_reply_key(struct v6n_ct_key *reply, const struct v6n_ct_value *out, __u8 proto)
{
	__builtin_memcpy(reply->saddr, out->daddr, 16);
	__builtin_memcpy(reply->daddr, out->saddr, 16);
	reply->sport = out->dport;
	reply->dport = out->sport;
	reply->proto = proto;
	reply->pad[0] = reply->pad[1] = reply->pad[2] = 0;
}

/* Forgets a connection: the entry under `key` and its reply direction. */
static __always_inline void v6n_ct_forget(const struct v6n_ct_key *key, const struct v6n_ct_value *entry)
{
	struct v6n_ct_key reply = {};

	v6n_ct_reply_key(&reply, entry, key->proto);
	bpf_map_delete_elem(&v6n_ct, &reply);
	bpf_map_delete_elem(&v6n_ct, key);
}

/* v6n_ct_rewrite for SCTP: its checksum covers no address. */
static __always_inline int v6n_ct_rewrite_sctp(struct __sk_buff *skb, const struct v6n_flow *flow,
					       const struct v6n_ct_value *out)
{
	__be16 payload_len;

	if (bpf_skb_store_bytes(skb, V6N_L3_OFFSET + __builtin_offsetof(struct ipv6hdr, saddr), out->saddr, 32,
				BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_load_bytes(skb, V6N_L3_OFFSET + __builtin_offsetof(struct ipv6hdr, payload_len), &payload_len,
			       sizeof(payload_len)) < 0)
		return -1;
	if (out->sport == flow->key.sport && out->dport == flow->key.dport)
		return 0;
	__u32 old_ports = flow->key.sport | (__u32)flow->key.dport << 16;
	__u32 new_ports = out->sport | (__u32)out->dport << 16;
	/* The SCTP packet's length as IPv6 gives it: a short frame may be padded. */
	return v6n_sctp_set_ports(skb, flow->l4_offset, bpf_ntohs(payload_len), old_ports, new_ports);
}

/*
 * Rewrites the packet of `flow` to leave as `out` (addresses and ports) and
 * mends its transport checksum: the addresses through the pseudo-header,
 * so a checksum the device will complete (CHECKSUM_PARTIAL) stays right.
 * TCP and UDP: SCTP's is v6n_ct_rewrite_sctp, which only the tables that
 * track SCTP call (its checksum's own frame is one call deeper than the
 * stateful NAT64's stack allows). Returns 0, or -1 when the packet cannot
 * be written.
 */
static __always_inline int v6n_ct_rewrite(struct __sk_buff *skb, const struct v6n_flow *flow, const struct v6n_ct_value *out)
{
	__u32 csum_flags = flow->key.proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__s64 diff = bpf_csum_diff((__be32 *)flow->key.saddr, 32, (__be32 *)out->saddr, 32, 0);

	if (diff < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, flow->csum_offset, 0, diff, BPF_F_PSEUDO_HDR | csum_flags) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, V6N_L3_OFFSET + __builtin_offsetof(struct ipv6hdr, saddr), out->saddr, 32, 0) < 0)
		return -1;
	if (out->sport != flow->key.sport || out->dport != flow->key.dport) {
		__u32 old_ports = flow->key.sport | (__u32)flow->key.dport << 16;
		__u32 new_ports = out->sport | (__u32)out->dport << 16;

		if (bpf_l4_csum_replace(skb, flow->csum_offset, old_ports, new_ports, sizeof(__u32) | csum_flags) < 0)
			return -1;
		if (bpf_skb_store_bytes(skb, flow->l4_offset, &new_ports, sizeof(new_ports), 0) < 0)
			return -1;
	}
	return 0;
}

#endif /* V6NODE_LIB_CT_H */
