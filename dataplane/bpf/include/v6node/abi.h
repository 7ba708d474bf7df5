/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The contract between v6node's BPF programs and the agent that loads them:
 * map names, keys, values and drop reasons. This header is the only
 * definition; the Rust side (crate v6node-abi) is generated from it by
 * bindgen, so a layout change here cannot drift from the loader.
 */
#ifndef V6NODE_ABI_H
#define V6NODE_ABI_H

#include <linux/types.h>

/* Why a packet was passed or dropped. Kept dense: it indexes counters. */
enum v6n_reason {
	V6N_REASON_PASS = 0,
	V6N_REASON_DROP_MALFORMED = 1,     /* shorter than its headers claim */
	V6N_REASON_DROP_DENIED_SOURCE = 2, /* source in filter.deny_sources */
	/* NAT46/64 translator (nat64.bpf.c), counted under a V6N_DIRECTION_XLAT_*. */
	V6N_REASON_XLAT_FORWARDED = 3,  /* translated and redirected to the next hop */
	V6N_REASON_XLAT_TO_STACK = 4,   /* translated, left to the kernel (local, or to fragment) */
	V6N_REASON_DROP_HOP_LIMIT = 5,  /* TTL/hop limit ran out: Time Exceeded sent back */
	V6N_REASON_DROP_TOO_BIG = 6,    /* does not fit the next hop: PTB/Frag Needed sent back */
	V6N_REASON_DROP_UNMAPPED = 7,   /* destination maps, source does not */
	V6N_REASON_DROP_UNTRANSLATABLE = 8, /* RFC 7915 says not to translate it */
	/* Pod devices and BPF host routing (pod.bpf.c, and host.bpf.c towards pods). */
	V6N_REASON_ROUTED = 9,           /* BPF host routing sent it on, past the host's stack */
	V6N_REASON_DROP_SPOOFED = 10,    /* a pod sent from an address that is not its own */
	V6N_REASON_DROP_NOT_IPV6 = 11,   /* pods are IPv6 only: IPv4, ARP and the rest */
	/* Services (lib/lb.h), counted under V6N_DIRECTION_SOCKET at ifindex 0. */
	V6N_REASON_LB_TRANSLATED = 12,   /* a socket to a Service was given a backend */
	V6N_REASON_DROP_NO_BACKEND = 13, /* a Service without usable endpoints: refused */
	/* Services reached from outside (lib/nodeport.h), per packet on the uplink
	 * and in pod devices; a first packet is V6N_REASON_LB_TRANSLATED too. */
	V6N_REASON_LB_TRACKED = 14,      /* a packet of a tracked connection, rewritten */
	V6N_REASON_DROP_NAT_PORTS = 15,  /* no source port left to masquerade with */
	V6N_REASON_DROP_DSR_REFUSED = 16, /* a frontend option for no frontend that sends here */
	/* Stateful NAT64 (lib/nat64_state.h), under a V6N_DIRECTION_XLAT_*. */
	V6N_REASON_DROP_POOL_EXHAUSTED = 17, /* no free port of the protocol left in the pool */
	V6N_REASON_DROP_NO_BINDING = 18,     /* to a pool address and port no client holds */
	V6N_REASON_DROP_FILTERED = 19,       /* address-dependent filtering: a server not yet contacted */
	V6N_REASON_DROP_STATE_FULL = 20,     /* the state table has no room for a new binding */
	/* Stateful NAT46 gateway (lib/nat46_gw.h); a VIP frontend without
	 * backends counts as V6N_REASON_DROP_NO_BACKEND. */
	V6N_REASON_DROP_NAT46_CLASH = 21,      /* the client's address and port reach this backend by another frontend */
	V6N_REASON_DROP_NAT46_NO_FLOW = 22,    /* a backend's packet to a client the gateway has no flow for */
	V6N_REASON_DROP_NAT46_STATE_FULL = 23, /* the flow table has no room for a new flow */
	V6N_REASON_XLAT_TO_FRAGMENT = 24, /* DF clear and too big: to the kernel to fragment, then translated */
	/* Network policy (lib/policy.h). */
	V6N_REASON_DROP_POLICY_INGRESS = 25, /* no rule of the receiving pod's policies allows it */
	V6N_REASON_DROP_POLICY_EGRESS = 26,  /* no rule of the sending pod's policies allows it */
	V6N_REASON_POLICY_AUDIT = 27,        /* would have been denied; passed, as the pod's policy is audited */
	/* Seen by trace.bpf.c, not by the exit: the kernel freed a packet of a
	 * pod on this node with a drop reason of its own (skb:kfree_skb). */
	V6N_REASON_DROP_KERNEL = 28,
	/* A rate-limited pod's packet whose departure time lies beyond the
	 * pacing horizon (lib/bandwidth.h): its pod sends or is sent more than
	 * its limit lets through. */
	V6N_REASON_DROP_BANDWIDTH = 29,
	/* To an external or load-balancer IP of a Service (v6n_lb_vips) on a
	 * port and protocol none of its frontends serves. */
	V6N_REASON_DROP_NO_FRONTEND = 30,
	V6N_REASON_COUNT
};

