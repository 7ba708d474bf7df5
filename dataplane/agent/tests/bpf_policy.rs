// SPDX-License-Identifier: Apache-2.0
//! Network policy in BPF (bpf/lib/policy.h): rules compiled by the agent's
//! own compiler and written as the agent writes them, then packets through
//! the pod devices' and the uplink's programs by BPF_PROG_TEST_RUN. Each
//! test is one scenario: what passes, what is dropped, and how it is counted.

mod common;

use std::net::Ipv6Addr;

use common::{
    counted,
    events::{events, kind, set_events},
    node::{Node, HOST_A_MAC, NODE, POD_A, POD_A_MAC, POD_B, REMOTE, ROUTER_MAC, UPLINK_MAC},
    packet::{ethernet, ipv6, ETH_IPV6},
    policy::{denied, set_rules},
    run_xdp, try_run_program, Run, TC_ACT_REDIRECT, TC_ACT_SHOT, TC_ACT_UNSPEC, XDP_DROP, XDP_PASS,
};
use etherparse::PacketBuilder;
use v6node_abi::{Direction, EventKind, PolicyDirection, Reason};
use v6node_k8s::policy::{Action, Block, DirectionRules, Peers, PortRange, Ports, Rule, TierRule};

const TCP: u8 = 6;
const UDP: u8 = 17;
const INGRESS: PolicyDirection = PolicyDirection::V6N_POLICY_INGRESS;
const EGRESS: PolicyDirection = PolicyDirection::V6N_POLICY_EGRESS;
/// Addresses on the uplink's side, reached through its default route.
const OUTSIDE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 2);
const OUTSIDE_EXCEPTED: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0xff);

fn frame(src: Ipv6Addr, dst: Ipv6Addr, from_outside: bool) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    let (to, from) = if from_outside { (UPLINK_MAC, ROUTER_MAC) } else { (HOST_A_MAC, POD_A_MAC) };
    PacketBuilder::ethernet2(from, to).ipv6(src.octets(), dst.octets(), 64)
}

fn tcp(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> Vec<u8> {
    let mut packet = Vec::new();
    frame(src, dst, false).tcp(sport, dport, 1, 65535).syn().write(&mut packet, b"policy").unwrap();
    packet
}

fn udp(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> Vec<u8> {
    let mut packet = Vec::new();
    frame(src, dst, false).udp(sport, dport).write(&mut packet, b"policy").unwrap();
    packet
}

fn echo(src: Ipv6Addr, dst: Ipv6Addr, request: bool) -> Vec<u8> {
    let mut packet = Vec::new();
    let ip = frame(src, dst, false);
    if request { ip.icmpv6_echo_request(0x77, 1) } else { ip.icmpv6_echo_reply(0x77, 1) }.write(&mut packet, b"ping").unwrap();
    packet
}

/// An ICMPv6 Packet Too Big from `from` to `to` quoting `quoted` (a frame).
fn too_big(from: Ipv6Addr, to: Ipv6Addr, quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![2, 0, 0, 0, 0, 0, 5, 0xdc];
    icmp.extend_from_slice(&quoted[14..]);
    ethernet(ETH_IPV6, &ipv6(from, to, 64, 58, &icmp, Some(2)))
}

fn tcp_ports(first: u16, last: u16) -> Ports {
    Ports::Ranges(vec![PortRange { protocol: TCP, first, last }])
}

fn only(peer: Ipv6Addr) -> Peers {
    Peers::Blocks(vec![Block { net: peer.into(), except: vec![] }])
}

fn rules(rules: Vec<Rule>) -> DirectionRules {
    DirectionRules { policies: vec!["default/test".into()], isolated: true, rules, ..DirectionRules::default() }
}

fn deny_all() -> DirectionRules {
    rules(vec![])
}

impl Node {
    fn to_pod(&self, packet: &[u8], device: u32) -> Run {
        try_run_program(&self.pod, "v6n_to_pod", packet, device).unwrap()
    }

    fn arriving_from_outside(&self, packet: &[u8]) -> Run {
        try_run_program(&self.host, "v6n_from_dev", packet, self.uplink).unwrap()
    }
}

#[test]
fn pods_no_policy_selects_reach_each_other() {
    let node = Node::new("policy-none", 0);
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40000, POD_B, 8080), node.host_a).verdict, TC_ACT_REDIRECT);
    assert_eq!(node.sent_by_pod(&udp(POD_A, 40000, POD_B, 53), node.host_a).verdict, TC_ACT_REDIRECT);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_POLICY_INGRESS), 0);
}

