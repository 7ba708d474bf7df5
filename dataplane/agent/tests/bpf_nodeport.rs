// SPDX-License-Identifier: Apache-2.0
//! Services reached from outside (bpf/lib/nodeport.h): the uplink's per-packet
//! translation and its connection tracking, run by the kernel through
//! BPF_PROG_TEST_RUN in a node of the test's own (common/node.rs). Each test
//! sends a connection's packets both ways and checks what leaves: addresses,
//! ports, checksums, verdicts and counters.

mod common;

use std::net::Ipv6Addr;

use aya::maps::{DevMapHash, HashMap, MapData};
use common::{
    counted,
    events::{events, set_events},
    ifindex, ip,
    lb::{add_service, addr, remove_backend, service_stats, set_external, set_lb_config, set_masquerade, TCP, UDP},
    node::{Node, HOST_B_MAC, NODE, POD_A, POD_B, POD_B_MAC, REMOTE, ROUTER_MAC, UPLINK_MAC},
    packet::{assert_well_formed, ethernet, fold, icmp, ipv6, pseudo6, sum16, ETH_IPV6},
    run_xdp, stay_on_this_cpu, try_run_program, try_run_skb, Run, SkbIn, TC_ACT_REDIRECT, TC_ACT_SHOT, TC_ACT_UNSPEC, XDP_DROP,
    XDP_PASS, XDP_REDIRECT, XDP_TX,
};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use v6node_abi::{
    maps, CtKey, CtValue, Direction, EndpointKey, EndpointValue, Reason, DSR_OPT_TYPE, EVENT_SERVICE, EVENT_XLAT, LB_DSR,
    LB_DSR_IP6IP6,
};
use v6node_api::format_mac;

const NODE_PORT: u16 = 30080;
const TARGET_PORT: u16 = 8080;
const CLIENT_PORT: u16 = 40000;
/// A pod on another node, reached through the uplink's default route.
const OTHER_POD: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 2, 0, 0, 0, 0x5);
/// The last address of this node's pod prefix (fd00:10:0:1::/64).
const MASQUERADE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0xffff, 0xffff, 0xffff, 0xffff);
const SECOND_CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 2);

fn segment(proto: u8, src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, syn: bool) -> Vec<u8> {
    let ip = PacketBuilder::ethernet2(ROUTER_MAC, UPLINK_MAC).ipv6(src.octets(), dst.octets(), 64);
    let mut packet = Vec::new();
    let payload = b"v6node nodeport";
    if proto == UDP {
        ip.udp(sport, dport).write(&mut packet, payload).unwrap();
    } else if syn {
        ip.tcp(sport, dport, 1, 65535).syn().write(&mut packet, payload).unwrap();
    } else {
        ip.tcp(sport, dport, 2, 65535).ack(1).write(&mut packet, payload).unwrap();
    }
    packet
}

/// An ICMPv6 echo request from `src` to `dst`.
fn icmp_echo(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut packet = Vec::new();
    PacketBuilder::ethernet2(ROUTER_MAC, UPLINK_MAC)
        .ipv6(src.octets(), dst.octets(), 64)
        .icmpv6_echo_request(7, 1)
        .write(&mut packet, b"ping")
        .unwrap();
    packet
}

/// (source, source port, destination, destination port) of a frame.
fn tuple(frame: &[u8]) -> (Ipv6Addr, u16, Ipv6Addr, u16) {
    let sliced = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(NetSlice::Ipv6(ip)) = sliced.net else { panic!("not IPv6") };
    let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
    match sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => (src, tcp.source_port(), dst, tcp.destination_port()),
        Some(TransportSlice::Udp(udp)) => (src, udp.source_port(), dst, udp.destination_port()),
        other => panic!("unexpected transport {other:?}"),
    }
}

/// A router on the path (the client's side or the cluster's).
const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1);
const PACKET_TOO_BIG: u8 = 2;
const DESTINATION_UNREACHABLE: u8 = 1;
const PORT_UNREACHABLE: u8 = 4;

/// An ICMPv6 error from `from` to `to` quoting `quoted` (an Ethernet frame as
/// `segment` builds it; its IPv6 packet is quoted whole).
fn icmp_error(kind: u8, code: u8, rest: [u8; 4], from: Ipv6Addr, to: Ipv6Addr, quoted: &[u8]) -> Vec<u8> {
    let message = icmp(kind, code, rest, &quoted[14..]);
    let mut frame = ethernet(ETH_IPV6, &ipv6(from, to, 64, 58, &message, Some(2)));
    frame[..12].copy_from_slice(&[UPLINK_MAC, ROUTER_MAC].concat());
    frame
}

/// What an ICMPv6 error says: (source, destination), the quoted packet's
/// (source, source port, destination, destination port), and whether the
/// quoted transport checksum is right for its addresses; the error's own
/// checksum is checked by assert_well_formed.
fn quoted(frame: &[u8]) -> ((Ipv6Addr, Ipv6Addr), (Ipv6Addr, u16, Ipv6Addr, u16), bool) {
    assert_well_formed(frame);
    let l3 = &frame[14..];
    assert_eq!(l3[6], 58, "an ICMPv6 message");
    let addr = |b: &[u8]| Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap());
    let inner = &l3[48..];
    let payload = &inner[40..];
    let port = |at: usize| u16::from_be_bytes([payload[at], payload[at + 1]]);
    let csum_ok = fold(pseudo6(&inner[8..24], &inner[24..40], inner[6], payload.len()) + sum16(payload)) == 0;
    ((addr(&l3[8..24]), addr(&l3[24..40])), (addr(&inner[8..24]), port(0), addr(&inner[24..40]), port(2)), csum_ok)
}

impl Node {
    fn arrived_on_uplink(&self, packet: &[u8]) -> Run {
        try_run_program(&self.host, "v6n_from_dev", packet, self.uplink).expect("BPF_PROG_TEST_RUN")
    }

    fn sent_to_uplink(&self, packet: &[u8]) -> Run {
        try_run_program(&self.host, "v6n_to_dev", packet, self.uplink).expect("BPF_PROG_TEST_RUN")
    }

    fn ingress(&self, reason: Reason) -> u64 {
        counted(&self.host, Direction::V6N_DIRECTION_INGRESS, reason)
    }

    /// A NodePort on the node's address with `backends` (ids 100, 101, ...),
    /// all of them in its Maglev table.
    fn node_port(&mut self, proto: u8, backends: &[(Ipv6Addr, u16)], affinity: Option<u32>) {
        let list: Vec<_> = backends.iter().map(|(ip, port)| addr(*ip, *port)).collect();
        add_service(&mut self.host, 1, addr(NODE, NODE_PORT), proto, &list, affinity);
        let ids: Vec<u32> = (0..backends.len() as u32).map(|i| 100 + i).collect();
        set_external(&mut self.host, addr(NODE, NODE_PORT), proto, &ids);
        set_masquerade(&mut self.host, MASQUERADE);
    }
}

