// SPDX-License-Identifier: Apache-2.0
//! The stateless translator (bpf/nat64.bpf.c) run by the kernel through
//! BPF_PROG_TEST_RUN, one scenario per RFC 7915 rule: build a packet, run it
//! as if it arrived on one side of a real topology (each test has its own
//! network namespace, so FIB lookups and ICMP source selection are real),
//! then check the packet that comes out field by field, checksums included,
//! and the counter it landed in. Needs root and a bpffs at /sys/fs/bpf.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::{nat64::*, packet::*, *};
use v6node_abi::{Direction, Reason};

/// (type, code, the 4 bytes after the checksum) in, and what must come out.
type IcmpCase = (u8, u8, [u8; 4], u8, u8, [u8; 4]);

const D64: Direction = Direction::V6N_DIRECTION_XLAT_6TO4;
const D46: Direction = Direction::V6N_DIRECTION_XLAT_4TO6;

fn udp6_to_v4_host(hop: u8, data: &[u8]) -> Vec<u8> {
    ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, hop, 17, &udp(40000, 53, data), Some(6)))
}

fn l3(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

fn v4_addrs(frame: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    let p = l3(frame);
    (Ipv4Addr::new(p[12], p[13], p[14], p[15]), Ipv4Addr::new(p[16], p[17], p[18], p[19]))
}

fn v6_addrs(frame: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let p = l3(frame);
    let a: [u8; 16] = p[8..24].try_into().unwrap();
    let b: [u8; 16] = p[24..40].try_into().unwrap();
    (a.into(), b.into())
}

#[test]
fn udp_6to4_maps_addresses_hop_limit_traffic_class_and_checksum() {
    let net = Net::enter();
    let xlat = Xlat::load("udp64");
    let run = xlat.run(&udp6_to_v4_host(64, b"v6node"), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "forwarded to the IPv4 side");
    let out = &run.packet;
    assert_eq!(&out[0..6], &V4_HOST_MAC, "next hop's MAC from the FIB");
    assert_eq!(&out[12..14], &ETH_IPV4);
    assert_well_formed(out);
    assert_eq!(v4_addrs(out), (V6_HOST_AS_V4, V4_HOST));
    let ip = l3(out);
    assert_eq!(ip[1], 0xba, "traffic class -> TOS");
    assert_eq!(ip[8], 63, "hop limit 64 -> TTL 63");
    assert_eq!(ip[9], 17);
    assert_eq!(u16::from_be_bytes([ip[6], ip[7]]), 0, "small packet: DF clear, not a fragment");
    assert_eq!(&ip[20..24], &[0x9c, 0x40, 0, 53], "ports");
    assert_eq!(&ip[28..], b"v6node");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_XLAT_FORWARDED), 1);
}

#[test]
fn tcp_4to6_maps_addresses_ttl_tos_and_checksum() {
    let net = Net::enter();
    let xlat = Xlat::load("tcp46");
    let packet = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 6, 0x4000, &tcp(80, 40000, b"hello"), Some(16)));
    let run = xlat.run(&packet, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let out = &run.packet;
    assert_eq!(&out[0..6], &V6_HOST_MAC);
    assert_eq!(&out[12..14], &ETH_IPV6);
    assert_well_formed(out);
    assert_eq!(v6_addrs(out), (V4_HOST_AS_V6, V6_HOST));
    let ip = l3(out);
    assert_eq!(((ip[0] & 0x0f) << 4) | (ip[1] >> 4), 0xba, "TOS -> traffic class");
    assert_eq!(&ip[1..4], &[0xa0, 0, 0], "flow label zero");
    assert_eq!(ip[6], 6);
    assert_eq!(ip[7], 63);
    assert_eq!(&ip[60..], b"hello");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_FORWARDED), 1);
}

#[test]
fn icmp_echo_request_and_reply_translate_both_ways() {
    let net = Net::enter();
    let xlat = Xlat::load("echo");
    let ping6 = ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 58, &icmp(128, 0, [0x12, 0x34, 0, 7], b"ping"), Some(2)));
    let out = xlat.run(&ping6, net.v6).packet;
    assert_well_formed(&out);
    let ip = l3(&out);
    assert_eq!((ip[9], ip[20], ip[21]), (1, 8, 0), "ICMP echo request");
    assert_eq!(&ip[24..28], &[0x12, 0x34, 0, 7], "identifier and sequence kept");

    let pong4 = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(0, 0, [0x12, 0x34, 0, 7], b"ping"), Some(2)));
    let out = xlat.run(&pong4, net.v4).packet;
    assert_well_formed(&out);
    let ip = l3(&out);
    assert_eq!((ip[6], ip[40], ip[41]), (58, 129, 0), "ICMPv6 echo reply");
    assert_eq!(&ip[44..48], &[0x12, 0x34, 0, 7]);
}

#[test]
fn network_specific_prefixes_embed_ipv4_where_rfc6052_puts_it() {
    let net = Net::enter();
    let mut xlat = Xlat::load("nsp");
    // RFC 6052 section 2.4's table: 192.0.2.33 under each prefix length.
    let table: [(&str, u8, &str); 6] = [
        ("2001:db8::", 32, "2001:db8:c000:221::"),
        ("2001:db8:100::", 40, "2001:db8:1c0:2:21::"),
        ("2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"),
        ("2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"),
        ("2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"),
        ("2001:db8:122:344::", 96, "2001:db8:122:344::c000:221"),
    ];
    let server = Ipv4Addr::new(192, 0, 2, 33);
    for (prefix, len, embedded) in table {
        xlat.set_prefix(prefix.parse().unwrap(), len);
        let embedded: Ipv6Addr = embedded.parse().unwrap();
        let packet = ethernet(ETH_IPV6, &ipv6(V6_HOST, embedded, 64, 17, &udp(1, 2, b"x"), Some(6)));
        let run = xlat.run(&packet, net.v6);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "/{len}");
        assert_eq!(v4_addrs(&run.packet), (V6_HOST_AS_V4, server), "/{len}");
        assert_well_formed(&run.packet);

        let back = ethernet(ETH_IPV4, &ipv4(server, V6_HOST_AS_V4, 64, 17, 0, &udp(2, 1, b"y"), Some(6)));
        let run = xlat.run(&back, net.v4);
        assert_eq!(v6_addrs(&run.packet), (embedded, V6_HOST), "/{len} back");
        assert_well_formed(&run.packet);
    }
    // Bits 64-71 (the "u" octet) must be zero under prefixes shorter than /96.
    xlat.set_prefix("2001:db8:122::".parse().unwrap(), 48);
    let u_set: Ipv6Addr = "2001:db8:122:c000:2:2100:0:1".parse().unwrap();
    let mut bad = u_set.octets();
    bad[8] = 1;
    let packet = ethernet(ETH_IPV6, &ipv6(V6_HOST, bad.into(), 64, 17, &udp(1, 2, b"x"), Some(6)));
    assert_eq!(xlat.run(&packet, net.v6).verdict, TC_ACT_UNSPEC, "not an IPv4-embedded address");
}

