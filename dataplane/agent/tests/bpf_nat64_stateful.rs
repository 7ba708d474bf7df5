// SPDX-License-Identifier: Apache-2.0
//! Stateful NAT64 (RFC 6146, bpf/lib/nat64_state.h) through
//! BPF_PROG_TEST_RUN, one scenario per rule: IPv6 clients without a mapping
//! of their own borrow the pool's transport addresses, and the answers find
//! their way back. Each test has its own network namespace and pins; the
//! packets that come out are checked field by field, checksums included.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::{nat64::*, packet::*, *};
use v6node_abi::{
    CtKey, Direction, Reason, CT_CLOSING, CT_ESTABLISHED, CT_FIN_IN, CT_FIN_OUT, CT_RESET,
    NAT64_FILTER_ADDRESS_DEPENDENT as ADDRESS_DEPENDENT, NAT64_FILTER_ENDPOINT_INDEPENDENT as ENDPOINT_INDEPENDENT,
};

const D64: Direction = Direction::V6N_DIRECTION_XLAT_6TO4;
const D46: Direction = Direction::V6N_DIRECTION_XLAT_4TO6;

const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0x100);
const CLIENT2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0x101);
/// On the IPv6 side, outside the sources that may use the pool.
const STRANGER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0x200);
const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const SERVER: Ipv4Addr = V4_HOST;
const SERVER2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);

const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
const TCP_FIN_ACK: u8 = 0x11;
const TCP_RST: u8 = 0x04;

/// The namespace and the translator with one pool address, ports (and echo
/// identifiers) `first..=last`, for CLIENT and CLIENT2.
fn gateway(test: &str, filtering: u32, first: u16, last: u16) -> (Net, Xlat) {
    gateway_with_pool(test, &[POOL], filtering, first, last)
}

fn gateway_with_pool(test: &str, pool: &[Ipv4Addr], filtering: u32, first: u16, last: u16) -> (Net, Xlat) {
    gateway_for(test, pool, 127, filtering, first, last)
}

/// As `gateway`, the pool lent to CLIENT's /`sources_len`.
fn gateway_for(test: &str, pool: &[Ipv4Addr], sources_len: u8, filtering: u32, first: u16, last: u16) -> (Net, Xlat) {
    let net = Net::enter();
    ip("neigh add 2001:db8:6::100 lladdr 02:00:00:00:06:64 dev v6 nud permanent");
    ip("neigh add 2001:db8:6::101 lladdr 02:00:00:00:06:65 dev v6 nud permanent");
    ip("neigh add 192.0.2.3 lladdr 02:00:00:00:04:03 dev v4 nud permanent");
    let mut xlat = Xlat::load(test);
    xlat.enable_stateful(pool, CLIENT, sources_len, first, last, filtering);
    (net, xlat)
}

/// An IPv4 host's IPv6 face under the well-known prefix.
fn face(v4: Ipv4Addr) -> Ipv6Addr {
    let o = v4.octets();
    Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([o[2], o[3]]))
}

fn udp_out(client: Ipv6Addr, port: u16, server: Ipv4Addr) -> Vec<u8> {
    ethernet(ETH_IPV6, &ipv6(client, face(server), 64, 17, &udp(port, 53, b"query"), Some(6)))
}

fn udp_in(server: Ipv4Addr, pool_port: u16) -> Vec<u8> {
    ethernet(ETH_IPV4, &ipv4(server, POOL, 64, 17, 0, &udp(53, pool_port, b"answer"), Some(6)))
}

fn tcp_with(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut segment = tcp(sport, dport, b"");
    segment[13] = flags;
    segment
}

fn tcp_out(port: u16, flags: u8) -> Vec<u8> {
    ethernet(ETH_IPV6, &ipv6(CLIENT, face(SERVER), 64, 6, &tcp_with(port, 443, flags), Some(16)))
}

fn tcp_in(pool_port: u16, flags: u8) -> Vec<u8> {
    ethernet(ETH_IPV4, &ipv4(SERVER, POOL, 64, 6, 0x4000, &tcp_with(443, pool_port, flags), Some(16)))
}

fn l3(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

/// (source, source port) of a translated IPv4 frame.
fn v4_source(frame: &[u8]) -> (Ipv4Addr, u16) {
    let ip = l3(frame);
    (Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]), u16::from_be_bytes([ip[20], ip[21]]))
}