#[test]
fn a_connection_from_outside_reaches_a_pod_here_with_the_clients_address() {
    for proto in [TCP, UDP] {
        let mut node = Node::new(&format!("nodeport-local-{proto}"), 0);
        node.node_port(proto, &[(POD_A, TARGET_PORT)], None);

        let first = node.arrived_on_uplink(&segment(proto, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
        assert_eq!(first.verdict, TC_ACT_REDIRECT, "into pod A's namespace");
        assert_eq!(tuple(&first.packet), (REMOTE, CLIENT_PORT, POD_A, TARGET_PORT));
        assert_well_formed(&first.packet);

        // The pod's reply leaves as the NodePort's, towards the router.
        let reply = node.sent_by_pod(&segment(proto, POD_A, TARGET_PORT, REMOTE, CLIENT_PORT, false), node.host_a);
        assert_eq!(reply.verdict, TC_ACT_REDIRECT);
        assert_eq!(tuple(&reply.packet), (NODE, NODE_PORT, REMOTE, CLIENT_PORT));
        assert_eq!(&reply.packet[..12], [ROUTER_MAC, UPLINK_MAC].concat());
        assert_well_formed(&reply.packet);

        let next = node.arrived_on_uplink(&segment(proto, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false));
        assert_eq!(tuple(&next.packet), (REMOTE, CLIENT_PORT, POD_A, TARGET_PORT));
        assert_well_formed(&next.packet);
        assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRANSLATED), 1, "one new connection");
        assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRACKED), 1, "then a packet of it");
        assert_eq!(service_stats(&node.host, 1), (1, 0));
    }
}

#[test]
fn a_backend_on_another_node_gets_the_connection_from_the_masquerade_address() {
    let mut node = Node::new("nodeport-remote", 0);
    node.node_port(TCP, &[(OTHER_POD, TARGET_PORT)], None);

    let first = node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
    assert_eq!(first.verdict, TC_ACT_REDIRECT, "out to the next hop");
    assert_eq!(&first.packet[..12], [ROUTER_MAC, UPLINK_MAC].concat());
    assert_eq!(tuple(&first.packet), (MASQUERADE, CLIENT_PORT, OTHER_POD, TARGET_PORT), "the client's port is kept while free");
    assert_well_formed(&first.packet);

    // The backend's reply comes back here and goes on to the client.
    let reply = node.arrived_on_uplink(&segment(TCP, OTHER_POD, TARGET_PORT, MASQUERADE, CLIENT_PORT, false));
    assert_eq!(reply.verdict, TC_ACT_REDIRECT);
    assert_eq!(tuple(&reply.packet), (NODE, NODE_PORT, REMOTE, CLIENT_PORT));
    assert_well_formed(&reply.packet);

    // Another client with the same port: the masquerade port is taken.
    let second = node.arrived_on_uplink(&segment(TCP, SECOND_CLIENT, CLIENT_PORT, NODE, NODE_PORT, true));
    let (src, sport, dst, _) = tuple(&second.packet);
    assert_eq!((src, dst), (MASQUERADE, OTHER_POD));
    assert_ne!(sport, CLIENT_PORT, "a second connection may not reuse a held port");
    let reply = node.arrived_on_uplink(&segment(TCP, OTHER_POD, TARGET_PORT, MASQUERADE, sport, false));
    assert_eq!(tuple(&reply.packet), (NODE, NODE_PORT, SECOND_CLIENT, CLIENT_PORT));
    assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRANSLATED), 2);
    assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRACKED), 2);
}

#[test]
fn a_new_connection_is_one_flow_event_naming_its_frontend_and_the_backend_chosen() {
    let mut node = Node::new("nodeport-event", 0);
    node.node_port(TCP, &[(OTHER_POD, TARGET_PORT)], None);
    set_events(&mut node.host, true, 1000, 100);
    node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
    let sent = events(&mut node.host);
    assert_eq!(sent.len(), 1, "{sent:?}");
    let e = &sent[0];
    assert_eq!((e.reason, e.direction), (Reason::V6N_REASON_LB_TRANSLATED as u8, Direction::V6N_DIRECTION_INGRESS as u8));
    assert_eq!(e.translated, (EVENT_SERVICE | EVENT_XLAT) as u8);
    assert_eq!(e.frontend, 1);
    // Before: the client to the NodePort; the packet as it left: masqueraded, to the backend.
    assert_eq!(
        (Ipv6Addr::from(e.xlat_saddr), u16::from_be(e.xlat_sport), Ipv6Addr::from(e.xlat_daddr), u16::from_be(e.xlat_dport)),
        (REMOTE, CLIENT_PORT, NODE, NODE_PORT)
    );
    assert_eq!(
        (Ipv6Addr::from(e.saddr), u16::from_be(e.sport), Ipv6Addr::from(e.daddr), u16::from_be(e.dport)),
        (MASQUERADE, CLIENT_PORT, OTHER_POD, TARGET_PORT)
    );
    // The connection's next packet and the reply are no new flows.
    node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false));
    node.arrived_on_uplink(&segment(TCP, OTHER_POD, TARGET_PORT, MASQUERADE, CLIENT_PORT, false));
    assert!(events(&mut node.host).is_empty());
}

#[test]
fn a_backend_in_the_nodes_own_namespace_answers_through_the_uplink() {
    let mut node = Node::new("nodeport-host", 0);
    node.node_port(TCP, &[(NODE, TARGET_PORT)], None);

    let first = node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
    assert_eq!(first.verdict, TC_ACT_UNSPEC, "to the node's stack");
    assert_eq!(tuple(&first.packet), (REMOTE, CLIENT_PORT, NODE, TARGET_PORT));
    assert_well_formed(&first.packet);

    let reply = node.sent_to_uplink(&segment(TCP, NODE, TARGET_PORT, REMOTE, CLIENT_PORT, false));
    assert_eq!(reply.verdict, TC_ACT_UNSPEC);
    assert_eq!(tuple(&reply.packet), (NODE, NODE_PORT, REMOTE, CLIENT_PORT));
    assert_well_formed(&reply.packet);
    assert_eq!(counted(&node.host, Direction::V6N_DIRECTION_EGRESS, Reason::V6N_REASON_LB_TRACKED), 1);
}

#[test]
fn a_frontend_without_backends_is_left_to_the_stack_to_refuse() {
    let mut node = Node::new("nodeport-empty", 0);
    node.node_port(TCP, &[], None);
    let packet = segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true);
    let run = node.arrived_on_uplink(&packet);
    assert_eq!((run.verdict, run.packet), (TC_ACT_UNSPEC, packet), "untouched: no listener, so a reset");
    assert_eq!(node.ingress(Reason::V6N_REASON_DROP_NO_BACKEND), 1);
    assert_eq!(service_stats(&node.host, 1), (0, 1));
}

#[test]
fn a_frontend_not_reached_from_outside_is_left_alone() {
    let mut node = Node::new("nodeport-internal", 0);
    add_service(&mut node.host, 1, addr(NODE, NODE_PORT), TCP, &[addr(POD_A, TARGET_PORT)], None);
    let packet = segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true);
    let run = node.arrived_on_uplink(&packet);
    assert_eq!((run.verdict, run.packet), (TC_ACT_UNSPEC, packet));
    assert_eq!(node.ingress(Reason::V6N_REASON_PASS), 1);
    assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRANSLATED), 0);
}

#[test]
fn a_backend_that_left_ends_its_connections_and_new_ones_go_elsewhere() {
    let mut node = Node::new("nodeport-left", 0);
    node.node_port(TCP, &[(POD_A, TARGET_PORT), (POD_B, TARGET_PORT)], None);
    let first = node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
    let (_, _, given, _) = tuple(&first.packet);
    let (left, left_id, stays, stays_id) = if given == POD_A { (POD_A, 100, POD_B, 101) } else { (POD_B, 101, POD_A, 100) };
    assert_eq!(given, left);

    remove_backend(&mut node.host, left_id);
    set_external(&mut node.host, addr(NODE, NODE_PORT), TCP, &[stays_id]);
    let next = node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false));
    assert_eq!(
        tuple(&next.packet),
        (REMOTE, CLIENT_PORT, stays, TARGET_PORT),
        "its backend answers a stray segment with a reset"
    );
    assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRANSLATED), 2);
}

