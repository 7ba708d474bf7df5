// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the node's own devices (uplinks): attached at tc ingress
 * and egress by the agent. Counts every packet by reason, drops IPv6 packets
 * from denied source prefixes before the stack sees them, translates
 * Services reached from outside (lib/nodeport.h), and switches packets for
 * this node's pods straight into the pod's namespace.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "lib/endpoint.h"
#include "lib/nodeport.h"
#include "lib/parse.h"
#include "lib/verdict.h"

/* What an uplink does with a packet it has no more to do for: TCX_NEXT (-1)
 * leaves it to later programs in the tcx chain, and to the stack. */
static __always_inline int v6n_uplink_action(enum v6n_reason reason)
{
	return reason == V6N_REASON_PASS || reason == V6N_REASON_LB_TRACKED ? TC_ACT_UNSPEC : TC_ACT_SHOT;
}

SEC("classifier")
int v6n_from_dev(struct __sk_buff *skb)
{
	struct ipv6hdr *ip6;
	enum v6n_reason reason = v6n_parse_ipv6(skb, &ip6);

	if (reason == V6N_REASON_PASS && ip6) {
		struct v6n_lpm6_key key = { .prefixlen = 128 };

		__builtin_memcpy(key.addr, &ip6->saddr, sizeof(key.addr));
		if (bpf_map_lookup_elem(&v6n_deny_src, &key))
			reason = V6N_REASON_DROP_DENIED_SOURCE;
	}
	if (reason == V6N_REASON_PASS && ip6) {
		int action = TC_ACT_UNSPEC;

		reason = v6n_nodeport_ingress(skb, &action);
		if (reason != V6N_REASON_PASS)
			return v6n_exit(skb, V6N_DIRECTION_INGRESS, reason, action);
		/* Packet pointers are stale after a helper that may pull data. */
		reason = v6n_parse_ipv6(skb, &ip6);
	}
	if (reason == V6N_REASON_PASS && ip6) {
		struct v6n_endpoint_value *pod = v6n_endpoint(&ip6->daddr);

		if (pod)
			return v6n_exit_routed(skb, V6N_DIRECTION_INGRESS, v6n_to_endpoint(skb, ip6, pod, 1));
	}
	return v6n_exit(skb, V6N_DIRECTION_INGRESS, reason, v6n_uplink_action(reason));
}

SEC("classifier")
int v6n_to_dev(struct __sk_buff *skb)
{
	struct ipv6hdr *ip6;
	enum v6n_reason reason = v6n_parse_ipv6(skb, &ip6);

	__u8 nexthdr = reason == V6N_REASON_PASS && ip6 ? ip6->nexthdr : 0;

	/* A reply of the node's own sockets to a connection from outside. */
	if (reason == V6N_REASON_PASS && ip6) {
		int rewritten = v6n_nodeport_reply(skb);
		if (rewritten != 0)
			reason = rewritten > 0 ? V6N_REASON_LB_TRACKED : V6N_REASON_DROP_MALFORMED;
	}
	/* SCTP of the node's own sockets to a Service, routed here by the
	 * default route: sent on to its backend. */
	if (reason == V6N_REASON_PASS && nexthdr == IPPROTO_SCTP) {
		reason = v6n_service_sctp(skb, 0);
		if (reason == V6N_REASON_LB_TRANSLATED || reason == V6N_REASON_LB_TRACKED)
			return v6n_exit_routed(skb, V6N_DIRECTION_EGRESS, v6n_nodeport_deliver(skb, 0));
	}
	return v6n_exit(skb, V6N_DIRECTION_EGRESS, reason, v6n_uplink_action(reason));
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
