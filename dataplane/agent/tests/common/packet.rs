// SPDX-License-Identifier: Apache-2.0
//! Packets built byte by byte (the translator's tests need malformed and
//! unusual ones a builder would refuse) and an independent checker of what
//! comes out: lengths, header and transport checksums.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const ETH_IPV6: [u8; 2] = [0x86, 0xdd];
pub const ETH_IPV4: [u8; 2] = [0x08, 0x00];

pub fn ethernet(ethertype: [u8; 2], l3: &[u8]) -> Vec<u8> {
    let mut frame = vec![2, 0, 0, 0, 0, 0xaa, 2, 0, 0, 0, 0, 0xbb];
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(l3);
    frame
}

/// One's complement sum of `data` as 16-bit big-endian words.
pub fn sum16(data: &[u8]) -> u32 {
    let mut sum = 0u32;
    for chunk in data.chunks(2) {
        let word = if chunk.len() == 2 { u16::from_be_bytes([chunk[0], chunk[1]]) } else { u16::from(chunk[0]) << 8 };
        sum += u32::from(word);
    }
    sum
}

pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub fn pseudo4(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u32 {
    sum16(src) + sum16(dst) + u32::from(proto) + len as u32
}

pub fn pseudo6(src: &[u8], dst: &[u8], next: u8, len: usize) -> u32 {
    sum16(src) + sum16(dst) + (len as u32 >> 16) + (len as u32 & 0xffff) + u32::from(next)
}

/// An IPv6 packet (no Ethernet) with the given next header and payload; the
/// transport checksum at `csum_at` (offset in payload) is filled in.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, next: u8, payload: &[u8], csum_at: Option<usize>) -> Vec<u8> {
    let mut p = vec![0x60 | 0x0b, 0xa0, 0, 0]; // traffic class 0xba
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.push(next);
    p.push(hop);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let mut payload = payload.to_vec();
    if let Some(at) = csum_at {
        payload[at..at + 2].copy_from_slice(&[0, 0]);
        let c = fold(pseudo6(&src.octets(), &dst.octets(), next, payload.len()) + sum16(&payload));
        payload[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    p.extend_from_slice(&payload);
    p
}

/// An IPv4 packet (no Ethernet); `csum_at` as for `ipv6`, with the IPv4
/// pseudo-header unless `next` is ICMP (which has none).
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, proto: u8, frag: u16, payload: &[u8], csum_at: Option<usize>) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![0x45, 0xba];
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0x12, 0x34]);
    p.extend_from_slice(&frag.to_be_bytes());
    p.push(ttl);
    p.push(proto);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = fold(sum16(&p));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut payload = payload.to_vec();
    if let Some(at) = csum_at {
        payload[at..at + 2].copy_from_slice(&[0, 0]);
        let pseudo = if proto == 1 { 0 } else { pseudo4(&src.octets(), &dst.octets(), proto, payload.len()) };
        let c = fold(pseudo + sum16(&payload));
        payload[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    p.extend_from_slice(&payload);
    p
}

/// `ip` (an IPv4 packet from `ipv4`) with 8 bytes of options inserted, its
/// lengths and header checksum redone.
pub fn with_ipv4_options(mut ip: Vec<u8>, options: [u8; 8]) -> Vec<u8> {
    ip.splice(20..20, options);
    ip[0] = 0x47;
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let c = fold(sum16(&ip[..28]));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip
}

pub fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

pub fn tcp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&0x01020304u32.to_be_bytes());
    t.extend_from_slice(&0x0a0b0c0du32.to_be_bytes());
    t.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    t
}