#[test]
fn explicit_address_mappings_carry_the_suffix_and_win_over_the_prefix() {
    let net = Net::enter();
    let mut xlat = Xlat::load("eam");
    // A /120 <-> /24 pair: the last 8 bits carry over.
    xlat.add_eam("2001:db8:66::".parse().unwrap(), 120, Ipv4Addr::new(203, 0, 113, 0), 24);
    let client: Ipv6Addr = "2001:db8:66::2a".parse().unwrap();
    let packet = ethernet(ETH_IPV6, &ipv6(client, V4_HOST_AS_V6, 64, 17, &udp(1, 2, b"x"), Some(6)));
    let run = xlat.run(&packet, net.v6);
    assert_eq!(v4_addrs(&run.packet), (Ipv4Addr::new(203, 0, 113, 42), V4_HOST));
    assert_well_formed(&run.packet);

    // Back again: no route to 2001:db8:66::/64 here, so the translated packet
    // is left to the kernel (which answers unreachable) and counted as such.
    let back = ethernet(ETH_IPV4, &ipv4(V4_HOST, Ipv4Addr::new(203, 0, 113, 42), 64, 17, 0, &udp(2, 1, b"y"), Some(6)));
    let run = xlat.run(&back, net.v4);
    assert_eq!(run.verdict, TC_ACT_OK);
    assert_eq!(v6_addrs(&run.packet), (V4_HOST_AS_V6, client));
    assert_well_formed(&run.packet);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_TO_STACK), 1);

    // An EAM can name IPv4 hosts too; it wins over the prefix (RFC 7757).
    xlat.add_eam("2001:db8:44::".parse().unwrap(), 120, Ipv4Addr::new(192, 0, 2, 0), 24);
    let via_eam: Ipv6Addr = "2001:db8:44::2".parse().unwrap();
    let packet = ethernet(ETH_IPV6, &ipv6(V6_HOST, via_eam, 64, 17, &udp(1, 2, b"x"), Some(6)));
    let run = xlat.run(&packet, net.v6);
    assert_eq!(v4_addrs(&run.packet), (V6_HOST_AS_V4, V4_HOST));
    let back = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(2, 1, b"y"), Some(6)));
    assert_eq!(v6_addrs(&xlat.run(&back, net.v4).packet), (via_eam, V6_HOST), "source maps by EAM, not prefix");
}

#[test]
fn ipv4_to_a_translatable_range_reaches_its_ipv4_embedded_ipv6_address_and_back() {
    let net = Net::enter();
    let mut xlat = Xlat::load("translatable");
    // An IPv6 service numbered under the prefix, 64:ff9b::198.51.100.10,
    // behind the IPv6 side.
    ip("-6 route add 64:ff9b::c633:6400/120 via 2001:db8:6::2 dev v6");
    let service = Ipv4Addr::new(198, 51, 100, 10);
    let service6: Ipv6Addr = "64:ff9b::c633:640a".parse().unwrap();
    let request = ethernet(ETH_IPV4, &ipv4(V4_HOST, service, 64, 6, 0x4000, &tcp(40000, 443, b"hello"), Some(16)));

    let run = xlat.run(&request, net.v4);
    assert_eq!(run.verdict, TC_ACT_UNSPEC, "outside every range and EAM: not the translator's");
    assert_eq!(run.packet, request, "untouched");

    xlat.add_translatable(Ipv4Addr::new(198, 51, 100, 0), 24);
    let run = xlat.run(&request, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "forwarded to the IPv6 side");
    assert_eq!(&run.packet[0..6], &V6_HOST_MAC);
    assert_well_formed(&run.packet);
    assert_eq!(v6_addrs(&run.packet), (V4_HOST_AS_V6, service6), "both addresses under the prefix");
    assert_eq!(&l3(&run.packet)[60..], b"hello");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_FORWARDED), 1);

    let reply = ethernet(ETH_IPV6, &ipv6(service6, V4_HOST_AS_V6, 64, 6, &tcp(443, 40000, b"world"), Some(16)));
    let run = xlat.run(&reply, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    assert_eq!(v4_addrs(&run.packet), (service, V4_HOST), "the reply comes from the address the client used");

    // An ICMP error about that reply reaches the service too (PMTUD):
    // Fragmentation Needed 1300 becomes Packet Too Big 1320, the quoted
    // reply translated back.
    let quoted = ipv4(service, V4_HOST, 63, 6, 0x4000, &tcp(443, 40000, b"world"), Some(16));
    let error = ethernet(ETH_IPV4, &ipv4(V4_HOST, service, 64, 1, 0, &icmp(3, 4, [0, 0, 0x05, 0x14], &quoted), Some(2)));
    let run = xlat.run(&error, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    assert_eq!(v6_addrs(&run.packet), (V4_HOST_AS_V6, service6));
    let message = &l3(&run.packet)[40..];
    assert_eq!((message[0], &message[4..8]), (2, &1320u32.to_be_bytes()[..]), "Packet Too Big, MTU 1320");
    assert_eq!((&message[8 + 8..8 + 24], &message[8 + 24..8 + 40]), (&service6.octets()[..], &V4_HOST_AS_V6.octets()[..]));

    // An EAM inside the range still wins (RFC 7757): 198.51.100.6 is V6_HOST.
    let to_eam = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, b"x"), Some(6)));
    assert_eq!(v6_addrs(&xlat.run(&to_eam, net.v4).packet), (V4_HOST_AS_V6, V6_HOST));
}

