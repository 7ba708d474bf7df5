/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The FIB's answers in XDP, kept for a moment. The FIB lookup was a
 * quarter of what a NodePort frame cost XDP, and an eighth of a
 * translated one (perf, tests/bench/xdp and xdp-nat64), and every frame
 * of a flow asks it the same question. Each CPU keeps the last answer to
 * each question in a slot of its own (a direct-mapped table: a question
 * that lands on another's slot takes it over) and asks the FIB again
 * after V6N_XDP_FIB_TTL_NS: a changed route or neighbour reaches the
 * flows XDP forwards within that time, the stack's at once.
 *
 * A successful answer is kept with the longest frame that fitted: a
 * longer one asks the FIB, which checks the MTU. "Forwarding off" is kept
 * too: it is the device's switch, asked first of every frame that comes in
 * by a device not running the family it is translated to (v6n_fib_lookup
 * then asks from the loopback device). Whatever else the FIB does not
 * answer with a next hop (no neighbour, no route) it is asked every time,
 * and its answer goes to tc as before.
 */
#ifndef V6NODE_LIB_XDP_FIB_H
#define V6NODE_LIB_XDP_FIB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

/* A power of two. Per CPU: 1024 slots of 80 bytes. */
#define V6N_XDP_FIB_SLOTS 1024
#define V6N_XDP_FIB_SLOT_BITS 10
#define V6N_XDP_FIB_TTL_NS (100ULL * 1000 * 1000)

/*
 * What bpf_fib_lookup is asked, as far as the answer depends on it, in
 * five words: the device, family and protocol, then the source and
 * destination addresses as the request holds them (IPv4's in the first
 * four bytes; every caller zeroes the request first).
 */
#define V6N_XDP_FIB_WORDS 5

struct v6n_xdp_fib_slot {
	__u64 question[V6N_XDP_FIB_WORDS];
	__u64 asked_at; /* bpf_ktime_get_coarse_ns; 0: no answer */
	__u32 ifindex;
	__u16 fits; /* the longest tot_len the FIB passed */
	__u8 smac[ETH_ALEN];
	__u8 dmac[ETH_ALEN];
	__u8 rc; /* BPF_FIB_LKUP_RET_SUCCESS or _FWD_DISABLED */
	__u8 pad[5];
};

/* Not pinned: a program loaded anew starts with an empty table. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V6N_XDP_FIB_SLOTS);
	__type(key, __u32);
	__type(value, struct v6n_xdp_fib_slot);
} v6n_xdp_fib_answers SEC(".maps");

/* Word `i` of the question `fib` asks. */
static __always_inline __u64 v6n_xdp_fib_word(const struct bpf_fib_lookup *fib, int i)
{
	if (i == 0)
		return fib->ifindex | (__u64)fib->family << 32 | (__u64)fib->l4_protocol << 40;
	if (i <= 2)
		return ((const __u64 *)fib->ipv6_src)[i - 1];
	return ((const __u64 *)fib->ipv6_dst)[i - 3];
}

static __always_inline __u32 v6n_xdp_fib_slot_of(const struct bpf_fib_lookup *fib)
{
	__u64 h = 0;

#pragma unroll
	for (int i = 0; i < V6N_XDP_FIB_WORDS; i++)
		h = (h ^ v6n_xdp_fib_word(fib, i)) * 0x9e3779b97f4a7c15ULL;
	return h >> (64 - V6N_XDP_FIB_SLOT_BITS);
}

/* Whether `slot` holds the question `fib` asks. */
static __always_inline int v6n_xdp_fib_asks(const struct v6n_xdp_fib_slot *slot, const struct bpf_fib_lookup *fib)
{
	__u64 differ = 0;

#pragma unroll
	for (int i = 0; i < V6N_XDP_FIB_WORDS; i++)
		differ |= slot->question[i] ^ v6n_xdp_fib_word(fib, i);
	return !differ;
}

static __always_inline int v6n_xdp_fib_same_next_hop(const struct v6n_xdp_fib_slot *slot,
						     const struct bpf_fib_lookup *fib)
{
	__u8 differ = slot->ifindex != fib->ifindex;

#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		differ |= (slot->smac[i] ^ fib->smac[i]) | (slot->dmac[i] ^ fib->dmac[i]);
	return !differ;
}

/*
 * bpf_fib_lookup(ctx, fib, sizeof(*fib), 0) for XDP, answered from this
 * CPU's table when it can be: then only the next hop's device and MACs
 * are filled in, the outputs XDP's callers read. The question is written
 * to its slot before the FIB is asked (the FIB's answer overwrites the
 * question in `fib`), and stays unanswered (asked_at 0) if the FIB has
 * neither a next hop nor "forwarding off" for it. Out of line: inlined,
 * its registers spilled a hundred bytes onto stacks the verifier caps at
 * 512 for a chain of calls.
 */
static __noinline int v6n_xdp_fib_lookup(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	__u32 index = v6n_xdp_fib_slot_of(fib);
	struct v6n_xdp_fib_slot *slot = bpf_map_lookup_elem(&v6n_xdp_fib_answers, &index);
	__u16 len = fib->tot_len;

	if (!slot)
		return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	__u64 now = bpf_ktime_get_coarse_ns();
	int fresh = slot->asked_at && now - slot->asked_at < V6N_XDP_FIB_TTL_NS && v6n_xdp_fib_asks(slot, fib);

	if (fresh && slot->rc == BPF_FIB_LKUP_RET_FWD_DISABLED)
		return BPF_FIB_LKUP_RET_FWD_DISABLED;
	if (fresh && len <= slot->fits) {
		fib->ifindex = slot->ifindex;
		__builtin_memcpy(fib->smac, slot->smac, ETH_ALEN);
		__builtin_memcpy(fib->dmac, slot->dmac, ETH_ALEN);
		return BPF_FIB_LKUP_RET_SUCCESS;
	}
	if (!fresh) {
		slot->asked_at = 0;
#pragma unroll
		for (int i = 0; i < V6N_XDP_FIB_WORDS; i++)
			slot->question[i] = v6n_xdp_fib_word(fib, i);
	}
	int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FWD_DISABLED) {
		/* The FIB wrote nothing back: the question is still the slot's. */
		slot->asked_at = now;
		slot->rc = rc;
		return rc;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	/* The same answer to a longer frame: it fits the route too. */
	if (fresh && v6n_xdp_fib_same_next_hop(slot, fib)) {
		slot->fits = len;
		return rc;
	}
	slot->asked_at = now;
	slot->rc = rc;
	slot->fits = len;
	slot->ifindex = fib->ifindex;
	__builtin_memcpy(slot->smac, fib->smac, ETH_ALEN);
	__builtin_memcpy(slot->dmac, fib->dmac, ETH_ALEN);
	return rc;
}

#endif /* V6NODE_LIB_XDP_FIB_H */