/// (destination, destination port) of a translated IPv6 frame.
fn v6_destination(frame: &[u8]) -> (Ipv6Addr, u16) {
    let ip = l3(frame);
    let addr: [u8; 16] = ip[24..40].try_into().unwrap();
    (addr.into(), u16::from_be_bytes([ip[42], ip[43]]))
}

/// Runs `frame` from the IPv6 side and returns the pool port it left with.
fn bind(xlat: &Xlat, net: &Net, frame: &[u8]) -> u16 {
    let run = xlat.run(frame, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "translated to the IPv4 side");
    assert_well_formed(&run.packet);
    let (source, port) = v4_source(&run.packet);
    assert_eq!(source, POOL);
    port
}

/// The pool side of the binding that holds `pool_port` (TCP or UDP).
fn pool_side(proto: u8, pool_port: u16) -> CtKey {
    CtKey { daddr: POOL.to_ipv6_mapped().octets(), dport: pool_port.to_be(), proto, ..CtKey::default() }
}

#[test]
fn a_udp_client_borrows_a_pool_address_and_port_and_the_answer_comes_back() {
    let (net, xlat) = gateway("udp", ENDPOINT_INDEPENDENT, 1024, 1031);
    let run = xlat.run(&udp_out(CLIENT, 40000, SERVER), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let out = &run.packet;
    assert_eq!(&out[0..6], &V4_HOST_MAC);
    assert_well_formed(out);
    let (source, port) = v4_source(out);
    assert_eq!(source, POOL);
    assert!((1024..=1031).contains(&port), "a port of the range: {port}");
    let ip = l3(out);
    assert_eq!(&ip[16..20], &SERVER.octets());
    assert_eq!(&ip[22..24], &53u16.to_be_bytes());
    assert_eq!(&ip[28..], b"query");

    let run = xlat.run(&udp_in(SERVER, port), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let back = &run.packet;
    assert_eq!(&back[12..14], &ETH_IPV6);
    assert_well_formed(back);
    assert_eq!(v6_destination(back), (CLIENT, 40000));
    assert_eq!(&l3(back)[8..24], &face(SERVER).octets(), "from the server's IPv6 face");
    assert_eq!(&l3(back)[48..], b"answer");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_XLAT_FORWARDED), 1);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_FORWARDED), 1);
    assert_eq!(xlat.state().len(), 2, "a binding is two entries, its client side and its pool side");
}

#[test]
fn one_client_port_keeps_one_pool_port_whatever_the_server() {
    let (net, xlat) = gateway("eim", ENDPOINT_INDEPENDENT, 1024, 1031);
    let first = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    assert_eq!(bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER2)), first, "endpoint-independent mapping");
    let other_port = bind(&xlat, &net, &udp_out(CLIENT, 40001, SERVER));
    let other_client = bind(&xlat, &net, &udp_out(CLIENT2, 40000, SERVER));
    assert!(other_port != first && other_client != first && other_port != other_client, "one binding each");
    assert_eq!(bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER)), first);
}

#[test]
fn endpoint_independent_filtering_lets_any_server_answer_a_binding_and_nobody_else_in() {
    let (net, xlat) = gateway("eif", ENDPOINT_INDEPENDENT, 1024, 1031);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    let run = xlat.run(&udp_in(SERVER2, port), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "a server the client never sent to");
    assert_eq!(v6_destination(&run.packet), (CLIENT, 40000));

    let run = xlat.run(&udp_in(SERVER, port + 1), net.v4);
    assert_eq!(run.verdict, TC_ACT_SHOT, "a pool port nobody holds");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BINDING), 1);
}

#[test]
fn address_dependent_filtering_admits_only_servers_the_client_sent_to() {
    let (net, xlat) = gateway("adf", ADDRESS_DEPENDENT, 1024, 1031);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    assert_eq!(xlat.run(&udp_in(SERVER, port), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(xlat.run(&udp_in(SERVER2, port), net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_FILTERED), 1);

    assert_eq!(bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER2)), port);
    let run = xlat.run(&udp_in(SERVER2, port), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "contacted now");
    assert_eq!(v6_destination(&run.packet), (CLIENT, 40000));
    assert_eq!(xlat.state().len(), 4, "the binding's two sides and a permit per server");
}