enum v6n_direction {
	V6N_DIRECTION_INGRESS = 0,
	V6N_DIRECTION_EGRESS = 1,
	V6N_DIRECTION_XLAT_6TO4 = 2, /* translator, IPv6 in, IPv4 out */
	V6N_DIRECTION_XLAT_4TO6 = 3, /* translator, IPv4 in, IPv6 out */
	V6N_DIRECTION_FROM_POD = 4,  /* sent by a pod (counted on its host-side device) */
	V6N_DIRECTION_TO_POD = 5,    /* on its way into a pod through the host-side device */
	V6N_DIRECTION_SOCKET = 6,    /* a cgroup socket hook (connect, sendmsg, ...) */
	V6N_DIRECTION_XDP = 7,       /* an uplink's driver, before the kernel has a packet (xdp.bpf.c) */
};

/* v6n_counters: per-CPU hash, one slot per device, direction and reason. */
struct v6n_counter_key {
	__u32 ifindex;
	__u8 direction; /* enum v6n_direction */
	__u8 reason;    /* enum v6n_reason */
	__u16 pad;      /* zero: hash keys compare every byte */
};

struct v6n_counter_value {
	__u64 packets;
	__u64 bytes;
};

/* v6n_deny_src: LPM trie of IPv6 source prefixes dropped at ingress. */
struct v6n_lpm6_key {
	__u32 prefixlen; /* LPM tries want the length first, in bits */
	__u8 addr[16];   /* network byte order */
};

struct v6n_deny_value {
	__u32 rule; /* index of the prefix in filter.deny_sources, for status */
};

/*
 * v6n_nat64_cfg: hash with the single key 0. A hash, not an array, because a
 * hash update swaps in a new element under RCU: a packet sees the old prefix
 * or the new one, never half of each.
 */
/*
 * How long a connection-tracking entry (struct v6n_ct_value, below) outlives
 * its last packet, by protocol and TCP state: one rule for every stateful
 * table (v6n_ct_lifetime_ns in lib/ct.h, conntrack.rs in the agent).
 */
struct v6n_ct_lifetimes {
	__u32 udp_seconds;
	__u32 tcp_established_seconds; /* V6N_CT_ESTABLISHED, not closing or reset */
	__u32 tcp_transitory_seconds;  /* before the answer, after a RST (V6N_CT_RESET) */
	__u32 icmp_seconds;            /* and any other protocol */
	__u32 tcp_closing_seconds;     /* V6N_CT_CLOSING: see there */
};

struct v6n_nat64_config {
	__u8 prefix[16];  /* RFC 6052 prefix, host bits zero */
	__u8 prefix_len;  /* 32, 40, 48, 56, 64 or 96 */
	__u8 filtering;   /* stateful NAT64: V6N_NAT64_FILTER_* */
	__u8 pad[2];
	/* Stateful NAT64: how long a binding outlives its last packet (RFC 6146
	 * 4's defaults are the config's). */
	struct v6n_ct_lifetimes lifetimes;
	/* Stateful NAT64: addresses in v6n_nat64_pool_addrs (0: no pool), and
	 * each protocol's ports (ICMP: echo identifiers), host order. */
	__u32 pool_size;
	__u16 tcp_first, tcp_last, udp_first, udp_last, icmp_first, icmp_last;
	/* Stateful NAT46 gateway: the /96 IPv4 clients are embedded in (RFC
	 * 6052), routed to this gateway alone so that replies come back here;
	 * nat46_on 0: no gateway. */
	__u8 nat46_prefix[12];
	__u8 nat46_on;
	__u8 pad2[3];
	/* RFC 7915 4.1: a DF-clear IPv4 packet too big for the IPv6 next hop
	 * goes to the kernel addressed to this address, its own destination in
	 * its mark; the main table routes the address out of the agent's
	 * fragmentation link (agent/src/nat/fragmenter.rs), whose MTU leaves
	 * room for the headers translation adds, and the fragments come back in
	 * at its peer, get their destination back and are translated one by
	 * one. A route, not a policy rule: any rule takes the kernel's IPv4
	 * lookups off their fast path for good. 0: no such link, a
	 * Fragmentation Needed instead. */
	__be32 fragment_addr;
};