#[test]
fn traffic_outside_the_mapping_passes_untouched_and_uncounted() {
    let net = Net::enter();
    let xlat = Xlat::load("outside");
    let other6 = ethernet(ETH_IPV6, &ipv6(V6_HOST, "2001:db8:99::1".parse().unwrap(), 64, 17, &udp(1, 2, b"x"), Some(6)));
    let ns = ethernet(
        ETH_IPV6,
        &ipv6(
            "fe80::2".parse().unwrap(),
            "ff02::1:ff00:1".parse().unwrap(),
            255,
            58,
            &icmp(135, 0, [0; 4], &V6_GW.octets()),
            Some(2),
        ),
    );
    let other4 = ethernet(ETH_IPV4, &ipv4(V4_HOST, Ipv4Addr::new(192, 0, 2, 99), 64, 17, 0, &udp(1, 2, b"x"), Some(6)));
    let arp = common::packet::arp();
    for (what, packet, ifindex) in
        [("IPv6", &other6, net.v6), ("NDP", &ns, net.v6), ("IPv4", &other4, net.v4), ("ARP", &arp, net.v4)]
    {
        let run = xlat.run(packet, ifindex);
        assert_eq!(run.verdict, TC_ACT_UNSPEC, "{what}");
        assert_eq!(&run.packet, packet, "{what} untouched");
    }
    assert_eq!(xlat.counted_total(), 0);
}

#[test]
fn unmapped_source_to_the_prefix_is_dropped_and_counted() {
    let net = Net::enter();
    let mut xlat = Xlat::load("unmapped");
    let stranger: Ipv6Addr = "2001:db8:77::1".parse().unwrap();
    let packet = ethernet(ETH_IPV6, &ipv6(stranger, V4_HOST_AS_V6, 64, 17, &udp(1, 2, b"x"), Some(6)));
    assert_eq!(xlat.run(&packet, net.v6).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNMAPPED), 1);
    // To an EAM address, the same source is ordinary IPv6 routed through.
    xlat.add_eam("2001:db8:44::".parse().unwrap(), 120, Ipv4Addr::new(192, 0, 2, 0), 24);
    let packet = ethernet(ETH_IPV6, &ipv6(stranger, "2001:db8:44::2".parse().unwrap(), 64, 17, &udp(1, 2, b"x"), Some(6)));
    assert_eq!(xlat.run(&packet, net.v6).verdict, TC_ACT_UNSPEC);
}

#[test]
fn a_destination_the_ipv6_network_routes_stays_ipv6_and_is_translated_as_a_source() {
    let net = Net::enter();
    let mut xlat = Xlat::load("native");
    // Two nodes' pods with IPv4 identities, as a BGP gateway that also routes
    // between them holds them: one mapping is flagged routed natively.
    let (pod_a, pod_b): (Ipv6Addr, Ipv6Addr) = ("2001:db8:66::5".parse().unwrap(), "2001:db8:67::7".parse().unwrap());
    xlat.add_eam(pod_a, 120, Ipv4Addr::new(203, 0, 113, 0), 24);
    xlat.add_eam_with_flags(pod_b, 120, Ipv4Addr::new(198, 51, 100, 0), 24, v6node_abi::EAM_ROUTED_NATIVELY as u16);
    let to_pod_b = ethernet(ETH_IPV6, &ipv6(pod_a, pod_b, 64, 6, &tcp(40000, 80, b""), Some(6)));
    let run = xlat.run(&to_pod_b, net.v6);
    assert_eq!(run.verdict, TC_ACT_UNSPEC, "pod to pod is plain IPv6");
    assert_eq!(&run.packet, &to_pod_b, "untouched");
    // Without the flag the same packet is translated (RFC 7757 hairpinning).
    let to_pod_a = ethernet(ETH_IPV6, &ipv6(pod_b, pod_a, 64, 17, &udp(1, 2, b"x"), Some(6)));
    assert_ne!(xlat.run(&to_pod_a, net.v6).verdict, TC_ACT_UNSPEC, "unflagged: translated");
    // The routed pod still reaches IPv4 under its IPv4 identity, and IPv4
    // reaches it.
    let out = xlat.run(&ethernet(ETH_IPV6, &ipv6(pod_b, V4_HOST_AS_V6, 64, 17, &udp(1, 2, b"x"), Some(6))), net.v6);
    assert_eq!(v4_addrs(&out.packet), (Ipv4Addr::new(198, 51, 100, 7), V4_HOST));
    let back = ethernet(ETH_IPV4, &ipv4(V4_HOST, Ipv4Addr::new(198, 51, 100, 7), 64, 17, 0, &udp(2, 1, b"y"), Some(6)));
    assert_eq!(v6_addrs(&xlat.run(&back, net.v4).packet), (V4_HOST_AS_V6, pod_b));
}

#[test]
fn hop_limit_running_out_is_answered_with_time_exceeded_from_the_ingress_side() {
    let net = Net::enter();
    let xlat = Xlat::load("ttl");
    let original = udp6_to_v4_host(1, b"traceroute");
    let run = xlat.run(&original, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "sent back");
    let out = &run.packet;
    assert_well_formed(out);
    assert_eq!(&out[0..6], &V6_HOST_MAC);
    assert_eq!(v6_addrs(out), (V6_GW, V6_HOST), "from the address facing the sender");
    let ip = l3(out);
    assert_eq!((ip[6], ip[40], ip[41]), (58, 3, 0), "ICMPv6 Time Exceeded, hop limit");
    assert_eq!(&ip[48..], &original[14..14 + ((original.len() - 14) & !3)], "quotes the packet, cut to whole words");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_HOP_LIMIT), 1);

    let original = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 1, 17, 0, &udp(1, 2, b"traceroute"), Some(6)));
    let out = xlat.run(&original, net.v4).packet;
    assert_well_formed(&out);
    assert_eq!(v4_addrs(&out), (V4_GW, V4_HOST));
    let ip = l3(&out);
    assert_eq!((ip[9], ip[20], ip[21]), (1, 11, 0), "ICMP Time Exceeded in transit");
    assert_eq!(&ip[28..], &original[14..14 + ((original.len() - 14) & !3)], "quote, cut to whole words");

    // Never an error about an error.
    let error = ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 1, 58, &icmp(1, 4, [0; 4], &[0; 48]), Some(2)));
    assert_eq!(xlat.run(&error, net.v6).verdict, TC_ACT_SHOT);
}