#[test]
fn tcp_binds_on_a_syn_and_times_the_binding_by_the_connections_state() {
    let (net, mut xlat) = gateway("tcp", ENDPOINT_INDEPENDENT, 1024, 1031);
    assert_eq!(xlat.run(&tcp_out(40000, TCP_ACK), net.v6).verdict, TC_ACT_SHOT, "no binding to a segment that opens nothing");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_NO_BINDING), 1);

    let port = bind(&xlat, &net, &tcp_out(40000, TCP_SYN));
    let key = pool_side(6, port);
    let flags = |xlat: &Xlat| xlat.state().into_iter().find(|(k, _)| *k == key).expect("the pool side").1.flags as u32;
    assert_eq!(flags(&xlat) & (CT_ESTABLISHED | CT_CLOSING), 0, "transitory until the server answers");

    let run = xlat.run(&tcp_in(port, TCP_SYN | TCP_ACK), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    assert_eq!(v6_destination(&run.packet), (CLIENT, 40000));
    assert_eq!(flags(&xlat) & (CT_ESTABLISHED | CT_CLOSING), CT_ESTABLISHED);
    // Established: 2 h 4 min. An hour of silence does not end it.
    xlat.age(&key, 3600);
    assert_eq!(xlat.run(&tcp_in(port, TCP_ACK), net.v4).verdict, TC_ACT_REDIRECT);

    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_FIN_ACK)), port);
    assert_eq!(xlat.run(&tcp_in(port, TCP_FIN_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(flags(&xlat) & CT_CLOSING, CT_CLOSING);
    // Both sides closed: transitory again, 4 min.
    xlat.age(&key, 241);
    assert_eq!(xlat.run(&tcp_in(port, TCP_ACK), net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BINDING), 1);
}

/// An established TCP binding on pool port `port` for CLIENT:40000, and its
/// pool side's key.
fn established(xlat: &Xlat, net: &Net) -> (u16, CtKey) {
    let port = bind(xlat, net, &tcp_out(40000, TCP_SYN));
    assert_eq!(xlat.run(&tcp_in(port, TCP_SYN | TCP_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(bind(xlat, net, &tcp_out(40000, TCP_ACK)), port);
    (port, pool_side(6, port))
}

fn tcp_flags_of(xlat: &Xlat, key: &CtKey) -> u32 {
    xlat.state().into_iter().find(|(k, _)| k == key).expect("the pool side").1.flags as u32
}

#[test]
fn a_half_closed_tcp_binding_stays_established_after_the_ipv6_fin_alone() {
    let (net, mut xlat) = gateway("halfclosed6", ENDPOINT_INDEPENDENT, 1024, 1031);
    let (port, key) = established(&xlat, &net);
    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_FIN_ACK)), port);
    assert_eq!(tcp_flags_of(&xlat, &key) & (CT_ESTABLISHED | CT_CLOSING), CT_ESTABLISHED, "one FIN closes nothing");
    assert_eq!(tcp_flags_of(&xlat, &key) & (CT_FIN_OUT | CT_FIN_IN), CT_FIN_OUT, "the IPv6 side's FIN");
    // RFC 6146 3.5.2.2: the server may send for hours yet; the binding
    // keeps the established lifetime (2 h 4 min), not the transitory one.
    xlat.age(&key, 3600);
    let run = xlat.run(&tcp_in(port, TCP_ACK), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "the server's data after the client's FIN");
    assert_eq!(v6_destination(&run.packet), (CLIENT, 40000));
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BINDING), 0);
}

#[test]
fn a_half_closed_tcp_binding_stays_established_after_the_ipv4_fin_alone() {
    let (net, mut xlat) = gateway("halfclosed4", ENDPOINT_INDEPENDENT, 1024, 1031);
    let (port, key) = established(&xlat, &net);
    assert_eq!(xlat.run(&tcp_in(port, TCP_FIN_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_ACK)), port, "the client's data after the server's FIN");
    assert_eq!(tcp_flags_of(&xlat, &key) & (CT_ESTABLISHED | CT_CLOSING), CT_ESTABLISHED);
    assert_eq!(tcp_flags_of(&xlat, &key) & (CT_FIN_OUT | CT_FIN_IN), CT_FIN_IN, "the IPv4 side's FIN");
    xlat.age(&key, 3600);
    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_ACK)), port, "still the established lifetime");
}