/* RFC 4787 filtering of packets from IPv4 to a binding. */
#define V6N_NAT64_FILTER_ENDPOINT_INDEPENDENT 0 /* from any server */
#define V6N_NAT64_FILTER_ADDRESS_DEPENDENT 1    /* from the addresses the client sent to */

/*
 * Stateful NAT64 (RFC 6146, lib/nat64_state.h). An IPv6 client in
 * v6n_nat64_src without a mapping of its own borrows a transport address
 * of the pool: one binding per client address, port (ICMP: echo
 * identifier) and protocol, whatever the server (endpoint-independent
 * mapping). v6n_nat64_state holds, with the connection tracking's key and
 * value types, three kinds of entry told apart by their zero address:
 *   binding, client side: saddr client, daddr ::, sport client port;
 *     value saddr pool (::ffff:a.b.c.d), sport pool port.
 *   binding, pool side: saddr ::, daddr pool, dport pool port; value daddr
 *     client, dport client port, last_seen_ns and flags: the binding's
 *     lifetime lives here alone; backend_id its generation, new with each
 *     client the port is bound to.
 *   permit (address-dependent filtering): saddr server, daddr pool, dport
 *     pool port; backend_id the generation of the binding it was made for,
 *     and admits nothing once the port is another client's.
 * A client side's and a permit's last_seen_ns is when it was made: the
 * agent reads the table while packets write it, and leaves alone what is
 * younger than its read.
 * Protocols are IPv4's numbers (ICMP 1 for echo, both sides). The table is
 * a plain hash, never LRU: nothing evicts half a binding. A new binding
 * takes a random port (RFC 6056) of the pool address its client's address
 * hashes to (paired, RFC 4787 REQ-2), free or held by an expired binding,
 * which it takes over at once: ports never wait for the agent's sweep,
 * which only removes what expired to keep the table small.
 */

/* v6n_nat64_pool: the pool's addresses (key: the address, network order);
 * v6n_nat64_pool_addrs the same by place. */
struct v6n_nat64_pool_value {
	__u32 index; /* in nat64.stateful.pool, for status */
};

/* Keys of v6n_eam4, the IPv4 side of the explicit address mappings. */
struct v6n_lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

/*
 * One RFC 7757 explicit address mapping, stored under both of its prefixes
 * (v6n_eam6 by IPv6, v6n_eam4 by IPv4). Both prefixes have the same number of
 * suffix bits, which carry over unchanged.
 */
struct v6n_eam_value {
	__u8 ipv6[16];
	__u8 ipv4[4];
	__u8 ipv6_len;
	__u8 ipv4_len;
	__u16 flags; /* V6N_EAM_* */
	__u32 rule; /* index in nat64.eam, for status */
};

/* The node's routing table routes the mapping's IPv6 side (a route other than
 * the default covers it): those are IPv6 hosts with an IPv4 identity, so IPv6
 * traffic to them stays IPv6; they are translated as sources and from IPv4. */
#define V6N_EAM_ROUTED_NATIVELY 1

/*
 * v6n_endpoints: hash of the node's pods by IPv6 address, for BPF host
 * routing. Written by the agent when the CNI plugin adds or deletes a pod.
 */
struct v6n_endpoint_key {
	__u8 addr[16];
};

#define V6N_ENDPOINT_NETKIT 1 /* flags: netkit pair (else veth) */

struct v6n_endpoint_value {
	__u32 ifindex;     /* host side of the pod's device pair */
	__u8 pod_mac[6];   /* the pod side's MAC: a veth pod drops frames not to it */
	__u8 host_mac[6];
	__u8 flags;
	__u8 pad[3];
};