#[test]
fn packets_too_big_for_the_next_hop_get_ptb_or_fragmentation_needed() {
    let net = Net::enter();
    let xlat = Xlat::load("ptb");
    net.set_mtu("v4", 1300);
    // 1400 bytes of IPv6 = 1380 of IPv4, with DF (over 1260): too big.
    let original = udp6_to_v4_host(64, &[7; 1400 - 48]);
    let run = xlat.run(&original, net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    let ip = l3(&run.packet);
    assert_eq!((ip[40], ip[41]), (2, 0), "ICMPv6 Packet Too Big");
    assert_eq!(u32::from_be_bytes(ip[44..48].try_into().unwrap()), 1320, "IPv4 MTU + 20");
    assert_eq!(ip.len(), 1280, "error fits the IPv6 minimum MTU");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_TOO_BIG), 1);

    // DF clear (<= 1260 after translation) and still too big: the kernel
    // fragments it on the way out.
    net.set_mtu("v4", 1000);
    let run = xlat.run(&udp6_to_v4_host(64, &[7; 1200 - 48]), net.v6);
    assert_eq!(run.verdict, TC_ACT_OK);
    assert_eq!(u16::from_be_bytes([l3(&run.packet)[6], l3(&run.packet)[7]]) & 0x4000, 0);
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_XLAT_TO_STACK), 1);

    net.set_mtu("v6", 1280);
    let original = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0x4000, &udp(1, 2, &[9; 1300 - 28]), Some(6)));
    // (v4's MTU of 1000 took IPv6 off it, forwarding switch included: the
    // translator looks the IPv6 route up from loopback then.)
    let run = xlat.run(&original, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    let out = run.packet;
    assert_well_formed(&out);
    let ip = l3(&out);
    assert_eq!((ip[20], ip[21]), (3, 4), "Fragmentation Needed");
    assert_eq!(u16::from_be_bytes([ip[26], ip[27]]), 1260, "IPv6 MTU - 20");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_TOO_BIG), 1);
}

/// What the kernel makes of `packet` (an IPv4 packet) on a link of MTU
/// 1252: its fragments, as they come back in.
fn fragments_of(packet: &[u8]) -> Vec<Vec<u8>> {
    let (header, payload) = packet.split_at(20);
    payload
        .chunks(1232)
        .enumerate()
        .map(|(i, chunk)| {
            let mut fragment = header.to_vec();
            let more = if (i + 1) * 1232 < payload.len() { 0x2000 } else { 0 };
            fragment[2..4].copy_from_slice(&((20 + chunk.len()) as u16).to_be_bytes());
            fragment[6..8].copy_from_slice(&(more | (i * 1232 / 8) as u16).to_be_bytes());
            fragment[8] -= 1; // forwarded out of the link
            fragment[10..12].copy_from_slice(&[0, 0]);
            let c = fold(sum16(&fragment));
            fragment[10..12].copy_from_slice(&c.to_be_bytes());
            fragment.extend_from_slice(chunk);
            ethernet(ETH_IPV4, &fragment)
        })
        .collect()
}

#[test]
fn df_clear_ipv4_too_big_for_ipv6_goes_to_the_kernel_readdressed_to_be_fragmented() {
    let net = Net::enter();
    let mut xlat = Xlat::load("fragment");
    net.set_mtu("v6", 1280);
    let big = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, &[9; 1300 - 28]), Some(6)));
    // Without a fragmentation link: Fragmentation Needed, DF or not.
    let run = xlat.run(&big, net.v4);
    assert_eq!((run.verdict, l3(&run.packet)[20]), (TC_ACT_REDIRECT, 3));

    const VIA: Ipv4Addr = Ipv4Addr::new(169, 254, 118, 1);
    xlat.set_fragment_addr(VIA);
    let run = xlat.run(&big, net.v4);
    assert_eq!(run.verdict, TC_ACT_OK, "to the kernel");
    assert_eq!(run.mark, u32::from(V6_HOST_AS_V4), "its destination kept in its mark");
    assert_eq!(v4_addrs(&run.packet), (V4_HOST, VIA), "readdressed to the fragmentation link's route");
    assert_eq!(fold(sum16(&l3(&run.packet)[..20])), 0, "header checksum");
    assert_eq!(l3(&run.packet)[20..], l3(&big)[20..], "the rest untouched, transport checksum included");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_TO_FRAGMENT), 1);
    let readdressed = run.packet;

    // The kernel's fragments come back: each translated to an IPv6 fragment
    // for the original destination, one hop taken in all, and the datagram
    // they make up has a valid checksum.
    let fragments = fragments_of(&readdressed[14..]);
    let mut datagram = Vec::new();
    for (i, fragment) in fragments.iter().enumerate() {
        let run = xlat.run_marked(fragment, net.v4, u32::from(V6_HOST_AS_V4));
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "fragment {i}");
        assert_well_formed(&run.packet);
        let ip = l3(&run.packet);
        assert_eq!(v6_addrs(&run.packet), (V4_HOST_AS_V6, V6_HOST), "fragment {i}");
        assert_eq!((ip[6], ip[7]), (44, 63), "fragment {i}: Fragment header, hop limit as the kernel left it");
        assert_eq!(ip.len(), if i == 0 { 1280 } else { 40 + 8 + 1300 - 20 - 1232 }, "fragment {i}: at most IPv6's minimum MTU");
        assert_eq!(run.mark, 0, "fragment {i}: the mark taken off");
        datagram.extend_from_slice(&ip[48..]);
    }
    assert_eq!(fragments.len(), 2);
    let sent = &l3(&big)[20..];
    assert!(datagram.len() == sent.len() && datagram[..6] == sent[..6] && datagram[8..] == sent[8..], "the datagram whole");
    assert_eq!(fold(pseudo6(&V4_HOST_AS_V6.octets(), &V6_HOST.octets(), 17, datagram.len()) + sum16(&datagram)), 0);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_TO_FRAGMENT), 1, "each sent round once");

    // TTL 2 on the way in: the kernel leaves the fragments TTL 1, and they
    // are translated with hop limit 1, no Time Exceeded: the translator's
    // hop was counted on the way in.
    let last_hop = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 2, 17, 0, &udp(1, 2, &[9; 1300 - 28]), Some(6)));
    let run = xlat.run(&last_hop, net.v4);
    assert_eq!(run.verdict, TC_ACT_OK);
    for fragment in fragments_of(&run.packet[14..]) {
        let run = xlat.run_marked(&fragment, net.v4, u32::from(V6_HOST_AS_V4));
        assert_eq!((run.verdict, l3(&run.packet)[6], l3(&run.packet)[7]), (TC_ACT_REDIRECT, 44, 1));
    }

    // A packet that comes back still too big is refused, not sent round
    // again, and the error quotes it with its own destination.
    let run = xlat.run_marked(&readdressed, net.v4, u32::from(V6_HOST_AS_V4));
    assert_eq!((run.verdict, l3(&run.packet)[20], l3(&run.packet)[21]), (TC_ACT_REDIRECT, 3, 4), "Fragmentation Needed");
    assert_eq!(&l3(&run.packet)[28 + 16..28 + 20], &V6_HOST_AS_V4.octets(), "quoted as sent");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_TO_FRAGMENT), 2);

    // To the fragmentation address without a destination kept (not from
    // the link): dropped and counted, neither guessed at nor sent round.
    let run = xlat.run(&readdressed, net.v4);
    assert_eq!(run.verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);

    // DF set, an ICMP message (translated whole), UDP without a checksum: refused as before.
    let df = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0x4000, &udp(1, 2, &[9; 1300 - 28]), Some(6)));
    let ping = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(8, 0, [0, 1, 0, 1], &[0; 1300 - 28]), Some(2)));
    let no_sum = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, &[9; 1300 - 28]), None));
    for frame in [df, ping, no_sum] {
        let run = xlat.run(&frame, net.v4);
        assert_eq!((run.verdict, run.mark), (TC_ACT_REDIRECT, 0));
    }
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_TO_FRAGMENT), 2);
}