#[test]
fn maglev_spreads_clients_and_affinity_keeps_a_client_on_one_backend() {
    let mut node = Node::new("nodeport-spread", 0);
    node.node_port(UDP, &[(POD_A, TARGET_PORT), (POD_B, TARGET_PORT)], None);
    let given: Vec<Ipv6Addr> = (0..32)
        .map(|i| tuple(&node.arrived_on_uplink(&segment(UDP, REMOTE, CLIENT_PORT + i, NODE, NODE_PORT, false)).packet).2)
        .collect();
    assert!(given.contains(&POD_A) && given.contains(&POD_B), "32 client ports all went to one backend: {given:?}");

    let mut node = Node::new("nodeport-affinity", 0);
    node.node_port(UDP, &[(POD_A, TARGET_PORT), (POD_B, TARGET_PORT)], Some(10800));
    let given: std::collections::BTreeSet<Ipv6Addr> = (0..32)
        .map(|i| tuple(&node.arrived_on_uplink(&segment(UDP, REMOTE, CLIENT_PORT + i, NODE, NODE_PORT, false)).packet).2)
        .collect();
    assert_eq!(given.len(), 1, "ClientIP affinity: every port of one client to one backend");
}

#[test]
fn a_packet_for_a_socket_of_the_nodes_own_is_not_taken_for_a_new_connection() {
    let mut node = Node::new("nodeport-own-socket", 0);
    node.node_port(UDP, &[(POD_A, TARGET_PORT)], None);
    // The node talks to the client from the frontend's port itself.
    let socket = std::net::UdpSocket::bind((NODE, NODE_PORT)).expect("binding in the test's netns");
    socket.connect((REMOTE, CLIENT_PORT)).unwrap();
    let packet = segment(UDP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false);
    let run = node.arrived_on_uplink(&packet);
    assert_eq!((run.verdict, run.packet), (TC_ACT_UNSPEC, packet), "left to the node's socket");
    assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRANSLATED), 0);
    drop(socket);
    wait_until_no_udp_socket_has_port(NODE_PORT);
    let run = node.arrived_on_uplink(&segment(UDP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false));
    assert_eq!(tuple(&run.packet).2, POD_A, "without the socket, a new connection");
}

/// Closing a socket frees it only once no process holds it: another test's
/// `ip`, forked at that moment, holds it until it runs `exec`.
fn wait_until_no_udp_socket_has_port(port: u16) {
    let local_port = format!(":{port:04X} ");
    for _ in 0..500 {
        let table = std::fs::read_to_string("/proc/thread-self/net/udp6").expect("reading this netns's UDP sockets");
        if !table
            .lines()
            .skip(1)
            .any(|line| line.split_whitespace().nth(1).is_some_and(|local| format!("{local} ").ends_with(&local_port)))
        {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("a UDP socket on port {port} still open after 5 s");
}

/// A BIG TCP segment over 64 KiB as it leaves a pod's stack: payload length
/// 0 and a hop-by-hop header holding only the jumbo option (RFC 2675).
fn jumbo_segment(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> Vec<u8> {
    let mut frame = [ROUTER_MAC, UPLINK_MAC].concat();
    frame.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 0, 64]); // payload length 0, next header: hop-by-hop
    frame.extend(src.octets());
    frame.extend(dst.octets());
    frame.extend([6, 0, 0xc2, 4]);
    frame.extend(70000u32.to_be_bytes());
    frame.extend(sport.to_be_bytes());
    frame.extend(dport.to_be_bytes());
    frame.extend([0, 0, 0, 2, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0x12, 0x34, 0, 0]);
    frame.extend([0u8; 64]);
    frame
}

#[test]
fn a_big_tcp_reply_with_its_jumbo_option_leaves_as_the_frontends() {
    let mut node = Node::new("nodeport-jumbo", 0);
    node.node_port(TCP, &[(POD_A, TARGET_PORT)], None);
    node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
    let reply = node.sent_by_pod(&jumbo_segment(POD_A, TARGET_PORT, REMOTE, CLIENT_PORT), node.host_a);
    assert_eq!(reply.verdict, TC_ACT_REDIRECT);
    let out = &reply.packet;
    let source = Ipv6Addr::from(<[u8; 16]>::try_from(&out[22..38]).unwrap());
    let sport = u16::from_be_bytes([out[62], out[63]]);
    assert_eq!((source, sport), (NODE, NODE_PORT), "found past the jumbo option and rewritten");
    assert_ne!(&out[78..80], &[0x12, 0x34], "its checksum mended");
}

#[test]
fn a_packet_too_big_from_the_clients_path_reaches_the_backend_quoting_its_own_reply() {
    for proto in [TCP, UDP] {
        let mut node = Node::new(&format!("nodeport-ptb-{proto}"), 0);
        node.node_port(proto, &[(POD_A, TARGET_PORT)], None);
        node.arrived_on_uplink(&segment(proto, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
        let reply = node.sent_by_pod(&segment(proto, POD_A, TARGET_PORT, REMOTE, CLIENT_PORT, false), node.host_a);

        // A router towards the client cannot take the reply as it left.
        let error = icmp_error(PACKET_TOO_BIG, 0, 1280u32.to_be_bytes(), ROUTER, NODE, &reply.packet);
        let run = node.arrived_on_uplink(&error);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "into pod A's namespace");
        let (outer, inner, csum_ok) = quoted(&run.packet);
        assert_eq!(outer, (ROUTER, POD_A), "from the router, to the backend");
        assert_eq!(inner, (POD_A, TARGET_PORT, REMOTE, CLIENT_PORT), "the reply as the pod sent it");
        assert!(csum_ok, "the quoted reply's checksum follows its addresses");
        assert_eq!(&run.packet[58..62], 1280u32.to_be_bytes(), "the MTU is kept");
        assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRACKED), 1);
    }
}

#[test]
fn an_error_about_a_masqueraded_packet_goes_back_to_the_client_quoting_what_it_sent() {
    let mut node = Node::new("nodeport-error-remote", 0);
    node.node_port(TCP, &[(OTHER_POD, TARGET_PORT)], None);
    let forwarded = node.arrived_on_uplink(&segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));
    assert_eq!(tuple(&forwarded.packet), (MASQUERADE, CLIENT_PORT, OTHER_POD, TARGET_PORT));

    // A router in the cluster's network, towards the other node, says so to
    // the masquerade address.
    let error = icmp_error(PACKET_TOO_BIG, 0, 1400u32.to_be_bytes(), ROUTER, MASQUERADE, &forwarded.packet);
    let run = node.arrived_on_uplink(&error);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "out to the next hop, towards the client");
    let (outer, inner, csum_ok) = quoted(&run.packet);
    assert_eq!(outer, (ROUTER, REMOTE));
    assert_eq!(inner, (REMOTE, CLIENT_PORT, NODE, NODE_PORT), "the packet as the client sent it");
    assert!(csum_ok);
}

#[test]
fn a_backends_port_unreachable_reaches_the_client_from_the_frontend() {
    let mut node = Node::new("nodeport-unreachable", 0);
    node.node_port(UDP, &[(POD_A, TARGET_PORT)], None);
    let delivered = node.arrived_on_uplink(&segment(UDP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true));

    // Nothing listens in the pod: its kernel answers from the pod's address.
    let error = icmp_error(DESTINATION_UNREACHABLE, PORT_UNREACHABLE, [0; 4], POD_A, REMOTE, &delivered.packet);
    let run = node.sent_by_pod(&error, node.host_a);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let (outer, inner, csum_ok) = quoted(&run.packet);
    assert_eq!(outer, (NODE, REMOTE), "from the frontend's address: the client never knew the pod's");
    assert_eq!(inner, (REMOTE, CLIENT_PORT, NODE, NODE_PORT));
    assert!(csum_ok);
}

