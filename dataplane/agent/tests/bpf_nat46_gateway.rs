// SPDX-License-Identifier: Apache-2.0
//! The stateful NAT46 gateway (bpf/lib/nat46_gw.h) through
//! BPF_PROG_TEST_RUN, one scenario per rule: IPv4 clients reach a VIP,
//! each flow is given a backend by the frontend's Maglev table and keeps it,
//! and the backends' replies leave from the VIP. The tables are written
//! here as the agent writes them; the weighted table itself is the agent's
//! unit tests' (maglev.rs) and the namespace test's.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::{
    events::{events, set_events},
    nat64::*,
    packet::*,
    *,
};
use v6node_abi::{CtKey, CtValue, Direction, Reason, CT_ESTABLISHED, EVENT_NAT46, EVENT_XLAT};

const D46: Direction = Direction::V6N_DIRECTION_XLAT_4TO6;
const D64: Direction = Direction::V6N_DIRECTION_XLAT_6TO4;

const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 80);
const CLIENT: Ipv4Addr = V4_HOST;
/// The gateway's source prefix, 2001:db8:46::/96, with CLIENT in it.
const CLIENT_AS_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, 0xc000, 0x0202);
const BACKENDS: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xa),
    Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xb),
    Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xc),
];
const BACKEND_PORT: u16 = 8080;
const TCP: u8 = 6;
const UDP: u8 = 17;
/// Frontend 1's backends are ids 101, 102, 103.
const FRONTEND: u32 = 1;

const TCP_SYN: u8 = 0x02;
const TCP_SYN_ACK: u8 = 0x12;
const TCP_ACK: u8 = 0x10;
const TCP_FIN_ACK: u8 = 0x11;

fn gateway(test: &str) -> (Net, Xlat) {
    let net = Net::enter();
    for (i, backend) in BACKENDS.iter().enumerate() {
        ip(&format!("neigh add {backend} lladdr 02:00:00:00:06:{:02x} dev v6 nud permanent", 0x10 + i));
    }
    let mut xlat = Xlat::load(test);
    xlat.enable_nat46(CLIENT_AS_V6);
    for (i, backend) in BACKENDS.iter().enumerate() {
        xlat.set_nat46_backend(101 + i as u32, *backend, BACKEND_PORT);
    }
    (net, xlat)
}

/// Frontend VIP:`port` over a table whose buckets go round `pattern`.
fn set_frontend(xlat: &mut Xlat, port: u16, proto: u8, id: u32, pattern: &[u32]) {
    xlat.set_nat46_frontend(VIP, port, proto, id, pattern);
}

fn tcp_with(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut segment = tcp(sport, dport, b"");
    segment[13] = flags;
    segment
}

fn to_vip(client_port: u16, port: u16, proto: u8, flags: u8) -> Vec<u8> {
    let l4 = if proto == TCP { tcp_with(client_port, port, flags) } else { udp(client_port, port, b"hello") };
    ethernet(ETH_IPV4, &ipv4(CLIENT, VIP, 64, proto, 0x4000, &l4, Some(if proto == TCP { 16 } else { 6 })))
}

fn from_backend(backend: Ipv6Addr, client_port: u16, proto: u8, flags: u8) -> Vec<u8> {
    let l4 = if proto == TCP { tcp_with(BACKEND_PORT, client_port, flags) } else { udp(BACKEND_PORT, client_port, b"hi") };
    ethernet(ETH_IPV6, &ipv6(backend, CLIENT_AS_V6, 64, proto, &l4, Some(if proto == TCP { 16 } else { 6 })))
}

/// (source, destination, destination port) of a translated IPv6 frame.
fn v6_flow(frame: &[u8]) -> (Ipv6Addr, Ipv6Addr, u16) {
    let ip = &frame[14..];
    let src: [u8; 16] = ip[8..24].try_into().unwrap();
    let dst: [u8; 16] = ip[24..40].try_into().unwrap();
    (src.into(), dst.into(), u16::from_be_bytes([ip[42], ip[43]]))
}