/// An ICMPv6 error from the IPv6 host about a UDP datagram the IPv4 host sent
/// it (as the translator delivered it).
fn icmp6_error_about_udp(kind: u8, code: u8, rest: [u8; 4]) -> Vec<u8> {
    let inner = ipv6(V4_HOST_AS_V6, V6_HOST, 63, 17, &udp(5353, 9, b"quoted datagram"), Some(6));
    ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 58, &icmp(kind, code, rest, &inner), Some(2)))
}

/// Checks the quote of a translated ICMP error: an IPv4 header whose fields
/// and checksum are right, and the UDP datagram with a valid checksum.
fn assert_quote_is_ipv4_udp(icmp_message: &[u8]) {
    let inner = &icmp_message[8..];
    assert_eq!(inner[0], 0x45);
    assert_eq!(fold(sum16(&inner[..20])), 0, "quoted header checksum");
    assert_eq!((&inner[12..16], &inner[16..20]), (&V4_HOST.octets()[..], &V6_HOST_AS_V4.octets()[..]));
    assert_eq!(inner[9], 17);
    assert_eq!(inner[8], 63, "quoted TTL as it was");
    let udp = &inner[20..];
    assert_eq!(u16::from_be_bytes([inner[2], inner[3]]) as usize, 20 + udp.len());
    assert_eq!(fold(pseudo4(&inner[12..16], &inner[16..20], 17, udp.len()) + sum16(udp)), 0, "quoted UDP checksum");
}

#[test]
fn icmpv6_errors_become_icmp_errors_with_the_quoted_packet_translated() {
    let net = Net::enter();
    let xlat = Xlat::load("icmp6err");
    let cases: [IcmpCase; 5] = [
        (2, 0, 1400u32.to_be_bytes(), 3, 4, [0, 0, 0x05, 0x64]), // PTB 1400 -> Frag Needed 1380
        (1, 4, [0; 4], 3, 3, [0; 4]),                            // port unreachable
        (1, 1, [0; 4], 3, 10, [0; 4]),                           // administratively prohibited
        (3, 0, [0; 4], 11, 0, [0; 4]),                           // hop limit exceeded
        (4, 0, 7u32.to_be_bytes(), 12, 0, [8, 0, 0, 0]),         // pointer at hop limit -> at TTL
    ];
    for (kind6, code6, rest6, kind4, code4, rest4) in cases {
        let run = xlat.run(&icmp6_error_about_udp(kind6, code6, rest6), net.v6);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "ICMPv6 {kind6}/{code6}");
        let out = &run.packet;
        assert_well_formed(out);
        assert_eq!(v4_addrs(out), (V6_HOST_AS_V4, V4_HOST));
        let message = &l3(out)[20..];
        assert_eq!((message[0], message[1]), (kind4, code4), "ICMPv6 {kind6}/{code6}");
        assert_eq!(&message[4..8], &rest4, "ICMPv6 {kind6}/{code6}: MTU/pointer field");
        assert_quote_is_ipv4_udp(message);
    }
    // RFC 7915 5.2: no IPv4 counterpart, so dropped.
    let run = xlat.run(&icmp6_error_about_udp(4, 2, [0; 4]), net.v6);
    assert_eq!(run.verdict, TC_ACT_SHOT, "unrecognised IPv6 option");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);
}

#[test]
fn icmp_errors_become_icmpv6_errors_with_the_quoted_packet_translated() {
    let net = Net::enter();
    let xlat = Xlat::load("icmp4err");
    let inner = ipv4(V6_HOST_AS_V4, V4_HOST, 63, 17, 0x4000, &udp(9, 5353, b"quoted datagram"), Some(6));
    let cases: [IcmpCase; 4] = [
        (3, 4, [0, 0, 0x05, 0x14], 2, 0, 1320u32.to_be_bytes()), // Frag Needed 1300 -> PTB 1320
        (3, 3, [0; 4], 1, 4, [0; 4]),                            // port unreachable
        (11, 0, [0; 4], 3, 0, [0; 4]),                           // TTL exceeded
        (3, 2, [0; 4], 4, 1, 6u32.to_be_bytes()),                // protocol unreachable -> pointer at next header
    ];
    for (kind4, code4, rest4, kind6, code6, rest6) in cases {
        let packet = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(kind4, code4, rest4, &inner), Some(2)));
        let run = xlat.run(&packet, net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "ICMP {kind4}/{code4}");
        let out = &run.packet;
        assert_well_formed(out);
        assert_eq!(v6_addrs(out), (V4_HOST_AS_V6, V6_HOST));
        let message = &l3(out)[40..];
        assert_eq!((message[0], message[1]), (kind6, code6), "ICMP {kind4}/{code4}");
        assert_eq!(&message[4..8], &rest6, "ICMP {kind4}/{code4}: MTU/pointer field");
        let quoted = &message[8..];
        assert_eq!(quoted[0] >> 4, 6);
        assert_eq!((&quoted[8..24], &quoted[24..40]), (&V6_HOST.octets()[..], &V4_HOST_AS_V6.octets()[..]));
        assert_eq!((quoted[6], quoted[7]), (17, 63), "next header, hop limit as quoted");
        let udp = &quoted[40..];
        assert_eq!(fold(pseudo6(&quoted[8..24], &quoted[24..40], 17, udp.len()) + sum16(udp)), 0, "quoted UDP checksum");
    }
    // Timestamps have no ICMPv6 counterpart.
    let packet = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(13, 0, [0; 4], &[0; 12]), Some(2)));
    assert_eq!(xlat.run(&packet, net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);
}