#[test]
fn fins_from_both_sides_give_the_tcp_binding_the_closing_lifetime() {
    let (net, mut xlat) = gateway("bothfins", ENDPOINT_INDEPENDENT, 1024, 1031);
    let (port, key) = established(&xlat, &net);
    assert_eq!(xlat.run(&tcp_in(port, TCP_FIN_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(tcp_flags_of(&xlat, &key) & CT_CLOSING, 0, "the IPv4 FIN alone");
    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_FIN_ACK)), port);
    assert_eq!(tcp_flags_of(&xlat, &key) & CT_CLOSING, CT_CLOSING, "V4 FIN + V6 FIN received");
    // Either side's second FIN does not undo it.
    assert_eq!(xlat.run(&tcp_in(port, TCP_FIN_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_ACK)), port, "the last ACK");
    assert_eq!(tcp_flags_of(&xlat, &key) & CT_CLOSING, CT_CLOSING);
    // The closing lifetime (NAT64's is the transitory 4 min), not 2 h 4 min.
    gone_after(&mut xlat, &net, port, &key, 241);
}

/// The binding under `key` is gone `seconds` after its last packet: the
/// server's next segment finds none, and is counted so.
fn gone_after(xlat: &mut Xlat, net: &Net, port: u16, key: &CtKey, seconds: u64) {
    xlat.age(key, seconds);
    assert_eq!(xlat.run(&tcp_in(port, TCP_ACK), net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BINDING), 1);
}

#[test]
fn a_rst_makes_the_tcp_binding_transitory() {
    let (net, mut xlat) = gateway("rst", ENDPOINT_INDEPENDENT, 1024, 1031);
    let (port, key) = established(&xlat, &net);
    assert_eq!(xlat.run(&tcp_in(port, TCP_RST | TCP_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(tcp_flags_of(&xlat, &key) & (CT_RESET | CT_CLOSING), CT_RESET, "transitory, not closing");
    // Transitory: 4 min after the RST the binding is gone.
    gone_after(&mut xlat, &net, port, &key, 241);
}

#[test]
fn a_segment_after_a_rst_makes_the_tcp_binding_established_again() {
    let (net, mut xlat) = gateway("rstback", ENDPOINT_INDEPENDENT, 1024, 1031);
    let (port, key) = established(&xlat, &net);
    assert_eq!(bind(&xlat, &net, &tcp_out(40000, TCP_RST)), port);
    assert_eq!(tcp_flags_of(&xlat, &key) & CT_RESET, CT_RESET);
    // Any segment but a RST after it: established again (RFC 6146 3.5.2.2).
    assert_eq!(xlat.run(&tcp_in(port, TCP_ACK), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(tcp_flags_of(&xlat, &key) & (CT_ESTABLISHED | CT_CLOSING | CT_RESET), CT_ESTABLISHED);
    xlat.age(&key, 3600);
    assert_eq!(xlat.run(&tcp_in(port, TCP_ACK), net.v4).verdict, TC_ACT_REDIRECT, "the established lifetime");
}

#[test]
fn echo_identifiers_are_mapped_both_ways_with_checksums_mended() {
    let (net, xlat) = gateway("echo", ENDPOINT_INDEPENDENT, 1024, 1031);
    let ping = ethernet(ETH_IPV6, &ipv6(CLIENT, face(SERVER), 64, 58, &icmp(128, 0, [0x12, 0x34, 0, 7], b"ping"), Some(2)));
    let run = xlat.run(&ping, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = l3(&run.packet);
    assert_eq!((ip[9], ip[20]), (1, 8), "an ICMP echo request");
    assert_eq!(&ip[12..16], &POOL.octets());
    let id = u16::from_be_bytes([ip[24], ip[25]]);
    assert!((1024..=1031).contains(&id), "an identifier of the pool's range: {id}");
    assert_eq!(&ip[26..28], &[0, 7], "the sequence kept");

    let [hi, lo] = id.to_be_bytes();
    let pong = ethernet(ETH_IPV4, &ipv4(SERVER, POOL, 64, 1, 0, &icmp(0, 0, [hi, lo, 0, 7], b"ping"), Some(2)));
    let run = xlat.run(&pong, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = l3(&run.packet);
    assert_eq!((ip[6], ip[40]), (58, 129), "an ICMPv6 echo reply");
    assert_eq!(&ip[24..40], &CLIENT.octets());
    assert_eq!(&ip[44..48], &[0x12, 0x34, 0, 7], "the client's identifier");

    let [hi, lo] = if id == 1024 { 1025u16 } else { 1024 }.to_be_bytes();
    let unasked = ethernet(ETH_IPV4, &ipv4(SERVER, POOL, 64, 1, 0, &icmp(0, 0, [hi, lo, 0, 7], b"ping"), Some(2)));
    assert_eq!(xlat.run(&unasked, net.v4).verdict, TC_ACT_SHOT, "a reply to no request");
}

#[test]
fn an_exhausted_pool_refuses_new_flows_counted_and_keeps_the_old_ones() {
    let (net, xlat) = gateway("exhaust", ENDPOINT_INDEPENDENT, 2000, 2199);
    let mut ports: Vec<u16> = (0..200).map(|i| bind(&xlat, &net, &udp_out(CLIENT, 40000 + i, SERVER))).collect();
    ports.sort_unstable();
    assert_eq!(ports, (2000..=2199).collect::<Vec<u16>>(), "every port, the last ones found by the scan");
    assert_eq!(xlat.run(&udp_out(CLIENT, 40200, SERVER), net.v6).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_POOL_EXHAUSTED), 1);
    for i in 0..200 {
        let port = bind(&xlat, &net, &udp_out(CLIENT, 40000 + i, SERVER));
        let run = xlat.run(&udp_in(SERVER, port), net.v4);
        assert_eq!(v6_destination(&run.packet), (CLIENT, 40000 + i), "existing flows untouched");
    }
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_POOL_EXHAUSTED), 1);
}

#[test]
fn an_expired_bindings_port_is_taken_over_at_once_and_never_revived() {
    let (net, mut xlat) = gateway("expiry", ENDPOINT_INDEPENDENT, 1024, 1024);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    assert_eq!(xlat.run(&udp_out(CLIENT, 40001, SERVER), net.v6).verdict, TC_ACT_SHOT, "the one port is held");
    xlat.age(&pool_side(17, port), 301);
    assert_eq!(xlat.run(&udp_in(SERVER, port), net.v4).verdict, TC_ACT_SHOT, "UDP lives 5 min");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BINDING), 1);
    assert_eq!(bind(&xlat, &net, &udp_out(CLIENT, 40001, SERVER)), port, "expired: free at once, before any sweep");
    assert_eq!(xlat.state().len(), 2, "the new binding's two sides: the old one's client side went with it");
    let run = xlat.run(&udp_in(SERVER, port), net.v4);
    assert_eq!(v6_destination(&run.packet), (CLIENT, 40001), "the port's new client");
    assert_eq!(xlat.run(&udp_out(CLIENT, 40000, SERVER), net.v6).verdict, TC_ACT_SHOT, "the old client's binding is gone");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_POOL_EXHAUSTED), 2);
}