#[test]
fn an_error_about_a_connection_nobody_tracks_is_left_alone() {
    let mut node = Node::new("nodeport-error-untracked", 0);
    node.node_port(TCP, &[(POD_A, TARGET_PORT)], None);
    // The node's own connection to the client, not through a frontend.
    let own = segment(TCP, NODE, 50000, REMOTE, 443, false);
    let error = icmp_error(PACKET_TOO_BIG, 0, 1280u32.to_be_bytes(), ROUTER, NODE, &own);
    let run = node.arrived_on_uplink(&error);
    assert_eq!((run.verdict, run.packet), (TC_ACT_UNSPEC, error), "the node's stack takes it as it came");
    assert_eq!(node.ingress(Reason::V6N_REASON_LB_TRACKED), 0);
}

/// A load-balancer IP every node announces (ECMP): a flow may land on any.
const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x5, 0, 0, 0, 0, 1);
const LB_PORT: u16 = 80;
const DSTOPTS: u8 = 60;

impl Node {
    /// VIP:LB_PORT reached from outside with `backend` (id 100) in its
    /// Maglev table, backends elsewhere answering directly (LB_DSR).
    fn dsr_frontend(&mut self, proto: u8, backend: Ipv6Addr) {
        add_service(&mut self.host, 1, addr(VIP, LB_PORT), proto, &[addr(backend, TARGET_PORT)], None);
        set_external(&mut self.host, addr(VIP, LB_PORT), proto, &[100]);
        set_lb_config(&mut self.host, MASQUERADE, LB_DSR);
    }

    /// As `dsr_frontend`, every packet to the backend inside an outer IPv6
    /// header (LB_DSR_IP6IP6).
    fn dsr_ip6ip6_frontend(&mut self, proto: u8, backend: Ipv6Addr) {
        self.dsr_frontend(proto, backend);
        set_lb_config(&mut self.host, MASQUERADE, LB_DSR | LB_DSR_IP6IP6);
    }

    /// OTHER_POD as a pod of this node, behind host_b.
    fn with_other_pod(&mut self) {
        let mut endpoints: HashMap<&mut MapData, EndpointKey, EndpointValue> =
            HashMap::try_from(self.pod.map_mut(maps::ENDPOINTS).unwrap()).unwrap();
        let value = EndpointValue { ifindex: self.host_b, pod_mac: POD_B_MAC, host_mac: HOST_B_MAC, flags: 0, pad: [0; 3] };
        endpoints.insert(EndpointKey { addr: OTHER_POD.octets() }, value, 0).unwrap();
    }
}

/// What a node that receives `packet` and sends its flow to OTHER_POD on
/// another node sends on: a node of its own, in a thread of its own (a
/// network namespace of its own), as each node of a cluster is.
fn forwarded_by_a_receiving_node(test: &str, proto: u8, packet: Vec<u8>) -> Run {
    sent_on_by_a_node_set_up_by(
        test,
        packet,
        if proto == TCP { |n| n.dsr_frontend(TCP, OTHER_POD) } else { |n| n.dsr_frontend(UDP, OTHER_POD) },
    )
}

/// As `forwarded_by_a_receiving_node`, the receiving node in `dsr-ip6ip6` mode.
fn encapsulated_by_a_receiving_node(test: &str, proto: u8, packet: Vec<u8>) -> Run {
    sent_on_by_a_node_set_up_by(
        test,
        packet,
        if proto == TCP { |n| n.dsr_ip6ip6_frontend(TCP, OTHER_POD) } else { |n| n.dsr_ip6ip6_frontend(UDP, OTHER_POD) },
    )
}

fn sent_on_by_a_node_set_up_by(test: &str, packet: Vec<u8>, setup: fn(&mut Node)) -> Run {
    let test = test.to_string();
    std::thread::spawn(move || {
        let mut node = Node::new(&test, 0);
        setup(&mut node);
        node.arrived_on_uplink(&packet)
    })
    .join()
    .expect("the receiving node's thread")
}

/// The frontend a frame's v6node Destination Options header names, and the
/// frame without it (as the backend's node passes it on).
fn frontend_header(frame: &[u8]) -> Option<((Ipv6Addr, u16), Vec<u8>)> {
    let l3 = &frame[14..];
    if l3[6] != DSTOPTS {
        return None;
    }
    let opt = &l3[40..64];
    assert_eq!((opt[1], opt[2], opt[3]), (2, DSR_OPT_TYPE as u8, 20), "hdrlen, option type, option length");
    assert_eq!(u16::from_be_bytes([l3[4], l3[5]]) as usize, l3.len() - 40, "payload length counts the header");
    let frontend = (Ipv6Addr::from(<[u8; 16]>::try_from(&opt[4..20]).unwrap()), u16::from_be_bytes([opt[20], opt[21]]));
    let mut bare = [&frame[..54], &frame[78..]].concat();
    bare[14 + 6] = opt[0];
    let payload_len = (bare.len() - 54) as u16;
    bare[18..20].copy_from_slice(&payload_len.to_be_bytes());
    Some((frontend, bare))
}

/// The outer IPv6 header's (source, destination) and the frame inside it
/// (Ethernet kept), or None for a frame not inside one.
fn outer_header(frame: &[u8]) -> Option<((Ipv6Addr, Ipv6Addr), Vec<u8>)> {
    let l3 = &frame[14..];
    if l3[6] != 41 {
        return None;
    }
    assert_eq!(u16::from_be_bytes([l3[4], l3[5]]) as usize, l3.len() - 40, "outer payload length: the inner packet");
    assert_eq!(&l3[..4], &l3[40..44], "outer version, traffic class and flow label: the inner's");
    let addrs = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&l3[at..at + 16]).unwrap());
    Some(((addrs(8), addrs(24)), [&frame[..14], &frame[54..]].concat()))
}

#[test]
fn dsr_inside_ipv6_sends_every_packet_in_an_outer_header_and_the_backends_node_answers_as_the_frontend() {
    for proto in [TCP, UDP] {
        let first = encapsulated_by_a_receiving_node(
            &format!("ip6ip6-first-{proto}"),
            proto,
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, true),
        );
        assert_eq!(first.verdict, TC_ACT_REDIRECT, "out to the backend's node");
        let (outer, inner) = outer_header(&first.packet).expect("inside an outer header");
        assert_eq!(outer, (MASQUERADE, OTHER_POD), "from this node to the backend");
        let (frontend, bare) = frontend_header(&inner).expect("the inner packet names its frontend");
        assert_eq!(frontend, (VIP, LB_PORT));
        assert_eq!(tuple(&bare), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT), "the client's address, inside");
        assert_well_formed(&bare);
        let later = encapsulated_by_a_receiving_node(
            &format!("ip6ip6-later-{proto}"),
            proto,
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, false),
        );
        let (outer, inner) = outer_header(&later.packet).expect("a later packet is inside one too");
        assert_eq!(outer, (MASQUERADE, OTHER_POD));
        let inner = frontend_header(&inner).map_or(inner, |(_, bare)| bare);
        assert_eq!(tuple(&inner), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT));

        let mut backend_node = Node::new(&format!("ip6ip6-backend-{proto}"), 0);
        backend_node.dsr_frontend(proto, OTHER_POD);
        backend_node.with_other_pod();
        for (what, frame) in [("first", &first.packet), ("later", &later.packet)] {
            let delivered = backend_node.arrived_on_uplink(frame);
            assert_eq!(delivered.verdict, TC_ACT_REDIRECT, "{what}: into the backend pod");
            assert!(outer_header(&delivered.packet).is_none(), "{what}: the outer header is taken off");
            assert!(frontend_header(&delivered.packet).is_none(), "{what}: so is the frontend header");
            assert_eq!(tuple(&delivered.packet), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT));
            assert_well_formed(&delivered.packet);
        }
        let reply =
            backend_node.sent_by_pod(&segment(proto, OTHER_POD, TARGET_PORT, REMOTE, CLIENT_PORT, false), backend_node.host_b);
        assert_eq!(tuple(&reply.packet), (VIP, LB_PORT, REMOTE, CLIENT_PORT), "answered as the frontend");
        assert_eq!(&reply.packet[..12], [ROUTER_MAC, UPLINK_MAC].concat(), "straight to the router");

        // Someone else's tunnel (its inner destination another address) is
        // not taken apart.
        let mut foreign = first.packet.clone();
        foreign[54 + 24..54 + 40].copy_from_slice(&REMOTE.octets());
        let run = backend_node.arrived_on_uplink(&foreign);
        assert!(outer_header(&run.packet).is_some(), "left inside its outer header");
    }
}

