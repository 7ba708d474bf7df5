/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Forwarding in BPF: the kernel's FIB decides the next hop, the program
 * hands the packet to it. Shared by the translator and BPF host routing.
 */
#ifndef V6NODE_LIB_FIB_H
#define V6NODE_LIB_FIB_H

#include <linux/bpf.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

/* <sys/socket.h> does not build for -target bpf. */
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* The MTU every IPv6 link has (RFC 8200 5). */
#define V6N_IPV6_MIN_MTU 1280

/*
 * FIB lookup for a translated packet. The kernel checks forwarding on the
 * device the lookup starts from, in the family being looked up: the
 * translated family, which the ingress device may not even run (an IPv4-only
 * uplink has no IPv6 forwarding switch; an MTU under 1280 removes IPv6 from
 * a device altogether). Then the lookup is made again from the loopback
 * device, whose switch follows net.ipv{4,6}.conf.all.forwarding.
 */
static __always_inline int v6n_fib_lookup(struct __sk_buff *skb, struct bpf_fib_lookup *fib)
{
	int rc = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);

	if (rc == BPF_FIB_LKUP_RET_FWD_DISABLED) {
		fib->ifindex = 1; /* LOOPBACK_IFINDEX */
		rc = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	}
	return rc;
}

/*
 * The MTU of the route to `daddr` (its `mtu` metric, else its device's: what
 * RFC 7915 calls the MTU of a next hop), for the ICMP errors a translator
 * sizes by both of its links. A lookup for the largest packet makes the
 * kernel report the MTU it is over. 0xffff if even that fits, 0 without a
 * route. `fib` is scratch: the caller sets it up again for its own lookup.
 */
static __always_inline __u32 v6n_route_mtu(struct __sk_buff *skb, struct bpf_fib_lookup *fib, __u8 family,
					   const void *daddr)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = family;
	fib->ifindex = skb->ingress_ifindex;
	fib->tot_len = 0xffff;
	if (family == AF_INET)
		__builtin_memcpy(&fib->ipv4_dst, daddr, 4);
	else
		__builtin_memcpy(fib->ipv6_dst, daddr, 16);
	int rc = v6n_fib_lookup(skb, fib);

	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return fib->mtu_result;
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ? 0xffff : 0;
}

/*
 * Hands a packet to the next hop the FIB lookup found: straight out of the
 * egress device when the neighbour is known, through the kernel's neighbour
 * code when it is not (bpf_redirect_neigh resolves it and queues the packet).
 */
static __always_inline int v6n_redirect(struct __sk_buff *skb, struct bpf_fib_lookup *fib, int rc)
{
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		__u8 macs[12];

		__builtin_memcpy(macs, fib->dmac, 6);
		__builtin_memcpy(macs + 6, fib->smac, 6);
		if (bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0) < 0)
			return TC_ACT_SHOT;
		return bpf_redirect(fib->ifindex, 0);
	}
	struct bpf_redir_neigh nh = { .nh_family = fib->family };

	if (fib->family == AF_INET)
		nh.ipv4_nh = fib->ipv4_dst;
	else
		__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
	return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
}

/*
 * Routes an IPv6 packet as a router would, past the host's stack: hop limit
 * decremented, out to the next hop the FIB names. Returns TC_ACT_UNSPEC, the
 * packet untouched, for whatever the stack must answer (its own addresses,
 * no route, too big, hop limit out).
 */
static __always_inline int v6n_route6(struct __sk_buff *skb, struct ipv6hdr *ip6)
{
	/* tot_len 0: the kernel checks the MTU against the skb itself, which
	 * knows about GSO; a BIG TCP packet's own length means nothing here. */
	struct bpf_fib_lookup fib = {
		.family = AF_INET6,
		.ifindex = skb->ifindex,
		.l4_protocol = ip6->nexthdr,
	};
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	int rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if ((rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) || ip6->hop_limit <= 1)
		return TC_ACT_UNSPEC;
	ip6->hop_limit--;
	return v6n_redirect(skb, &fib, rc);
}

#endif /* V6NODE_LIB_FIB_H */