#[test]
fn a_permit_of_the_ports_previous_client_admits_nothing() {
    let (net, mut xlat) = gateway("generation", ADDRESS_DEPENDENT, 1024, 1024);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    xlat.age(&pool_side(17, port), 301);
    assert_eq!(bind(&xlat, &net, &udp_out(CLIENT, 40001, SERVER2)), port);
    assert_eq!(xlat.run(&udp_in(SERVER, port), net.v4).verdict, TC_ACT_SHOT, "SERVER was the old client's");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_FILTERED), 1);
    assert_eq!(xlat.run(&udp_in(SERVER2, port), net.v4).verdict, TC_ACT_REDIRECT);
    assert_eq!(bind(&xlat, &net, &udp_out(CLIENT, 40001, SERVER)), port);
    assert_eq!(xlat.run(&udp_in(SERVER, port), net.v4).verdict, TC_ACT_REDIRECT, "contacted by the new client now");
}

#[test]
fn one_clients_flows_all_leave_from_one_pool_address() {
    let pool = [POOL, Ipv4Addr::new(203, 0, 113, 2), Ipv4Addr::new(203, 0, 113, 3), Ipv4Addr::new(203, 0, 113, 4)];
    let (net, xlat) = gateway_with_pool("paired", &pool, ENDPOINT_INDEPENDENT, 1024, 2047);
    let sources: std::collections::BTreeSet<Ipv4Addr> = (0..16)
        .map(|i| {
            let run = xlat.run(&udp_out(CLIENT, 40000 + i, SERVER), net.v6);
            assert_eq!(run.verdict, TC_ACT_REDIRECT);
            v4_source(&run.packet).0
        })
        .collect();
    assert_eq!(sources.len(), 1, "paired (RFC 4787 REQ-2): {sources:?}");
    assert!(pool.contains(sources.first().unwrap()));
}

