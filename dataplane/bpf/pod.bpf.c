// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for pod devices, attached by the agent to the host side of
 * each pod's device pair: netkit links (peer = what the pod sends, primary =
 * what enters the pod) or, on kernels without netkit, tcx on the veth's host
 * side (ingress = what the pod sends, egress = what enters it).
 *
 * BPF host routing: what a pod sends goes straight to another pod on this
 * node, or to the next hop the kernel's FIB names, without a pass through
 * the host's IP stack. Anything the stack has to answer (its own addresses,
 * no route, too big, hop limit out) is left to it.
 *
 * netkit's verdicts are tc's: NETKIT_NEXT -1, PASS 0, DROP 2, REDIRECT 7.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "lib/bandwidth.h"
#include "lib/endpoint.h"
#include "lib/fib.h"
#include "lib/nodeport.h"
#include "lib/parse.h"
#include "lib/policy.h"
#include "lib/verdict.h"

SEC("classifier")
int v6n_from_pod(struct __sk_buff *skb)
{
	const __u8 dir = V6N_DIRECTION_FROM_POD;
	struct ipv6hdr *ip6;
	enum v6n_reason reason = v6n_parse_ipv6(skb, &ip6);

	if (reason != V6N_REASON_PASS)
		return v6n_exit(skb, dir, reason, TC_ACT_SHOT);
	if (!ip6)
		return v6n_exit(skb, dir, V6N_REASON_DROP_NOT_IPV6, TC_ACT_SHOT);
	if (v6n_link_scoped(&ip6->daddr))
		return v6n_exit(skb, dir, V6N_REASON_PASS, TC_ACT_UNSPEC);

	/* A pod sends from its own address, through its own device, or not at all. */
	struct v6n_endpoint_value *self = v6n_endpoint(&ip6->saddr);
	if (!self || self->ifindex != skb->ifindex)
		return v6n_exit(skb, dir, V6N_REASON_DROP_SPOOFED, TC_ACT_SHOT);
	int at_ingress = !(self->flags & V6N_ENDPOINT_NETKIT);

	/* Egress policy judges the packet as the pod sent it, before a reply
	 * to a connection from outside is given the frontend's address. */
	__u8 nexthdr = ip6->nexthdr;
	struct v6n_policy_flow *sent = v6n_policy_scratch_flow(V6N_POLICY_FLOW_SENT);
	if (!sent)
		return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);
	int policy_parsed = v6n_policy_flow_of(skb, V6N_POLICY_EGRESS, sent);
	if (policy_parsed < 0)
		return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);

	/* A reply to a connection from outside leaves as the frontend's; SCTP
	 * to a Service goes to a backend. Packet pointers are stale after
	 * either (they may pull data). */
	int replied = v6n_nodeport_reply(skb);
	if (replied < 0)
		return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);
	int translated = 0;
	if (replied == 0 && nexthdr == IPPROTO_SCTP) {
		reason = v6n_service_sctp(skb, 1);
		if (reason != V6N_REASON_PASS && reason != V6N_REASON_LB_TRANSLATED && reason != V6N_REASON_LB_TRACKED)
			return v6n_exit(skb, dir, reason, TC_ACT_SHOT);
		translated = reason != V6N_REASON_PASS;
	}
	if (policy_parsed == 0) {
		/* SCTP to a Service is judged against the backend it was given,
		 * as the socket hooks have TCP and UDP judged. */
		if (translated) {
			struct v6n_policy_flow *chosen = v6n_policy_scratch_flow(V6N_POLICY_FLOW_CHOSEN);

			if (!chosen || v6n_policy_flow_of(skb, V6N_POLICY_EGRESS, chosen) != 0)
				return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);
			reason = v6n_policy_judge(skb, chosen, &sent->key);
		} else {
			reason = v6n_policy_judge(skb, sent, NULL);
		}
		if (reason != V6N_REASON_PASS)
			return v6n_exit(skb, dir, reason, TC_ACT_SHOT);
	}
	if (v6n_parse_ipv6(skb, &ip6) != V6N_REASON_PASS || !ip6)
		return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);

	struct v6n_endpoint_value *peer = v6n_endpoint(&ip6->daddr);
	if (peer)
		return v6n_exit_routed(skb, dir, v6n_to_endpoint(skb, ip6, peer, at_ingress));

	/* The pod's egress limit paces what leaves the node: fq on the uplinks
	 * holds it (what it sends another pod here counts to that pod's
	 * ingress limit). */
	struct v6n_bandwidth_value *bw = v6n_bandwidth_of(skb->ifindex);
	if (bw) {
		reason = v6n_pace(skb, bw, &bw->egress, ip6->nexthdr);
		if (reason != V6N_REASON_PASS)
			return v6n_exit(skb, dir, reason, TC_ACT_SHOT);
	}
	return v6n_exit_routed(skb, dir, v6n_route6(skb, ip6));
}

/* A veth pod's ingress limit: this program runs at tc egress of the host
 * side, before its queue (fq), whichever way the packet came: BPF host
 * routing redirects to this device's egress for a limited pod, the stack
 * transmits through it. A netkit pod's were paced before its queue, by
 * v6n_to_endpoint. */
static __always_inline enum v6n_reason v6n_pace_at_veth(struct __sk_buff *skb)
{
	struct v6n_bandwidth_value *bw = v6n_bandwidth_of(skb->ifindex);

	if (!bw || !bw->ingress.ps_per_byte_q16)
		return V6N_REASON_PASS;
	struct ipv6hdr *ip6;
	if (v6n_parse_ipv6(skb, &ip6) != V6N_REASON_PASS || !ip6)
		return V6N_REASON_DROP_MALFORMED;
	struct v6n_endpoint_value *ep = v6n_endpoint(&ip6->daddr);
	/* On a netkit device skb->ifindex is the pod side's, in another
	 * namespace: equal to a host ifindex only by chance. */
	if (!ep || ep->ifindex != skb->ifindex || (ep->flags & V6N_ENDPOINT_NETKIT))
		return V6N_REASON_PASS;
	return v6n_pace(skb, bw, &bw->ingress, ip6->nexthdr);
}

SEC("classifier")
int v6n_to_pod(struct __sk_buff *skb)
{
	struct ipv6hdr *ip6;
	enum v6n_reason reason = v6n_parse_ipv6(skb, &ip6);

	if (reason == V6N_REASON_PASS && !ip6)
		reason = V6N_REASON_DROP_NOT_IPV6;
	/* What the stack delivers (from the node, or routed by it) is judged
	 * here; what BPF host routing delivers was judged on its way, and
	 * passes again as a known connection. */
	if (reason == V6N_REASON_PASS)
		reason = v6n_policy_check(skb, V6N_POLICY_INGRESS);
	if (reason == V6N_REASON_PASS)
		reason = v6n_pace_at_veth(skb);
	return v6n_exit(skb, V6N_DIRECTION_TO_POD, reason, reason == V6N_REASON_PASS ? TC_ACT_UNSPEC : TC_ACT_SHOT);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