#[test]
fn default_deny_drops_new_connections_on_every_way_in_and_counts_them_by_rules() {
    let mut node = Node::new("policy-deny", 0);
    set_rules(&mut node.pod, POD_B, INGRESS, 7, &deny_all(), false);
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40000, POD_B, 8080), node.host_a).verdict, TC_ACT_SHOT, "from a pod here");
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_POLICY_INGRESS), 1);
    let mut outside = tcp(OUTSIDE, 40000, POD_B, 8080);
    outside[..12].copy_from_slice(&[UPLINK_MAC, ROUTER_MAC].concat());
    assert_eq!(node.arriving_from_outside(&outside).verdict, TC_ACT_SHOT, "from outside, switched in by the uplink");
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_DROP_POLICY_INGRESS), 1);
    assert_eq!(node.to_pod(&tcp(OUTSIDE, 40001, POD_B, 8080), node.host_b).verdict, TC_ACT_SHOT, "from the stack");
    assert_eq!(node.counted(Direction::V6N_DIRECTION_TO_POD, Reason::V6N_REASON_DROP_POLICY_INGRESS), 1);
    assert_eq!(denied(&node.pod, 7), 3);
    // Pod A is not isolated: what it receives passes.
    assert_eq!(node.to_pod(&tcp(OUTSIDE, 40002, POD_A, 8080), node.host_a).verdict, TC_ACT_UNSPEC);
}

#[test]
fn an_allowed_peer_on_an_allowed_port_and_protocol_passes_and_nothing_else() {
    let mut node = Node::new("policy-allow", 0);
    let block = Block { net: "2001:db8:99::/48".parse().unwrap(), except: vec![OUTSIDE_EXCEPTED.into()] };
    set_rules(
        &mut node.pod,
        POD_B,
        INGRESS,
        7,
        &rules(vec![
            Rule { peers: only(POD_A), ports: tcp_ports(8080, 8080) },
            Rule { peers: Peers::Blocks(vec![block]), ports: tcp_ports(9000, 9010) },
        ]),
        false,
    );
    let verdict = |packet: Vec<u8>| node.sent_by_pod(&packet, node.host_a).verdict;
    assert_eq!(verdict(tcp(POD_A, 40000, POD_B, 8080)), TC_ACT_REDIRECT, "A on TCP 8080");
    assert_eq!(verdict(tcp(POD_A, 40001, POD_B, 8081)), TC_ACT_SHOT, "another port");
    assert_eq!(verdict(udp(POD_A, 40002, POD_B, 8080)), TC_ACT_SHOT, "UDP on the TCP port");
    assert_eq!(verdict(tcp(POD_A, 40003, POD_B, 9005)), TC_ACT_SHOT, "A is not in the block");
    let to_b = |src: Ipv6Addr, dport: u16| node.to_pod(&tcp(src, 40000, POD_B, dport), node.host_b).verdict;
    assert_eq!(to_b(OUTSIDE, 9000), TC_ACT_UNSPEC, "the block, first port of the range");
    assert_eq!(to_b(OUTSIDE, 9010), TC_ACT_UNSPEC, "the block, endPort");
    assert_eq!(to_b(OUTSIDE, 9011), TC_ACT_SHOT, "past endPort");
    assert_eq!(to_b(OUTSIDE_EXCEPTED, 9005), TC_ACT_SHOT, "the block's except");
    assert_eq!(to_b(REMOTE, 9005), TC_ACT_SHOT, "outside the block");
    assert_eq!(denied(&node.pod, 7), 6);
}