#[test]
fn a_flow_to_a_backend_on_another_node_keeps_the_clients_address_and_names_its_frontend() {
    // TCP: the SYN carries the header, the connection's later packets go bare.
    let syn = forwarded_by_a_receiving_node("dsr-send-syn", TCP, segment(TCP, REMOTE, CLIENT_PORT, VIP, LB_PORT, true));
    assert_eq!(syn.verdict, TC_ACT_REDIRECT, "out to the backend's node");
    let (frontend, bare) = frontend_header(&syn.packet).expect("the SYN names its frontend");
    assert_eq!(frontend, (VIP, LB_PORT));
    assert_eq!(tuple(&bare), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT), "the client's address kept");
    assert_well_formed(&bare);
    let ack = forwarded_by_a_receiving_node("dsr-send-ack", TCP, segment(TCP, REMOTE, CLIENT_PORT, VIP, LB_PORT, false));
    assert!(frontend_header(&ack.packet).is_none(), "a segment after the SYN goes bare");
    assert_eq!(tuple(&ack.packet), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT));
    assert_well_formed(&ack.packet);

    // UDP: each datagram that still fits IPv6's minimum MTU with it.
    let small = forwarded_by_a_receiving_node("dsr-send-udp", UDP, segment(UDP, REMOTE, CLIENT_PORT, VIP, LB_PORT, false));
    let (_, bare) = frontend_header(&small.packet).expect("a small datagram names its frontend");
    assert_eq!(tuple(&bare), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT));
    assert_well_formed(&bare);
    let mut large = Vec::new();
    PacketBuilder::ethernet2(ROUTER_MAC, UPLINK_MAC)
        .ipv6(REMOTE.octets(), VIP.octets(), 64)
        .udp(CLIENT_PORT, LB_PORT)
        .write(&mut large, &[7u8; 1220])
        .unwrap();
    let large = forwarded_by_a_receiving_node("dsr-send-udp-large", UDP, large);
    assert!(frontend_header(&large.packet).is_none(), "1268 bytes + 24 would pass 1280");
    assert_well_formed(&large.packet);
}

#[test]
fn the_backends_node_answers_as_the_frontend_and_a_flow_moved_to_another_node_keeps_its_backend() {
    for proto in [TCP, UDP] {
        let first = forwarded_by_a_receiving_node(
            &format!("dsr-first-{proto}"),
            proto,
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, true),
        );
        let mut backend_node = Node::new(&format!("dsr-backend-{proto}"), 0);
        if proto == TCP {
            backend_node.dsr_frontend(proto, OTHER_POD);
        } else {
            // A frontend this node serves only to its own pods (a NodePort
            // on the receiving node's address) is named just as well.
            add_service(&mut backend_node.host, 1, addr(VIP, LB_PORT), proto, &[addr(OTHER_POD, TARGET_PORT)], None);
        }
        backend_node.with_other_pod();

        let delivered = backend_node.arrived_on_uplink(&first.packet);
        assert_eq!(delivered.verdict, TC_ACT_REDIRECT, "into the backend pod");
        assert!(frontend_header(&delivered.packet).is_none(), "the header is taken off");
        assert_eq!(tuple(&delivered.packet), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT));
        assert_well_formed(&delivered.packet);

        // The pod's answer leaves as the frontend's, towards the client.
        let answer = || segment(proto, OTHER_POD, TARGET_PORT, REMOTE, CLIENT_PORT, false);
        let reply = backend_node.sent_by_pod(&answer(), backend_node.host_b);
        assert_eq!(reply.verdict, TC_ACT_REDIRECT);
        assert_eq!(tuple(&reply.packet), (VIP, LB_PORT, REMOTE, CLIENT_PORT));
        assert_eq!(&reply.packet[..12], [ROUTER_MAC, UPLINK_MAC].concat(), "to the router, not back through the first node");
        assert_well_formed(&reply.packet);

        // An ECMP change: the flow's next packet lands on a third node,
        // which picks the same backend (Maglev) and sends it bare.
        let moved = forwarded_by_a_receiving_node(
            &format!("dsr-moved-{proto}"),
            proto,
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, false),
        );
        let moved = match frontend_header(&moved.packet) {
            Some((_, bare)) => bare, // UDP carries it still
            None => moved.packet,
        };
        let delivered = backend_node.arrived_on_uplink(&moved);
        assert_eq!(delivered.verdict, TC_ACT_REDIRECT);
        assert_eq!(tuple(&delivered.packet), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT), "the same backend, the same tuple");
        let reply = backend_node.sent_by_pod(&answer(), backend_node.host_b);
        assert_eq!(tuple(&reply.packet), (VIP, LB_PORT, REMOTE, CLIENT_PORT), "still answered as the frontend");
        assert_eq!(backend_node.ingress(Reason::V6N_REASON_DROP_DSR_REFUSED), 0);
    }
}

#[test]
fn a_frontend_header_for_no_frontend_here_is_refused_and_counted() {
    let first = forwarded_by_a_receiving_node("dsr-refused-send", TCP, segment(TCP, REMOTE, CLIENT_PORT, VIP, LB_PORT, true));
    let mut node = Node::new("dsr-refused", 0);
    node.with_other_pod();
    // No such frontend here: nobody may make a pod answer as one.
    let refused = node.arrived_on_uplink(&first.packet);
    assert_eq!(refused.verdict, TC_ACT_SHOT);
    assert_eq!(node.ingress(Reason::V6N_REASON_DROP_DSR_REFUSED), 1);

    // The frontend, but the destination is no backend of this node's.
    node.dsr_frontend(TCP, OTHER_POD);
    let mut elsewhere = first.packet.clone();
    elsewhere[14 + 24..14 + 40].copy_from_slice(&Ipv6Addr::new(0xfd00, 0x10, 0, 3, 0, 0, 0, 5).octets());
    assert_eq!(node.arrived_on_uplink(&elsewhere).verdict, TC_ACT_SHOT);
    assert_eq!(node.ingress(Reason::V6N_REASON_DROP_DSR_REFUSED), 2);

    // Someone else's option is not ours to judge: left as it is.
    let mut foreign = first.packet.clone();
    foreign[14 + 42] = 0x3e;
    let passed = node.arrived_on_uplink(&foreign);
    assert_ne!(passed.verdict, TC_ACT_SHOT);
    assert_eq!(passed.packet[14 + 6], DSTOPTS, "the header stays");
    assert_eq!(node.ingress(Reason::V6N_REASON_DROP_DSR_REFUSED), 2);
}

// --- the same Services in the uplink's XDP program (bpf/lib/nodeport_xdp.h) ---

impl Node {
    fn xdp_on_uplink(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        run_xdp(self.xdp.as_ref().expect("a node made by Node::with_xdp"), "v6n_xdp_uplink", frame, self.uplink)
    }

