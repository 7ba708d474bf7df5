// SPDX-License-Identifier: Apache-2.0
//! SCTP Services, translated per packet: from outside through the uplink
//! (bpf/lib/nodeport.h) and from pods at their device (pod.bpf.c), as the
//! kernel runs no socket hook for SCTP. Each test sends an association's
//! packets both ways through BPF_PROG_TEST_RUN and checks what leaves:
//! addresses, ports, and a CRC32c the receiver accepts.

mod common;

use std::net::{Ipv6Addr, SocketAddrV6};

use common::{
    lb::{add_service, addr, service_stats, set_external, set_masquerade},
    node::{Node, NODE, POD_A, POD_B, REMOTE, ROUTER_MAC, UPLINK_MAC},
    packet::{ethernet, ipv6},
    try_run_program, Run, TC_ACT_REDIRECT, TC_ACT_SHOT, TC_ACT_UNSPEC,
};
use v6node_abi::{Direction, Reason};

const SCTP: u8 = 132;
const CLUSTER_IP: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 0x10);
const SERVICE_PORT: u16 = 5060;
const TARGET_PORT: u16 = 5061;
const NODE_PORT: u16 = 30132;
const CLIENT_PORT: u16 = 40000;
/// The last address of this node's pod prefix (fd00:10:0:1::/64).
const MASQUERADE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0xffff, 0xffff, 0xffff, 0xffff);
/// A pod on another node, reached through the uplink's default route.
const OTHER_POD: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 2, 0, 0, 0, 0x5);

/// CRC32c (RFC 9260 appendix A), bit by bit: the test's own oracle.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ if crc & 1 != 0 { 0x82f6_3b78 } else { 0 };
        }
    }
    !crc
}

#[test]
fn the_oracle_is_crc32c() {
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
}

/// An SCTP packet (common header and one chunk of `chunk_len` bytes) from
/// (src, sport) to (dst, dport), its checksum computed, or left zero as a
/// sender leaves it for the device.
fn sctp_frame(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, chunk_len: usize, checksum: bool) -> Vec<u8> {
    let mut sctp = Vec::new();
    sctp.extend_from_slice(&sport.to_be_bytes());
    sctp.extend_from_slice(&dport.to_be_bytes());
    sctp.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // verification tag
    sctp.extend_from_slice(&[0; 4]);
    // A DATA chunk (type 0) with its length, then a payload of `chunk_len - 4`.
    sctp.extend_from_slice(&[0, 3]);
    sctp.extend_from_slice(&(chunk_len as u16).to_be_bytes());
    sctp.extend((0..chunk_len - 4).map(|i| (i * 7 + 3) as u8));
    if checksum {
        let crc = crc32c(&sctp);
        sctp[8..12].copy_from_slice(&crc.to_le_bytes());
    }
    let mut frame = ethernet([0x86, 0xdd], &ipv6(src, dst, 64, SCTP, &sctp, None));
    frame[..12].copy_from_slice(&[UPLINK_MAC, ROUTER_MAC].concat());
    frame
}

/// (source, source port, destination, destination port) of an SCTP frame,
/// and its checksum as a receiver finds it: Some(valid) or None (left zero).
fn sctp_of(frame: &[u8]) -> ((Ipv6Addr, u16, Ipv6Addr, u16), Option<bool>) {
    let l3 = &frame[14..];
    assert_eq!(l3[6], SCTP, "an SCTP packet");
    let payload_len = u16::from_be_bytes([l3[4], l3[5]]) as usize;
    let sctp = &l3[40..40 + payload_len];
    let addr = |b: &[u8]| Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap());
    let port = |at: usize| u16::from_be_bytes([sctp[at], sctp[at + 1]]);
    let stored = u32::from_le_bytes(sctp[8..12].try_into().unwrap());
    let mut zeroed = sctp.to_vec();
    zeroed[8..12].fill(0);
    let checksum = (stored != 0).then(|| crc32c(&zeroed) == stored);
    ((addr(&l3[8..24]), port(0), addr(&l3[24..40]), port(2)), checksum)
}

fn sa(ip: Ipv6Addr, port: u16) -> SocketAddrV6 {
    addr(ip, port)
}

impl Node {
    fn arrived_on_uplink(&self, packet: &[u8]) -> Run {
        try_run_program(&self.host, "v6n_from_dev", packet, self.uplink).expect("BPF_PROG_TEST_RUN")
    }

    fn sent_to_uplink(&self, packet: &[u8]) -> Run {
        try_run_program(&self.host, "v6n_to_dev", packet, self.uplink).expect("BPF_PROG_TEST_RUN")
    }
}

