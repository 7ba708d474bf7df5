// SPDX-License-Identifier: Apache-2.0
//! Flow events (bpf/lib/events.h): packets through the pod devices' and the
//! uplink's programs by BPF_PROG_TEST_RUN, and what each decision sent to
//! the ring, read as the agent reads it. One scenario per test: a new
//! connection, a policy drop, a malformed packet, the rate limit, events off.

mod common;

use std::net::Ipv6Addr;

use common::{
    events::{events, kind, set_events, stats},
    node::{Node, HOST_A_MAC, POD_A, POD_A_MAC, POD_B},
    policy::set_rules,
    stay_on_this_cpu, TC_ACT_REDIRECT, TC_ACT_SHOT,
};
use etherparse::PacketBuilder;
use v6node_abi::{Direction, EventKind, EventStats, FlowEvent, PolicyDirection, Reason};
use v6node_k8s::policy::DirectionRules;

fn tcp(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, syn: bool) -> Vec<u8> {
    let mut packet = Vec::new();
    let ip = PacketBuilder::ethernet2(POD_A_MAC, HOST_A_MAC).ipv6(src.octets(), dst.octets(), 64);
    let tcp = ip.tcp(sport, dport, 1, 65535);
    if syn { tcp.syn() } else { tcp.ack(1) }.write(&mut packet, b"events").unwrap();
    packet
}

#[test]
fn a_new_connection_between_pods_is_one_event_per_pod_and_its_next_packet_none() {
    let mut node = Node::new("events-new", 0);
    set_events(&mut node.pod, true, 1000, 100);
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40000, POD_B, 8080, true), node.host_a).verdict, TC_ACT_REDIRECT);
    let sent = events(&mut node.pod);
    assert_eq!(sent.len(), 2, "{sent:?}");
    let (from_a, to_b) = (&sent[0], &sent[1]);
    for (event, direction) in [(from_a, Direction::V6N_DIRECTION_FROM_POD), (to_b, Direction::V6N_DIRECTION_TO_POD)] {
        assert_eq!(kind(event), EventKind::V6N_EVENT_FLOW);
        assert_eq!(event.direction, direction as u8);
        assert_eq!(event.reason, Reason::V6N_REASON_ROUTED as u8, "the packet's fate at the exit");
        assert_eq!((Ipv6Addr::from(event.saddr), Ipv6Addr::from(event.daddr)), (POD_A, POD_B));
        assert_eq!((u16::from_be(event.sport), u16::from_be(event.dport)), (40000, 8080));
        assert_eq!((event.protocol, event.tcp_flags), (6, 0x02));
        assert_eq!((event.ifindex, event.policy_id), (node.host_a, 0));
        assert!(event.time_ns > 0);
    }
    // The connection's next packet is known: no event.
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40000, POD_B, 8080, false), node.host_a).verdict, TC_ACT_REDIRECT);
    assert!(events(&mut node.pod).is_empty());
    assert_eq!(stats(&node.pod, Reason::V6N_REASON_ROUTED).sent, 2);
}

#[test]
fn a_new_connection_reusing_a_closed_connections_ports_is_a_new_flow() {
    let mut node = Node::new("events-reuse", 0);
    set_events(&mut node.pod, true, 1000, 100);
    node.sent_by_pod(&tcp(POD_A, 40005, POD_B, 8080, true), node.host_a);
    let mut fin = tcp(POD_A, 40005, POD_B, 8080, false);
    fin[14 + 40 + 13] |= 0x01; // FIN|ACK
    let fin = fixed_checksum(fin);
    node.sent_by_pod(&fin, node.host_a);
    assert_eq!(events(&mut node.pod).len(), 2, "the first connection: one flow per pod");
    // The same ports again, a SYN: a new connection, judged and reported afresh.
    node.sent_by_pod(&tcp(POD_A, 40005, POD_B, 8080, true), node.host_a);
    assert_eq!(events(&mut node.pod).len(), 2, "the second connection on the same ports");
    // Its next packet is known.
    node.sent_by_pod(&tcp(POD_A, 40005, POD_B, 8080, false), node.host_a);
    assert!(events(&mut node.pod).is_empty());
}

/// `packet` with its TCP checksum made right again after an edit.
fn fixed_checksum(mut packet: Vec<u8>) -> Vec<u8> {
    let ip = etherparse::Ipv6HeaderSlice::from_slice(&packet[14..]).unwrap().to_header();
    let (tcp, payload) = etherparse::TcpHeader::from_slice(&packet[54..]).unwrap();
    let sum = tcp.calc_checksum_ipv6(&ip, payload).unwrap();
    packet[54 + 16..54 + 18].copy_from_slice(&sum.to_be_bytes());
    packet
}