#[test]
fn replies_pass_where_the_reply_direction_is_isolated_and_new_connections_do_not() {
    let mut node = Node::new("policy-replies", 0);
    set_rules(&mut node.pod, POD_A, INGRESS, 1, &deny_all(), false);
    set_rules(&mut node.pod, POD_B, EGRESS, 2, &deny_all(), false);
    // A may send (its egress is open) and B may receive (its ingress is).
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40000, POD_B, 8080), node.host_a).verdict, TC_ACT_REDIRECT);
    let reply = tcp(POD_B, 8080, POD_A, 40000);
    assert_eq!(node.sent_by_pod(&reply, node.host_b).verdict, TC_ACT_REDIRECT, "B's reply, into A");
    assert_eq!(node.to_pod(&reply, node.host_a).verdict, TC_ACT_UNSPEC, "and again, as the stack delivers it");
    assert_eq!(node.sent_by_pod(&tcp(POD_B, 8080, POD_A, 40001), node.host_b).verdict, TC_ACT_SHOT, "not a reply");
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_POLICY_EGRESS), 1);
    assert_eq!((denied(&node.pod, 1), denied(&node.pod, 2)), (0, 1));
    // Echo: the reply to A's request passes A's deny-all ingress.
    assert_eq!(node.sent_by_pod(&echo(POD_A, REMOTE, true), node.host_a).verdict, TC_ACT_REDIRECT);
    assert_eq!(node.to_pod(&echo(REMOTE, POD_A, false), node.host_a).verdict, TC_ACT_UNSPEC);
    assert_eq!(node.to_pod(&echo(REMOTE, POD_A, true), node.host_a).verdict, TC_ACT_SHOT, "a request is new");
}

#[test]
fn icmpv6_errors_about_a_known_connection_pass_and_others_do_not() {
    let mut node = Node::new("policy-errors", 0);
    set_rules(&mut node.pod, POD_A, INGRESS, 1, &deny_all(), false);
    let sent = tcp(POD_A, 40000, REMOTE, 443);
    assert_eq!(node.sent_by_pod(&sent, node.host_a).verdict, TC_ACT_REDIRECT);
    assert_eq!(node.to_pod(&too_big(ROUTER, POD_A, &sent), node.host_a).verdict, TC_ACT_UNSPEC, "about A's connection");
    let never_sent = tcp(POD_A, 40001, REMOTE, 443);
    assert_eq!(node.to_pod(&too_big(ROUTER, POD_A, &never_sent), node.host_a).verdict, TC_ACT_SHOT, "about nothing known");
    assert_eq!(node.counted(Direction::V6N_DIRECTION_TO_POD, Reason::V6N_REASON_DROP_POLICY_INGRESS), 1);
}

#[test]
fn neighbour_discovery_is_the_links_own_business() {
    let mut node = Node::new("policy-nd", 0);
    set_rules(&mut node.pod, POD_B, INGRESS, 1, &deny_all(), false);
    set_rules(&mut node.pod, POD_B, EGRESS, 2, &deny_all(), false);
    // A unicast neighbour solicitation to B's own address, from the host's link-local one.
    let mut ns = vec![135, 0, 0, 0, 0, 0, 0, 0];
    ns.extend_from_slice(&POD_B.octets());
    let ns = ethernet(ETH_IPV6, &ipv6("fe80::1".parse().unwrap(), POD_B, 255, 58, &ns, Some(2)));
    assert_eq!(node.to_pod(&ns, node.host_b).verdict, TC_ACT_UNSPEC);
    // Its answer, to the node's global address: ND by type, whatever the addresses.
    let mut na = vec![136, 0, 0, 0, 0x40, 0, 0, 0];
    na.extend_from_slice(&POD_B.octets());
    let na = ethernet(ETH_IPV6, &ipv6(POD_B, NODE, 255, 58, &na, Some(2)));
    assert_eq!(node.sent_by_pod(&na, node.host_b).verdict, TC_ACT_UNSPEC);
    assert_eq!(denied(&node.pod, 1) + denied(&node.pod, 2), 0);
}

