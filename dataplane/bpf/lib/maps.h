/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Map definitions shared by every entry object. Pinned by name so that each
 * object, and each restart of the agent, opens the same kernel maps under the
 * agent's pin directory instead of creating fresh, empty ones.
 */
#ifndef V6NODE_LIB_MAPS_H
#define V6NODE_LIB_MAPS_H

#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#ifndef LIBBPF_PIN_BY_NAME
#define LIBBPF_PIN_BY_NAME 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, V6N_COUNTERS_MAX);
	__type(key, struct v6n_counter_key);
	__type(value, struct v6n_counter_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_DENY_SRC_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* LPM tries refuse preallocation */
	__type(key, struct v6n_lpm6_key);
	__type(value, struct v6n_deny_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_deny_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_ENDPOINTS_MAX);
	__type(key, struct v6n_endpoint_key);
	__type(value, struct v6n_endpoint_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_endpoints SEC(".maps");

/* The pod on this node with address `addr`, or NULL. */
static __always_inline struct v6n_endpoint_value *v6n_endpoint(const struct in6_addr *addr)
{
	struct v6n_endpoint_key key;

	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	return bpf_map_lookup_elem(&v6n_endpoints, &key);
}

/* Rate-limited pods by their host-side ifindex (lib/bandwidth.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_BANDWIDTH_MAX);
	__type(key, __u32);
	__type(value, struct v6n_bandwidth_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_bandwidth SEC(".maps");

/* Written by the socket hooks (sock.bpf.c) for each socket sent to a
 * backend; read by them for replies, and by the exit's flow events, which
 * name a pod's connection to a Service by it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, V6N_SOCK_REVNAT_MAX);
	__type(key, struct v6n_sock_revnat_key);
	__type(value, struct v6n_sock_revnat_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_sock_revnat SEC(".maps");

#endif /* V6NODE_LIB_MAPS_H */