/// Sends a client's packet and returns the backend it went to.
fn backend_of(xlat: &Xlat, net: &Net, client_port: u16, proto: u8) -> Ipv6Addr {
    let run = xlat.run(&to_vip(client_port, 80, proto, TCP_SYN), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "flow from port {client_port} translated");
    v6_flow(&run.packet).1
}

fn flows(xlat: &Xlat) -> Vec<(CtKey, CtValue)> {
    xlat.nat46_state()
}

#[test]
fn a_client_reaches_a_backend_through_the_vip_and_the_replies_come_from_the_vip() {
    let (net, mut xlat) = gateway("nat46-tcp");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[102]);

    let run = xlat.run(&to_vip(40000, 80, TCP, TCP_SYN), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let out = &run.packet;
    assert_eq!(&out[12..14], &ETH_IPV6);
    assert_eq!(&out[0..6], &[2, 0, 0, 0, 6, 0x11], "to backend ::b's link-layer address");
    assert_well_formed(out);
    assert_eq!(v6_flow(out), (CLIENT_AS_V6, BACKENDS[1], BACKEND_PORT), "from the embedded client to the backend");
    assert_eq!(u16::from_be_bytes([out[54], out[55]]), 40000, "the client's port kept");

    let run = xlat.run(&from_backend(BACKENDS[1], 40000, TCP, TCP_SYN_ACK), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let back = &run.packet;
    assert_eq!(&back[12..14], &ETH_IPV4);
    assert_eq!(&back[0..6], &V4_HOST_MAC);
    assert_well_formed(back);
    let ip = &back[14..];
    assert_eq!((&ip[12..16], &ip[16..20]), (&VIP.octets()[..], &CLIENT.octets()[..]), "from the VIP to the client");
    assert_eq!((u16::from_be_bytes([ip[20], ip[21]]), u16::from_be_bytes([ip[22], ip[23]])), (80, 40000));

    let state = flows(&xlat);
    assert_eq!(state.len(), 2, "a flow is a forward and a reverse entry");
    let (_, forward) = state.iter().find(|(k, _)| k.saddr == CLIENT.to_ipv6_mapped().octets()).expect("the forward entry");
    assert_eq!((forward.backend_id, forward.frontend_id), (102, FRONTEND));
    assert_eq!(forward.flags & CT_ESTABLISHED as u8, CT_ESTABLISHED as u8, "answered: established");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_FORWARDED), 1);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_XLAT_FORWARDED), 1);
}

#[test]
fn a_new_flow_is_one_event_naming_the_ipv4_client_and_frontend_and_the_backend() {
    let (net, mut xlat) = gateway("nat46-event");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[102]);
    set_events(&mut xlat.ebpf, true, 1000, 100);
    xlat.run(&to_vip(40000, 80, TCP, TCP_SYN), net.v4);
    let sent = events(&mut xlat.ebpf);
    assert_eq!(sent.len(), 1, "{sent:?}");
    let e = &sent[0];
    assert_eq!((e.reason, e.direction), (Reason::V6N_REASON_XLAT_FORWARDED as u8, D46 as u8));
    assert_eq!(e.translated, (EVENT_NAT46 | EVENT_XLAT) as u8);
    // As it came: the IPv4 client to the VIP; as it left: the embedded client to the backend.
    assert_eq!(
        (Ipv6Addr::from(e.xlat_saddr), u16::from_be(e.xlat_sport), Ipv6Addr::from(e.xlat_daddr), u16::from_be(e.xlat_dport)),
        (CLIENT.to_ipv6_mapped(), 40000, VIP.to_ipv6_mapped(), 80)
    );
    assert_eq!(
        (Ipv6Addr::from(e.saddr), Ipv6Addr::from(e.daddr), u16::from_be(e.dport)),
        (CLIENT_AS_V6, BACKENDS[1], BACKEND_PORT)
    );
    // The flow's next packet and the backend's answer are no new flows.
    xlat.run(&to_vip(40000, 80, TCP, TCP_ACK), net.v4);
    xlat.run(&from_backend(BACKENDS[1], 40000, TCP, TCP_SYN_ACK), net.v6);
    assert!(events(&mut xlat.ebpf).is_empty());
}