/// `packet` as it arrives on the uplink, from the router.
fn from_outside(mut packet: Vec<u8>) -> Vec<u8> {
    packet[..12].copy_from_slice(&[UPLINK_MAC, ROUTER_MAC].concat());
    packet
}

#[test]
fn xdp_drops_what_a_pods_ingress_policy_denies_from_outside_and_leaves_the_rest_to_tc() {
    let mut node = Node::with_xdp("policy-xdp");
    set_rules(&mut node.pod, POD_B, INGRESS, 7, &rules(vec![Rule { peers: only(OUTSIDE), ports: tcp_ports(8080, 8080) }]), false);
    set_rules(&mut node.pod, POD_A, INGRESS, 5, &deny_all(), true);
    set_events(&mut node.pod, true, 1000, 100);
    let xdp = |node: &Node, packet: &[u8]| run_xdp(node.xdp.as_ref().unwrap(), "v6n_xdp_uplink", packet, node.uplink);

    for (what, packet) in [
        ("another peer", from_outside(tcp(REMOTE, 40000, POD_B, 8080))),
        ("UDP on the TCP port", from_outside(udp(OUTSIDE, 40001, POD_B, 8080))),
    ] {
        assert_eq!(xdp(&node, &packet).0, XDP_DROP, "{what}: dropped in the driver");
        let sent = events(&mut node.pod);
        let reported = sent.iter().map(|e| (kind(e), e.reason, e.direction, e.policy_id)).collect::<Vec<_>>();
        let drop =
            (EventKind::V6N_EVENT_DROP, Reason::V6N_REASON_DROP_POLICY_INGRESS as u8, Direction::V6N_DIRECTION_XDP as u8, 7);
        assert_eq!(reported, vec![drop], "{what}: one drop event, naming the rules");
        assert_eq!(node.arriving_from_outside(&packet).verdict, TC_ACT_SHOT, "{what}: as tc drops it");
        events(&mut node.pod);
    }
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_XDP, Reason::V6N_REASON_DROP_POLICY_INGRESS), 2);
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_DROP_POLICY_INGRESS), 2);
    assert_eq!(denied(&node.pod, 7), 4, "by the rules, at XDP and at tc alike");

    // B's own connection out: its answers are known, and pass.
    assert_eq!(node.sent_by_pod(&tcp(POD_B, 40002, REMOTE, 443), node.host_b).verdict, TC_ACT_REDIRECT);
    events(&mut node.pod); // its new flow's
    let mut passes = vec![
        ("the allowed peer and port", from_outside(tcp(OUTSIDE, 40003, POD_B, 8080))),
        ("an answer to B's own connection", from_outside(tcp(REMOTE, 443, POD_B, 40002))),
        ("audited, not denied", from_outside(tcp(REMOTE, 40004, POD_A, 8080))),
        ("ICMPv6, tc's to judge", from_outside(echo(REMOTE, POD_B, true))),
    ];
    let mut last_hop = from_outside(tcp(REMOTE, 40005, POD_B, 8080));
    last_hop[14 + 7] = 1;
    passes.push(("hop limit out: the stack answers", last_hop));
    for (what, packet) in &passes {
        assert_eq!(xdp(&node, packet), (XDP_PASS, packet.clone()), "{what}: passes untouched");
    }
    assert!(events(&mut node.pod).is_empty(), "what XDP passes, it does not report");
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_XDP, Reason::V6N_REASON_DROP_POLICY_INGRESS), 2);
    assert_eq!(denied(&node.pod, 7), 4, "nothing more");
}

#[test]
fn audit_counts_what_it_would_deny_and_drops_nothing() {
    let mut node = Node::new("policy-audit", 0);
    set_rules(&mut node.pod, POD_B, INGRESS, 5, &deny_all(), true);
    for _ in 0..2 {
        assert_eq!(node.sent_by_pod(&tcp(POD_A, 40000, POD_B, 8080), node.host_a).verdict, TC_ACT_REDIRECT);
    }
    assert_eq!(denied(&node.pod, 5), 2, "each packet, as nothing is tracked for it");
    assert_eq!(node.counted(Direction::V6N_DIRECTION_TO_POD, Reason::V6N_REASON_POLICY_AUDIT), 2);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_POLICY_INGRESS), 0);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_ROUTED), 2);
}