    fn xdp(&self, reason: Reason) -> u64 {
        counted(&self.host, Direction::V6N_DIRECTION_XDP, reason)
    }

    /// A second uplink, `uplink2`, with OTHER_POD's node behind a router on
    /// it; on a node with XDP, its program runs there too (v6n_xdp_ports).
    fn second_uplink(&mut self) -> u32 {
        ip("link add uplink2 address 02:00:00:00:02:01 type veth peer name uplink2peer");
        ip("link set uplink2 up");
        ip("addr add 2001:db8:2::1/64 dev uplink2 nodad");
        ip("neigh add 2001:db8:2::ff lladdr 02:00:00:00:02:ff dev uplink2 nud permanent");
        ip(&format!("route add {OTHER_POD}/128 via 2001:db8:2::ff dev uplink2"));
        let uplink2 = ifindex("uplink2");
        if let Some(xdp) = self.xdp.as_mut() {
            let mut ports: DevMapHash<&mut MapData> = DevMapHash::try_from(xdp.map_mut(maps::XDP_PORTS).unwrap()).unwrap();
            for port in [self.uplink, uplink2] {
                ports.insert(port, port, None, 0).unwrap();
            }
        }
        uplink2
    }
}

/// What tc alone makes of `frames`, one after another, on a node of its own
/// (in a thread of its own: a network namespace of its own) set up by
/// `setup`: the reference XDP's frames must equal byte for byte.
fn tc_alone(test: &str, setup: fn(&mut Node), frames: Vec<Vec<u8>>) -> Vec<Run> {
    let test = test.to_string();
    std::thread::spawn(move || {
        let mut node = Node::new(&test, 0);
        setup(&mut node);
        frames.iter().map(|frame| node.arrived_on_uplink(frame)).collect()
    })
    .join()
    .expect("the tc node's thread")
}

/// Runs `frames` through tc alone on one node and through XDP on another,
/// both set up by `setup`: each frame goes back out of the uplink, XDP's
/// byte for byte tc's. Returns the XDP node and tc's runs.
fn xdp_sends_what_tc_sends(test: &str, setup: fn(&mut Node), frames: &[Vec<u8>]) -> (Node, Vec<Run>) {
    let reference = tc_alone(&format!("{test}-tc"), setup, frames.to_vec());
    let mut node = Node::with_xdp(test);
    setup(&mut node);
    for (i, (frame, tc)) in frames.iter().zip(&reference).enumerate() {
        let (verdict, sent) = node.xdp_on_uplink(frame);
        assert_eq!((tc.verdict, verdict), (TC_ACT_REDIRECT, XDP_TX), "{test}, frame {i}: back out of the uplink");
        assert_eq!(sent, tc.packet, "{test}, frame {i}: the frame tc sends");
        assert_well_formed(&sent);
    }
    (node, reference)
}

#[test]
fn xdp_sends_a_connection_to_a_backend_on_another_node_and_its_replies_to_the_client_byte_for_byte_as_tc() {
    for proto in [TCP, UDP] {
        let setup: fn(&mut Node) = if proto == TCP {
            |node| node.node_port(TCP, &[(OTHER_POD, TARGET_PORT)], None)
        } else {
            |node| node.node_port(UDP, &[(OTHER_POD, TARGET_PORT)], None)
        };
        let frames = vec![
            segment(proto, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true),
            segment(proto, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false),
            segment(proto, OTHER_POD, TARGET_PORT, MASQUERADE, CLIENT_PORT, false),
        ];
        let (node, reference) = xdp_sends_what_tc_sends(&format!("xdp-remote-{proto}"), setup, &frames);
        assert_eq!(tuple(&node.xdp_on_uplink(&frames[0]).1), (MASQUERADE, CLIENT_PORT, OTHER_POD, TARGET_PORT));
        assert_eq!(tuple(&reference[2].packet), (NODE, NODE_PORT, REMOTE, CLIENT_PORT));
        assert_eq!(
            (node.xdp(Reason::V6N_REASON_LB_TRANSLATED), node.xdp(Reason::V6N_REASON_LB_TRACKED)),
            (1, 3),
            "proto {proto}: counted under xdp"
        );
        assert_eq!(
            node.ingress(Reason::V6N_REASON_LB_TRANSLATED) + node.ingress(Reason::V6N_REASON_LB_TRACKED),
            0,
            "tc saw none"
        );
    }
}

#[test]
fn xdp_sends_a_backend_behind_another_uplink_out_of_it_when_that_uplink_runs_xdp() {
    let setup: fn(&mut Node) = |node| {
        node.second_uplink();
        node.node_port(TCP, &[(OTHER_POD, TARGET_PORT)], None);
    };
    let frames =
        vec![segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true), segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false)];
    let reference = tc_alone("xdp-uplink2-tc", setup, frames.clone());
    let mut node = Node::with_xdp("xdp-uplink2");
    setup(&mut node);
    for (i, (frame, tc)) in frames.iter().zip(&reference).enumerate() {
        let (verdict, sent) = node.xdp_on_uplink(frame);
        assert_eq!((tc.verdict, verdict), (TC_ACT_REDIRECT, XDP_REDIRECT), "frame {i}: out of the other uplink");
        assert_eq!(sent, tc.packet, "frame {i}: the frame tc sends");
        assert_eq!(&sent[0..6], &[2, 0, 0, 0, 2, 0xff], "frame {i}: to the router on uplink2");
        assert_eq!(tuple(&sent), (MASQUERADE, CLIENT_PORT, OTHER_POD, TARGET_PORT));
    }
    // The backend's answer comes in on uplink2 and leaves by the first.
    let uplink2 = ifindex("uplink2");
    let answer = segment(TCP, OTHER_POD, TARGET_PORT, MASQUERADE, CLIENT_PORT, false);
    let (verdict, sent) = run_xdp(node.xdp.as_ref().unwrap(), "v6n_xdp_uplink", &answer, uplink2);
    assert_eq!(verdict, XDP_REDIRECT, "the answer, out of the client's uplink");
    assert_eq!(&sent[0..6], &ROUTER_MAC);
    assert_eq!(tuple(&sent), (NODE, NODE_PORT, REMOTE, CLIENT_PORT));
    assert_well_formed(&sent);
    assert_eq!((node.xdp(Reason::V6N_REASON_LB_TRANSLATED), node.xdp(Reason::V6N_REASON_LB_TRACKED)), (1, 2));
}

/// A UDP frame of `len` bytes from the IPv6 header on.
fn udp_of_length(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, len: usize) -> Vec<u8> {
    let mut packet = Vec::new();
    PacketBuilder::ethernet2(ROUTER_MAC, UPLINK_MAC)
        .ipv6(src.octets(), dst.octets(), 64)
        .udp(sport, dport)
        .write(&mut packet, &vec![0x76; len - 40 - 8])
        .unwrap();
    packet
}