#[test]
fn an_association_from_outside_reaches_a_pod_and_its_checksum_follows_the_ports() {
    let mut node = Node::new("sctp-nodeport", 0);
    add_service(&mut node.host, 1, sa(NODE, NODE_PORT), SCTP, &[sa(POD_A, TARGET_PORT)], None);
    set_external(&mut node.host, sa(NODE, NODE_PORT), SCTP, &[100]);

    // Sizes whose lengths set different bits of the CRC's shift.
    for (i, chunk_len) in [16usize, 1004, 1400].into_iter().enumerate() {
        let client_port = CLIENT_PORT + i as u16;
        let run = node.arrived_on_uplink(&sctp_frame(REMOTE, client_port, NODE, NODE_PORT, chunk_len, true));
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "into pod A's namespace");
        assert_eq!(sctp_of(&run.packet), ((REMOTE, client_port, POD_A, TARGET_PORT), Some(true)), "chunk {chunk_len}");

        let reply = node.sent_by_pod(&sctp_frame(POD_A, TARGET_PORT, REMOTE, client_port, chunk_len, true), node.host_a);
        assert_eq!(reply.verdict, TC_ACT_REDIRECT, "to the router");
        assert_eq!(sctp_of(&reply.packet), ((NODE, NODE_PORT, REMOTE, client_port), Some(true)));
    }
    // A checksum the sender left to its device stays left.
    let run = node.arrived_on_uplink(&sctp_frame(REMOTE, CLIENT_PORT, NODE, NODE_PORT, 16, false));
    assert_eq!(sctp_of(&run.packet), ((REMOTE, CLIENT_PORT, POD_A, TARGET_PORT), None));
    assert_eq!(service_stats(&node.host, 1), (3, 0), "three associations");
}

#[test]
fn a_pod_reaches_a_cluster_ip_over_sctp_with_a_backend_here_and_the_reply_shows_the_service() {
    let mut node = Node::new("sctp-cluster-ip", 0);
    add_service(&mut node.host, 2, sa(CLUSTER_IP, SERVICE_PORT), SCTP, &[sa(POD_B, TARGET_PORT)], None);

    for _ in 0..2 {
        let run = node.sent_by_pod(&sctp_frame(POD_A, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT, 100, true), node.host_a);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "into pod B");
        assert_eq!(sctp_of(&run.packet), ((POD_A, CLIENT_PORT, POD_B, TARGET_PORT), Some(true)));

        let reply = node.sent_by_pod(&sctp_frame(POD_B, TARGET_PORT, POD_A, CLIENT_PORT, 100, true), node.host_b);
        assert_eq!(reply.verdict, TC_ACT_REDIRECT, "into pod A");
        assert_eq!(sctp_of(&reply.packet), ((CLUSTER_IP, SERVICE_PORT, POD_A, CLIENT_PORT), Some(true)));
    }
    assert_eq!(service_stats(&node.host, 2), (1, 0), "one association, then packets of it");

    // TCP to the same address and port is not the SCTP Service: the socket
    // hooks serve TCP, and the device leaves it alone.
    let tcp = common::packet::tcp(CLIENT_PORT, SERVICE_PORT, b"x");
    let mut frame = ethernet([0x86, 0xdd], &ipv6(POD_A, CLUSTER_IP, 64, 6, &tcp, Some(16)));
    frame[..12].copy_from_slice(&[UPLINK_MAC, ROUTER_MAC].concat());
    let run = node.sent_by_pod(&frame, node.host_a);
    assert_eq!(&run.packet[14 + 24..14 + 40], &CLUSTER_IP.octets(), "TCP untouched");
}

#[test]
fn a_pod_reaches_a_backend_on_another_node_and_the_reply_comes_back_through_the_uplink() {
    let mut node = Node::new("sctp-remote-backend", 0);
    add_service(&mut node.host, 3, sa(CLUSTER_IP, SERVICE_PORT), SCTP, &[sa(OTHER_POD, SERVICE_PORT)], None);

    let run = node.sent_by_pod(&sctp_frame(POD_A, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT, 64, true), node.host_a);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "out of the uplink");
    assert_eq!(&run.packet[..6], &ROUTER_MAC, "to the router");
    assert_eq!(sctp_of(&run.packet), ((POD_A, CLIENT_PORT, OTHER_POD, SERVICE_PORT), Some(true)));

    let reply = node.arrived_on_uplink(&sctp_frame(OTHER_POD, SERVICE_PORT, POD_A, CLIENT_PORT, 64, true));
    assert_eq!(reply.verdict, TC_ACT_REDIRECT, "into pod A");
    assert_eq!(sctp_of(&reply.packet), ((CLUSTER_IP, SERVICE_PORT, POD_A, CLIENT_PORT), Some(true)));
}

