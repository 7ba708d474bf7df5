/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
#ifndef V6NODE_LIB_COUNTERS_H
#define V6NODE_LIB_COUNTERS_H

#include "maps.h"

/*
 * Counts one packet (or socket call) of `bytes` under (device, direction,
 * reason). The first of a slot inserts it; BPF_NOEXIST keeps a concurrent
 * first insert on another CPU from being overwritten (per-CPU values make
 * the later add race-free).
 */
static __always_inline void v6n_count_at(__u32 ifindex, __u8 direction, __u8 reason, __u64 bytes)
{
	struct v6n_counter_key key = {
		.ifindex = ifindex,
		.direction = direction,
		.reason = reason,
	};
	struct v6n_counter_value *value = bpf_map_lookup_elem(&v6n_counters, &key);

	if (value) {
		value->packets++;
		value->bytes += bytes;
		return;
	}
	struct v6n_counter_value first = { .packets = 1, .bytes = bytes };
	if (bpf_map_update_elem(&v6n_counters, &key, &first, BPF_NOEXIST) == 0)
		return;
	/* Lost the insert race on this CPU's slot: the slot now exists. */
	value = bpf_map_lookup_elem(&v6n_counters, &key);
	if (value) {
		value->packets++;
		value->bytes += bytes;
	}
}

static __always_inline void v6n_count(const struct __sk_buff *skb, __u8 direction, __u8 reason)
{
	v6n_count_at(skb->ifindex, direction, reason, skb->len);
}

#endif /* V6NODE_LIB_COUNTERS_H */
