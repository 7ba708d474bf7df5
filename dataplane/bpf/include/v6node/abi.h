/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The contract between v6node's BPF programs and the agent that loads them:
 * map names, keys, values and drop reasons. This header is the only
 * definition; the Rust side (crate v6node-abi) is generated from it by
 * bindgen, so a layout change here cannot drift from the loader.
 */
#ifndef V6NODE_ABI_H
#define V6NODE_ABI_H

#include <linux/types.h>

/* Why a packet was passed or dropped. Kept dense: it indexes counters. */
enum v6n_reason {
	V6N_REASON_PASS = 0,
	V6N_REASON_DROP_MALFORMED = 1,     /* shorter than its headers claim */
	V6N_REASON_DROP_DENIED_SOURCE = 2, /* source in filter.deny_sources */
	V6N_REASON_COUNT
};

enum v6n_direction {
	V6N_DIRECTION_INGRESS = 0,
	V6N_DIRECTION_EGRESS = 1,
};

/* v6n_counters: per-CPU hash, one slot per device, direction and reason. */
struct v6n_counter_key {
	__u32 ifindex;
	__u8 direction; /* enum v6n_direction */
	__u8 reason;    /* enum v6n_reason */
	__u16 pad;      /* zero: hash keys compare every byte */
};

struct v6n_counter_value {
	__u64 packets;
	__u64 bytes;
};

/* v6n_deny_src: LPM trie of IPv6 source prefixes dropped at ingress. */
struct v6n_lpm6_key {
	__u32 prefixlen; /* LPM tries want the length first, in bits */
	__u8 addr[16];   /* network byte order */
};

struct v6n_deny_value {
	__u32 rule; /* index of the prefix in filter.deny_sources, for status */
};

#define V6N_COUNTERS_MAX 4096
#define V6N_DENY_SRC_MAX 262144

#endif /* V6NODE_ABI_H */
