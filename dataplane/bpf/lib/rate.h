/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Token buckets, for what the datapath sends of its own accord (ICMP
 * errors, flow events): updated without atomics, so a race on one bucket
 * lets an extra one through, no more.
 */
#ifndef V6NODE_LIB_RATE_H
#define V6NODE_LIB_RATE_H

#include <linux/bpf.h>

struct v6n_token_bucket {
	__u64 refilled_ns;
	__u64 tokens;
	__u64 empty_until_ns; /* out of tokens, and none earned before this */
};

/* Whether `bucket` is known to have no token at `now`, found without the
 * refill's two 64-bit divisions: a flood asks it of every packet, and the
 * answer is the same until the next token is earned. */
static __always_inline int v6n_bucket_empty(const struct v6n_token_bucket *bucket, __u64 now)
{
	return !bucket->tokens && now < bucket->empty_until_ns;
}

/* Whether `bucket`, refilled at `per_second` up to `burst`, has a token at
 * `now`; takes it if so. */
static __always_inline int v6n_take_token(struct v6n_token_bucket *bucket, __u64 per_second, __u64 burst, __u64 now)
{
	if (!per_second || v6n_bucket_empty(bucket, now))
		return 0;
	const __u64 interval = 1000000000ULL / per_second;
	__u64 earned = interval ? (now - bucket->refilled_ns) / interval : burst;

	if (earned) {
		__u64 tokens = bucket->tokens + earned;

		bucket->tokens = tokens > burst ? burst : tokens;
		bucket->refilled_ns = now;
	}
	if (!bucket->tokens) {
		bucket->empty_until_ns = bucket->refilled_ns + interval;
		return 0;
	}
	bucket->tokens--;
	return 1;
}

#endif /* V6NODE_LIB_RATE_H */