/// XDP keeps the FIB's answer to a question for a moment (bpf/lib/xdp_fib.h,
/// 100 ms): a next hop changed under a flow reaches its frames after that
/// moment, and a frame longer than the answer was given for asks the FIB
/// again, which refuses it over the MTU: XDP leaves it to tc. On one CPU,
/// whose table each run finds: a table that kept its answers longer, or
/// for any length, fails here.
#[test]
fn xdp_follows_a_changed_next_hop_after_a_moment_and_asks_again_for_a_longer_frame() {
    stay_on_this_cpu();
    let mut node = Node::with_xdp("xdp-fib");
    node.node_port(UDP, &[(OTHER_POD, TARGET_PORT)], None);
    let frame = udp_of_length(REMOTE, CLIENT_PORT, NODE, NODE_PORT, 1200);
    // The first frame asks about the client's address, the later ones (the
    // connection tracked) about the masquerade address: two questions.
    for _ in 0..2 {
        let (verdict, sent) = node.xdp_on_uplink(&frame);
        assert_eq!((verdict, &sent[0..6]), (XDP_TX, &ROUTER_MAC[..]), "to the router");
    }

    let new_router_mac = [2, 0, 0, 0, 1, 0xfe];
    ip(&format!("neigh replace 2001:db8:1::ff lladdr {} dev uplink nud permanent", format_mac(&new_router_mac)));
    ip("link set uplink mtu 1280");
    std::thread::sleep(std::time::Duration::from_millis(250));
    let (verdict, sent) = node.xdp_on_uplink(&frame);
    assert_eq!((verdict, &sent[0..6]), (XDP_TX, &new_router_mac[..]), "to the router's new MAC, 250 ms on");

    // 1200 bytes fitted; 1281 is over the uplink's new MTU (the FIB's
    // check: a route's own mtu counts only when locked). The answer for
    // 1200 must not send it.
    let longer = udp_of_length(REMOTE, CLIENT_PORT, NODE, NODE_PORT, 1281);
    let (verdict, _) = node.xdp_on_uplink(&longer);
    assert_eq!(verdict, XDP_PASS, "over the uplink's MTU: tc's");
    let (verdict, sent) = node.xdp_on_uplink(&frame);
    assert_eq!((verdict, &sent[0..6]), (XDP_TX, &new_router_mac[..]), "the 1200 bytes still go");
}

#[test]
fn xdp_leaves_a_backend_on_this_node_to_tc_untouched_with_nothing_recorded() {
    let mut node = Node::with_xdp("xdp-local");
    node.node_port(TCP, &[(POD_A, TARGET_PORT)], None);
    let frame = segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, true);
    assert_eq!(node.xdp_on_uplink(&frame), (XDP_PASS, frame.clone()));
    let tracked: HashMap<&MapData, CtKey, CtValue> = HashMap::try_from(node.host.map(maps::CT).unwrap()).unwrap();
    assert_eq!(tracked.keys().count(), 0, "no connection tracked");
    assert_eq!(counted_under(&node, Direction::V6N_DIRECTION_XDP), 0);
    let run = node.arrived_on_uplink(&frame);
    assert_eq!((run.verdict, tuple(&run.packet).2), (TC_ACT_REDIRECT, POD_A), "tc delivers it into the pod");
    // The connection tc now tracks stays tc's.
    let next = segment(TCP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false);
    assert_eq!(node.xdp_on_uplink(&next), (XDP_PASS, next.clone()));
    assert_eq!(counted_under(&node, Direction::V6N_DIRECTION_XDP), 0);
}

#[test]
fn xdp_leaves_to_tc_what_the_stack_must_answer_and_a_backend_that_left() {
    let mut node = Node::with_xdp("xdp-stack");
    node.node_port(UDP, &[(OTHER_POD, TARGET_PORT), (POD_A, TARGET_PORT)], None);
    // Hop limit out: the stack sends Time Exceeded.
    let mut last_hop = segment(UDP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false);
    last_hop[14 + 7] = 1;
    assert_eq!(node.xdp_on_uplink(&last_hop), (XDP_PASS, last_hop.clone()));
    // A frontend without backends: tc counts it and the stack answers.
    set_external(&mut node.host, addr(NODE, NODE_PORT), UDP, &[]);
    let frame = segment(UDP, REMOTE, CLIENT_PORT, NODE, NODE_PORT, false);
    assert_eq!(node.xdp_on_uplink(&frame), (XDP_PASS, frame.clone()));
    assert_eq!(counted_under(&node, Direction::V6N_DIRECTION_XDP), 0);

    // A connection XDP sent to OTHER_POD, whose backend then leaves: tc
    // ends it and picks again.
    set_external(&mut node.host, addr(NODE, NODE_PORT), UDP, &[100]);
    let (verdict, sent) = node.xdp_on_uplink(&frame);
    assert_eq!((verdict, tuple(&sent).2), (XDP_TX, OTHER_POD));
    remove_backend(&mut node.host, 100);
    set_external(&mut node.host, addr(NODE, NODE_PORT), UDP, &[101]);
    assert_eq!(node.xdp_on_uplink(&frame), (XDP_PASS, frame.clone()));
    assert_eq!(tuple(&node.arrived_on_uplink(&frame).packet).2, POD_A);
}

#[test]
fn xdp_sends_direct_server_return_with_the_frontend_header_byte_for_byte_as_tc() {
    for proto in [TCP, UDP] {
        let setup: fn(&mut Node) =
            if proto == TCP { |node| node.dsr_frontend(TCP, OTHER_POD) } else { |node| node.dsr_frontend(UDP, OTHER_POD) };
        // A SYN (or any UDP packet that fits 1280 bytes with it) carries the
        // header; a later TCP segment goes bare.
        let frames = vec![
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, true),
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, false),
        ];
        let (_, reference) = xdp_sends_what_tc_sends(&format!("xdp-dsr-{proto}"), setup, &frames);
        let (frontend, bare) = frontend_header(&reference[0].packet).expect("the first frame names its frontend");
        assert_eq!(frontend, (VIP, LB_PORT));
        assert_eq!(tuple(&bare), (REMOTE, CLIENT_PORT, OTHER_POD, TARGET_PORT), "the client's address kept");
        assert_eq!(frontend_header(&reference[1].packet).is_some(), proto == UDP);
    }
}

/// A TCP segment from the client to VIP:LB_PORT (ACK, no SYN) whose IPv6
/// packet is `l3_len` bytes.
fn segment_of(l3_len: usize) -> Vec<u8> {
    let mut packet = Vec::new();
    PacketBuilder::ethernet2(ROUTER_MAC, UPLINK_MAC)
        .ipv6(REMOTE.octets(), VIP.octets(), 64)
        .tcp(CLIENT_PORT, LB_PORT, 2, 65535)
        .ack(1)
        .write(&mut packet, &vec![b'a'; l3_len - 40 - 20])
        .unwrap();
    packet
}

#[test]
fn dsr_inside_ipv6_tells_the_client_with_a_packet_too_big_what_fits_with_the_outer_header() {
    // The uplink's MTU is 1500: inside an outer header, 1460 bytes fit.
    let mut node = Node::with_xdp("ip6ip6-too-big");
    node.dsr_ip6ip6_frontend(TCP, OTHER_POD);
    let syn = segment(TCP, REMOTE, CLIENT_PORT, VIP, LB_PORT, true);
    assert_eq!(node.arrived_on_uplink(&syn).verdict, TC_ACT_REDIRECT);

    let fits = segment_of(1460);
    assert_eq!(node.xdp_on_uplink(&fits).0, XDP_TX, "1460 bytes: XDP sends it, in its outer header");
    let sent = node.arrived_on_uplink(&fits);
    assert_eq!(sent.verdict, TC_ACT_REDIRECT);
    assert_eq!(sent.packet.len(), 14 + 1500, "at tc too: 1500 bytes with the outer header");
    assert!(outer_header(&sent.packet).is_some());

    let big = segment_of(1461);
    assert_eq!(node.xdp_on_uplink(&big), (XDP_PASS, big.clone()), "1461 bytes: left to tc");
    let answer = node.arrived_on_uplink(&big);
    assert_eq!(answer.verdict, TC_ACT_REDIRECT, "the Packet Too Big goes back to the client");
    assert_well_formed(&answer.packet);
    let l3 = &answer.packet[14..];
    assert_eq!(l3[6], 58, "ICMPv6");
    assert_eq!(&l3[24..40], &REMOTE.octets(), "to the client");
    assert_eq!((l3[40], l3[41]), (2, 0), "Packet Too Big");
    assert_eq!(u32::from_be_bytes([l3[44], l3[45], l3[46], l3[47]]), 1460, "the MTU that fits");
    assert_eq!(&l3[48..88], &big[14..54], "quoting the packet the client sent");
    assert_eq!(node.ingress(Reason::V6N_REASON_DROP_TOO_BIG), 1);

    // A GSO packet (the uplink's GRO made it of the client's segments) gets
    // none: the outer header comes off its segments' size. (A test run's
    // packet has no GSO type, so the kernel will not encapsulate it: only
    // the absence of a Packet Too Big is checked.)
    let gso = segment_of(40 + 20 + 2 * 1440);
    let as_gso = SkbIn { gso_segs: 2, gso_size: 1440, ..SkbIn::default() };
    let run = try_run_skb(&node.host, "v6n_from_dev", &gso, node.uplink, as_gso).unwrap();
    assert_ne!(run.packet.get(14 + 6), Some(&58), "no Packet Too Big for a GSO packet");
    assert_eq!(node.ingress(Reason::V6N_REASON_DROP_TOO_BIG), 1);
}

