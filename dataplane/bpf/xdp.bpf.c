// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the node's uplinks in native XDP: what arrives is
 * decided here, in the driver, before the kernel allocates a packet for it,
 * where that needs no socket:
 *
 * - a denied source's frames (v6n_deny_src) are dropped, and a new
 *   connection straight to a pod here that the pod's ingress policy
 *   denies (lib/policy.h, asked as tc would ask it);
 * - Services reached from outside whose backend is on another node, and a
 *   masquerading node's replies to their clients, are translated and sent
 *   out of an uplink (lib/nodeport_xdp.h);
 * - on the devices in nat64.devices, the translator's common packets
 *   (stateless NAT46/64, stateful NAT64, the NAT46 gateway) are translated
 *   and sent out of an uplink (lib/xlat_xdp.h): the one they came in by,
 *   or another that runs this program (lib/xdp_send.h).
 *
 * What XDP decides is counted under V6N_DIRECTION_XDP, with the flow event
 * every verdict has. Everything else passes, unrecorded, to tc's
 * v6n_from_dev and the stack, which record it.
 *
 * Frames may come in several buffers (xdp.frags: the device keeps its MTU
 * and, on veth, its peer's GSO); only the first is read. A frame whose
 * headers do not fit in it passes: tc can pull them, XDP cannot.
 */
#define V6N_CTX_XDP
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/maps.h"
#include "lib/nodeport_xdp.h"
#include "lib/policy.h"
#include "lib/verdict.h"
#include "lib/xlat_xdp.h"

/* NodePort for an IPv6 frame. Out of line, as the translator is: their
 * frames are never on the stack together. */
static __noinline v6n_outcome v6n_xdp_nodeport(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct v6n_flow flow = {};
	int action = XDP_PASS;

	if (v6n_flow_parse(data, data_end, &flow) < 0)
		return V6N_XDP_TO_TC;
	enum v6n_reason reason = v6n_nodeport_xdp(ctx, &flow, &action);
	if (reason == V6N_REASON_PASS)
		return V6N_XDP_TO_TC;
	return V6N_OUTCOME(action, reason);
}

/*
 * A pod's ingress policy, early: a frame from outside straight to a pod
 * here (TCP, UDP or SCTP, no extension header) that policy would drop at tc
 * (v6n_to_endpoint) is dropped here, counted as tc counts it. Nothing is
 * tracked or changed: whatever policy admits, or has yet to judge (a
 * connection it knows, ICMPv6, a hop limit out), passes to tc, which
 * judges it again.
 */
static __noinline v6n_outcome v6n_xdp_policy(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + V6N_L3_OFFSET;
	__u8 *l4 = (void *)(ip6 + 1);

	if ((void *)(l4 + 14) > data_end || ip6->hop_limit <= 1)
		return V6N_XDP_TO_TC;
	__u8 proto = ip6->nexthdr;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP)
		return V6N_XDP_TO_TC;
	if (v6n_link_scoped(&ip6->saddr) || v6n_link_scoped(&ip6->daddr) || !v6n_endpoint(&ip6->daddr))
		return V6N_XDP_TO_TC;
	struct v6n_policy_flow *flow = v6n_policy_scratch_flow(V6N_POLICY_FLOW_CHECKED);
	if (!flow)
		return V6N_XDP_TO_TC;
	__builtin_memcpy(flow->key.saddr, &ip6->saddr, 16);
	__builtin_memcpy(flow->key.daddr, &ip6->daddr, 16);
	__builtin_memcpy(&flow->key.sport, l4, 2);
	__builtin_memcpy(&flow->key.dport, l4 + 2, 2);
	flow->key.protocol = proto;
	flow->key.direction = V6N_POLICY_INGRESS;
	if (proto == IPPROTO_TCP)
		flow->tcp_flags = l4[13];
	__u32 id = v6n_policy_denies(flow, bpf_ktime_get_ns());
	if (!id)
		return V6N_XDP_TO_TC;
	v6n_count(&v6n_policy_denied, &id, v6n_ctx_len(ctx));
	v6n_event_note(V6N_POLICY_INGRESS, id, V6N_NOTE_DENIED);
	return V6N_OUTCOME(XDP_DROP, V6N_REASON_DROP_POLICY_INGRESS);
}

SEC("xdp.frags")
int v6n_xdp_uplink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	v6n_outcome outcome;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		outcome = v6n_xlat_xdp(ctx, eth->h_proto);
		goto out;
	}
	if ((void *)(ip6 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6) || ip6->version != 6)
		return XDP_PASS;

	struct v6n_lpm6_key key = { .prefixlen = 128 };

	__builtin_memcpy(key.addr, &ip6->saddr, sizeof(key.addr));
	if (bpf_map_lookup_elem(&v6n_deny_src, &key))
		return v6n_exit(ctx, V6N_DIRECTION_XDP, V6N_REASON_DROP_DENIED_SOURCE, XDP_DROP);

	outcome = v6n_xdp_nodeport(ctx);
	/* In tc's order: v6n_from_dev's Services, then its pods, then the
	 * translator. */
	if (V6N_OUTCOME_REASON(outcome) == V6N_REASON_PASS)
		outcome = v6n_xdp_policy(ctx);
	if (V6N_OUTCOME_REASON(outcome) == V6N_REASON_PASS)
		outcome = v6n_xlat_xdp(ctx, bpf_htons(ETH_P_IPV6));
out:
	if (V6N_OUTCOME_REASON(outcome) == V6N_REASON_PASS)
		return XDP_PASS;
	return v6n_exit(ctx, V6N_DIRECTION_XDP, V6N_OUTCOME_REASON(outcome), V6N_OUTCOME_ACTION(outcome));
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