/// RFC 7915 5.2 (and 4.3 below): a quoted TCP segment is translated like a
/// packet, so its checksum follows the quote's new addresses when the quote
/// holds it; a quote cut short of it is carried as it is.
#[test]
fn icmpv6_errors_quoting_tcp_carry_the_quoted_checksum_translated() {
    let net = Net::enter();
    let xlat = Xlat::load("icmp6err-tcp");
    let segment = tcp(443, 40000, b"quoted segment");
    let inner = ipv6(V4_HOST_AS_V6, V6_HOST, 63, 6, &segment, Some(16));
    // The same segment as the IPv4 host sent it: the checksum to find.
    let sent = ipv4(V4_HOST, V6_HOST_AS_V4, 63, 6, 0, &segment, Some(16));
    // Whole, up to the urgent pointer, to the checksum, short of it.
    for tcp_len in [segment.len(), 20, 18, 16, 8] {
        let what = format!("a quote of {tcp_len} bytes of TCP");
        let quoted = &inner[..40 + tcp_len];
        let error = ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 58, &icmp(1, 4, [0; 4], quoted), Some(2)));
        let run = xlat.run(&error, net.v6);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "{what}");
        assert_well_formed(&run.packet);
        let quote = &l3(&run.packet)[28..];
        assert_eq!((&quote[12..16], &quote[16..20]), (&V4_HOST.octets()[..], &V6_HOST_AS_V4.octets()[..]), "{what}");
        assert_tcp_quote(&quote[20..], &sent[20..20 + tcp_len], &quoted[40..], &what);
        if tcp_len == segment.len() {
            assert_quoted_tcp_checksum(quote, &what);
        }
    }
}

/// The TCP bytes of a translated quote (`got`): the segment as the other
/// side would have sent it (`want`) when the quote reaches the checksum,
/// else what was quoted (`quoted`), as it was.
fn assert_tcp_quote(got: &[u8], want: &[u8], quoted: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    if got.len() >= 18 {
        assert_eq!(got, want, "{what}: the segment, its checksum translated");
    } else {
        assert_eq!(got, quoted, "{what}: cut short of the checksum, as it was");
    }
}

#[test]
fn icmp_errors_quoting_tcp_carry_the_quoted_checksum_translated() {
    let net = Net::enter();
    let xlat = Xlat::load("icmp4err-tcp");
    let segment = tcp(40000, 443, b"quoted segment");
    let inner = ipv4(V6_HOST_AS_V4, V4_HOST, 63, 6, 0x4000, &segment, Some(16));
    // The same segment as the IPv6 host sent it: the checksum to find.
    let sent = ipv6(V6_HOST, V4_HOST_AS_V6, 63, 6, &segment, Some(16));
    for tcp_len in [segment.len(), 20, 18, 16, 8] {
        let what = format!("a quote of {tcp_len} bytes of TCP");
        let quoted = &inner[..20 + tcp_len];
        let error = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(3, 3, [0; 4], quoted), Some(2)));
        let run = xlat.run(&error, net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "{what}");
        assert_well_formed(&run.packet);
        let quote = &l3(&run.packet)[48..];
        assert_eq!((&quote[8..24], &quote[24..40]), (&V6_HOST.octets()[..], &V4_HOST_AS_V6.octets()[..]), "{what}");
        assert_tcp_quote(&quote[40..], &sent[40..40 + tcp_len], &quoted[20..], &what);
        if tcp_len == segment.len() {
            assert_quoted_tcp_checksum(quote, &what);
        }
    }
}

/// A Fragmentation Needed from the IPv4 host about a datagram the IPv6 host
/// sent it, advertising `mtu` (0: a router older than RFC 1191), the quoted
/// header claiming `quoted_len` bytes.
fn frag_needed_about_udp(mtu: u16, quoted_len: u16) -> Vec<u8> {
    let mut inner = ipv4(V6_HOST_AS_V4, V4_HOST, 63, 17, 0x4000, &udp(9, 5353, b"quoted datagram"), Some(6));
    inner[2..4].copy_from_slice(&quoted_len.to_be_bytes());
    inner[10..12].copy_from_slice(&[0, 0]);
    let c = fold(sum16(&inner[..20]));
    inner[10..12].copy_from_slice(&c.to_be_bytes());
    let [hi, lo] = mtu.to_be_bytes();
    ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(3, 4, [0, 0, hi, lo], &inner), Some(2)))
}

#[test]
fn too_big_errors_carry_the_smallest_mtu_of_the_message_and_both_links() {
    let net = Net::enter();
    let xlat = Xlat::load("ptbmin");
    // RFC 7915 5.2, IPv6 -> IPv4: minimum(advertised - 20, IPv4 next hop, IPv6 next hop - 20).
    let frag_needed_mtu = |advertised: u32| {
        let run = xlat.run(&icmp6_error_about_udp(2, 0, advertised.to_be_bytes()), net.v6);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "PTB {advertised}");
        assert_well_formed(&run.packet);
        let message = &l3(&run.packet)[20..];
        assert_eq!((message[0], message[1]), (3, 4), "Fragmentation Needed");
        u16::from_be_bytes([message[6], message[7]])
    };
    assert_eq!(frag_needed_mtu(1400), 1380, "the message's own, both links at 1500");
    // A route's MTU counts where the kernel's forwarding honours it: locked.
    ip("route replace 192.0.2.0/24 dev v4 src 192.0.2.1 mtu lock 1300");
    assert_eq!(frag_needed_mtu(1400), 1300, "the route to the IPv4 host carries 1300");
    ip("route replace 192.0.2.0/24 dev v4 src 192.0.2.1");
    net.set_mtu("v6", 1280);
    assert_eq!(frag_needed_mtu(1500), 1260, "the IPv6 link's 1280 - 20");
    net.set_mtu("v6", 1500);

    // RFC 7915 4.2, IPv4 -> IPv6: minimum(advertised + 20, IPv6 next hop, IPv4 next hop + 20).
    let ptb_mtu = |advertised: u16, quoted_len: u16| {
        let run = xlat.run(&frag_needed_about_udp(advertised, quoted_len), net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "Frag Needed {advertised}");
        assert_well_formed(&run.packet);
        let message = &l3(&run.packet)[40..];
        assert_eq!((message[0], message[1]), (2, 0), "Packet Too Big");
        u32::from_be_bytes(message[4..8].try_into().unwrap())
    };
    assert_eq!(ptb_mtu(1300, 1400), 1320, "the message's own");
    net.set_mtu("v4", 1400);
    assert_eq!(ptb_mtu(1450, 1500), 1420, "the IPv4 link's 1400 + 20");
    net.set_mtu("v4", 1500);
    ip("-6 route replace 2001:db8:6::/64 dev v6 metric 256 mtu lock 1300");
    assert_eq!(ptb_mtu(1450, 1500), 1300, "the route to the IPv6 host carries 1300");
    ip("-6 route replace 2001:db8:6::/64 dev v6 metric 256");

    // No MTU in the message: RFC 1191's plateau under the quoted datagram's
    // length, + 20; never under IPv6's 1280.
    net.set_mtu("v4", 9000);
    net.set_mtu("v6", 9000);
    assert_eq!(ptb_mtu(0, 4000), 2002 + 20, "under 4000: 2002");
    assert_eq!(ptb_mtu(0, 1500), 1492 + 20, "under 1500: 1492");
    assert_eq!(ptb_mtu(0, 1000), 1280, "under 1000: 508, raised to 1280");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_XLAT_FORWARDED), 6);
}

