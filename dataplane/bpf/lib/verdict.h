/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one exit of every program: where a packet's (or a socket call's) fate
 * is decided for the record. Each program returns through v6n_exit (tc, XDP) or
 * v6n_exit_socket (cgroup hooks), with the reason for its action; both
 * record through v6n_record, so whatever is to see every verdict is added
 * there once: the counters, and a flow event for every drop (events.h). A program that leaves a packet to the next one in the tcx chain
 * without deciding anything about it (not its kind of traffic) returns
 * TCX_NEXT without a record: the program that decides records it.
 */
#ifndef V6NODE_LIB_VERDICT_H
#define V6NODE_LIB_VERDICT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "ctx.h"
#include "events.h"
#include "maps.h"

/*
 * Adds one packet of `bytes` to the per-CPU {packets, bytes} counter under
 * `key` in `map`. The first of a slot inserts it; BPF_NOEXIST keeps a
 * concurrent first insert on another CPU from being overwritten (per-CPU
 * values make the later add race-free).
 */
static __always_inline void v6n_count(void *map, const void *key, __u64 bytes)
{
	struct v6n_counter_value *value = bpf_map_lookup_elem(map, key);

	if (value) {
		value->packets++;
		value->bytes += bytes;
		return;
	}
	struct v6n_counter_value first = { .packets = 1, .bytes = bytes };
	if (bpf_map_update_elem(map, key, &first, BPF_NOEXIST) == 0)
		return;
	/* Lost the insert race on this CPU's slot: the slot now exists. */
	value = bpf_map_lookup_elem(map, key);
	if (value) {
		value->packets++;
		value->bytes += bytes;
	}
}

/* Counts one packet (or socket call) of `bytes` under (device, direction, reason). */
static __always_inline void v6n_record(__u32 ifindex, __u8 direction, __u8 reason, __u64 bytes)
{
	struct v6n_counter_key key = {
		.ifindex = ifindex,
		.direction = direction,
		.reason = reason,
	};

	v6n_count(&v6n_counters, &key, bytes);
}

/* A packet program's exit (tc, or XDP: ctx.h): records `reason` for the
 * packet, returns `action`. */
static __always_inline int v6n_exit(struct v6n_ctx *ctx, __u8 direction, enum v6n_reason reason, int action)
{
	v6n_record(v6n_ctx_ifindex(ctx), direction, reason, v6n_ctx_len(ctx));
	v6n_event_at_exit(ctx, direction, reason);
	return action;
}

/* A cgroup socket hook's exit: records `reason` for the call (no device, no
 * bytes), returns `verdict`. */
static __always_inline int v6n_exit_socket(enum v6n_reason reason, int verdict)
{
	v6n_record(0, V6N_DIRECTION_SOCKET, reason, 0);
	return verdict;
}

#endif /* V6NODE_LIB_VERDICT_H */