#[test]
fn new_rules_decide_new_connections_and_established_ones_go_on() {
    let mut node = Node::new("policy-replace", 0);
    set_rules(&mut node.pod, POD_B, INGRESS, 10, &rules(vec![Rule { peers: only(POD_A), ports: tcp_ports(8080, 8080) }]), false);
    let established = tcp(POD_A, 40000, POD_B, 8080);
    assert_eq!(node.sent_by_pod(&established, node.host_a).verdict, TC_ACT_REDIRECT);
    // The agent writes the new rules under a new id, then switches the pod to it.
    set_rules(&mut node.pod, POD_B, INGRESS, 11, &rules(vec![Rule { peers: only(POD_A), ports: tcp_ports(9090, 9090) }]), false);
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40001, POD_B, 9090), node.host_a).verdict, TC_ACT_REDIRECT, "newly allowed");
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40002, POD_B, 8080), node.host_a).verdict, TC_ACT_SHOT, "no longer allowed");
    assert_eq!(node.sent_by_pod(&established, node.host_a).verdict, TC_ACT_REDIRECT, "its connection from before");
    assert_eq!((denied(&node.pod, 10), denied(&node.pod, 11)), (0, 1));
}

#[test]
fn a_packet_cut_short_is_dropped_and_counted_malformed() {
    let node = Node::new("policy-short", 0);
    // TCP by its next header, with 4 bytes of the 20 a TCP header needs.
    let short = ethernet(ETH_IPV6, &ipv6(POD_A, POD_B, 64, TCP, &[0x9c, 0x40, 0x1f, 0x90], None));
    let mut short = short;
    short[..12].copy_from_slice(&[HOST_A_MAC, POD_A_MAC].concat());
    assert_eq!(node.sent_by_pod(&short, node.host_a).verdict, TC_ACT_SHOT);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_MALFORMED), 1);
}

#[test]
fn egress_rules_judge_the_destination_and_its_port() {
    let mut node = Node::new("policy-egress", 0);
    set_rules(
        &mut node.pod,
        POD_A,
        EGRESS,
        3,
        &rules(vec![
            Rule { peers: only(POD_B), ports: Ports::Ranges(vec![PortRange { protocol: UDP, first: 53, last: 53 }]) },
            Rule { peers: only(REMOTE), ports: Ports::Any },
        ]),
        false,
    );
    let verdict = |packet: Vec<u8>| node.sent_by_pod(&packet, node.host_a).verdict;
    assert_eq!(verdict(udp(POD_A, 40000, POD_B, 53)), TC_ACT_REDIRECT);
    assert_eq!(verdict(tcp(POD_A, 40000, POD_B, 53)), TC_ACT_SHOT, "TCP 53 is not allowed");
    assert_eq!(verdict(echo(POD_A, REMOTE, true)), TC_ACT_REDIRECT, "no ports: every protocol");
    assert_eq!(verdict(tcp(POD_A, 40001, OUTSIDE, 443)), TC_ACT_SHOT);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_POLICY_EGRESS), 2);
}

fn tier_rule(action: Action, peers: Peers, ports: Ports) -> TierRule {
    TierRule { action, rule: Rule { peers, ports } }
}