/// Splits a UDP datagram (header included) at `at` bytes.
fn split(datagram: &[u8], at: usize) -> (&[u8], &[u8]) {
    datagram.split_at(at)
}

#[test]
fn ipv6_fragments_become_ipv4_fragments() {
    let net = Net::enter();
    let xlat = Xlat::load("frag64");
    let full = ipv6(V6_HOST, V4_HOST_AS_V6, 64, 17, &udp(1, 2, &[5; 100]), Some(6));
    let (first, second) = split(&full[40..], 64);
    let fragment = |offset: u16, more: bool, data: &[u8]| {
        let mut f = vec![17, 0];
        f.extend_from_slice(&((offset << 3) | more as u16).to_be_bytes());
        f.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        f.extend_from_slice(data);
        ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 44, &f, None))
    };
    let a = xlat.run(&fragment(0, true, first), net.v6);
    let b = xlat.run(&fragment(8, false, second), net.v6);
    for (run, flags) in [(&a, 0x2000u16), (&b, 8)] {
        assert_eq!(run.verdict, TC_ACT_REDIRECT);
        assert_well_formed(&run.packet);
        let ip = l3(&run.packet);
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0x5678, "low 16 bits of the identification");
        assert_eq!(u16::from_be_bytes([ip[6], ip[7]]), flags, "MF and offset, DF clear");
        assert_eq!(ip[9], 17);
    }
    // Reassembled, the datagram's checksum is right for the IPv4 addresses.
    let mut datagram = l3(&a.packet)[20..].to_vec();
    datagram.extend_from_slice(&l3(&b.packet)[20..]);
    assert_eq!(fold(pseudo4(&V6_HOST_AS_V4.octets(), &V4_HOST.octets(), 17, datagram.len()) + sum16(&datagram)), 0);
}

#[test]
fn ipv4_fragments_become_ipv6_fragments() {
    let net = Net::enter();
    let xlat = Xlat::load("frag46");
    let full = ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(2, 1, &[6; 100]), Some(6));
    let (first, second) = split(&full[20..], 64);
    let a = xlat.run(&ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0x2000, first, None)), net.v4);
    let b = xlat.run(&ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 8, second, None)), net.v4);
    for (run, offset_more) in [(&a, 1u16), (&b, 8 << 3)] {
        assert_eq!(run.verdict, TC_ACT_REDIRECT);
        assert_well_formed(&run.packet);
        let ip = l3(&run.packet);
        assert_eq!(ip[6], 44, "Fragment header");
        assert_eq!(ip[40], 17);
        assert_eq!(u16::from_be_bytes([ip[42], ip[43]]), offset_more);
        assert_eq!(u32::from_be_bytes(ip[44..48].try_into().unwrap()), 0x1234, "identification");
    }
    let mut datagram = l3(&a.packet)[48..].to_vec();
    datagram.extend_from_slice(&l3(&b.packet)[48..]);
    assert_eq!(fold(pseudo6(&V4_HOST_AS_V6.octets(), &V6_HOST.octets(), 17, datagram.len()) + sum16(&datagram)), 0);
}

#[test]
fn ipv4_udp_without_checksum_gets_one_unless_fragmented() {
    let net = Net::enter();
    let xlat = Xlat::load("udp0");
    for size in [1, 2, 3, 511, 512, 513, 1400] {
        let packet = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(2, 1, &vec![0xa5; size]), None));
        let run = xlat.run(&packet, net.v4);
        assert_eq!(run.verdict, TC_ACT_REDIRECT, "{size} bytes");
        let ip = l3(&run.packet);
        assert_ne!(&ip[46..48], &[0, 0], "{size} bytes: checksum computed");
        assert_well_formed(&run.packet);
    }
    let fragment = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0x2000, &udp(2, 1, &[0; 64]), None));
    assert_eq!(xlat.run(&fragment, net.v4).verdict, TC_ACT_SHOT);
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);
}

#[test]
fn extension_headers_are_dropped_and_lengths_follow() {
    let net = Net::enter();
    let xlat = Xlat::load("ext");
    let udp_part = udp(1, 2, b"behind options");
    let mut payload = vec![60, 0, 1, 4, 0, 0, 0, 0]; // hop-by-hop: PadN, then destination options
    payload.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    let l4_at = payload.len();
    payload.extend_from_slice(&udp_part);
    let mut packet = ipv6(V6_HOST, V4_HOST_AS_V6, 64, 0, &payload, None);
    // The UDP checksum covers only the UDP part.
    let c = fold(pseudo6(&V6_HOST.octets(), &V4_HOST_AS_V6.octets(), 17, udp_part.len()) + sum16(&udp_part));
    packet[40 + l4_at + 6..40 + l4_at + 8].copy_from_slice(&c.to_be_bytes());
    let run = xlat.run(&ethernet(ETH_IPV6, &packet), net.v6);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_well_formed(&run.packet);
    assert_eq!(&l3(&run.packet)[28..], b"behind options");
}