#[test]
fn xdp_sends_direct_server_return_inside_ipv6_byte_for_byte_as_tc() {
    for proto in [TCP, UDP] {
        let setup: fn(&mut Node) = if proto == TCP {
            |node| node.dsr_ip6ip6_frontend(TCP, OTHER_POD)
        } else {
            |node| node.dsr_ip6ip6_frontend(UDP, OTHER_POD)
        };
        let frames = vec![
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, true),
            segment(proto, REMOTE, CLIENT_PORT, VIP, LB_PORT, false),
        ];
        let (node, reference) = xdp_sends_what_tc_sends(&format!("xdp-ip6ip6-{proto}"), setup, &frames);
        for run in &reference {
            let (outer, _) = outer_header(&run.packet).expect("inside an outer header");
            assert_eq!(outer, (MASQUERADE, OTHER_POD));
        }
        assert_eq!(node.xdp(Reason::V6N_REASON_LB_TRANSLATED) + node.xdp(Reason::V6N_REASON_LB_TRACKED), 2);
    }
}

impl Node {
    /// `vip` as a Service's external IP (v6n_lb_vips), as the agent writes it.
    fn announce_vip(&mut self, vip: Ipv6Addr) {
        let mut vips: HashMap<&mut MapData, [u8; 16], u8> = HashMap::try_from(self.host.map_mut(maps::LB_VIPS).unwrap()).unwrap();
        vips.insert(vip.octets(), 1, 0).unwrap();
    }
}

#[test]
fn a_vips_port_no_frontend_serves_is_dropped_early_at_tc_and_in_xdp() {
    let setup = |node: &mut Node| {
        node.dsr_frontend(TCP, OTHER_POD);
        node.announce_vip(VIP);
    };
    let unserved = segment(TCP, REMOTE, CLIENT_PORT, VIP, LB_PORT + 1, true);
    let served = segment(TCP, REMOTE, CLIENT_PORT, VIP, LB_PORT, true);

    let mut tc = Node::new("vip-unserved-tc", 0);
    setup(&mut tc);
    assert_eq!(tc.arrived_on_uplink(&unserved).verdict, TC_ACT_SHOT, "tc: nothing admits it");
    assert_eq!(tc.ingress(Reason::V6N_REASON_DROP_NO_FRONTEND), 1);
    assert_eq!(tc.arrived_on_uplink(&served).verdict, TC_ACT_REDIRECT, "the frontend's own port is served");
    // UDP to the VIP's unserved port too; ICMPv6 to it (errors about its
    // connections, echoes) is not the load balancer's to refuse.
    let udp = segment(UDP, REMOTE, CLIENT_PORT, VIP, LB_PORT, false);
    assert_eq!(tc.arrived_on_uplink(&udp).verdict, TC_ACT_SHOT, "no UDP frontend on the VIP");
    let echo = icmp_echo(REMOTE, VIP);
    assert_ne!(tc.arrived_on_uplink(&echo).verdict, TC_ACT_SHOT, "ICMPv6 passes");
    assert_eq!(tc.ingress(Reason::V6N_REASON_DROP_NO_FRONTEND), 2);
    // A port of an address that is no VIP: the stack's (a node's own port).
    let other = segment(TCP, REMOTE, CLIENT_PORT, NODE, LB_PORT + 1, true);
    assert_eq!(tc.arrived_on_uplink(&other).verdict, TC_ACT_UNSPEC);
    // A VIP no longer listed (the agent leaves the node's own addresses out).
    let mut vips: HashMap<&mut MapData, [u8; 16], u8> = HashMap::try_from(tc.host.map_mut(maps::LB_VIPS).unwrap()).unwrap();
    vips.remove(&VIP.octets()).unwrap();
    assert_eq!(tc.arrived_on_uplink(&unserved).verdict, TC_ACT_UNSPEC, "left to the stack");

    let mut xdp = Node::with_xdp("vip-unserved-xdp");
    setup(&mut xdp);
    assert_eq!(xdp.xdp_on_uplink(&unserved).0, XDP_DROP, "dropped in the driver");
    assert_eq!(xdp.xdp(Reason::V6N_REASON_DROP_NO_FRONTEND), 1);
    assert_eq!(xdp.xdp_on_uplink(&served).0, XDP_TX);
    assert_eq!(xdp.xdp_on_uplink(&echo), (XDP_PASS, echo.clone()), "ICMPv6 left to tc");
}

#[test]
fn xdp_keeps_a_quarantined_backends_flows_and_gives_it_no_new_ones_until_it_recovers() {
    // A backend that is not ready (its readiness probe fails) or is
    // terminating stays listed (v6n_backends) but leaves Maglev's table.
    const OTHER_POD_2: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 3, 0, 0, 0, 0x6);
    let mut node = Node::with_xdp("xdp-quarantine");
    node.node_port(UDP, &[(OTHER_POD, TARGET_PORT), (OTHER_POD_2, TARGET_PORT)], None);
    let frame = |port: u16| segment(UDP, REMOTE, port, NODE, NODE_PORT, false);
    let backend_of = |node: &Node, port: u16| {
        let (verdict, sent) = node.xdp_on_uplink(&frame(port));
        assert_eq!(verdict, XDP_TX, "client port {port}");
        tuple(&sent).2
    };
    let ports: Vec<u16> = (0..32).map(|i| CLIENT_PORT + i).collect();
    let given: Vec<Ipv6Addr> = ports.iter().map(|&p| backend_of(&node, p)).collect();
    let (quarantined, healthy, quarantined_id) =
        if given[0] == OTHER_POD { (OTHER_POD, OTHER_POD_2, 100) } else { (OTHER_POD_2, OTHER_POD, 101) };

    set_external(&mut node.host, addr(NODE, NODE_PORT), UDP, &[if quarantined_id == 100 { 101 } else { 100 }]);
    for (&port, &before) in ports.iter().zip(&given) {
        assert_eq!(backend_of(&node, port), before, "client port {port}: its flow stays where it was");
    }
    assert!((100..132).all(|p| backend_of(&node, p) == healthy), "new flows only to the healthy backend");

    set_external(&mut node.host, addr(NODE, NODE_PORT), UDP, &[100, 101]);
    let recovered: std::collections::BTreeSet<Ipv6Addr> = (200..232).map(|p| backend_of(&node, p)).collect();
    assert!(recovered.contains(&quarantined), "back from quarantine: new flows reach it again");
}

/// Packets counted under `direction`, whatever the reason.
fn counted_under(node: &Node, direction: Direction) -> u64 {
    common::counter_slots(&node.host).iter().filter(|(k, _, _)| k.direction == direction as u8).map(|(_, p, _)| p).sum()
}
