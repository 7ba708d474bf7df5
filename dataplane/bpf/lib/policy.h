/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Network policy, judged where a pod's packets enter and leave it (layout
 * and the agent's part in abi.h). A connection is judged once, at its first
 * packet, by three lookups whatever the number of rules; its later packets,
 * its replies and the ICMPv6 errors about it pass by v6n_policy_ct.
 *
 * Every pod's connections are tracked, isolated or not, so that a policy
 * that newly isolates a pod leaves the connections it already has alone:
 * policy decides new connections, as kube-proxy-era implementations (and
 * the kernel's conntrack) do. A connection outlives a policy change until
 * it closes or idles out; then it is judged again.
 *
 * The entry points are BPF subprograms, not inlined: their stack is then
 * used only while they run, not beside the SCTP checksum's in the pod
 * device's frame.
 */
#ifndef V6NODE_LIB_POLICY_H
#define V6NODE_LIB_POLICY_H

#include <linux/bpf.h>
#include <linux/icmpv6.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <v6node/abi.h>

#include "ct.h"
#include "maps.h"
#include "parse.h"
#include "verdict.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, V6N_POLICY_PODS_MAX);
	__type(key, struct v6n_endpoint_key);
	__type(value, struct v6n_policy_pod);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_policy_pods SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_POLICY_PEERS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_policy_peer_key);
	__type(value, struct v6n_policy_classes);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_policy_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, V6N_POLICY_PORTS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6n_policy_port_key);
	__type(value, struct v6n_policy_classes);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_policy_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, V6N_POLICY_CT_MAX);
	__type(key, struct v6n_policy_ct_key);
	__type(value, struct v6n_policy_ct_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_policy_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, V6N_POLICY_DENIED_MAX);
	__type(key, __u32);
	__type(value, struct v6n_counter_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} v6n_policy_denied SEC(".maps");

/* A packet as policy sees it: the tuple of the connection it belongs to,
 * oriented as the judged pod's packet (key.direction), or for an ICMPv6
 * error the tuple its quoted packet's reply would have: the error passes
 * exactly when such a reply would, as part of a known connection. */
struct v6n_policy_flow {
	struct v6n_policy_ct_key key;
	__u8 tcp_flags;
	__u8 error;
};

/* Room for the flows a program holds across other work (the pod device
 * keeps what the pod sent while SCTP to a Service is translated): BPF's
 * stack is 512 bytes for a program and every call it makes. */
enum { V6N_POLICY_FLOW_SENT, V6N_POLICY_FLOW_CHOSEN, V6N_POLICY_FLOW_CHECKED, V6N_POLICY_FLOW_SLOTS };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V6N_POLICY_FLOW_SLOTS);
	__type(key, __u32);
	__type(value, struct v6n_policy_flow);
} v6n_policy_scratch SEC(".maps");

/* A zeroed flow of this CPU's scratch slot, or NULL (never, in practice). */
static __always_inline struct v6n_policy_flow *v6n_policy_scratch_flow(__u32 slot)
{
	struct v6n_policy_flow *flow = bpf_map_lookup_elem(&v6n_policy_scratch, &slot);

	if (flow)
		__builtin_memset(flow, 0, sizeof(*flow));
	return flow;
}

#define V6N_POLICY_ND_FIRST 133 /* router solicitation .. redirect: the link's own business */
#define V6N_POLICY_ND_LAST 137

/* Reads the transport ports (or an echo's identifier) at `l4` into key. */
static __always_inline int v6n_policy_ports_at(struct __sk_buff *skb, __u32 l4, struct v6n_policy_ct_key *key,
					       __u8 *tcp_flags)
{
	__u8 head[14];

	if (key->protocol == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, l4, head, 14) < 0)
			return -1;
		*tcp_flags = head[13];
	} else if (key->protocol == IPPROTO_UDP || key->protocol == IPPROTO_SCTP) {
		if (bpf_skb_load_bytes(skb, l4, head, 4) < 0)
			return -1;
	} else if (key->protocol == IPPROTO_ICMPV6) {
		/* The identifier as a request's source port and a reply's
		 * destination port: a reply then has the reversed key of its
		 * request, and a request is never taken for a reply. */
		if (bpf_skb_load_bytes(skb, l4, head, 6) < 0)
			return -1;
		if (head[0] == ICMPV6_ECHO_REQUEST)
			__builtin_memcpy(&key->sport, head + 4, 2);
		else if (head[0] == ICMPV6_ECHO_REPLY)
			__builtin_memcpy(&key->dport, head + 4, 2);
		return 0;
	} else {
		return 0; /* no ports: the protocol alone */
	}
	__builtin_memcpy(&key->sport, head, 2);
	__builtin_memcpy(&key->dport, head + 2, 2);
	return 0;
}

