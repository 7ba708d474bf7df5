/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Internet checksum arithmetic on the 32-bit partial sums bpf_csum_diff()
 * returns. Sums are taken over memory as stored, so the folded results can be
 * written back into packets without byte swapping.
 */
#ifndef V6NODE_LIB_CSUM_H
#define V6NODE_LIB_CSUM_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* One's complement sum of two partial sums. */
static __always_inline __u32 v6n_csum_add(__u32 a, __u32 b)
{
	__u32 sum = a + b;

	return sum + (sum < a);
}

/* Folds a partial sum into the 16-bit checksum to store (complemented). */
static __always_inline __u16 v6n_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/*
 * RFC 1624 incremental update: the checksum that results from `old` when the
 * covered data changes by `diff` (a bpf_csum_diff() of old and new bytes).
 */
static __always_inline __u16 v6n_csum_update(__u16 old, __u32 diff)
{
	return v6n_csum_fold(v6n_csum_add((__u16)~old, diff));
}

/*
 * bpf_csum_diff() as a partial sum; its errors (sizes not a multiple of 4,
 * over 512 bytes) are ruled out by the constant sizes every caller passes.
 */
static __always_inline __u32 v6n_csum_diff(void *from, __u32 from_size, void *to, __u32 to_size)
{
	return (__u32)bpf_csum_diff(from, from_size, to, to_size, 0);
}

#endif /* V6NODE_LIB_CSUM_H */