#[test]
fn a_client_whose_paired_address_is_full_borrows_another_rather_than_being_refused() {
    let pool = [POOL, Ipv4Addr::new(203, 0, 113, 2)];
    let (net, xlat) = gateway_with_pool("overflow", &pool, ENDPOINT_INDEPENDENT, 1024, 1024);
    let paired = bind_from(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    let other = bind_from(&xlat, &net, &udp_out(CLIENT, 40001, SERVER));
    assert_ne!(paired, other, "the paired address's one port is held");
    assert_eq!(bind_from(&xlat, &net, &udp_out(CLIENT, 40000, SERVER)), paired, "each binding keeps its address");
    assert_eq!(xlat.run(&udp_out(CLIENT, 40002, SERVER), net.v6).verdict, TC_ACT_SHOT, "and with both full, refused");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_POOL_EXHAUSTED), 1);
}

#[test]
fn clients_spread_over_the_pool() {
    let pool = [POOL, Ipv4Addr::new(203, 0, 113, 2), Ipv4Addr::new(203, 0, 113, 3), Ipv4Addr::new(203, 0, 113, 4)];
    let (net, xlat) = gateway_for("spread", &pool, 120, ENDPOINT_INDEPENDENT, 1024, 2047);
    let mut per_address = std::collections::BTreeMap::<Ipv4Addr, usize>::new();
    for n in 0..32u16 {
        let client = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0x100 + n);
        *per_address.entry(bind_from(&xlat, &net, &udp_out(client, 40000, SERVER))).or_default() += 1;
    }
    assert_eq!(per_address.len(), 4, "32 clients, differing in their last bits only: {per_address:?}");
}

/// Runs `frame` from the IPv6 side and returns the pool address it left from.
fn bind_from(xlat: &Xlat, net: &Net, frame: &[u8]) -> Ipv4Addr {
    let run = xlat.run(frame, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "translated to the IPv4 side");
    v4_source(&run.packet).0
}

#[test]
fn sources_outside_the_pools_prefixes_stay_unmapped() {
    let (net, xlat) = gateway("stranger", ENDPOINT_INDEPENDENT, 1024, 1031);
    assert_eq!(xlat.run(&udp_out(STRANGER, 40000, SERVER), net.v6).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNMAPPED), 1);
    assert!(xlat.state().is_empty());
    // The mapped host keeps its stateless mapping, and its own address.
    let run = xlat.run(&udp_out(V6_HOST, 40000, SERVER), net.v6);
    assert_eq!(v4_source(&run.packet), (V6_HOST_AS_V4, 40000));
}

/// An ICMPv4 error from `from` to the pool about a UDP datagram that left
/// from `pool_port` to the server, quoted whole.
fn error_about_udp(from: Ipv4Addr, kind: u8, code: u8, rest: [u8; 4], pool_port: u16) -> Vec<u8> {
    let quoted = ipv4(POOL, SERVER, 63, 17, 0, &udp(pool_port, 53, b"query"), Some(6));
    ethernet(ETH_IPV4, &ipv4(from, POOL, 64, 1, 0, &icmp(kind, code, rest, &quoted), Some(2)))
}

#[test]
fn icmp_errors_about_a_binding_reach_its_client_quoting_what_it_sent() {
    let (net, xlat) = gateway("errors", ENDPOINT_INDEPENDENT, 1024, 1031);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    let router = Ipv4Addr::new(198, 18, 0, 1);
    for (from, kind, code, rest, want) in [
        (SERVER, 3, 3, [0; 4], (1, 4)),             // port unreachable
        (router, 3, 4, [0, 0, 0x05, 0x78], (2, 0)), // fragmentation needed, MTU 1400
        (router, 11, 0, [0; 4], (3, 0)),            // time exceeded
    ] {
        let run = xlat.run(&error_about_udp(from, kind, code, rest, port), net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "ICMP {kind}/{code}");
        let out = &run.packet;
        assert_well_formed(out);
        let ip = l3(out);
        assert_eq!(&ip[24..40], &CLIENT.octets(), "to the binding's client");
        assert_eq!(&ip[8..24], &face(from).octets());
        assert_eq!((ip[40], ip[41]), want, "ICMPv6 type and code");
        if kind == 3 && code == 4 {
            assert_eq!(u32::from_be_bytes(ip[44..48].try_into().unwrap()), 1420, "1400 + 20");
        }
        let inner = &ip[48..];
        assert_eq!(&inner[8..24], &CLIENT.octets(), "the quote's source is the client");
        assert_eq!(&inner[24..40], &face(SERVER).octets());
        let datagram = &inner[40..];
        assert_eq!(&datagram[0..4], &[0x9c, 0x40, 0, 53], "the client's own port 40000");
        let sum = pseudo6(&inner[8..24], &inner[24..40], 17, datagram.len()) + sum16(datagram);
        assert_eq!(fold(sum), 0, "the quoted datagram's checksum, mended");
    }
    assert_eq!(xlat.run(&error_about_udp(router, 3, 3, [0; 4], port + 1), net.v4).verdict, TC_ACT_SHOT, "no binding");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_NO_BINDING), 1);
}

