/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Where XDP may send a frame it rewrote: back out of the uplink it came in
 * by (XDP_TX), or out of another uplink that runs v6n_xdp_uplink natively
 * and whose driver takes redirected frames (v6n_xdp_ports, kept by the
 * agent from the kernel's xdp-features), through the driver's XDP transmit
 * (XDP_REDIRECT): a two-armed gateway, or a backend behind another uplink,
 * stays in XDP. Anything else (a pod, a device with no native XDP, a
 * device whose program fell back to tc, a veth whose peer would drop what
 * it is sent) is tc's.
 */
#ifndef V6NODE_LIB_XDP_SEND_H
#define V6NODE_LIB_XDP_SEND_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

/* The uplinks running v6n_xdp_uplink in native mode, by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, V6N_XDP_PORTS_MAX);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_xdp_ports SEC(".maps");

/* Whether XDP can send a frame out of `ifindex`, the FIB's answer for a
 * frame that came in on `ingress`. */
static __always_inline int v6n_xdp_sends_by(__u32 ingress, __u32 ifindex)
{
	return ifindex == ingress || bpf_map_lookup_elem(&v6n_xdp_ports, &ifindex) != NULL;
}

/* The XDP action that sends the frame out of `ifindex` (v6n_xdp_sends_by
 * said it can). */
static __always_inline int v6n_xdp_send(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(&v6n_xdp_ports, ifindex, XDP_PASS);
}

#endif /* V6NODE_LIB_XDP_SEND_H */