#[test]
fn cluster_policy_tiers_decide_in_order_and_a_pass_hands_over_to_network_policies() {
    let mut node = Node::new("policy-tiers", 0);
    // B's ingress: the Admin tier denies A on 22 and passes A on anything
    // else to the NetworkPolicies, which allow A on 8080 only; everyone
    // else meets the Baseline tier's Deny... except that the NetworkPolicy
    // decides for B: the Baseline never applies to it.
    let admin = vec![
        tier_rule(Action::Deny, only(POD_A), tcp_ports(22, 22)),
        tier_rule(Action::Pass, only(POD_A), Ports::Any),
        tier_rule(Action::Accept, Peers::Any, tcp_ports(443, 443)),
    ];
    let isolated = DirectionRules {
        policies: vec!["Admin:a".into(), "default/np".into()],
        admin: admin.clone(),
        isolated: true,
        rules: vec![Rule { peers: only(POD_A), ports: tcp_ports(8080, 8080) }],
        baseline: vec![tier_rule(Action::Accept, Peers::Any, Ports::Any)],
    };
    set_rules(&mut node.pod, POD_B, INGRESS, 7, &isolated, false);
    let to_b =
        |node: &Node, src: Ipv6Addr, sport: u16, dport: u16| node.to_pod(&tcp(src, sport, POD_B, dport), node.host_b).verdict;
    assert_eq!(to_b(&node, POD_A, 40000, 22), TC_ACT_SHOT, "the Admin Deny");
    assert_eq!(to_b(&node, POD_A, 40001, 8080), TC_ACT_UNSPEC, "passed on, allowed by the NetworkPolicy");
    assert_eq!(to_b(&node, POD_A, 40002, 443), TC_ACT_SHOT, "passed on before the Admin Accept; no NetworkPolicy rule");
    assert_eq!(to_b(&node, OUTSIDE, 40003, 443), TC_ACT_UNSPEC, "the Admin Accept");
    assert_eq!(to_b(&node, OUTSIDE, 40004, 80), TC_ACT_SHOT, "the NetworkPolicy's deny, not the Baseline Accept");
    assert_eq!(denied(&node.pod, 7), 3);

    // Without a NetworkPolicy: the Baseline tier decides what the Admin tier passed or left.
    let baseline = DirectionRules {
        policies: vec!["Admin:a".into(), "Baseline:b".into()],
        admin,
        baseline: vec![
            tier_rule(
                Action::Pass,
                Peers::Blocks(vec![Block { net: "2001:db8:99::/48".parse().unwrap(), except: vec![] }]),
                Ports::Any,
            ),
            tier_rule(Action::Deny, Peers::Any, Ports::Any),
        ],
        ..DirectionRules::default()
    };
    set_rules(&mut node.pod, POD_B, INGRESS, 8, &baseline, false);
    assert_eq!(to_b(&node, POD_A, 40010, 8080), TC_ACT_SHOT, "passed by Admin, denied by the Baseline");
    assert_eq!(to_b(&node, OUTSIDE, 40011, 80), TC_ACT_UNSPEC, "a Baseline Pass: nothing denies it");
    assert_eq!(to_b(&node, ROUTER, 40012, 80), TC_ACT_SHOT, "the Baseline Deny");
    assert_eq!(to_b(&node, ROUTER, 40013, 443), TC_ACT_UNSPEC, "the Admin Accept first");
    assert_eq!(denied(&node.pod, 8), 2);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_TO_POD, Reason::V6N_REASON_DROP_POLICY_INGRESS), 5);
}

#[test]
fn cluster_policy_egress_rules_judge_the_destination() {
    let mut node = Node::new("policy-tiers-egress", 0);
    let rules = DirectionRules {
        policies: vec!["Admin:egress".into()],
        admin: vec![
            tier_rule(Action::Accept, only(REMOTE), Ports::Ranges(vec![PortRange { protocol: UDP, first: 53, last: 53 }])),
            tier_rule(Action::Deny, Peers::Blocks(vec![Block { net: "::/0".parse().unwrap(), except: vec![] }]), Ports::Any),
        ],
        ..DirectionRules::default()
    };
    set_rules(&mut node.pod, POD_A, EGRESS, 3, &rules, false);
    assert_eq!(node.sent_by_pod(&udp(POD_A, 40000, REMOTE, 53), node.host_a).verdict, TC_ACT_REDIRECT);
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40001, REMOTE, 53), node.host_a).verdict, TC_ACT_SHOT, "TCP is not UDP");
    assert_eq!(node.sent_by_pod(&echo(POD_A, POD_B, true), node.host_a).verdict, TC_ACT_SHOT, "ICMPv6 too");
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_POLICY_EGRESS), 2);
}
