// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the stateless NAT46/NAT64 translator (SIIT, RFC 7915),
 * attached at tc ingress of the devices in nat64.devices. IPv6 packets to
 * mapped destinations become IPv4, and IPv4 packets to EAM destinations or
 * into nat64.translatable ranges (IPv4-embedded under the prefix) become
 * IPv6; both are then sent to the FIB's next hop. Everything else passes
 * untouched. The translation itself keeps no per-flow state; in front of it
 * sit stateful NAT64 (lib/nat64_state.h: IPv6 clients borrowing a pool's
 * transport addresses) and the NAT46 gateway (lib/nat46_gw.h: IPv4 clients
 * to a VIP's IPv6 backends), which rewrite ports and hand the translator
 * the addresses to use. The directions are lib/xlat_6to4.h and
 * lib/xlat_4to6.h; what both share, lib/xlat.h and lib/xlat_icmp.h.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/verdict.h"
#include "lib/xlat_4to6.h"
#include "lib/xlat_6to4.h"

/* --- entry ------------------------------------------------------------------------ */

SEC("classifier")
int v6n_nat64(struct __sk_buff *skb)
{
	v6n_outcome outcome;
	__u8 direction;

	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		direction = V6N_DIRECTION_XLAT_6TO4;
		outcome = v6n_6to4(skb);
		switch (V6N_OUTCOME_ACTION(outcome)) {
		case V6N_ACT_XLAT_ICMP_ERROR:
			outcome = v6n_6to4_icmp_error(skb);
			break;
		case V6N_ACT_TIME_EXCEEDED:
			outcome = V6N_OUTCOME(v6n_icmp6_error(skb, ICMPV6_TIME_EXCEED, ICMPV6_EXC_HOPLIMIT, 0),
					      V6N_OUTCOME_REASON(outcome));
			break;
		case V6N_ACT_TOO_BIG:
			outcome = V6N_OUTCOME(v6n_icmp6_error(skb, ICMPV6_PKT_TOOBIG, 0, V6N_OUTCOME_MTU(outcome)),
					      V6N_OUTCOME_REASON(outcome));
			break;
		}
	} else if (skb->protocol == bpf_htons(ETH_P_IP)) {
		direction = V6N_DIRECTION_XLAT_4TO6;
		outcome = v6n_4to6(skb);
		switch (V6N_OUTCOME_ACTION(outcome)) {
		case V6N_ACT_XLAT_ICMP_ERROR:
			outcome = v6n_4to6_icmp_error(skb);
			break;
		case V6N_ACT_TIME_EXCEEDED:
			outcome = V6N_OUTCOME(v6n_icmp4_error(skb, ICMP_TIME_EXCEEDED, ICMP_EXC_TTL, 0),
					      V6N_OUTCOME_REASON(outcome));
			break;
		case V6N_ACT_TOO_BIG:
			outcome = V6N_OUTCOME(v6n_icmp4_error(skb, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED,
							      V6N_OUTCOME_MTU(outcome)),
					      V6N_OUTCOME_REASON(outcome));
			break;
		}
	} else {
		return TC_ACT_UNSPEC;
	}
	/* Traffic outside the mapping is the host program's to count. */
	if (V6N_OUTCOME_ACTION(outcome) == TC_ACT_UNSPEC)
		return TC_ACT_UNSPEC;
	return v6n_exit(skb, direction, V6N_OUTCOME_REASON(outcome), V6N_OUTCOME_ACTION(outcome));
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