/*
 * The bandwidth manager (lib/bandwidth.h): a pod's rate limits, keyed by the
 * ifindex of the host side of its device pair. Each way with a limit is a
 * pacer that gives every packet a departure time (skb->tstamp), which the
 * fq qdisc on the uplinks (egress) or on the pod's own device (ingress)
 * holds the packet until. Times are in picoseconds since `origin_ns` on
 * bpf_ktime_get_ns()'s clock, modulo 2^64 (compared as signed differences,
 * so the 213-day wrap is harmless), so that a 64-byte packet at 100 Gbit/s
 * (5.12 ns) costs what it should.
 */
struct v6n_pacer {
	__u64 ps_per_byte_q16; /* picoseconds per byte, times 2^16; 0: no limit this way */
	__u64 next_free_ps;    /* when the pod's share is free again (the agent writes 0) */
	__u64 packets;         /* paced */
	__u64 bytes;           /* paced, as frames on the wire (GSO segments each with headers) */
	__u64 drops;           /* beyond the horizon: V6N_REASON_DROP_BANDWIDTH */
};

struct v6n_bandwidth_value {
	__u64 origin_ns;  /* the pacers' clock starts here (the agent's install time) */
	__u64 horizon_ns; /* a packet due later than this from now is dropped */
	struct v6n_pacer egress;  /* what the pod sends off the node */
	struct v6n_pacer ingress; /* what is delivered to the pod */
};

/*
 * Services (lib/lb.h). A frontend (ClusterIP, external or load-balancer IP,
 * node address for a NodePort; port; protocol) has a row per slot in
 * v6n_services: slot 0 says how many backends it has and slots 1..count name
 * them by backend id. The agent writes backends, then slots, then slot 0, so
 * a reader never meets a slot that names a missing backend.
 */
struct v6n_service_key {
	__u8 addr[16];  /* network byte order */
	__u16 port;     /* network byte order */
	__u8 proto;     /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
	__u16 slot;     /* 0: the frontend itself; 1..count: its backends */
	__u16 pad2;
};

#define V6N_SERVICE_AFFINITY 1 /* sessionAffinity: ClientIP */
#define V6N_SERVICE_EXTERNAL 2 /* reached from outside the cluster: the uplink
				* translates packets to it (v6n_maglev has its backends) */

struct v6n_service_value {
	__u32 backend_id;       /* slots 1..count: the backend */
	__u32 id;               /* the frontend's id: v6n_frontends, affinity, stats */
	__u16 count;            /* slot 0: backends in slots 1..count; 0 refuses */
	__u16 flags;            /* slot 0: V6N_SERVICE_* */
	__u32 affinity_seconds; /* slot 0, with V6N_SERVICE_AFFINITY */
};

/* A transport address: a backend (v6n_backends, by backend id), or a
 * frontend (v6n_frontends, by frontend id) for replies and getpeername. */
struct v6n_l4_addr {
	__u8 addr[16]; /* network byte order */
	__u16 port;    /* network byte order */
	__u8 proto;
	__u8 pad;
};

/* v6n_affinity (LRU): the backend a client was given, for ClientIP affinity.
 * The client is its network namespace (its socket's netns cookie): at connect
 * time a socket has no source address yet, and a pod is one namespace. */
struct v6n_affinity_key {
	__u64 client;
	__u32 frontend;
	__u32 pad;
};

struct v6n_affinity_value {
	__u64 last_used_ns; /* bpf_ktime_get_ns() */
	__u32 backend_id;
	__u16 slot;         /* where it was: a slot naming another backend means it left */
	__u16 pad;
};

/* v6n_sock_revnat (LRU): a socket that was sent to a backend in place of a
 * frontend, so replies (recvmsg) and getpeername show the frontend. */
struct v6n_sock_revnat_key {
	__u64 cookie;   /* bpf_get_socket_cookie() */
	__u8 addr[16];  /* the backend */
	__u16 port;
	__u16 pad;
	__u32 pad2;
};

struct v6n_sock_revnat_value {
	__u32 frontend;
};

/* v6n_service_stats (per CPU, by frontend id). */
struct v6n_service_stats {
	__u64 translated; /* sockets given a backend */
	__u64 refused;    /* connects refused: no backend */
};