#[test]
fn flows_spread_over_the_table_and_keep_their_backend_until_it_is_removed() {
    let (net, mut xlat) = gateway("nat46-spread");
    // Shares 1:2:3 of the buckets.
    set_frontend(&mut xlat, 80, UDP, FRONTEND, &[101, 102, 102, 103, 103, 103]);
    let ports: Vec<u16> = (20000..44000).collect();
    let first: Vec<Ipv6Addr> = ports.iter().map(|p| backend_of(&xlat, &net, *p, UDP)).collect();
    for (i, weight) in [1.0, 2.0, 3.0].into_iter().enumerate() {
        let share = first.iter().filter(|b| **b == BACKENDS[i]).count() as f64 / ports.len() as f64;
        assert!((share - weight / 6.0).abs() < 0.05 * weight / 6.0, "backend {i}: share {share:.3}, weight {weight}/6");
    }

    // A new table (every bucket moved on by one) moves no flow.
    set_frontend(&mut xlat, 80, UDP, FRONTEND, &[103, 101, 102, 102, 103, 103]);
    let again: Vec<Ipv6Addr> = ports.iter().map(|p| backend_of(&xlat, &net, *p, UDP)).collect();
    assert_eq!(again, first, "flows keep their backends through a new table");

    // ::b removed (the agent rewrites the table without it): its flows move, no other does.
    set_frontend(&mut xlat, 80, UDP, FRONTEND, &[101, 103, 103]);
    xlat.remove_nat46_backend(102);
    let after: Vec<Ipv6Addr> = ports.iter().map(|p| backend_of(&xlat, &net, *p, UDP)).collect();
    for ((port, was), now) in ports.iter().zip(&first).zip(&after) {
        if *was == BACKENDS[1] {
            assert_ne!(*now, BACKENDS[1], "port {port}: moved off the removed backend");
        } else {
            assert_eq!(now, was, "port {port}: kept its backend");
        }
    }
    // The moved flows' old reverse entries are no longer theirs.
    let port = *ports.iter().zip(&first).find(|(_, b)| **b == BACKENDS[1]).unwrap().0;
    let run = xlat.run(&from_backend(BACKENDS[1], port, UDP, 0), net.v6);
    assert_eq!(run.verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_NAT46_NO_FLOW), 1);
}

#[test]
fn what_no_frontend_serves_is_the_hosts() {
    let (net, mut xlat) = gateway("nat46-host");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[101]);
    for frame in [
        to_vip(40000, 22, TCP, TCP_SYN),
        to_vip(40000, 80, UDP, 0),
        ethernet(ETH_IPV4, &ipv4(CLIENT, VIP, 64, 1, 0, &icmp(8, 0, [0, 1, 0, 1], b"ping"), Some(2))),
    ] {
        assert_eq!(xlat.run(&frame, net.v4).verdict, TC_ACT_UNSPEC, "left to the stack");
    }
    assert!(flows(&xlat).is_empty());
    assert_eq!(xlat.counted_total(), 0, "the host program's to count");
}

#[test]
fn replies_of_no_flow_and_fragments_are_dropped_and_counted() {
    let (net, mut xlat) = gateway("nat46-drops");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[101]);
    let run = xlat.run(&from_backend(BACKENDS[0], 40000, TCP, TCP_SYN_ACK), net.v6);
    assert_eq!(run.verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_NAT46_NO_FLOW), 1);

    let fragment = ethernet(ETH_IPV4, &ipv4(CLIENT, VIP, 64, TCP, 0x2000, &tcp_with(40000, 80, TCP_ACK), Some(16)));
    assert_eq!(xlat.run(&fragment, net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);
    assert!(flows(&xlat).is_empty(), "nothing was opened");
}

#[test]
fn a_frontend_without_backends_refuses_new_flows() {
    let (net, mut xlat) = gateway("nat46-empty");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[]);
    assert_eq!(xlat.run(&to_vip(40000, 80, TCP, TCP_SYN), net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BACKEND), 1);
}

#[test]
fn mid_flow_packets_open_a_flow_on_the_backend_the_table_names() {
    // As on a second gateway after a failover: no state, the same table.
    let (net, mut xlat) = gateway("nat46-midflow");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[103]);
    let run = xlat.run(&to_vip(40000, 80, TCP, TCP_ACK), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(v6_flow(&run.packet).1, BACKENDS[2]);
}

