/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The Maglev bucket of a flow: a hash of the client's transport address that
 * is the same on every node (unlike the skb's hash, seeded per boot), into
 * the agent's tables (agent/src/services/maglev.rs). Services reached from outside
 * (nodeport.h) and the NAT46 gateway (nat46_gw.h) choose backends by it.
 */
#ifndef V6NODE_LIB_MAGLEV_H
#define V6NODE_LIB_MAGLEV_H

#include <linux/types.h>
#include <v6node/abi.h>

/* A 32-bit mix of one word into a running hash (MurmurHash3's steps). */
static __always_inline __u32 v6n_hash_word(__u32 hash, __u32 word)
{
	word *= 0xcc9e2d51;
	word = (word << 15) | (word >> 17);
	word *= 0x1b873593;
	hash ^= word;
	hash = (hash << 13) | (hash >> 19);
	return hash * 5 + 0xe6546b64;
}

static __always_inline __u32 v6n_hash_final(__u32 hash)
{
	hash ^= hash >> 16;
	hash *= 0x85ebca6b;
	hash ^= hash >> 13;
	hash *= 0xc2b2ae35;
	return hash ^ (hash >> 16);
}

static __always_inline __u32 v6n_maglev_bucket(const struct v6n_ct_key *client, int affine)
{
	const __u32 *addr = (const __u32 *)client->saddr;
	__u32 hash = client->proto;

	hash = v6n_hash_word(hash, addr[0]);
	hash = v6n_hash_word(hash, addr[1]);
	hash = v6n_hash_word(hash, addr[2]);
	hash = v6n_hash_word(hash, addr[3]);
	if (!affine)
		hash = v6n_hash_word(hash, client->sport);
	return v6n_hash_final(hash) % V6N_MAGLEV_SIZE;
}

/* The backend id in the client's bucket of `table`. */
static __always_inline __u32 v6n_maglev_pick(const struct v6n_maglev_table *table, const struct v6n_ct_key *client,
					     int affine)
{
	__u32 bucket = v6n_maglev_bucket(client, affine);

	/* The verifier cannot follow the modulo: hide it, check again. */
	asm volatile("" : "+r"(bucket));
	return bucket < V6N_MAGLEV_SIZE ? table->backend_ids[bucket] : 0;
}

#endif /* V6NODE_LIB_MAGLEV_H */
