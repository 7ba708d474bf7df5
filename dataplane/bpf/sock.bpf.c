// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Entry object for the cgroup socket hooks, attached by the agent to the
 * node's root cgroup: Services for every pod and every process of the node,
 * chosen once when a socket connects (or, for unconnected UDP, per
 * datagram) instead of per packet. A connected socket's packets then carry
 * the backend's address from the start, so BPF host routing and the kernel
 * route them like any pod-to-pod packet, at no cost per packet.
 *
 * Replies and getpeername() are given the frontend's address back through
 * v6n_sock_revnat, so an application sees the Service it asked for.
 *
 * SCTP never comes here: the kernel runs no connect hook for it, and its
 * Services are translated per packet (v6n_service_sctp in lib/nodeport.h).
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "lib/lb.h"
#include "lib/verdict.h"

#define V6N_SOCK_ALLOW 1
#define V6N_SOCK_REFUSE 0
#define V6N_ECONNREFUSED 111

/* The translating hooks' verdict: a refusal is ECONNREFUSED (what a TCP
 * reset gives) rather than the hook's EPERM. */
static __always_inline int v6n_sock_verdict(enum v6n_reason reason)
{
	if (reason == V6N_REASON_LB_TRANSLATED || reason == V6N_REASON_PASS)
		return v6n_exit_socket(reason, V6N_SOCK_ALLOW);
	bpf_set_retval(-V6N_ECONNREFUSED);
	return v6n_exit_socket(reason, V6N_SOCK_REFUSE);
}

static __always_inline void v6n_sock_addr(const struct bpf_sock_addr *ctx, __u8 addr[16])
{
	/* The verifier allows user_ip6 only as 32-bit loads and stores. */
	__u32 *words = (__u32 *)addr;
	words[0] = ctx->user_ip6[0];
	words[1] = ctx->user_ip6[1];
	words[2] = ctx->user_ip6[2];
	words[3] = ctx->user_ip6[3];
}

static __always_inline void v6n_sock_set_addr(struct bpf_sock_addr *ctx, const struct v6n_l4_addr *to)
{
	const __u32 *words = (const __u32 *)to->addr;
	ctx->user_ip6[0] = words[0];
	ctx->user_ip6[1] = words[1];
	ctx->user_ip6[2] = words[2];
	ctx->user_ip6[3] = words[3];
	ctx->user_port = to->port;
}

/* connect() and sendmsg(): a frontend's address becomes one of its backends. */
static __always_inline int v6n_sock_to_backend(struct bpf_sock_addr *ctx)
{
	struct v6n_service_key key = { .port = (__u16)ctx->user_port, .proto = ctx->protocol };
	v6n_sock_addr(ctx, key.addr);
	struct v6n_service_value *svc = v6n_lb_frontend(&key);
	if (!svc)
		return V6N_SOCK_ALLOW; /* not a Service: uncounted, the common case */
	__u32 frontend = svc->id, backend_id;
	struct v6n_l4_addr *backend = v6n_lb_select(&key, svc, bpf_get_netns_cookie(ctx), &backend_id);
	v6n_lb_account(frontend, backend != NULL);
	if (!backend)
		return v6n_sock_verdict(V6N_REASON_DROP_NO_BACKEND);

	struct v6n_sock_revnat_key reverse = { .cookie = bpf_get_socket_cookie(ctx), .port = backend->port };
	__builtin_memcpy(reverse.addr, backend->addr, 16);
	struct v6n_sock_revnat_value value = { .frontend = frontend };
	bpf_map_update_elem(&v6n_sock_revnat, &reverse, &value, BPF_ANY);
	v6n_sock_set_addr(ctx, backend);
	return v6n_sock_verdict(V6N_REASON_LB_TRANSLATED);
}

/* recvmsg() and getpeername(): a backend's address shows as the frontend
 * this socket asked for. These hooks may not refuse. */
static __always_inline int v6n_sock_to_frontend(struct bpf_sock_addr *ctx)
{
	struct v6n_sock_revnat_key reverse = { .cookie = bpf_get_socket_cookie(ctx), .port = (__u16)ctx->user_port };
	v6n_sock_addr(ctx, reverse.addr);
	struct v6n_sock_revnat_value *value = bpf_map_lookup_elem(&v6n_sock_revnat, &reverse);
	if (!value)
		return V6N_SOCK_ALLOW;
	struct v6n_l4_addr *frontend = bpf_map_lookup_elem(&v6n_frontends, &value->frontend);
	if (frontend)
		v6n_sock_set_addr(ctx, frontend);
	return V6N_SOCK_ALLOW;
}

SEC("cgroup/connect6")
int v6n_sock_connect(struct bpf_sock_addr *ctx)
{
	return v6n_sock_to_backend(ctx);
}

SEC("cgroup/sendmsg6")
int v6n_sock_sendmsg(struct bpf_sock_addr *ctx)
{
	return v6n_sock_to_backend(ctx);
}

SEC("cgroup/recvmsg6")
int v6n_sock_recvmsg(struct bpf_sock_addr *ctx)
{
	return v6n_sock_to_frontend(ctx);
}

SEC("cgroup/getpeername6")
int v6n_sock_peername(struct bpf_sock_addr *ctx)
{
	return v6n_sock_to_frontend(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
