/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Delivering a packet to a pod on this node (BPF host routing): the pods'
 * addresses are keys of v6n_endpoints, each naming the host side of its
 * pod's device pair.
 */
#ifndef V6NODE_LIB_ENDPOINT_H
#define V6NODE_LIB_ENDPOINT_H

#include <linux/bpf.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "bandwidth.h"
#include "maps.h"
#include "parse.h"
#include "policy.h"
#include "verdict.h"

/* v6n_to_endpoint's answer when it drops the packet for a reason of the
 * receiving pod's (its policy, its rate limit): not a tc action,
 * v6n_exit_routed (or v6n_delivered_reason and v6n_tc_action) make it one. */
#define V6N_ACT_DROPPED 0x100
#define V6N_ACT_DROPPED_FOR(reason) (V6N_ACT_DROPPED | (reason))
/* Whether an answer of v6n_to_endpoint is one of those: not TC_ACT_UNSPEC
 * (-1), whose bits include V6N_ACT_DROPPED's. */
#define V6N_ACT_IS_DROPPED(action) (((action) & ~0xff) == V6N_ACT_DROPPED)


/*
 * Hands the packet to the pod behind `ep` if the pod's ingress policy lets it
 * in (else V6N_ACT_DROPPED_FOR the reason), as a router would: hop limit
 * decremented (the kernel gets the packet when it runs out, to send Time
 * Exceeded), MACs set to what the pod's device expects.
 *
 * `at_ingress` says the program runs at tc ingress (an uplink, or a veth's
 * host side), where bpf_redirect_peer may switch the packet straight into
 * the pod's namespace: no backlog queue, no second pass through a device.
 * A netkit program runs in the sending device's transmit path instead, where
 * the kernel refuses peer redirects; redirecting to the target pod's primary
 * device runs that device's own program and enters the pod just as directly.
 *
 * Returns TC_ACT_REDIRECT, or TC_ACT_UNSPEC to leave the packet to the stack.
 */
static __always_inline int v6n_to_endpoint(struct __sk_buff *skb, struct ipv6hdr *ip6,
					   const struct v6n_endpoint_value *ep, int at_ingress)
{
	if (ip6->hop_limit <= 1)
		return TC_ACT_UNSPEC;
	enum v6n_reason judged = v6n_policy_check(skb, V6N_POLICY_INGRESS);
	if (judged == V6N_REASON_DROP_POLICY_INGRESS)
		return V6N_ACT_DROPPED_FOR(judged);
	if (judged != V6N_REASON_PASS)
		return TC_ACT_SHOT;
	/* Policy read the packet through helpers: its pointers are stale. */
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	ip6 = data + sizeof(struct ethhdr);
	if ((void *)(ip6 + 1) > data_end)
		return TC_ACT_SHOT;
	ip6->hop_limit--;

	/* A pod with an ingress limit is reached through its own device's
	 * queue (fq), never by a peer redirect past it. A netkit pod's
	 * packets are paced here: its device's program runs after the queue.
	 * A veth pod's are paced by v6n_to_pod, at tc egress before it. */
	__u32 ifindex = ep->ifindex;
	struct v6n_bandwidth_value *bw = v6n_bandwidth_of(ifindex);
	int queued = bw && bw->ingress.ps_per_byte_q16;
	if (queued && (ep->flags & V6N_ENDPOINT_NETKIT)) {
		enum v6n_reason paced = v6n_pace(skb, bw, &bw->ingress, ip6->nexthdr);

		if (paced != V6N_REASON_PASS)
			return V6N_ACT_DROPPED_FOR(paced);
	}

	__u8 macs[12];

	__builtin_memcpy(macs, ep->pod_mac, 6);
	__builtin_memcpy(macs + 6, ep->host_mac, 6);
	/* Invalidates ip6: nothing reads the packet after this. */
	if (bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0) < 0)
		return TC_ACT_SHOT;
	if (at_ingress && !queued)
		return bpf_redirect_peer(ifindex, 0);
	return bpf_redirect(ifindex, 0);
}

/* The counter reason for what host routing did: routed when BPF sent the
 * packet on, passed when the stack gets it; a packet that cannot be
 * rewritten is too short for its own headers. */
static __always_inline enum v6n_reason v6n_routed_reason(int action)
{
	if (V6N_ACT_IS_DROPPED(action))
		return action & 0xff;
	if (action == TC_ACT_REDIRECT)
		return V6N_REASON_ROUTED;
	return action == TC_ACT_UNSPEC ? V6N_REASON_PASS : V6N_REASON_DROP_MALFORMED;
}

/* The exit after host routing: records what it did, returns its action. */
/* The tc action of what delivery answered. */
static __always_inline int v6n_tc_action(int delivered)
{
	return V6N_ACT_IS_DROPPED(delivered) ? TC_ACT_SHOT : delivered;
}

static __always_inline int v6n_exit_routed(struct __sk_buff *skb, __u8 direction, int action)
{
	return v6n_exit(skb, direction, v6n_routed_reason(action), v6n_tc_action(action));
}

/* The reason to count for a delivery after a translation that counts as
 * `translated`: the delivery's own failure, or the translation. */
static __always_inline enum v6n_reason v6n_delivered_reason(int delivered, enum v6n_reason translated)
{
	if (V6N_ACT_IS_DROPPED(delivered))
		return delivered & 0xff;
	return delivered == TC_ACT_SHOT ? V6N_REASON_DROP_MALFORMED : translated;
}

#endif /* V6NODE_LIB_ENDPOINT_H */
