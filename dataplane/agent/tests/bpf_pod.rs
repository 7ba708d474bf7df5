// SPDX-License-Identifier: Apache-2.0
//! BPF host routing (bpf/pod.bpf.c, and the uplink side in bpf/host.bpf.c)
//! run by the kernel through BPF_PROG_TEST_RUN. Each test builds, in a
//! network namespace of its own, the host side of two pods' device pairs and
//! an uplink with a default route, so FIB answers are the kernel's; it then
//! sends one packet and checks verdict, rewritten headers and counters.
//! BPF_PROG_TEST_RUN reports a redirect without performing it: where the
//! packet then goes is the netns and boot tests' business.

mod common;

use std::net::Ipv6Addr;

use common::{
    counted,
    node::{Node, HOST_A_MAC, HOST_B_MAC, NODE, POD_A, POD_A_MAC, POD_B, POD_B_MAC, REMOTE, ROUTER_MAC, UPLINK_MAC},
    try_run_program, TC_ACT_REDIRECT, TC_ACT_SHOT, TC_ACT_UNSPEC,
};
use etherparse::PacketBuilder;
use v6node_abi::{Direction, Reason, ENDPOINT_NETKIT};

fn tcp6(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8) -> Vec<u8> {
    let builder =
        PacketBuilder::ethernet2(POD_A_MAC, HOST_A_MAC).ipv6(src.octets(), dst.octets(), hop_limit).tcp(40000, 8080, 1, 65535);
    let mut packet = Vec::new();
    builder.write(&mut packet, b"v6node pod").unwrap();
    packet
}

fn hop_limit(frame: &[u8]) -> u8 {
    frame[14 + 7]
}

fn macs(frame: &[u8]) -> ([u8; 6], [u8; 6]) {
    (frame[0..6].try_into().unwrap(), frame[6..12].try_into().unwrap())
}

/// Everything but the MACs and the hop limit stays as the pod sent it.
fn assert_only_routing_changed(sent: &[u8], out: &[u8]) {
    assert_eq!(sent.len(), out.len());
    let mut expected = sent.to_vec();
    expected[..12].copy_from_slice(&out[..12]);
    expected[14 + 7] = sent[14 + 7] - 1;
    assert_eq!(out, expected);
}

#[test]
fn a_veth_pod_reaches_a_pod_on_the_same_node_past_the_stack() {
    let node = Node::new("pod-to-pod-veth", 0);
    let sent = tcp6(POD_A, POD_B, 64);
    let run = node.sent_by_pod(&sent, node.host_a);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(macs(&run.packet), (POD_B_MAC, HOST_B_MAC), "B's veth only takes frames to its own MAC");
    assert_eq!(hop_limit(&run.packet), 63);
    assert_only_routing_changed(&sent, &run.packet);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_ROUTED), 1);
}

#[test]
fn a_netkit_pod_reaches_a_pod_on_the_same_node_past_the_stack() {
    let node = Node::new("pod-to-pod-netkit", ENDPOINT_NETKIT as u8);
    let sent = tcp6(POD_B, POD_A, 64);
    let run = node.sent_by_pod(&sent, node.host_b);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(macs(&run.packet), (POD_A_MAC, HOST_A_MAC));
    assert_only_routing_changed(&sent, &run.packet);
}

#[test]
fn traffic_leaving_the_node_goes_to_the_next_hop_the_fib_names() {
    let node = Node::new("pod-to-remote", 0);
    let sent = tcp6(POD_A, REMOTE, 64);
    let run = node.sent_by_pod(&sent, node.host_a);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(macs(&run.packet), (ROUTER_MAC, UPLINK_MAC));
    assert_only_routing_changed(&sent, &run.packet);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_ROUTED), 1);
}

#[test]
fn what_the_stack_must_answer_is_left_to_it_untouched() {
    let node = Node::new("pod-to-stack", 0);
    for (what, packet) in [
        ("the node's own address", tcp6(POD_A, NODE, 64)),
        ("an unreachable route", tcp6(POD_A, "2001:db8:dead::1".parse().unwrap(), 64)),
        ("hop limit 1 to a pod (Time Exceeded)", tcp6(POD_A, POD_B, 1)),
        ("hop limit 1 off the node", tcp6(POD_A, REMOTE, 1)),
        ("link-local (neighbour discovery)", tcp6(POD_A, "fe80::1".parse().unwrap(), 255)),
        ("multicast", tcp6(POD_A, "ff02::1".parse().unwrap(), 1)),
    ] {
        let run = node.sent_by_pod(&packet, node.host_a);
        assert_eq!(run.verdict, TC_ACT_UNSPEC, "{what}");
        assert_eq!(run.packet, packet, "{what}: changed on the way to the stack");
    }
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_PASS), 6);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_ROUTED), 0);
}

#[test]
fn a_pod_cannot_send_from_an_address_that_is_not_its_own() {
    let node = Node::new("spoofed", 0);
    for (what, packet, device) in [
        ("an address of no pod", tcp6(REMOTE, POD_B, 64), node.host_a),
        ("the node's address", tcp6(NODE, REMOTE, 64), node.host_a),
        ("another pod's address", tcp6(POD_B, REMOTE, 64), node.host_a),
        ("its own address, through another pod's device", tcp6(POD_A, REMOTE, 64), node.host_b),
    ] {
        assert_eq!(node.sent_by_pod(&packet, device).verdict, TC_ACT_SHOT, "{what}");
    }
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_SPOOFED), 4);
}

#[test]
fn pods_are_ipv6_only_both_ways() {
    let node = Node::new("not-ipv6", 0);
    let builder = PacketBuilder::ethernet2(POD_A_MAC, HOST_A_MAC).ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).udp(1, 2);
    let mut ipv4 = Vec::new();
    builder.write(&mut ipv4, b"ipv4").unwrap();
    assert_eq!(node.sent_by_pod(&ipv4, node.host_a).verdict, TC_ACT_SHOT);
    let to_pod = |packet: &[u8]| try_run_program(&node.pod, "v6n_to_pod", packet, node.host_a).unwrap().verdict;
    assert_eq!(to_pod(&ipv4), TC_ACT_SHOT);
    assert_eq!(to_pod(&tcp6(REMOTE, POD_A, 64)), TC_ACT_UNSPEC);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_NOT_IPV6), 1);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_TO_POD, Reason::V6N_REASON_DROP_NOT_IPV6), 1);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_TO_POD, Reason::V6N_REASON_PASS), 1);
}

#[test]
fn the_uplink_switches_packets_for_local_pods_into_them() {
    let node = Node::new("uplink", ENDPOINT_NETKIT as u8);
    let from_uplink = |packet: &[u8]| try_run_program(&node.host, "v6n_from_dev", packet, node.uplink).unwrap();
    let sent = tcp6(REMOTE, POD_B, 60);
    let run = from_uplink(&sent);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(macs(&run.packet), (POD_B_MAC, HOST_B_MAC));
    assert_only_routing_changed(&sent, &run.packet);
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_ROUTED), 1);
    for (what, packet) in [("the node", tcp6(REMOTE, NODE, 60)), ("a pod, hop limit 1", tcp6(REMOTE, POD_A, 1))] {
        let run = from_uplink(&packet);
        assert_eq!((run.verdict, run.packet), (TC_ACT_UNSPEC, packet), "{what}");
    }
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_PASS), 2);
}