#[test]
fn what_rfc7915_says_not_to_translate_is_dropped_with_a_reason() {
    let net = Net::enter();
    let xlat = Xlat::load("untranslatable");
    let mld = ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 58, &icmp(130, 0, [0; 4], &[0; 16]), Some(2)));
    let mut routing = vec![17, 2, 0, 1, 0, 0, 0, 0]; // type 0, one segment left
    routing.extend_from_slice(&V4_HOST_AS_V6.octets());
    routing.extend_from_slice(&udp(1, 2, b"x"));
    let routed = ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 43, &routing, None));
    let mut frag_echo = vec![58, 0, 0, 1, 0, 0, 0, 9];
    frag_echo.extend_from_slice(&icmp(128, 0, [0; 4], &[0; 8]));
    let fragmented_icmp = ethernet(ETH_IPV6, &ipv6(V6_HOST, V4_HOST_AS_V6, 64, 44, &frag_echo, None));
    for (what, packet) in [("MLD", &mld), ("routing header", &routed), ("fragmented ICMPv6", &fragmented_icmp)] {
        assert_eq!(xlat.run(packet, net.v6).verdict, TC_ACT_SHOT, "{what}");
    }
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 3);

    // IPv4 with a loose source route option (type 131).
    let ip = with_ipv4_options(ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, b"x"), Some(6)), [131, 7, 4, 192, 0, 2, 9, 0]);
    assert_eq!(xlat.run(&ethernet(ETH_IPV4, &ip), net.v4).verdict, TC_ACT_SHOT, "source route");
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_UNTRANSLATABLE), 1);

    // Other options (here a no-op and record route) are simply dropped.
    let ip = with_ipv4_options(ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, b"x"), Some(6)), [1, 7, 3, 4, 0, 0, 0, 0]);
    let run = xlat.run(&ethernet(ETH_IPV4, &ip), net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT, "record route");
    assert_well_formed(&run.packet);
    assert_eq!(&l3(&run.packet)[48..], b"x");
}

#[test]
fn malformed_packets_are_dropped_and_counted_never_translated() {
    let net = Net::enter();
    let xlat = Xlat::load("malformed");
    let mut bad_sum = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, b"x"), Some(6)));
    bad_sum[14 + 10] ^= 0xff;
    let mut long4 = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(1, 2, b"x"), Some(6)));
    long4[14 + 3] += 40;
    long4[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let c = fold(sum16(&long4[14..34]));
    long4[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    for (what, packet) in [("IPv4 header checksum", &bad_sum), ("IPv4 total length past the frame", &long4)] {
        assert_eq!(xlat.run(packet, net.v4).verdict, TC_ACT_SHOT, "{what}");
    }
    assert_eq!(xlat.counted(D46, Reason::V6N_REASON_DROP_MALFORMED), 2);

    let mut long6 = udp6_to_v4_host(64, b"x");
    long6[14 + 5] += 40;
    let mut zero_udp = udp6_to_v4_host(64, b"x");
    zero_udp[14 + 46..14 + 48].copy_from_slice(&[0, 0]);
    for (what, packet) in [("IPv6 payload length past the frame", &long6), ("IPv6 UDP without checksum", &zero_udp)] {
        assert_eq!(xlat.run(packet, net.v6).verdict, TC_ACT_SHOT, "{what}");
    }
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_MALFORMED), 2);
}

#[test]
fn large_translations_set_df_and_small_ones_carry_an_identification() {
    let net = Net::enter();
    let xlat = Xlat::load("df");
    let big = xlat.run(&udp6_to_v4_host(64, &[1; 1300]), net.v6).packet;
    assert_eq!(&l3(&big)[4..8], &[0, 0, 0x40, 0], "over 1260: DF, identification 0");
    let ids: Vec<[u8; 2]> = (0..2)
        .map(|_| {
            let small = xlat.run(&udp6_to_v4_host(64, &[1; 100]), net.v6).packet;
            assert_eq!(&l3(&small)[6..8], &[0, 0], "DF clear");
            [l3(&small)[4], l3(&small)[5]]
        })
        .collect();
    assert_ne!(ids[0], ids[1], "each gets its own identification");
}

#[test]
fn a_prefix_change_applies_from_the_next_packet() {
    let net = Net::enter();
    let mut xlat = Xlat::load("reprefix");
    let packet = udp6_to_v4_host(64, b"x");
    assert_eq!(xlat.run(&packet, net.v6).verdict, TC_ACT_REDIRECT);
    xlat.set_prefix("64:ff9b:1::".parse().unwrap(), 48);
    assert_eq!(xlat.run(&packet, net.v6).verdict, TC_ACT_UNSPEC, "the old prefix is ordinary IPv6 now");
    let embedded: Ipv6Addr = "64:ff9b:1:c000:2:200::".parse().unwrap();
    let moved = ethernet(ETH_IPV6, &ipv6(V6_HOST, embedded, 64, 17, &udp(1, 2, b"x"), Some(6)));
    let run = xlat.run(&moved, net.v6);
    assert_eq!(v4_addrs(&run.packet), (V6_HOST_AS_V4, V4_HOST));
}

#[test]
fn ethernet_padding_is_not_carried_into_the_translated_packet() {
    let net = Net::enter();
    let xlat = Xlat::load("padding");
    // A 28-byte IPv4 ping, padded to Ethernet's 60-byte minimum frame.
    let mut frame = ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 1, 0, &icmp(8, 0, [0, 1, 0, 1], &[]), Some(2)));
    frame.resize(60, 0xee);
    let run = xlat.run(&frame, net.v4);
    assert_eq!(run.verdict, TC_ACT_REDIRECT);
    assert_eq!(run.packet.len(), 14 + 40 + 8, "trimmed to the IPv6 packet");
    assert_well_formed(&run.packet);
}

#[test]
fn errors_the_translator_sends_are_rate_limited() {
    let net = Net::enter();
    let xlat = Xlat::load("ratelimit");
    // 200 expiring packets in a few milliseconds: the burst of 50 is
    // answered, then about one per millisecond; every one is counted.
    let expiring = udp6_to_v4_host(1, b"flood");
    let started = std::time::Instant::now();
    let answered = (0..200).filter(|_| xlat.run(&expiring, net.v6).verdict == TC_ACT_REDIRECT).count();
    let refills = started.elapsed().as_millis() as usize + 1;
    assert!((50..=50 + refills).contains(&answered), "{answered} of 200 answered in {refills} ms");
    assert_eq!(xlat.counted(D64, Reason::V6N_REASON_DROP_HOP_LIMIT), 200);
    // After a pause, the bucket has refilled.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(xlat.run(&expiring, net.v6).verdict, TC_ACT_REDIRECT);
}