/// An ICMPv6 Port Unreachable from CLIENT about `quoted`, through the
/// translator: the IPv4 packet that leaves, checked to leave from the pool.
fn port_unreachable_from_client(xlat: &Xlat, net: &Net, quoted: &[u8]) -> Vec<u8> {
    let error = ethernet(ETH_IPV6, &ipv6(CLIENT, face(SERVER), 64, 58, &icmp(1, 4, [0; 4], quoted), Some(2)));
    let run = xlat.run(&error, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = l3(&run.packet).to_vec();
    assert_eq!((&ip[12..16], &ip[16..20]), (&POOL.octets()[..], &SERVER.octets()[..]), "from the pool address");
    ip
}

#[test]
fn icmpv6_errors_from_a_client_leave_from_its_binding_quoting_what_the_server_sent() {
    let (net, xlat) = gateway("errors6", ENDPOINT_INDEPENDENT, 1024, 1031);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    // The server's answer came in, and the client's port was closed by then.
    let quoted = ipv6(face(SERVER), CLIENT, 63, 17, &udp(53, 40000, b"answer"), Some(6));
    let ip = port_unreachable_from_client(&xlat, &net, &quoted);
    let ip = ip.as_slice();
    assert_eq!((ip[20], ip[21]), (3, 3), "port unreachable");
    let inner = &ip[28..];
    assert_eq!((&inner[12..16], &inner[16..20]), (&SERVER.octets()[..], &POOL.octets()[..]));
    let datagram = &inner[20..];
    assert_eq!(&datagram[0..4], &[0, 53, (port >> 8) as u8, port as u8], "to the pool's port");
    assert_eq!(fold(pseudo4(&inner[12..16], &inner[16..20], 17, datagram.len()) + sum16(datagram)), 0);

    let unbound = ipv6(face(SERVER), CLIENT, 63, 17, &udp(53, 40001, b"answer"), Some(6));
    let error = ethernet(ETH_IPV6, &ipv6(CLIENT, face(SERVER), 64, 58, &icmp(1, 4, [0; 4], &unbound), Some(2)));
    assert_eq!(xlat.run(&error, net.v6).verdict, TC_ACT_SHOT, "about no binding of the client's");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_NO_BINDING), 1);
}

