// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The packet generator and the sink of tests/bench/xdp. xdpgen_send runs
 * under BPF_PROG_TEST_RUN with live frames (xdpgen.c): each run of it writes
 * the template's headers into a frame, gives it the next of xdpgen_cfg's
 * flows (its UDP source port, checksum mended) and sends it out of the
 * configured device,
 * from the kernel, at whatever rate one CPU manages. xdpgen_sink, on that
 * device, drops the UDP frames that come back (counted by the driver as
 * XDP drops) and passes the rest (the control plane's TCP, neighbour
 * discovery).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* The frame's first bytes, as the generator's template has them: each run
 * writes them again, since a page the generator gets back still holds
 * what the node under test made of the frame (live frames recycle pages).
 * As long as Ethernet, IPv6 and UDP; an IPv4 frame's template covers the
 * start of its payload too. */
#define XDPGEN_HEAD_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + sizeof(struct udphdr))

struct xdpgen_cfg {
	__u32 ifindex;
	__u32 flows;
	__u8 head[XDPGEN_HEAD_LEN];
	__u8 ipv4; /* the frame is IPv4, its UDP header right after 20 bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdpgen_cfg);
} xdpgen_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xdpgen_next SEC(".maps");

SEC("xdp")
int xdpgen_send(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct xdpgen_cfg *cfg = bpf_map_lookup_elem(&xdpgen_cfg, &zero);
	__u32 *next = bpf_map_lookup_elem(&xdpgen_next, &zero);

	if (!cfg || !next || data + XDPGEN_HEAD_LEN > data_end || cfg->flows == 0)
		return XDP_ABORTED;
	__builtin_memcpy(data, cfg->head, XDPGEN_HEAD_LEN);
	struct udphdr *udp = data + sizeof(struct ethhdr) + (cfg->ipv4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr));

	if ((void *)(udp + 1) > data_end)
		return XDP_ABORTED;
	/* The template's checksum, mended for this flow's source port. */
	__u16 port = bpf_htons(10000 + *next % cfg->flows);
	__u32 sum = (__u16)~udp->check + (__u16)~udp->source + port;

	*next += 1;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	udp->check = (__u16)~sum;
	udp->source = port;
	return bpf_redirect(cfg->ifindex, 0);
}

/* Its own section, so that `ip link ... xdp obj ... sec xdp.frags` finds it. */
SEC("xdp.frags")
int xdpgen_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct iphdr *ip = (void *)(eth + 1);

	/* What a translator sent back is IPv4. */
	if ((void *)(ip + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP))
		return ip->protocol == IPPROTO_UDP ? XDP_DROP : XDP_PASS;
	if ((void *)(ip6 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return XDP_PASS;
	return ip6->nexthdr == IPPROTO_UDP ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