/* The next header after at most one hop-by-hop header (BIG TCP's jumbo
 * option travels in one), and where it starts. */
static __always_inline int v6n_policy_skip_hbh(struct __sk_buff *skb, __u32 *l4, __u8 *proto)
{
	__u8 hbh[2];

	if (*proto != IPPROTO_HOPOPTS)
		return 0;
	if (bpf_skb_load_bytes(skb, *l4, hbh, 2) < 0)
		return -1;
	*proto = hbh[0];
	*l4 += (hbh[1] + 1) * 8;
	return 0;
}

/*
 * The policy flow of an IPv6 packet judged in `direction`. Returns 1 when
 * policy has nothing to say (the link's own traffic: link-scoped addresses,
 * neighbour discovery), 0 with *flow set, -1 for a packet cut short.
 */
static __noinline int v6n_policy_flow_of(struct __sk_buff *skb, __u8 direction, struct v6n_policy_flow *flow)
{
	struct ipv6hdr ip6;

	if (bpf_skb_load_bytes(skb, V6N_L3_OFFSET, &ip6, sizeof(ip6)) < 0)
		return -1;
	if (v6n_link_scoped(&ip6.saddr) || v6n_link_scoped(&ip6.daddr))
		return 1;
	__u32 l4 = V6N_L4_OFFSET;
	__u8 proto = ip6.nexthdr;
	if (v6n_policy_skip_hbh(skb, &l4, &proto) < 0)
		return -1;
	__builtin_memcpy(flow->key.saddr, &ip6.saddr, 16);
	__builtin_memcpy(flow->key.daddr, &ip6.daddr, 16);
	flow->key.protocol = proto;
	flow->key.direction = direction;
	if (proto != IPPROTO_ICMPV6)
		return v6n_policy_ports_at(skb, l4, &flow->key, &flow->tcp_flags);

	__u8 type;
	if (bpf_skb_load_bytes(skb, l4, &type, 1) < 0)
		return -1;
	if (type >= V6N_POLICY_ND_FIRST && type <= V6N_POLICY_ND_LAST)
		return 1;
	if (type >= ICMPV6_ECHO_REQUEST)
		return v6n_policy_ports_at(skb, l4, &flow->key, &flow->tcp_flags);

	/* An error quotes the packet it is about, from its IPv6 header on. */
	struct ipv6hdr quoted;
	__u32 inner = l4 + sizeof(struct icmp6hdr);
	if (bpf_skb_load_bytes(skb, inner, &quoted, sizeof(quoted)) < 0)
		return -1;
	struct v6n_policy_ct_key about = { .protocol = quoted.nexthdr };
	__u8 ignored;
	if (v6n_policy_ports_at(skb, inner + sizeof(quoted), &about, &ignored) < 0)
		return -1;
	/* Reversed: the reply to the quoted packet. */
	__builtin_memcpy(flow->key.saddr, &quoted.daddr, 16);
	__builtin_memcpy(flow->key.daddr, &quoted.saddr, 16);
	flow->key.sport = about.dport;
	flow->key.dport = about.sport;
	flow->key.protocol = about.protocol;
	flow->error = 1;
	return 0;
}

/* The connection in the other direction, as the other end judged it. */
static __always_inline void v6n_policy_reply_key(struct v6n_policy_ct_key *reply, const struct v6n_policy_ct_key *key)
{
	__builtin_memcpy(reply->saddr, key->daddr, 16);
	__builtin_memcpy(reply->daddr, key->saddr, 16);
	reply->sport = key->dport;
	reply->dport = key->sport;
	reply->protocol = key->protocol;
	reply->direction = !key->direction;
	reply->pad[0] = reply->pad[1] = 0;
}