#[test]
fn a_routers_icmpv6_error_about_a_bindings_packet_leaves_from_the_pool() {
    let (net, xlat) = gateway("errors6-router", ENDPOINT_INDEPENDENT, 1024, 1031);
    let port = bind(&xlat, &net, &udp_out(CLIENT, 40000, SERVER));
    // The server's answer was too big for a link between the gateway and the
    // client; the router there is no source that may use the pool.
    let router: Ipv6Addr = "2001:db8:ff::1".parse().unwrap();
    let too_big = |client: Ipv6Addr| {
        let quoted = ipv6(face(SERVER), client, 63, 17, &udp(53, 40000, &[0; 1300]), Some(6));
        ethernet(ETH_IPV6, &ipv6(router, face(SERVER), 64, 58, &icmp(2, 0, [0, 0, 0x05, 0x00], &quoted[..1232]), Some(2)))
    };
    let run = xlat.run(&too_big(CLIENT), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = l3(&run.packet);
    assert_eq!((&ip[12..16], &ip[16..20]), (&POOL.octets()[..], &SERVER.octets()[..]), "from the pool address");
    assert_eq!((ip[20], ip[21]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([ip[26], ip[27]]), 1260, "1280 - 20");
    let inner = &ip[28..];
    assert_eq!((&inner[12..16], &inner[16..20]), (&SERVER.octets()[..], &POOL.octets()[..]));
    assert_eq!(&inner[20..24], &[0, 53, (port >> 8) as u8, port as u8], "to the pool's port");

    // About a host that may not use the pool: not stateful NAT64's.
    assert_eq!(xlat.run(&too_big(STRANGER), net.v6).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNMAPPED), 1);
}

/// RFC 5508 REQ-3, RFC 7915 4.3/5.2: the TCP segment an error quotes is
/// translated like a packet, its checksum following the binding's address
/// and port in the quote, both ways.
#[test]
fn icmp_errors_quoting_tcp_carry_the_quoted_checksum_through_the_binding() {
    let (net, xlat) = gateway("errors-tcp", ENDPOINT_INDEPENDENT, 1024, 1031);
    let port = bind(&xlat, &net, &tcp_out(40000, TCP_SYN));

    // To the client: the server's port is closed to what left from the pool.
    let quoted = ipv4(POOL, SERVER, 63, 6, 0x4000, &tcp(port, 443, b"hello"), Some(16));
    let error = ethernet(ETH_IPV4, &ipv4(SERVER, POOL, 64, 1, 0, &icmp(3, 3, [0; 4], &quoted), Some(2)));
    let run = xlat.run(&error, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = l3(&run.packet);
    assert_eq!(&ip[24..40], &CLIENT.octets(), "to the binding's client");
    let inner = &ip[48..];
    assert_eq!((&inner[8..24], &inner[24..40]), (&CLIENT.octets()[..], &face(SERVER).octets()[..]));
    assert_eq!(&inner[40..44], &[0x9c, 0x40, 1, 187], "the client's own port 40000");
    assert_quoted_tcp_checksum(inner, "to the client");

    // From the client: the server's segment reached a closed port.
    let quoted = ipv6(face(SERVER), CLIENT, 63, 6, &tcp(443, 40000, b"hello"), Some(16));
    let ip = port_unreachable_from_client(&xlat, &net, &quoted);
    let ip = ip.as_slice();
    let inner = &ip[28..];
    assert_eq!((&inner[12..16], &inner[16..20]), (&SERVER.octets()[..], &POOL.octets()[..]));
    assert_eq!(&inner[20..24], &[1, 187, (port >> 8) as u8, port as u8], "to the pool's port");
    assert_quoted_tcp_checksum(inner, "from the client");
}

#[test]
fn a_client_reaches_another_through_its_pool_address_hairpinned() {
    let (net, xlat) = gateway("hairpin", ENDPOINT_INDEPENDENT, 1024, 1031);
    let port2 = bind(&xlat, &net, &udp_out(CLIENT2, 40001, SERVER));
    let to_pool = |from: Ipv6Addr, sport: u16, dport: u16| {
        ethernet(ETH_IPV6, &ipv6(from, face(POOL), 64, 17, &udp(sport, dport, b"hairpin"), Some(6)))
    };
    let run = xlat.run(&to_pool(CLIENT, 40000, port2), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let out = &run.packet;
    assert_eq!(&out[12..14], &ETH_IPV6, "IPv6 in, IPv6 out");
    assert_eq!(&out[0..6], &[2, 0, 0, 0, 6, 0x65], "to CLIENT2's MAC");
    assert_well_formed(out);
    let ip = l3(out);
    assert_eq!(&ip[8..24], &face(POOL).octets(), "from the sender's pool address");
    assert_eq!(v6_destination(out), (CLIENT2, 40001));
    assert_eq!(ip[7], 63, "routed: hop limit 64 -> 63");
    let port1 = u16::from_be_bytes([ip[40], ip[41]]);
    assert!(port1 != port2 && (1024..=1031).contains(&port1), "the sender's own binding");

    let run = xlat.run(&to_pool(CLIENT2, 40001, port1), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    assert_eq!(v6_destination(&run.packet), (CLIENT, 40000), "and back");
    assert_eq!(u16::from_be_bytes([l3(&run.packet)[40], l3(&run.packet)[41]]), port2);
    let nobodys = (1024..=1031).find(|p| ![port1, port2].contains(p)).unwrap();
    assert_eq!(xlat.run(&to_pool(CLIENT, 40000, nobodys), net.v6).verdict, TC_ACT_SHOT, "a pool port nobody holds");
}