/*
 * v6n_maglev (by frontend id): for frontends reached from outside, the
 * backend of each of V6N_MAGLEV_SIZE hash buckets, filled by Maglev
 * (Eisenbud et al., NSDI 2016) over the backends' addresses. Every node
 * computes the same table from the same backends, so a connection that
 * lands on another node (an ECMP change) is given the same backend there.
 * Only the backends traffic from outside may reach are in it: with
 * externalTrafficPolicy Local, this node's own.
 */
#define V6N_MAGLEV_SIZE 4099 /* prime, above V6N_BACKENDS_PER_SERVICE_MAX */

struct v6n_maglev_table {
	__u32 backend_ids[V6N_MAGLEV_SIZE];
};

/* v6n_lb_config.flags */
#define V6N_LB_DSR 1 /* backends on other nodes answer the client directly */
/* With V6N_LB_DSR: every packet to such a backend travels inside an outer
 * IPv6 header from this node to the backend (RFC 2473), so the network
 * between nodes sees neither the clients' addresses nor the frontend
 * header. */
#define V6N_LB_DSR_IP6IP6 2

/* v6n_lb_cfg (hash, key 0): what the uplink needs beyond the tables. */
struct v6n_lb_config {
	/* The source a connection from outside is given when its backend is on
	 * another node, so the reply comes back through this node: an address
	 * of this node's pod prefix that no pod is given (the prefix's last).
	 * Unused with V6N_LB_DSR. */
	__u8 masquerade_addr[16];
	__u32 flags; /* V6N_LB_* */
};

/*
 * Direct server return: a connection from outside whose backend is on
 * another node goes there with the client's own address, and its first
 * packets carry this Destination Options header (RFC 8200 4.6) naming the
 * frontend, so the backend's node can answer as the frontend straight to the
 * client. Option type 0x1e is RFC 4727's experimental one whose two high
 * bits say "skip if unknown": a host that does not know it still takes the
 * packet. 24 bytes, the 8-byte multiple the header must be.
 */
#define V6N_DSR_OPT_TYPE 0x1e

struct v6n_dsr_header {
	__u8 nexthdr;
	__u8 hdrlen;   /* 8-byte units after the first 8: 2 */
	__u8 opt_type; /* V6N_DSR_OPT_TYPE */
	__u8 opt_len;  /* the bytes below: 20 */
	__u8 addr[16]; /* the frontend, as the client addressed it */
	__u16 port;    /* network byte order */
	__u16 pad;
};

/*
 * Connection tracking (lib/ct.h), for translation per packet: an entry per
 * direction of a translated connection, keyed by its packets as they arrive,
 * holding the addresses and ports they leave with. One layout for every
 * stateful table of the node, in three tables that expire differently:
 * v6n_ct (NodePort, LRU: entries past their lifetime count as gone),
 * v6n_nat64_state and v6n_nat46_state (stateful NAT64 and the NAT46
 * gateway, not LRU: a binding must not vanish under load, so the agent
 * sweeps what has expired).
 */
struct v6n_ct_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport; /* network byte order, as are the ports below */
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

#define V6N_CT_REPLY 1   /* the reply direction of the connection */
/* The closing lifetime. Services: a TCP FIN or RST was seen. Stateful NAT64
 * and the NAT46 gateway: both sides sent a FIN (RFC 6146 3.5.2.2). */
#define V6N_CT_CLOSING 2
#define V6N_CT_DSR 4     /* to a backend on another node, which answers the client itself */
#define V6N_CT_ESTABLISHED 8 /* stateful NAT64: a TCP binding answered from IPv4 */
/* Stateful NAT64 and the NAT46 gateway, TCP (RFC 6146 3.5.2.2): a FIN from
 * the side that opened the binding (NAT64: IPv6; NAT46: the IPv4 client),
 * a FIN from the other side; both make it V6N_CT_CLOSING. */
#define V6N_CT_FIN_OUT 16
#define V6N_CT_FIN_IN 32
/* Stateful NAT64 and the NAT46 gateway: a TCP RST was the last segment, so
 * the transitory lifetime; the next segment that is not one takes it back
 * to established. */
#define V6N_CT_RESET 64
#define V6N_CT_DSR_IP6IP6 128 /* with V6N_CT_DSR: inside an outer IPv6 header (V6N_LB_DSR_IP6IP6) */