#[test]
fn a_pod_that_reaches_itself_through_the_service_comes_in_from_the_masquerade_address() {
    let mut node = Node::new("sctp-hairpin", 0);
    add_service(&mut node.host, 5, sa(CLUSTER_IP, SERVICE_PORT), SCTP, &[sa(POD_A, TARGET_PORT)], None);
    set_masquerade(&mut node.host, MASQUERADE);

    let run = node.sent_by_pod(&sctp_frame(POD_A, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT, 64, true), node.host_a);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "back into pod A");
    let ((src, masq_port, dst, dport), checksum) = sctp_of(&run.packet);
    assert_eq!((src, dst, dport, checksum), (MASQUERADE, POD_A, TARGET_PORT, Some(true)));

    // Its answer to the masquerade address leaves the pod and comes back
    // as the Service's, to the port it asked from.
    let reply = node.sent_by_pod(&sctp_frame(POD_A, TARGET_PORT, MASQUERADE, masq_port, 64, true), node.host_a);
    assert_eq!(reply.verdict, TC_ACT_REDIRECT, "into pod A");
    assert_eq!(sctp_of(&reply.packet), ((CLUSTER_IP, SERVICE_PORT, POD_A, CLIENT_PORT), Some(true)));
}

#[test]
fn the_nodes_own_sctp_to_a_cluster_ip_is_sent_on_at_the_uplink_and_the_replies_reach_it_as_the_services() {
    let mut node = Node::new("sctp-from-node", 0);
    add_service(&mut node.host, 6, sa(CLUSTER_IP, SERVICE_PORT), SCTP, &[sa(POD_B, TARGET_PORT)], None);
    add_service(&mut node.host, 7, sa(CLUSTER_IP, SERVICE_PORT + 1), SCTP, &[sa(OTHER_POD, SERVICE_PORT)], None);

    // Routed to the uplink by the default route, it goes into pod B instead.
    let run = node.sent_to_uplink(&sctp_frame(NODE, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT, 64, true));
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "into pod B");
    assert_eq!(sctp_of(&run.packet), ((NODE, CLIENT_PORT, POD_B, TARGET_PORT), Some(true)));
    let reply = node.sent_by_pod(&sctp_frame(POD_B, TARGET_PORT, NODE, CLIENT_PORT, 64, true), node.host_b);
    assert_eq!(reply.verdict, TC_ACT_UNSPEC, "to the node's own stack");
    assert_eq!(sctp_of(&reply.packet), ((CLUSTER_IP, SERVICE_PORT, NODE, CLIENT_PORT), Some(true)));

    // A backend on another node: out of the uplink to the router, and the
    // answer coming in is the Service's.
    let run = node.sent_to_uplink(&sctp_frame(NODE, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT + 1, 64, true));
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(&run.packet[..6], &ROUTER_MAC, "to the router");
    assert_eq!(sctp_of(&run.packet), ((NODE, CLIENT_PORT, OTHER_POD, SERVICE_PORT), Some(true)));
    let reply = node.arrived_on_uplink(&sctp_frame(OTHER_POD, SERVICE_PORT, NODE, CLIENT_PORT, 64, true));
    assert_eq!(reply.verdict, TC_ACT_UNSPEC, "to the node's own stack");
    assert_eq!(sctp_of(&reply.packet), ((CLUSTER_IP, SERVICE_PORT + 1, NODE, CLIENT_PORT), Some(true)));

    // The node's own SCTP to what is no Service leaves as it is.
    let run = node.sent_to_uplink(&sctp_frame(NODE, CLIENT_PORT, REMOTE, SERVICE_PORT, 64, true));
    assert_eq!(run.verdict, TC_ACT_UNSPEC);
    assert_eq!(sctp_of(&run.packet), ((NODE, CLIENT_PORT, REMOTE, SERVICE_PORT), Some(true)));
}

#[test]
fn the_node_reaching_a_host_network_backend_of_its_own_over_sctp_is_refused_and_counted() {
    let mut node = Node::new("sctp-node-self", 0);
    add_service(&mut node.host, 8, sa(CLUSTER_IP, SERVICE_PORT), SCTP, &[sa(NODE, TARGET_PORT)], None);
    let run = node.sent_to_uplink(&sctp_frame(NODE, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT, 64, true));
    assert_eq!(run.verdict, TC_ACT_SHOT);
    assert_eq!(common::counted(&node.host, Direction::V6N_DIRECTION_EGRESS, Reason::V6N_REASON_DROP_NO_BACKEND), 1);
    assert_eq!(service_stats(&node.host, 8), (0, 1), "refused");
}

#[test]
fn sctp_to_a_service_without_backends_is_dropped_and_counted() {
    let mut node = Node::new("sctp-no-backend", 0);
    add_service(&mut node.host, 4, sa(CLUSTER_IP, SERVICE_PORT), SCTP, &[], None);

    let run = node.sent_by_pod(&sctp_frame(POD_A, CLIENT_PORT, CLUSTER_IP, SERVICE_PORT, 16, true), node.host_a);
    assert_eq!(run.verdict, TC_ACT_SHOT);
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_NO_BACKEND), 1);
    assert_eq!(service_stats(&node.host, 4), (0, 1), "refused");

    // SCTP to an address that is no Service goes on as it is.
    let run = node.sent_by_pod(&sctp_frame(POD_A, CLIENT_PORT, POD_B, SERVICE_PORT, 16, true), node.host_a);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(sctp_of(&run.packet), ((POD_A, CLIENT_PORT, POD_B, SERVICE_PORT), Some(true)));
}
