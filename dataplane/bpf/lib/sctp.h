/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * SCTP's checksum when a translation changes its ports. SCTP covers its
 * packet with CRC32c (RFC 9260 appendix A), not the Internet checksum: no
 * pseudo-header, so new addresses leave it alone, but a new port changes it
 * and BPF has no helper to recompute it over the packet. CRC is linear, so
 * the change is the CRC of the bytes that changed, carried through the
 * zeros after them: their XOR times x^(8 * length) mod the polynomial, a
 * few dozen multiplications whatever the packet's size.
 *
 * A checksum of zero is one the sender left to the device (the kernel's
 * CHECKSUM_PARTIAL for SCTP, computed over the packet as it finally
 * leaves): it stays zero.
 */
#ifndef V6NODE_LIB_SCTP_H
#define V6NODE_LIB_SCTP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct v6n_sctphdr {
	__be16 source;
	__be16 dest;
	__be32 vtag;
	__u32 checksum; /* CRC32c, little-endian on the wire */
};

#define V6N_SCTP_CSUM_AT 8
#define V6N_CRC32C_POLY 0x82f63b78 /* reflected: x^0 is the top bit */

/* x^(8 * 2^k) mod the polynomial, k = 0..15: an SCTP packet is under 64 KiB. */
static const __u32 v6n_crc32c_x8_pow2[16] = {
	0x00800000, 0x00008000, 0x82f63b78, 0x6ea2d55c, 0x18b8ea18, 0x510ac59a, 0xb82be955, 0xb8fdb1e7,
	0x88e56f72, 0x74c360a4, 0xe4172b16, 0x0d65762a, 0x35d73a62, 0x28461564, 0xbf455269, 0xe2ea32dc,
};

/* a * b mod the polynomial, both reflected. */
static __always_inline __u32 v6n_crc32c_mul(__u32 a, __u32 b)
{
	__u32 product = 0;

	for (int bit = 31; bit >= 0; bit--) {
		if (a & (1U << bit))
			product ^= b;
		b = (b >> 1) ^ (b & 1 ? V6N_CRC32C_POLY : 0);
	}
	return product;
}

/*
 * What the CRC32c of an SCTP packet of `length` bytes changes by when its
 * first four bytes (the ports) change by `changed` (old XOR new, as read
 * from the packet on a little-endian CPU). Its own frame, not inlined
 * into every caller.
 */
static __noinline __u32 v6n_sctp_csum_change(__u32 changed, __u32 length)
{
	__u32 power = 1U << 31; /* x^0 */

	for (int k = 0; k < 16; k++) {
		if (length & (1U << k))
			power = v6n_crc32c_mul(v6n_crc32c_x8_pow2[k], power);
	}
	return v6n_crc32c_mul(power, changed);
}

/*
 * Rewrites the SCTP header at `l4` (of an SCTP packet of `length` bytes)
 * from `old_ports` to `new_ports` (source and destination, as they sit in
 * the packet) and mends its checksum. Returns 0, or -1 when the packet
 * cannot be written.
 */
static __always_inline int v6n_sctp_set_ports(struct __sk_buff *skb, __u32 l4, __u32 length, __u32 old_ports,
					      __u32 new_ports)
{
	__u32 csum;

	if (bpf_skb_load_bytes(skb, l4 + V6N_SCTP_CSUM_AT, &csum, sizeof(csum)) < 0)
		return -1;
	if (csum != 0) {
		csum ^= v6n_sctp_csum_change(old_ports ^ new_ports, length);
		if (bpf_skb_store_bytes(skb, l4 + V6N_SCTP_CSUM_AT, &csum, sizeof(csum), BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	}
	return bpf_skb_store_bytes(skb, l4, &new_ports, sizeof(new_ports), BPF_F_RECOMPUTE_CSUM);
}

#endif /* V6NODE_LIB_SCTP_H */