#[test]
fn one_client_port_cannot_reach_one_backend_through_two_frontends() {
    let (net, mut xlat) = gateway("nat46-clash");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[101]);
    set_frontend(&mut xlat, 81, TCP, 2, &[101]);
    assert_eq!(xlat.run(&to_vip(40000, 80, TCP, TCP_SYN), net.v4).verdict, TC_ACT_REDIRECT);
    // The backend could not tell the two apart: its replies would go astray.
    assert_eq!(xlat.run(&to_vip(40000, 81, TCP, TCP_SYN), net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NAT46_CLASH), 1);
    assert_eq!(xlat.run(&to_vip(40001, 81, TCP, TCP_SYN), net.v4).verdict, TC_ACT_REDIRECT, "another port is fine");
}

#[test]
fn a_new_connection_from_a_closed_flows_port_is_balanced_anew() {
    let (net, mut xlat) = gateway("nat46-reopen");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[101]);
    let send = |xlat: &Xlat, flags: u8| {
        let run = xlat.run(&to_vip(40000, 80, TCP, flags), net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "flags {flags:#x}");
        v6_flow(&run.packet).1
    };
    assert_eq!(send(&xlat, TCP_SYN), BACKENDS[0]);
    xlat.run(&from_backend(BACKENDS[0], 40000, TCP, TCP_SYN_ACK), net.v6);
    // ::a out of the table, still configured (quarantined, or draining).
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[102]);
    assert_eq!(send(&xlat, TCP_ACK), BACKENDS[0], "the live connection keeps its backend");
    assert_eq!(send(&xlat, TCP_SYN), BACKENDS[0], "and so does a retransmitted SYN");
    xlat.run(&from_backend(BACKENDS[0], 40000, TCP, TCP_SYN_ACK), net.v6);

    // Closed from both sides; the flow lives on for the closing lifetime.
    send(&xlat, TCP_FIN_ACK);
    assert_eq!(xlat.run(&from_backend(BACKENDS[0], 40000, TCP, TCP_FIN_ACK), net.v6).verdict, TC_ACT_REDIRECT);
    assert_eq!(send(&xlat, TCP_ACK), BACKENDS[0], "the last ACK is still the old connection's");
    set_events(&mut xlat.ebpf, true, 1000, 100);
    // The client takes the port again for a new connection.
    assert_eq!(send(&xlat, TCP_SYN), BACKENDS[1], "a new connection: the table's backend, not the closed flow's");
    assert_eq!(events(&mut xlat.ebpf).len(), 1, "a new flow, reported");
    let (_, forward) = flows(&xlat).into_iter().find(|(k, _)| k.saddr == CLIENT.to_ipv6_mapped().octets()).unwrap();
    assert_eq!(forward.backend_id, 102);
    assert_eq!(xlat.run(&from_backend(BACKENDS[1], 40000, TCP, TCP_SYN_ACK), net.v6).verdict, TC_ACT_REDIRECT);
    assert_eq!(xlat.run(&from_backend(BACKENDS[0], 40000, TCP, TCP_ACK), net.v6).verdict, TC_ACT_SHOT, "the old backend's");
}

/// `v4` embedded in the gateway's prefix, as the backends see it.
fn embedded(v4: Ipv4Addr) -> Ipv6Addr {
    let mut octets = CLIENT_AS_V6.octets();
    octets[12..].copy_from_slice(&v4.octets());
    octets.into()
}