/* A connection policy let through lives as a Service's does (lib/ct.h). */
static __always_inline int v6n_policy_ct_expired(const struct v6n_policy_ct_value *entry, __u8 protocol, __u64 now)
{
	return now - entry->last_seen_ns > v6n_ct_service_lifetime_ns(entry->flags, protocol);
}

/* The live entry of the connection policy let through already that the
 * flow belongs to, either way, or NULL. */
static __always_inline struct v6n_policy_ct_value *v6n_policy_tracked(const struct v6n_policy_flow *flow, __u64 now)
{
	struct v6n_policy_ct_key reply;
	struct v6n_policy_ct_value *entry = bpf_map_lookup_elem(&v6n_policy_ct, &flow->key);

	if (!entry || v6n_policy_ct_expired(entry, flow->key.protocol, now)) {
		v6n_policy_reply_key(&reply, &flow->key);
		entry = bpf_map_lookup_elem(&v6n_policy_ct, &reply);
		if (!entry || v6n_policy_ct_expired(entry, flow->key.protocol, now))
			return NULL;
	}
	return entry;
}

/* Whether the flow belongs to a connection policy let through already. */
static __always_inline int v6n_policy_known(const struct v6n_policy_flow *flow, __u64 now)
{
	struct v6n_policy_ct_value *entry = v6n_policy_tracked(flow, now);

	if (!entry)
		return 0;
	/* A SYN on a tuple whose connection has closed is a new connection
	 * reusing the ports: judged afresh, and a new flow. */
	if (v6n_tcp_opens(flow->tcp_flags) && (entry->flags & V6N_CT_CLOSING))
		return 0;
	if (flow->tcp_flags & (V6N_TCP_FIN | V6N_TCP_RST))
		entry->flags |= V6N_CT_CLOSING;
	if (now - entry->last_seen_ns > V6N_CT_TOUCH_NS)
		entry->last_seen_ns = now;
	return 1;
}

/* Whether the rules allow the flow: its matching classes are the peer's
 * (longest prefix) and the port's or the any-port ones; the lowest decides
 * (abi.h, "Network policy"). */
static __always_inline int v6n_policy_allows(const struct v6n_policy_rules *rules, const struct v6n_policy_flow *flow)
{
	struct v6n_policy_peer_key peer = { .prefixlen = 32 + 128, .peer.id = bpf_htonl(rules->id) };

	__builtin_memcpy(peer.peer.addr, flow->key.direction == V6N_POLICY_INGRESS ? flow->key.saddr : flow->key.daddr, 16);
	struct v6n_policy_classes *peer_classes = bpf_map_lookup_elem(&v6n_policy_peers, &peer);
	if (!peer_classes)
		return 1;
	__u64 classes = rules->any_port_classes;
	__u8 protocol = flow->key.protocol;
	if (protocol == IPPROTO_TCP || protocol == IPPROTO_UDP || protocol == IPPROTO_SCTP) {
		struct v6n_policy_port_key port = {
			.prefixlen = 64,
			.port = { .id = bpf_htonl(rules->id), .protocol = protocol, .port = flow->key.dport },
		};
		struct v6n_policy_classes *port_classes = bpf_map_lookup_elem(&v6n_policy_ports, &port);
		if (port_classes)
			classes |= port_classes->classes;
	}
	__u64 matching = peer_classes->classes & classes;
	__u64 first = matching & -matching;
	if (first & rules->pass_classes & rules->admin_classes) {
		matching &= ~rules->admin_classes;
		first = matching & -matching;
	}
	return !first || (first & (rules->accept_classes | rules->pass_classes));
}

/* The rules of the flow's pod (its destination's coming in, its source's
 * going out) in the flow's direction, or NULL for a pod no rule names. */
static __always_inline const struct v6n_policy_rules *v6n_policy_rules_of(const struct v6n_policy_flow *flow)
{
	__u8 ingress = flow->key.direction == V6N_POLICY_INGRESS;
	struct v6n_endpoint_key pod_key;

	__builtin_memcpy(pod_key.addr, ingress ? flow->key.daddr : flow->key.saddr, 16);
	struct v6n_policy_pod *pod = bpf_map_lookup_elem(&v6n_policy_pods, &pod_key);
	if (!pod)
		return NULL;
	return ingress ? &pod->direction[V6N_POLICY_INGRESS] : &pod->direction[V6N_POLICY_EGRESS];
}

