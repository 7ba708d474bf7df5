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

#include "lib/endpoint.h"
#include "lib/fib.h"
#include "lib/nodeport.h"
#include "lib/parse.h"
#include "lib/verdict.h"

/*
 * SCTP from a pod to a Service (any frontend: ClusterIP, NodePort, external
 * IP, hostPort). The kernel runs no cgroup connect hook for SCTP sockets
 * (sctp_inet_connect goes straight to the association), so the socket hooks
 * never see it: its packets are translated here, at the pod's device, and
 * tracked like a connection from outside with the pod's own address kept.
 * The reply entry is this node's: the backend's answers come back through
 * its pod device (a backend here) or the uplink (one elsewhere), and both
 * give them the frontend's address back. A pod that reaches itself goes in
 * from the masquerade address (v6n_lb_cfg), as kube-proxy masquerades a
 * hairpin: an answer to its own address would never leave its namespace to
 * be given the frontend's address back. Returns V6N_REASON_PASS for any
 * other packet, untouched; V6N_REASON_LB_TRANSLATED or _TRACKED when
 * rewritten; else the reason to drop it (V6N_REASON_DROP_NO_BACKEND: the
 * association's INIT goes unanswered, as kube-proxy's rules leave it).
 */
static __noinline enum v6n_reason v6n_service_sctp_from_pod(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;
	struct v6n_flow flow = {};
	__u64 now = bpf_ktime_get_ns();

	if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_SCTP)
		return V6N_REASON_PASS;
	if (v6n_flow_of(skb, &flow) < 0)
		return V6N_REASON_DROP_MALFORMED;
	struct v6n_ct_value out;
	struct v6n_ct_value *entry = v6n_ct_lookup(&flow, now);
	if (entry && !(entry->flags & V6N_CT_REPLY)) {
		/* A backend that left ends its associations: they start over. */
		struct v6n_l4_addr *backend = bpf_map_lookup_elem(&v6n_backends, &entry->backend_id);
		if (backend && v6n_same_addr(backend->addr, entry->daddr) && backend->port == entry->dport) {
			v6n_ct_note_time(entry, now);
			__builtin_memcpy(&out, entry, sizeof(out));
			return v6n_service_rewrite(skb, &flow, &out) < 0 ? V6N_REASON_DROP_MALFORMED : V6N_REASON_LB_TRACKED;
		}
		v6n_ct_forget(&flow.key, entry);
	}

	struct v6n_service_key key = { .port = flow.key.dport, .proto = IPPROTO_SCTP };
	__builtin_memcpy(key.addr, flow.key.daddr, 16);
	struct v6n_service_value *svc = v6n_lb_frontend(&key);
	if (!svc)
		return V6N_REASON_PASS;
	__u32 frontend = svc->id, backend_id = 0;
	/* ClientIP affinity keys on the pod's address (the socket hooks' on
	 * its network namespace). */
	const __u32 *client = (const __u32 *)flow.key.saddr;
	struct v6n_l4_addr *backend =
		v6n_lb_select(&key, svc, ((__u64)(client[0] ^ client[1]) << 32) | (client[2] ^ client[3]), &backend_id);
	v6n_lb_account(frontend, backend != NULL);
	if (!backend)
		return V6N_REASON_DROP_NO_BACKEND;

	/* The reply direction first (the frontend's answer to the pod), then
	 * the forward one that uses it. */
	struct v6n_ct_value reply = {
		.sport = flow.key.dport,
		.dport = flow.key.sport,
		.frontend_id = frontend,
		.last_seen_ns = now,
		.flags = V6N_CT_REPLY,
	};
	__builtin_memcpy(reply.saddr, flow.key.daddr, 16);
	__builtin_memcpy(reply.daddr, flow.key.saddr, 16);
	__builtin_memset(&out, 0, sizeof(out));
	__builtin_memcpy(out.saddr, flow.key.saddr, 16);
	__builtin_memcpy(out.daddr, backend->addr, 16);
	out.sport = flow.key.sport;
	out.dport = backend->port;
	out.backend_id = backend_id;
	out.frontend_id = frontend;
	out.last_seen_ns = now;
	if (v6n_same_addr(backend->addr, flow.key.saddr)) {
		__u32 zero = 0;
		struct v6n_lb_config *cfg = bpf_map_lookup_elem(&v6n_lb_cfg, &zero);
		if (!cfg)
			return V6N_REASON_DROP_NAT_PORTS;
		__builtin_memcpy(out.saddr, cfg->masquerade_addr, 16);
		if (v6n_masquerade_port(&out, &reply, IPPROTO_SCTP) < 0)
			return V6N_REASON_DROP_NAT_PORTS;
	} else {
		struct v6n_ct_key reply_key = {};
		v6n_ct_reply_key(&reply_key, &out, IPPROTO_SCTP);
		if (bpf_map_update_elem(&v6n_ct, &reply_key, &reply, BPF_ANY) < 0)
			return V6N_REASON_DROP_NAT_PORTS;
	}
	if (bpf_map_update_elem(&v6n_ct, &flow.key, &out, BPF_ANY) < 0)
		return V6N_REASON_DROP_NAT_PORTS;
	return v6n_service_rewrite(skb, &flow, &out) < 0 ? V6N_REASON_DROP_MALFORMED : V6N_REASON_LB_TRANSLATED;
}

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

	/* A reply to a connection from outside leaves as the frontend's; SCTP
	 * to a Service goes to a backend. Packet pointers are stale after
	 * either (they may pull data). */
	int replied = v6n_nodeport_reply(skb);
	if (replied < 0)
		return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);
	if (replied == 0) {
		reason = v6n_service_sctp_from_pod(skb);
		if (reason != V6N_REASON_PASS && reason != V6N_REASON_LB_TRANSLATED && reason != V6N_REASON_LB_TRACKED)
			return v6n_exit(skb, dir, reason, TC_ACT_SHOT);
	}
	if (v6n_parse_ipv6(skb, &ip6) != V6N_REASON_PASS || !ip6)
		return v6n_exit(skb, dir, V6N_REASON_DROP_MALFORMED, TC_ACT_SHOT);

	struct v6n_endpoint_value *peer = v6n_endpoint(&ip6->daddr);
	if (peer)
		return v6n_exit_routed(skb, dir, v6n_to_endpoint(skb, ip6, peer, at_ingress));

	return v6n_exit_routed(skb, dir, v6n_route6(skb, ip6));
}

SEC("classifier")
int v6n_to_pod(struct __sk_buff *skb)
{
	struct ipv6hdr *ip6;
	enum v6n_reason reason = v6n_parse_ipv6(skb, &ip6);

	if (reason == V6N_REASON_PASS && !ip6)
		reason = V6N_REASON_DROP_NOT_IPV6;
	return v6n_exit(skb, V6N_DIRECTION_TO_POD, reason, reason == V6N_REASON_PASS ? TC_ACT_UNSPEC : TC_ACT_SHOT);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
