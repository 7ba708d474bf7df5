// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the kernel's own drops: the skb:kfree_skb tracepoint
 * (attached as tp_btf, with the drop reason the kernel gives). A packet to
 * or from a pod on this node that the kernel freed with a reason the agent
 * marked in v6n_kernel_drop_reasons (from the kernel's BTF: every reason
 * but the datapath's own, a tc or netkit drop, which its exit reports, and
 * a free without a reason) becomes a flow event of V6N_REASON_DROP_KERNEL,
 * rate-limited like every other reason's.
 *
 * The kernel's sk_buff is read through CO-RE: the two fields of it named
 * here are relocated to the running kernel's layout when the agent loads
 * the object with the kernel's BTF.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* A tracing program: events.h reads the clock tracing may read. */
#define V6N_CTX_TRACING
#include "lib/events.h"
#include "lib/maps.h"

struct net_device {
	int ifindex;
} __attribute__((preserve_access_index));

struct sk_buff {
	unsigned int len;
	unsigned char *head;
	__u16 transport_header;
	__u16 network_header;
	__be16 protocol;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, V6N_KERNEL_DROP_REASONS_MAX);
	__type(key, __u32);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_kernel_drop_reasons SEC(".maps");

/* A transport header the kernel has not set is all ones. */
#define V6N_NO_HEADER 0xffff

static __always_inline int v6n_is_local_pod(const __u8 addr[16])
{
	struct v6n_endpoint_key key;

	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	return bpf_map_lookup_elem(&v6n_endpoints, &key) != NULL;
}

SEC("tp_btf/kfree_skb")
int v6n_kernel_drop(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	__u32 kernel_reason = (__u32)ctx[2], zero = 0;
	__u8 *wanted = bpf_map_lookup_elem(&v6n_kernel_drop_reasons, &kernel_reason);

	if (!wanted || !*wanted || BPF_CORE_READ(skb, protocol) != bpf_htons(ETH_P_IPV6))
		return 0;
	struct v6n_event_config *config = bpf_map_lookup_elem(&v6n_event_config, &zero);
	if (!config || !config->enabled)
		return 0;
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 network = BPF_CORE_READ(skb, network_header), transport = BPF_CORE_READ(skb, transport_header);
	struct ipv6hdr ip6;
	if (network == V6N_NO_HEADER || bpf_probe_read_kernel(&ip6, sizeof(ip6), head + network))
		return 0;
	__u8 direction;
	if (v6n_is_local_pod(ip6.daddr.in6_u.u6_addr8))
		direction = V6N_DIRECTION_TO_POD;
	else if (v6n_is_local_pod(ip6.saddr.in6_u.u6_addr8))
		direction = V6N_DIRECTION_FROM_POD;
	else
		return 0;

	struct v6n_flow_event *event = v6n_event_reserve(config, V6N_REASON_DROP_KERNEL);
	if (!event)
		return 0;
	event->kind = V6N_EVENT_DROP;
	event->direction = direction;
	event->kernel_reason = kernel_reason;
	event->len = BPF_CORE_READ(skb, len);
	event->protocol = ip6.nexthdr;
	__builtin_memcpy(event->saddr, ip6.saddr.in6_u.u6_addr8, 16);
	__builtin_memcpy(event->daddr, ip6.daddr.in6_u.u6_addr8, 16);
	/* The ports (and TCP's flags), where the kernel got as far as the
	 * transport; extension headers are named, not skipped. */
	if (transport != V6N_NO_HEADER &&
	    (ip6.nexthdr == IPPROTO_TCP || ip6.nexthdr == IPPROTO_UDP || ip6.nexthdr == IPPROTO_SCTP) &&
	    bpf_probe_read_kernel(&event->sport, 4, head + transport) == 0 && ip6.nexthdr == IPPROTO_TCP)
		bpf_probe_read_kernel(&event->tcp_flags, 1, head + transport + 13);
	v6n_event_submit(event);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