/// Opens a UDP flow from the client's port 40000 to VIP:53; its backend.
fn udp_flow(xlat: &mut Xlat, net: &Net) -> Ipv6Addr {
    set_frontend(xlat, 53, UDP, FRONTEND, &[102]);
    let run = xlat.run(&to_vip(40000, 53, UDP, 0), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    v6_flow(&run.packet).1
}

#[test]
fn icmpv6_errors_about_a_flow_reach_its_client_from_the_vip_quoting_what_it_sent() {
    let (net, mut xlat) = gateway("nat46-errors6");
    let backend = udp_flow(&mut xlat, &net);
    let router = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
    let error_about = |client_port: u16, from: Ipv6Addr, kind: u8, code: u8, rest: [u8; 4]| {
        let quoted = ipv6(CLIENT_AS_V6, backend, 63, UDP, &udp(client_port, BACKEND_PORT, b"hello"), Some(6));
        ethernet(ETH_IPV6, &ipv6(from, CLIENT_AS_V6, 64, 58, &icmp(kind, code, rest, &quoted), Some(2)))
    };
    for (from, kind, code, rest, want) in [
        (backend, 1, 4, [0; 4], (3, 3)),            // port unreachable
        (router, 2, 0, [0, 0, 0x05, 0x78], (3, 4)), // packet too big, MTU 1400
        (router, 3, 0, [0; 4], (11, 0)),            // hop limit exceeded
    ] {
        let run = xlat.run(&error_about(40000, from, kind, code, rest), net.v6);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "ICMPv6 {kind}/{code}");
        assert_well_formed(&run.packet);
        let ip = &run.packet[14..];
        assert_eq!((&ip[12..16], &ip[16..20]), (&VIP.octets()[..], &CLIENT.octets()[..]), "from the VIP to the client");
        assert_eq!((ip[20], ip[21]), want, "ICMPv4 type and code");
        if kind == 2 {
            assert_eq!(u16::from_be_bytes([ip[26], ip[27]]), 1380, "1400 - 20");
        }
        let inner = &ip[28..];
        assert_eq!((&inner[12..16], &inner[16..20]), (&CLIENT.octets()[..], &VIP.octets()[..]), "what the client sent");
        let datagram = &inner[20..];
        assert_eq!(&datagram[0..4], &[0x9c, 0x40, 0, 53], "from its port 40000 to the VIP's port 53");
        assert_eq!(
            fold(pseudo4(&inner[12..16], &inner[16..20], UDP, datagram.len()) + sum16(datagram)),
            0,
            "quoted checksum mended"
        );
    }

    assert_eq!(xlat.run(&error_about(40001, backend, 1, 4, [0; 4]), net.v6).verdict, TC_ACT_SHOT, "about no flow");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_NAT46_NO_FLOW), 1);
    // A quote that is not the destination's own packet says nothing of its flow.
    let quoted = ipv6(embedded(Ipv4Addr::new(192, 0, 2, 9)), backend, 63, UDP, &udp(40000, BACKEND_PORT, b"x"), Some(6));
    let stray = ethernet(ETH_IPV6, &ipv6(backend, CLIENT_AS_V6, 64, 58, &icmp(1, 4, [0; 4], &quoted), Some(2)));
    assert_eq!(xlat.run(&stray, net.v6).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);
    let echo = ethernet(ETH_IPV6, &ipv6(backend, CLIENT_AS_V6, 64, 58, &icmp(128, 0, [0, 1, 0, 1], b"ping"), Some(2)));
    assert_eq!(xlat.run(&echo, net.v6).verdict, TC_ACT_SHOT, "an echo belongs to no flow");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 2);
}