/*
 * Whether policy would drop the flow's packet, asked without changing
 * anything (XDP's early drop): a connection not tracked yet that its pod's
 * rules deny, and do not merely audit. Returns the rules' id, or 0 for
 * whatever v6n_policy_judge must decide.
 */
static __always_inline __u32 v6n_policy_denies(const struct v6n_policy_flow *flow, __u64 now)
{
	if (v6n_policy_tracked(flow, now))
		return 0;
	const struct v6n_policy_rules *rules = v6n_policy_rules_of(flow);
	if (!rules || !rules->id || (rules->flags & V6N_POLICY_AUDIT) || v6n_policy_allows(rules, flow))
		return 0;
	return rules->id;
}

/*
 * Judges a flow: V6N_REASON_PASS, or the direction's policy drop. A new
 * connection the pod's rules allow (or that no rule isolates) is tracked
 * under its key, and under `also` when not NULL: the tuple the pod itself
 * sent, where the packet was translated on its way (SCTP to a Service), so
 * that the reply, translated back, is known too.
 */
static __noinline enum v6n_reason v6n_policy_judge(struct __sk_buff *skb, const struct v6n_policy_flow *flow,
							 const struct v6n_policy_ct_key *also)
{
	__u64 now = bpf_ktime_get_ns();

	if (v6n_policy_known(flow, now))
		return V6N_REASON_PASS;
	__u8 ingress = flow->key.direction == V6N_POLICY_INGRESS;
	const struct v6n_policy_rules *rules = v6n_policy_rules_of(flow);
	__u32 id = rules ? rules->id : 0;

	__u8 pod_direction = ingress ? V6N_DIRECTION_TO_POD : V6N_DIRECTION_FROM_POD;
	if (id && !v6n_policy_allows(rules, flow)) {
		v6n_count(&v6n_policy_denied, &id, skb->len);
		if (!(rules->flags & V6N_POLICY_AUDIT)) {
			v6n_event_note(flow->key.direction, id, V6N_NOTE_DENIED);
			return ingress ? V6N_REASON_DROP_POLICY_INGRESS : V6N_REASON_DROP_POLICY_EGRESS;
		}
		/* Audited: counted apart from the packet's own verdict, not
		 * tracked, so each packet the policy would deny is counted. */
		v6n_record(skb->ifindex, pod_direction, V6N_REASON_POLICY_AUDIT, skb->len);
		v6n_event_note(flow->key.direction, id, V6N_NOTE_AUDITED);
		return V6N_REASON_PASS;
	}
	if (flow->error)
		return V6N_REASON_PASS;
	/* A new connection of the pod's, in this direction: tracked, and noted
	 * for its flow event. */
	struct v6n_policy_ct_value entry = { .last_seen_ns = now, .id = id };
	bpf_map_update_elem(&v6n_policy_ct, &flow->key, &entry, BPF_ANY);
	if (also)
		bpf_map_update_elem(&v6n_policy_ct, also, &entry, BPF_ANY);
	v6n_event_note(flow->key.direction, id, V6N_NOTE_NEW_FLOW);
	return V6N_REASON_PASS;
}

/* Judges the packet as it is, in `direction`: V6N_REASON_PASS, a policy
 * drop, or V6N_REASON_DROP_MALFORMED for one cut short. */
static __always_inline enum v6n_reason v6n_policy_check(struct __sk_buff *skb, __u8 direction)
{
	struct v6n_policy_flow *flow = v6n_policy_scratch_flow(V6N_POLICY_FLOW_CHECKED);

	if (!flow)
		return V6N_REASON_DROP_MALFORMED;
	int parsed = v6n_policy_flow_of(skb, direction, flow);
	if (parsed > 0)
		return V6N_REASON_PASS;
	if (parsed < 0)
		return V6N_REASON_DROP_MALFORMED;
	return v6n_policy_judge(skb, flow, NULL);
}

#endif /* V6NODE_LIB_POLICY_H */
