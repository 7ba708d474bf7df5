/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef V6NODE_LIB_COUNTERS_H
#define V6NODE_LIB_COUNTERS_H

#include "maps.h"

/*
 * Counts the packet under (device, direction, reason). The first packet of a
 * slot inserts it; BPF_NOEXIST keeps a concurrent first insert on another CPU
 * from being overwritten (per-CPU values make the later add race-free).
 */
static __always_inline void v6n_count(const struct __sk_buff *skb, __u8 direction, __u8 reason)
{
	struct v6n_counter_key key = {
		.ifindex = skb->ifindex,
		.direction = direction,
		.reason = reason,
	};
	struct v6n_counter_value *value = bpf_map_lookup_elem(&v6n_counters, &key);

	if (value) {
		value->packets++;
		value->bytes += skb->len;
		return;
	}
	struct v6n_counter_value first = { .packets = 1, .bytes = skb->len };
	if (bpf_map_update_elem(&v6n_counters, &key, &first, BPF_NOEXIST) == 0)
		return;
	/* Lost the insert race on this CPU's slot: the slot now exists. */
	value = bpf_map_lookup_elem(&v6n_counters, &key);
	if (value) {
		value->packets++;
		value->bytes += skb->len;
	}
}

#endif /* V6NODE_LIB_COUNTERS_H */