#[test]
fn icmp_errors_to_the_vip_reach_the_flows_backend_quoting_what_it_sent() {
    let (net, mut xlat) = gateway("nat46-errors4");
    let backend = udp_flow(&mut xlat, &net);
    let router = Ipv4Addr::new(198, 18, 0, 1);
    let error_about = |vip_port: u16, client_port: u16, from: Ipv4Addr, kind: u8, code: u8, rest: [u8; 4]| {
        let quoted = ipv4(VIP, CLIENT, 63, UDP, 0, &udp(vip_port, client_port, b"hi"), Some(6));
        ethernet(ETH_IPV4, &ipv4(from, VIP, 64, 1, 0, &icmp(kind, code, rest, &quoted), Some(2)))
    };
    for (from, kind, code, rest, want) in [
        (CLIENT, 3, 3, [0; 4], (1, 4)),             // port unreachable: the client's port closed
        (router, 3, 4, [0, 0, 0x05, 0x78], (2, 0)), // fragmentation needed, MTU 1400
        (router, 11, 0, [0; 4], (3, 0)),            // time exceeded
    ] {
        let run = xlat.run(&error_about(53, 40000, from, kind, code, rest), net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "ICMP {kind}/{code}");
        assert_well_formed(&run.packet);
        let ip = &run.packet[14..];
        assert_eq!(&ip[8..24], &embedded(from).octets(), "from the sender, embedded in the prefix");
        assert_eq!(&ip[24..40], &backend.octets(), "to the flow's backend");
        assert_eq!((ip[40], ip[41]), want, "ICMPv6 type and code");
        if kind == 3 && code == 4 {
            assert_eq!(u32::from_be_bytes(ip[44..48].try_into().unwrap()), 1420, "1400 + 20");
        }
        let inner = &ip[48..];
        assert_eq!((&inner[8..24], &inner[24..40]), (&backend.octets()[..], &CLIENT_AS_V6.octets()[..]), "what the backend sent");
        let datagram = &inner[40..];
        assert_eq!(&datagram[0..4], &[0x1f, 0x90, 0x9c, 0x40], "from its port 8080 to the client's 40000");
        let sum = pseudo6(&inner[8..24], &inner[24..40], UDP, datagram.len()) + sum16(datagram);
        assert_eq!(fold(sum), 0, "quoted checksum mended");
    }

    assert_eq!(xlat.run(&error_about(53, 40001, CLIENT, 3, 3, [0; 4]), net.v4).verdict, TC_ACT_SHOT, "about no flow");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NAT46_NO_FLOW), 1);
    // The VIP may be the host's own address: errors about its own packets are its.
    let counted = xlat.counted_total();
    assert_eq!(xlat.run(&error_about(22, 40000, CLIENT, 3, 3, [0; 4]), net.v4).verdict, TC_ACT_UNSPEC, "no frontend's port");
    assert_eq!(xlat.counted_total(), counted, "the host program's to count");
}

/// RFC 7915 4.3/5.2: the TCP segment an error quotes is translated like a
/// packet, its checksum following the flow's addresses and ports in the
/// quote, both ways.
#[test]
fn icmp_errors_quoting_tcp_carry_the_quoted_checksum_through_the_flow() {
    let (net, mut xlat) = gateway("nat46-errors-tcp");
    set_frontend(&mut xlat, 80, TCP, FRONTEND, &[102]);
    let backend = backend_of(&xlat, &net, 40000, TCP);

    // The backend's error to the client, about what the client sent it.
    let quoted = ipv6(CLIENT_AS_V6, backend, 63, TCP, &tcp(40000, BACKEND_PORT, b"hello"), Some(16));
    let error = ethernet(ETH_IPV6, &ipv6(backend, CLIENT_AS_V6, 64, 58, &icmp(1, 4, [0; 4], &quoted), Some(2)));
    let run = xlat.run(&error, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = &run.packet[14..];
    assert_eq!((&ip[12..16], &ip[16..20]), (&VIP.octets()[..], &CLIENT.octets()[..]), "from the VIP to the client");
    let inner = &ip[28..];
    assert_eq!((&inner[12..16], &inner[16..20]), (&CLIENT.octets()[..], &VIP.octets()[..]), "what the client sent");
    assert_eq!(&inner[20..24], &[0x9c, 0x40, 0, 80], "from its port 40000 to the VIP's port 80");
    assert_quoted_tcp_checksum(inner, "to the client");

    // The client's error to the VIP, about what the backend sent it.
    let quoted = ipv4(VIP, CLIENT, 63, TCP, 0x4000, &tcp(80, 40000, b"hi"), Some(16));
    let error = ethernet(ETH_IPV4, &ipv4(CLIENT, VIP, 64, 1, 0, &icmp(3, 3, [0; 4], &quoted), Some(2)));
    let run = xlat.run(&error, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = &run.packet[14..];
    assert_eq!(&ip[24..40], &backend.octets(), "to the flow's backend");
    let inner = &ip[48..];
    assert_eq!((&inner[8..24], &inner[24..40]), (&backend.octets()[..], &CLIENT_AS_V6.octets()[..]), "what the backend sent");
    assert_eq!(&inner[40..44], &[0x1f, 0x90, 0x9c, 0x40], "from its port 8080 to the client's 40000");
    assert_quoted_tcp_checksum(inner, "to the backend");
}