struct v6n_ct_value {
	__u8 saddr[16]; /* rewritten to */
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u32 backend_id;  /* the Service backend a forward entry was given */
	__u64 last_seen_ns;
	__u32 frontend_id;
	__u8 flags;        /* V6N_CT_* */
	__u8 pad[3];
};

#define V6N_CT_MAX 131072
#define V6N_CT_TCP_SECONDS 86400    /* kube-proxy's default for established TCP */
#define V6N_CT_CLOSING_SECONDS 10
#define V6N_CT_UDP_SECONDS 120
#define V6N_MAGLEV_MAX 16384        /* frontends reached from outside */

#define V6N_SERVICE_SLOTS_MAX 1048576 /* frontends plus all their backend slots */
#define V6N_BACKENDS_MAX 262144
#define V6N_LB_VIPS_MAX 65536 /* external and load-balancer IPs */
#define V6N_FRONTENDS_MAX 131072
#define V6N_BACKENDS_PER_SERVICE_MAX 4096 /* more are clamped, with a reason in status */
#define V6N_AFFINITY_MAX 65536
#define V6N_SOCK_REVNAT_MAX 262144

#define V6N_COUNTERS_MAX 16384 /* ~a dozen slots per pod at 110 pods, plus uplinks */
#define V6N_ENDPOINTS_MAX 65536
#define V6N_BANDWIDTH_MAX 65536 /* rate-limited pods */
#define V6N_EAM_MAX 65536
#define V6N_XLAT4_MAX 1024 /* IPv4 ranges translated into the prefix (nat64.translatable) */
#define V6N_XLAT_DEVICES_MAX 64 /* nat64.devices present at once */
#define V6N_XDP_PORTS_MAX 64    /* uplinks running native XDP, which XDP sends out of */
#define V6N_DENY_SRC_MAX 262144
#define V6N_NAT64_POOL_MAX 1024 /* a /22: every port of each, bindings bounded by the state table */
#define V6N_NAT64_SOURCES_MAX 1024     /* IPv6 prefixes allowed to use the pool */
#define V6N_NAT64_STATE_MAX 1048576    /* bindings take two entries, permits one */

/*
 * Stateful NAT46 gateway (lib/nat46_gw.h): IPv4 clients reach a frontend,
 * an IPv4 VIP, port and protocol (v6n_nat46_frontends), and each flow is
 * given one of its IPv6 backends (v6n_nat46_backends, by id) by the
 * frontend's Maglev table (v6n_nat46_maglev, by frontend id, weighted: a
 * backend holds buckets in proportion to its weight). The client's address
 * is embedded in the gateway's nat46 prefix. v6n_nat46_state holds, with
 * the connection tracking's types, two entries a flow:
 *   forward: saddr client (::ffff:a.b.c.d), daddr VIP (::ffff:),
 *     sport, dport as the client sent them; value daddr, dport the backend,
 *     backend_id, frontend_id, last_seen_ns and flags: the flow's lifetime
 *     lives here alone.
 *   reverse: saddr backend, daddr the embedded client, sport backend port,
 *     dport client port; value saddr VIP (::ffff:), sport VIP port, daddr
 *     client (::ffff:), dport client port, flags V6N_CT_REPLY;
 *     last_seen_ns when it was made.
 * A flow keeps its backend while the backend is in v6n_nat46_backends
 * under its id (weight 0: drained, in no bucket, still serving its flows).
 * A plain hash that the agent sweeps, like v6n_nat64_state.
 */
struct v6n_nat46_frontend_key {
	__u8 addr[4]; /* the VIP, network order */
	__u16 port;   /* network order */
	__u8 proto;
	__u8 pad;
};

struct v6n_nat46_frontend {
	__u32 id;       /* v6n_nat46_maglev's key */
	__u32 backends; /* in its Maglev table; 0: new flows are refused */
};

#define V6N_NAT46_FRONTENDS_MAX 1024
#define V6N_NAT46_VIPS_MAX 1024
#define V6N_NAT46_BACKENDS_MAX 65536
#define V6N_NAT46_STATE_MAX 1048576

