/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The bandwidth manager's pacing: a rate-limited pod's packets are given
 * earliest departure times (skb->tstamp, a monotonic delivery time), one
 * schedule per pod and way whatever its flows, and an fq qdisc holds each
 * packet until then: fq on the uplinks for what the pod sends, on the pod's
 * own device for what it is sent. Nothing queues in BPF and no qdisc lock is
 * shared between pods; a sender sees its packets leave at the rate, so TCP
 * (TSQ, BBR) keeps little in flight instead of filling a token bucket's
 * queue.
 *
 * The rate counts frames as tc's qdiscs do: every GSO segment with its own
 * Ethernet, IPv6 and transport headers.
 */
#ifndef V6NODE_LIB_BANDWIDTH_H
#define V6NODE_LIB_BANDWIDTH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "verdict.h"

static __always_inline struct v6n_bandwidth_value *v6n_bandwidth_of(__u32 ifindex)
{
	return bpf_map_lookup_elem(&v6n_bandwidth, &ifindex);
}

/* Bytes the packet puts on the wire: a GSO packet carries its headers once,
 * the wire once per segment. A packet a virtio device handed in whole (its
 * guest TSO) has a segment size but no count yet: the count is worked out
 * from it. Extension headers are not looked for: a TCP segment with them
 * counts 40 bytes short per segment. */
static __always_inline __u64 v6n_wire_bytes(struct __sk_buff *skb, __u8 nexthdr)
{
	__u64 bytes = skb->len;
	__u32 segs = skb->gso_segs;
	__u32 size = skb->gso_size;

	if (segs <= 1 && !size)
		return bytes;
	__u32 headers = ETH_HLEN + sizeof(struct ipv6hdr);
	if (nexthdr == IPPROTO_TCP) {
		__u8 offset;

		if (bpf_skb_load_bytes(skb, ETH_HLEN + sizeof(struct ipv6hdr) + 12, &offset, 1) < 0)
			return bytes;
		headers += (offset >> 4) * 4;
	} else if (nexthdr == IPPROTO_UDP) {
		headers += 8;
	}
	if (!segs && size && skb->len > headers)
		segs = (skb->len - headers + size - 1) / size;
	if (segs <= 1)
		return bytes;
	return bytes + (__u64)(segs - 1) * headers;
}

/*
 * Gives the packet its departure time on `pacer`'s schedule: as soon as the
 * pod's share is free, and no earlier than the time its socket gave it (a
 * pod's own pacing, BBR's, stands). A packet due beyond the horizon is
 * dropped and counted instead: the pod sends more than its limit for longer
 * than the horizon, and its sender has to learn so.
 *
 * Under backlog the schedule advances by an atomic add, so senders on other
 * CPUs never lose each other's bytes; only the restart after idle is a plain
 * write, where a race lets one packet through early.
 */
static __noinline enum v6n_reason v6n_pace(struct __sk_buff *skb, struct v6n_bandwidth_value *bw,
					   struct v6n_pacer *pacer, __u8 nexthdr)
{
	__u64 ps_per_byte_q16 = pacer->ps_per_byte_q16;

	if (!ps_per_byte_q16)
		return V6N_REASON_PASS;
	__u64 now = bpf_ktime_get_ns();
	__u64 wanted = now;
	if (skb->tstamp_type == BPF_SKB_TSTAMP_DELIVERY_MONO && skb->tstamp > now)
		wanted = skb->tstamp;

	__u64 bytes = v6n_wire_bytes(skb, nexthdr);
	__u64 horizon_ps = bw->horizon_ns * 1000;
	/* Two products that cannot overflow (picoseconds per byte stay below
	 * 2^34 down to 1 kbit/s; no packet reaches 2^20 bytes). */
	if (bytes >= (1 << 20))
		goto beyond;
	__u64 cost_ps = bytes * (ps_per_byte_q16 >> 16) + ((bytes * (ps_per_byte_q16 & 0xffff)) >> 16);
	if (cost_ps > horizon_ps)
		goto beyond;
	__u64 wanted_ps = (wanted - bw->origin_ns) * 1000;
	__u64 free_ps = pacer->next_free_ps;
	__u64 depart_ps;

	if ((__s64)(free_ps - wanted_ps) <= 0) {
		/* Idle, or slower than the limit: the packet leaves when it wants. */
		pacer->next_free_ps = wanted_ps + cost_ps;
		depart_ps = wanted_ps;
	} else {
		if (free_ps - wanted_ps + (wanted - now) * 1000 > horizon_ps)
			goto beyond;
		__sync_fetch_and_add(&pacer->next_free_ps, cost_ps);
		depart_ps = free_ps;
	}
	__sync_fetch_and_add(&pacer->packets, 1);
	__sync_fetch_and_add(&pacer->bytes, bytes);
	__u64 depart = wanted + (depart_ps - wanted_ps) / 1000;
	if (depart > now)
		bpf_skb_set_tstamp(skb, depart, BPF_SKB_TSTAMP_DELIVERY_MONO);
	return V6N_REASON_PASS;
beyond:
	__sync_fetch_and_add(&pacer->drops, 1);
	return V6N_REASON_DROP_BANDWIDTH;
}

#endif /* V6NODE_LIB_BANDWIDTH_H */