#[test]
fn a_policy_drop_is_one_event_naming_the_rules_that_denied_it() {
    let mut node = Node::new("events-policy", 0);
    set_events(&mut node.pod, true, 1000, 100);
    let deny_all = DirectionRules { policies: vec!["default/deny".into()], isolated: true, ..DirectionRules::default() };
    set_rules(&mut node.pod, POD_B, PolicyDirection::V6N_POLICY_INGRESS, 7, &deny_all, false);
    assert_eq!(node.sent_by_pod(&tcp(POD_A, 40001, POD_B, 8080, true), node.host_a).verdict, TC_ACT_SHOT);
    let sent = events(&mut node.pod);
    // A's egress was allowed (a new flow of A's), B's ingress denied it.
    let drops: Vec<&FlowEvent> = sent.iter().filter(|e| kind(e) == EventKind::V6N_EVENT_DROP).collect();
    assert_eq!(drops.len(), 1, "{sent:?}");
    let drop = drops[0];
    assert_eq!(drop.reason, Reason::V6N_REASON_DROP_POLICY_INGRESS as u8);
    assert_eq!(drop.policy_id, 7);
    assert_eq!(drop.direction, Direction::V6N_DIRECTION_FROM_POD as u8, "where it was dropped");
    assert_eq!((Ipv6Addr::from(drop.saddr), Ipv6Addr::from(drop.daddr), u16::from_be(drop.dport)), (POD_A, POD_B, 8080));
    assert!(sent.iter().all(|e| kind(e) == EventKind::V6N_EVENT_DROP), "a dropped packet starts no flow: {sent:?}");
    // The next packet of the denied connection is dropped and reported again.
    node.sent_by_pod(&tcp(POD_A, 40001, POD_B, 8080, true), node.host_a);
    assert_eq!(events(&mut node.pod).len(), 1);
}

#[test]
fn a_malformed_packet_is_one_drop_event_with_what_could_be_read() {
    let mut node = Node::new("events-malformed", 0);
    set_events(&mut node.pod, true, 1000, 100);
    let mut packet = tcp(POD_A, 40002, POD_B, 8080, true);
    packet.truncate(14 + 40 + 10);
    assert_eq!(node.sent_by_pod(&packet, node.host_a).verdict, TC_ACT_SHOT);
    let sent = events(&mut node.pod);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((kind(&sent[0]), sent[0].reason), (EventKind::V6N_EVENT_DROP, Reason::V6N_REASON_DROP_MALFORMED as u8));
    assert_eq!(Ipv6Addr::from(sent[0].saddr), POD_A);
    // Cut within the TCP header: its ports are there, its flags are not.
    assert_eq!((u16::from_be(sent[0].sport), u16::from_be(sent[0].dport), sent[0].tcp_flags), (40002, 8080, 0));
}

#[test]
fn a_flood_of_one_drop_is_held_to_its_rate_and_counted() {
    let mut node = Node::new("events-flood", 0);
    set_events(&mut node.pod, true, 1, 3);
    let spoofed = tcp(Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0, 0, 0, 0x99), 40003, POD_B, 8080, true);
    for _ in 0..20 {
        assert_eq!(node.sent_by_pod(&spoofed, node.host_a).verdict, TC_ACT_SHOT);
    }
    // Another reason has a bucket of its own.
    let mut malformed = tcp(POD_A, 40003, POD_B, 8080, true);
    malformed.truncate(14 + 40 + 10);
    assert_eq!(node.sent_by_pod(&malformed, node.host_a).verdict, TC_ACT_SHOT);
    let sent = events(&mut node.pod);
    assert_eq!(sent.len(), 4, "the spoofing's burst, then nothing within the second; the malformed packet's");
    let spoofing = stats(&node.pod, Reason::V6N_REASON_DROP_SPOOFED);
    assert_eq!((spoofing.sent, spoofing.rate_limited, spoofing.ring_full), (3, 17, 0));
    assert_eq!(stats(&node.pod, Reason::V6N_REASON_DROP_MALFORMED).sent, 1);
}

/// A reason whose rate is used up is held back without asking the bucket
/// again until its next token is due (bpf/lib/rate.h); then it is sent.
#[test]
fn a_held_back_drop_is_sent_again_once_its_next_token_is_earned() {
    let mut node = Node::new("events-refill", 0);
    stay_on_this_cpu();
    set_events(&mut node.pod, true, 20, 1);
    let spoofed = tcp(Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0, 0, 0, 0x98), 40005, POD_B, 8080, true);
    let drop_and_count = |node: &mut Node| {
        assert_eq!(node.sent_by_pod(&spoofed, node.host_a).verdict, TC_ACT_SHOT);
        let spoofing = stats(&node.pod, Reason::V6N_REASON_DROP_SPOOFED);
        (spoofing.sent, spoofing.rate_limited)
    };
    assert_eq!(drop_and_count(&mut node), (1, 0), "the burst of one");
    assert_eq!(drop_and_count(&mut node), (1, 1), "within 50 ms: held back");
    assert_eq!(drop_and_count(&mut node), (1, 2), "held back again");
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(drop_and_count(&mut node), (2, 2), "a token earned since");
    assert_eq!(events(&mut node.pod).len(), 2);
}

#[test]
fn events_off_send_nothing() {
    let mut node = Node::new("events-off", 0);
    set_events(&mut node.pod, false, 1000, 100);
    node.sent_by_pod(&tcp(POD_A, 40004, POD_B, 8080, true), node.host_a);
    node.sent_by_pod(&tcp(Ipv6Addr::LOCALHOST, 40004, POD_B, 8080, true), node.host_a);
    assert!(events(&mut node.pod).is_empty());
    assert_eq!(stats(&node.pod, Reason::V6N_REASON_DROP_SPOOFED), EventStats::default());
}
