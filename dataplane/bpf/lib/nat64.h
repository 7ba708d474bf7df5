/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Address mapping for the stateless translator: RFC 7757 explicit address
 * mappings first, then the RFC 6052 prefix. Tables are written by the agent
 * from the [nat64] config section.
 */
#ifndef V6NODE_LIB_NAT64_H
#define V6NODE_LIB_NAT64_H

#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <v6node/abi.h>

#include "maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6n_nat64_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_nat64_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_EAM_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_lpm6_key);
	__type(value, struct v6n_eam_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_eam6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_EAM_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_lpm4_key);
	__type(value, struct v6n_eam_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_eam4 SEC(".maps");

/* IPv4 destinations translated into the RFC 6052 prefix (nat64.translatable):
 * IPv6 services with IPv4-embedded addresses, reached from IPv4 by the
 * stateless translator alone (stateless NAT46). The value is unused. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_XLAT4_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_lpm4_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_xlat4 SEC(".maps");

/* The devices in nat64.devices, by ifindex: the uplinks' XDP program
 * translates on these only, where tc's v6n_nat64 runs too. The value is
 * unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_XLAT_DEVICES_MAX);
	__type(key, __u32);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_xlat_devices SEC(".maps");

static __always_inline const struct v6n_nat64_config *v6n_nat64_config(void)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(&v6n_nat64_cfg, &key);
}

/* The first n bytes of a and b are equal (n is a constant: unrolled). */
static __always_inline int v6n_bytes_eq(const __u8 *a, const __u8 *b, int n)
{
	int diff = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

/* Low `bits` bits set; bits is 0..32. */
static __always_inline __u32 v6n_low_mask(__u32 bits)
{
	return bits >= 32 ? 0xffffffff : (1U << bits) - 1;
}

/*
 * IPv6 -> IPv4. Returns 0 and sets *out (network order), or -1 when the
 * address is in neither the EAM table nor the prefix, or is a destination
 * the IPv6 network routes (V6N_EAM_ROUTED_NATIVELY). The RFC 6052 "u" octet
 * (bits 64-71) must be zero for prefixes shorter than /96. *by_eam, unless
 * NULL, says whether the address is in the EAM table.
 */
static __always_inline int v6n_map_6to4_by(const struct v6n_nat64_config *cfg, const struct in6_addr *addr,
					   __be32 *out, int destination, int *by_eam)
{
	struct v6n_lpm6_key key = { .prefixlen = 128 };
	const struct v6n_eam_value *eam;
	const __u8 *a = addr->s6_addr;

	__builtin_memcpy(key.addr, a, 16);
	eam = bpf_map_lookup_elem(&v6n_eam6, &key);
	if (by_eam)
		*by_eam = eam != NULL;
	if (eam) {
		if (destination && (eam->flags & V6N_EAM_ROUTED_NATIVELY))
			return -1;
		__u32 mask = v6n_low_mask(32 - eam->ipv4_len);
		__u32 suffix = bpf_ntohl(addr->s6_addr32[3]) & mask;
		__u32 net = ((__u32)eam->ipv4[0] << 24) | ((__u32)eam->ipv4[1] << 16) |
			    ((__u32)eam->ipv4[2] << 8) | eam->ipv4[3];

		*out = bpf_htonl((net & ~mask) | suffix);
		return 0;
	}
	if (!cfg)
		return -1;

	__u8 b0, b1, b2, b3;
	switch (cfg->prefix_len) {
	case 96:
		if (!v6n_bytes_eq(a, cfg->prefix, 12))
			return -1;
		b0 = a[12], b1 = a[13], b2 = a[14], b3 = a[15];
		break;
	case 64:
		if (!v6n_bytes_eq(a, cfg->prefix, 8) || a[8])
			return -1;
		b0 = a[9], b1 = a[10], b2 = a[11], b3 = a[12];
		break;
	case 56:
		if (!v6n_bytes_eq(a, cfg->prefix, 7) || a[8])
			return -1;
		b0 = a[7], b1 = a[9], b2 = a[10], b3 = a[11];
		break;
	case 48:
		if (!v6n_bytes_eq(a, cfg->prefix, 6) || a[8])
			return -1;
		b0 = a[6], b1 = a[7], b2 = a[9], b3 = a[10];
		break;
	case 40:
		if (!v6n_bytes_eq(a, cfg->prefix, 5) || a[8])
			return -1;
		b0 = a[5], b1 = a[6], b2 = a[7], b3 = a[9];
		break;
	case 32:
		if (!v6n_bytes_eq(a, cfg->prefix, 4) || a[8])
			return -1;
		b0 = a[4], b1 = a[5], b2 = a[6], b3 = a[7];
		break;
	default:
		return -1;
	}
	*out = bpf_htonl(((__u32)b0 << 24) | ((__u32)b1 << 16) | ((__u32)b2 << 8) | b3);
	return 0;
}

/* v6n_map_6to4_by, where whether an EAM matched is not asked. */
static __always_inline int v6n_map_6to4_as(const struct v6n_nat64_config *cfg, const struct in6_addr *addr,
					   __be32 *out, int destination)
{
	return v6n_map_6to4_by(cfg, addr, out, destination, NULL);
}

/* A source, or an address inside a quoted packet: any mapping applies. */
static __always_inline int v6n_map_6to4(const struct v6n_nat64_config *cfg, const struct in6_addr *addr,
					__be32 *out)
{
	return v6n_map_6to4_as(cfg, addr, out, 0);
}

/* IPv4 (network order) in the EAM table -> IPv6. Returns -1 when absent. */
static __always_inline int v6n_map_4to6_eam(__be32 addr, struct in6_addr *out)
{
	struct v6n_lpm4_key key = { .prefixlen = 32 };
	const struct v6n_eam_value *eam;

	__builtin_memcpy(key.addr, &addr, 4);
	eam = bpf_map_lookup_elem(&v6n_eam4, &key);
	if (!eam)
		return -1;
	__u32 mask = v6n_low_mask(32 - eam->ipv4_len);

	__builtin_memcpy(out->s6_addr, eam->ipv6, 16);
	out->s6_addr32[3] = bpf_htonl((bpf_ntohl(out->s6_addr32[3]) & ~mask) | (bpf_ntohl(addr) & mask));
	return 0;
}

/* IPv4 -> IPv6: EAM, else embedded in the RFC 6052 prefix. */
static __always_inline int v6n_map_4to6(const struct v6n_nat64_config *cfg, __be32 addr, struct in6_addr *out)
{
	if (v6n_map_4to6_eam(addr, out) == 0)
		return 0;
	if (!cfg)
		return -1;

	const __u8 *v4 = (const __u8 *)&addr;
	__u8 *a = out->s6_addr;

	__builtin_memset(a, 0, 16);
	switch (cfg->prefix_len) {
	case 96:
		__builtin_memcpy(a, cfg->prefix, 12);
		a[12] = v4[0], a[13] = v4[1], a[14] = v4[2], a[15] = v4[3];
		break;
	case 64:
		__builtin_memcpy(a, cfg->prefix, 8);
		a[9] = v4[0], a[10] = v4[1], a[11] = v4[2], a[12] = v4[3];
		break;
	case 56:
		__builtin_memcpy(a, cfg->prefix, 7);
		a[7] = v4[0], a[9] = v4[1], a[10] = v4[2], a[11] = v4[3];
		break;
	case 48:
		__builtin_memcpy(a, cfg->prefix, 6);
		a[6] = v4[0], a[7] = v4[1], a[9] = v4[2], a[10] = v4[3];
		break;
	case 40:
		__builtin_memcpy(a, cfg->prefix, 5);
		a[5] = v4[0], a[6] = v4[1], a[7] = v4[2], a[9] = v4[3];
		break;
	case 32:
		__builtin_memcpy(a, cfg->prefix, 4);
		a[4] = v4[0], a[5] = v4[1], a[6] = v4[2], a[7] = v4[3];
		break;
	default:
		return -1;
	}
	return 0;
}

/* IPv4 -> IPv6 for an IPv4 destination: EAM, else, in a nat64.translatable
 * range, embedded in the RFC 6052 prefix (an IPv4-translatable IPv6 address,
 * RFC 6052 2.3). -1: not a destination the translator serves. Out of line,
 * so that its keys do not count against its caller's stack. */
static __noinline int v6n_map_4to6_dst(const struct v6n_nat64_config *cfg, __be32 addr, struct in6_addr *out)
{
	struct v6n_lpm4_key key = { .prefixlen = 32 };

	if (v6n_map_4to6_eam(addr, out) == 0)
		return 0;
	__builtin_memcpy(key.addr, &addr, 4);
	if (!bpf_map_lookup_elem(&v6n_xlat4, &key))
		return -1;
	return v6n_map_4to6(cfg, addr, out);
}

#endif /* V6NODE_LIB_NAT64_H */