/// Fails unless `quote` (the packet an ICMP error quotes: an IPv4 or IPv6
/// header and a TCP segment, whole) carries a TCP checksum valid for its own
/// header's addresses and the segment's ports (RFC 7915 4.3/5.2, RFC 5508
/// REQ-3: the quote is translated like a packet).
pub fn assert_quoted_tcp_checksum(quote: &[u8], what: &str) {
    let sum = if quote[0] >> 4 == 4 {
        assert_eq!(quote[9], 6, "{what}: the quote is TCP");
        let segment = &quote[20..];
        pseudo4(&quote[12..16], &quote[16..20], 6, segment.len()) + sum16(segment)
    } else {
        assert_eq!(quote[6], 6, "{what}: the quote is TCP");
        let segment = &quote[40..];
        pseudo6(&quote[8..24], &quote[24..40], 6, segment.len()) + sum16(segment)
    };
    assert_eq!(fold(sum), 0, "{what}: the quoted TCP checksum, translated");
}

/// ICMP or ICMPv6 message: type, code, the 4 bytes after the checksum, body.
pub fn icmp(kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    m
}

/// Fails unless `frame` is a well-formed IPv4 or IPv6 packet whose header and
/// transport checksums (TCP, UDP, ICMP, ICMPv6; first fragments excepted:
/// their checksum covers bytes in later fragments) are valid.
pub fn assert_well_formed(frame: &[u8]) {
    assert!(frame.len() >= 14, "runt frame");
    let l3 = &frame[14..];
    match [frame[12], frame[13]] {
        ETH_IPV4 => {
            assert!(l3.len() >= 20, "short IPv4");
            assert_eq!(l3[0], 0x45, "IPv4 version/IHL");
            assert_eq!(fold(sum16(&l3[..20])), 0, "IPv4 header checksum");
            let total = u16::from_be_bytes([l3[2], l3[3]]) as usize;
            assert_eq!(total, l3.len(), "IPv4 total length vs frame");
            let frag = u16::from_be_bytes([l3[6], l3[7]]);
            if frag & 0x3fff != 0 {
                return; // a fragment: its datagram's checksum cannot be checked alone
            }
            let payload = &l3[20..];
            let (src, dst) = (&l3[12..16], &l3[16..20]);
            match l3[9] {
                1 => assert_eq!(fold(sum16(payload)), 0, "ICMP checksum"),
                6 => assert_eq!(fold(pseudo4(src, dst, 6, payload.len()) + sum16(payload)), 0, "TCP checksum"),
                17 if payload[6..8] != [0, 0] => {
                    assert_eq!(fold(pseudo4(src, dst, 17, payload.len()) + sum16(payload)), 0, "UDP checksum")
                }
                _ => {}
            }
        }
        ETH_IPV6 => {
            assert!(l3.len() >= 40, "short IPv6");
            assert_eq!(l3[0] >> 4, 6, "IPv6 version");
            let plen = u16::from_be_bytes([l3[4], l3[5]]) as usize;
            assert_eq!(40 + plen, l3.len(), "IPv6 payload length vs frame");
            let (src, dst) = (&l3[8..24], &l3[24..40]);
            let (mut next, mut payload) = (l3[6], &l3[40..]);
            if next == 44 {
                let offset = u16::from_be_bytes([payload[2], payload[3]]) & !7;
                let more = payload[3] & 1;
                if offset != 0 || more != 0 {
                    return;
                }
                next = payload[0];
                payload = &payload[8..];
            }
            match next {
                6 | 17 | 58 => {
                    assert_eq!(fold(pseudo6(src, dst, next, payload.len()) + sum16(payload)), 0, "checksum of next header {next}")
                }
                _ => {}
            }
        }
        other => panic!("ethertype {other:02x?} is neither IPv4 nor IPv6"),
    }
}

/// A well-formed UDP datagram (40000 -> 53, "v6node") from `source` to
/// `destination` in an Ethernet frame, built by etherparse.
pub fn udp6(source: Ipv6Addr, destination: Ipv6Addr) -> Vec<u8> {
    let builder = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(source.octets(), destination.octets(), 64)
        .udp(40000, 53);
    let payload = b"v6node";
    let mut packet = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut packet, payload).unwrap();
    packet
}

/// A broadcast ARP frame with a zeroed body: a frame that is not IP.
pub fn arp() -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    frame.extend_from_slice(&[0; 28]);
    frame
}