/*
 * Network policy (lib/policy.h). The agent compiles what applies to each
 * pod of this node, for each direction, into one ordered list of rules:
 * ClusterNetworkPolicies' Admin tier by priority, then the NetworkPolicies
 * (when any selects the pod: their rules, then "deny the rest"), then the
 * Baseline tier. Consecutive rules with one action form a group; within a
 * group each distinct set of ports is a class, one bit of 64, numbered in
 * precedence order, so the lowest bit set is the rule that decides.
 *   v6n_policy_pods: the pod's address -> for each direction the id of its
 *     compiled rules (0: nothing applies, everything allowed), flags and
 *     which classes accept, pass, and belong to the Admin tier.
 *   v6n_policy_peers: LPM trie of (id, peer prefix) -> the classes whose
 *     rules' peers contain all of the prefix, excepts applied, so the
 *     longest match alone answers.
 *   v6n_policy_ports: LPM trie of (id, protocol, port prefix) -> the
 *     classes that contain the port.
 * A new connection's matching classes are peer classes & (port classes |
 * any_port_classes): three lookups whatever the number of rules. The lowest
 * one decides: accept, deny, or pass (an Admin pass drops the Admin tier's
 * classes and looks again, a Baseline pass accepts); none matching accepts.
 * A changed policy gets a new id: its entries are written first, then the
 * pod's entry is switched to it in one update, then the old id's entries
 * are deleted, so a packet sees the old rules or the new ones.
 *
 * v6n_policy_ct: the connections policy let through, by the tuple of their
 * first packet as the judged pod sent or received it and the direction; a
 * reply, and an ICMPv6 error about the connection, is allowed by it.
 */
enum v6n_policy_direction {
	V6N_POLICY_INGRESS = 0,
	V6N_POLICY_EGRESS = 1,
};

#define V6N_POLICY_AUDIT 1 /* count what would be denied, drop nothing */

struct v6n_policy_rules {
	__u32 id;      /* of the entries in v6n_policy_peers and _ports; 0: not isolated */
	__u32 flags;   /* V6N_POLICY_AUDIT */
	__u64 any_port_classes; /* classes of rules with no ports: every protocol and port */
	__u64 accept_classes;   /* classes of Accept rules (NetworkPolicy rules among them) */
	__u64 pass_classes;     /* classes of Pass rules */
	__u64 admin_classes;    /* classes of the Admin tier; the rest are later tiers' */
};

struct v6n_policy_pod {
	struct v6n_policy_rules direction[2]; /* by enum v6n_policy_direction */
};

/* The tries' keys: the length first, in bits, then the data it counts in. */
struct v6n_policy_peer {
	__u32 id; /* network byte order: LPM compares keys bytewise */
	__u8 addr[16];
};

struct v6n_policy_peer_key {
	__u32 prefixlen; /* 32 (the id) + the peer prefix's length */
	struct v6n_policy_peer peer;
};

struct v6n_policy_port {
	__u32 id; /* network byte order */
	__u8 protocol;
	__u8 pad;
	__u16 port; /* network byte order */
};

struct v6n_policy_port_key {
	__u32 prefixlen; /* 48 (id, protocol, pad) + the port prefix's length */
	struct v6n_policy_port port;
};

struct v6n_policy_classes {
	__u64 classes;
};

struct v6n_policy_ct_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport; /* network byte order; an echo request's identifier */
	__u16 dport; /* an echo reply's identifier */
	__u8 protocol;
	__u8 direction; /* enum v6n_policy_direction */
	__u8 pad[2];
};

struct v6n_policy_ct_value {
	__u64 last_seen_ns;
	__u32 id;    /* the rules that allowed it, for status */
	__u32 flags; /* V6N_CT_CLOSING after a FIN or RST */
};

/* v6n_policy_denied: per-CPU hash, by rules id (__u32), of struct
 * v6n_counter_value: what the rules denied. */

#define V6N_POLICY_CLASSES_MAX 64
#define V6N_POLICY_PODS_MAX 65536
#define V6N_POLICY_PEERS_MAX 4194304 /* no per-pod limit: shared by the node's pods */
#define V6N_POLICY_PORTS_MAX 1048576
#define V6N_POLICY_CT_MAX 262144
#define V6N_POLICY_DENIED_MAX 131072

/*
 * Flow events (bpf/lib/events.h): what the datapath decided, for the agent
 * to turn into flows (Hubble's API, the flow log). One event per dropped
 * packet, and one per new flow at each decision that starts one (a pod's
 * first packet of a connection, a policy's verdict on it, a Service's
 * backend, a NAT64 binding); forwarded packets of known flows send none.
 * Each reason has its own per-CPU token bucket, so a flood of one kind of
 * drop cannot crowd out the others or the agent.
 */
