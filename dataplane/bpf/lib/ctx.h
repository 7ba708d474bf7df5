/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The packet a program has in hand: a socket buffer at tc (the default), or
 * an XDP frame in an entry object that defines V6N_CTX_XDP before its first
 * include. The libraries the exit uses (verdict.h, events.h) read packets
 * through these, so one exit serves both; the rest are tc's.
 */
#ifndef V6NODE_LIB_CTX_H
#define V6NODE_LIB_CTX_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifdef V6N_CTX_XDP
#define v6n_ctx xdp_md

static __always_inline int v6n_ctx_load_bytes(struct v6n_ctx *ctx, __u32 offset, void *to, __u32 len)
{
	return bpf_xdp_load_bytes(ctx, offset, to, len);
}

/* The whole frame, its fragments (xdp.frags) included. */
static __always_inline __u32 v6n_ctx_len(struct v6n_ctx *ctx)
{
	return bpf_xdp_get_buff_len(ctx);
}

static __always_inline __u32 v6n_ctx_ifindex(struct v6n_ctx *ctx)
{
	return ctx->ingress_ifindex;
}

/* No socket owns a frame the driver has not handed to the stack. */
static __always_inline __u64 v6n_ctx_socket_cookie(struct v6n_ctx *ctx)
{
	return 0;
}
#else
#define v6n_ctx __sk_buff

static __always_inline int v6n_ctx_load_bytes(struct v6n_ctx *ctx, __u32 offset, void *to, __u32 len)
{
	return bpf_skb_load_bytes(ctx, offset, to, len);
}

static __always_inline __u32 v6n_ctx_len(struct v6n_ctx *ctx)
{
	return ctx->len;
}

static __always_inline __u32 v6n_ctx_ifindex(struct v6n_ctx *ctx)
{
	return ctx->ifindex;
}

static __always_inline __u64 v6n_ctx_socket_cookie(struct v6n_ctx *ctx)
{
	return bpf_get_socket_cookie(ctx);
}
#endif

#endif /* V6NODE_LIB_CTX_H */
