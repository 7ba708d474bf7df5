/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Services: a frontend (address, port, protocol) to one of its backends.
 * This header owns the service maps (layout in abi.h) and the backend
 * choice; entry objects decide where the translation happens.
 */
#ifndef V6NODE_LIB_LB_H
#define V6NODE_LIB_LB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_SERVICE_SLOTS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_service_key);
	__type(value, struct v6n_service_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_BACKENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct v6n_l4_addr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_FRONTENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct v6n_l4_addr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_frontends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, V6N_AFFINITY_MAX);
	__type(key, struct v6n_affinity_key);
	__type(value, struct v6n_affinity_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, V6N_FRONTENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct v6n_service_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_service_stats SEC(".maps");

/* The frontend at (addr, port, proto), or NULL: not a Service. */
static __always_inline struct v6n_service_value *v6n_lb_frontend(struct v6n_service_key *key)
{
	key->slot = 0;
	return bpf_map_lookup_elem(&v6n_services, key);
}

static __always_inline void v6n_lb_account(__u32 frontend, int translated)
{
	struct v6n_service_stats *stats = bpf_map_lookup_elem(&v6n_service_stats, &frontend);

	if (!stats) {
		struct v6n_service_stats first = {};
		bpf_map_update_elem(&v6n_service_stats, &frontend, &first, BPF_NOEXIST);
		stats = bpf_map_lookup_elem(&v6n_service_stats, &frontend);
		if (!stats)
			return;
	}
	if (translated)
		stats->translated++;
	else
		stats->refused++;
}

/* The backend in `slot` of the frontend `key` names, or NULL. */
static __always_inline struct v6n_l4_addr *v6n_lb_slot(struct v6n_service_key *key, __u16 slot, __u32 *backend_id)
{
	key->slot = slot;
	struct v6n_service_value *entry = bpf_map_lookup_elem(&v6n_services, key);
	if (!entry)
		return NULL;
	*backend_id = entry->backend_id;
	return bpf_map_lookup_elem(&v6n_backends, backend_id);
}

/*
 * Chooses a backend for a new connection of `client` to the frontend `svc`
 * (found under `key`): the one it had, with ClientIP affinity still fresh
 * and that backend still in its slot, else one at random; its id goes in
 * *chosen_id. NULL when the frontend has no backend (the caller refuses the
 * connection).
 */
static __always_inline struct v6n_l4_addr *v6n_lb_select(struct v6n_service_key *key,
							  const struct v6n_service_value *svc, __u64 client,
							  __u32 *chosen_id)
{
	__u16 count = svc->count;
	__u32 backend_id = 0;
	struct v6n_l4_addr *backend;

	if (count == 0)
		return NULL;
	struct v6n_affinity_key sticky = { .client = client, .frontend = svc->id };
	int affine = svc->flags & V6N_SERVICE_AFFINITY;
	__u64 now = bpf_ktime_get_ns();
	if (affine) {
		struct v6n_affinity_value *was = bpf_map_lookup_elem(&v6n_affinity, &sticky);
		if (was && now - was->last_used_ns <= (__u64)svc->affinity_seconds * 1000000000ULL &&
		    was->slot >= 1 && was->slot <= count) {
			backend = v6n_lb_slot(key, was->slot, &backend_id);
			if (backend && backend_id == was->backend_id) {
				was->last_used_ns = now;
				*chosen_id = backend_id;
				return backend;
			}
		}
	}
	__u16 slot = bpf_get_prandom_u32() % count + 1;
	backend = v6n_lb_slot(key, slot, &backend_id);
	if (backend && affine) {
		struct v6n_affinity_value chosen = { .last_used_ns = now, .backend_id = backend_id, .slot = slot };
		bpf_map_update_elem(&v6n_affinity, &sticky, &chosen, BPF_ANY);
	}
	*chosen_id = backend_id;
	return backend;
}

#endif /* V6NODE_LIB_LB_H */