enum v6n_event_kind {
	V6N_EVENT_DROP = 1, /* a packet dropped; reason says why */
	V6N_EVENT_FLOW = 2, /* a new flow forwarded; reason says how */
};

/* Which of enum v6n_reason are not drops: a bit per reason. */
#define V6N_REASONS_FORWARDING                                                              \
	((1ULL << V6N_REASON_PASS) | (1ULL << V6N_REASON_XLAT_FORWARDED) |                  \
	 (1ULL << V6N_REASON_XLAT_TO_STACK) | (1ULL << V6N_REASON_XLAT_TO_FRAGMENT) |        \
	 (1ULL << V6N_REASON_ROUTED) | (1ULL << V6N_REASON_LB_TRANSLATED) |                 \
	 (1ULL << V6N_REASON_LB_TRACKED) | (1ULL << V6N_REASON_POLICY_AUDIT))

/* The event's own fields, before the packet's headers: an IPv4 address is
 * IPv4-mapped (::ffff:a.b.c.d). */
struct v6n_flow_event {
	__u64 time_ns;   /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 cookie;    /* the socket's (bpf_get_socket_cookie), or 0 */
	__u32 ifindex;   /* the device (0: a socket hook) */
	__u32 len;       /* the packet's length (0: a socket hook) */
	__u32 policy_id; /* the pod's policy rules that judged it (0: none) */
	__u8 kind;       /* enum v6n_event_kind */
	__u8 reason;     /* enum v6n_reason */
	__u8 direction;  /* enum v6n_direction */
	__u8 protocol;   /* IPPROTO_* of the transport (0: not reached) */
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;     /* network byte order; an echo's identifier */
	__u16 dport;
	__u8 tcp_flags;  /* FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10 */
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 translated; /* V6N_EVENT_SERVICE, V6N_EVENT_XLAT */
	/* Where the flow was sent: a Service's chosen backend (the packet's
	 * own addresses are then the frontend's), a NAT64 binding's IPv4 side. */
	__u8 xlat_saddr[16];
	__u8 xlat_daddr[16];
	__u16 xlat_sport;
	__u16 xlat_dport;
	__u32 frontend; /* the Service frontend's id (with V6N_EVENT_SERVICE) */
	__u32 kernel_reason; /* with V6N_REASON_DROP_KERNEL: the kernel's enum skb_drop_reason */
	__u32 pad;
};

/* The event's `translated` bits. */
#define V6N_EVENT_SERVICE 1 /* the flow is a Service's: frontend says which */
#define V6N_EVENT_XLAT 2    /* xlat_*: the flow as it left (a backend, a NAT64 binding) */
#define V6N_EVENT_NAT46 4   /* a NAT46 gateway's new flow: xlat_* the IPv4 client and frontend as they came */

/* v6n_event_config: array, key 0. Written by the agent; all zero (before
 * the agent writes it) sends no events. */
struct v6n_event_config {
	__u32 enabled;         /* 0: no events at all */
	__u32 per_second;      /* each reason's rate, per CPU */
	__u32 burst;           /* each reason's bucket */
};

/* v6n_event_stats: per-CPU array by reason: what was sent, what the rate
 * limit held back, what found the ring full. */
struct v6n_event_stats {
	__u64 sent;
	__u64 rate_limited;
	__u64 ring_full;
};

#define V6N_EVENTS_RING_BYTES (4 * 1024 * 1024)
/* The agent is woken when this much waits in the ring (64 events); it also
 * reads every V6N_EVENTS_READ_MS on its own. */
#define V6N_EVENTS_WAKE_BYTES (64 * sizeof(struct v6n_flow_event))
#define V6N_EVENTS_READ_MS 10

/* v6n_kernel_drop_reasons: array by the running kernel's enum
 * skb_drop_reason, 1 where a pod's packet freed with that reason is a flow
 * event. Written by the agent from the kernel's BTF (all zero: none); it
 * leaves out what the datapath reports itself (a tc or netkit drop) and
 * frees without a reason. */
#define V6N_KERNEL_DROP_REASONS_MAX 1024

#endif /* V6NODE_ABI_H */
