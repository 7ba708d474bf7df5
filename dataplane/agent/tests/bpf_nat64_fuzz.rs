// SPDX-License-Identifier: Apache-2.0
//! Fuzzing the translator through BPF_PROG_TEST_RUN: many random packets,
//! valid ones and mutated ones, each checked against the invariant the
//! translator promises: a packet is passed untouched (not its business),
//! dropped and counted under a drop reason, or comes out well formed, with
//! a valid IP header and, whenever the input's transport checksum was valid,
//! a valid transport checksum. With stateful NAT64 on, also: no packet
//! leaves with another flow's binding (each client transport address keeps
//! one pool port, each pool port one client). With the NAT46 gateway on:
//! each flow keeps one backend, a backend's packet leaves from the VIP port
//! of the flow it belongs to, or not at all, and an ICMP error about a flow
//! reaches that flow's backend or client quoting that flow's ports.
//! Deterministic: the seed is printed, and a failure prints the packet.

mod common;

use std::{
    collections::HashMap,
    net::{Ipv4Addr, Ipv6Addr},
};

use common::{nat64::*, packet::*, *};
use v6node_abi::{Reason, NAT64_FILTER_ENDPOINT_INDEPENDENT};

/// Stateful NAT64's clients (2001:db8:6::100/126) and pool, with the
/// ports it hands out: few, so that bindings are reused and run out.
const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const POOL_PORTS: (u16, u16) = (1024, 1039);

/// The NAT46 gateway's VIP, its frontends' ports (TCP, UDP, TCP, and a UDP
/// one without backends), the prefix its clients are embedded in, and the
/// backends, all on one port.
const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 80);
const VIP_PORTS: [(u16, u8); 4] = [(40000, 6), (40001, 17), (40002, 6), (40003, 17)];
const NAT46_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, 0, 0);
const BACKENDS: [Ipv6Addr; 2] =
    [Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xa), Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xb)];
const BACKEND_PORT: u16 = 8080;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Stateless,
    /// Stateful NAT64 for 2001:db8:6::100/126.
    Stateful,
    /// The NAT46 gateway.
    Gateway,
}

/// Packets counted per reason, over every device and direction.
fn by_reason(xlat: &Xlat) -> [u64; Reason::V6N_REASON_COUNT as usize] {
    let mut totals = [0; Reason::V6N_REASON_COUNT as usize];
    for (key, packets, _) in counter_slots(&xlat.ebpf) {
        totals[usize::from(key.reason)] += packets;
    }
    totals
}

/// xorshift64*: small, deterministic, good enough to pick packet shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

fn v6_addr(rng: &mut Rng) -> Ipv6Addr {
    match rng.below(7) {
        6 => Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0x100 + rng.below(4) as u16),
        0 | 1 => V6_HOST,
        2 | 3 => V4_HOST_AS_V6,
        4 => Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, rng.next() as u16, rng.next() as u16),
        _ => rng.pick(&["2001:db8:99::1", "fe80::1", "ff02::1", "::1"]).parse().unwrap(),
    }
}

fn v4_addr(rng: &mut Rng) -> Ipv4Addr {
    match rng.below(6) {
        5 => POOL,
        0 | 1 => V6_HOST_AS_V4,
        2 | 3 => V4_HOST,
        _ => Ipv4Addr::from(rng.next() as u32),
    }
}

/// A port: often one of a few (a flow seen again, a pool port), else any.
fn port(rng: &mut Rng) -> u16 {
    match rng.below(3) {
        0 => 40000 + rng.below(4) as u16,
        1 => POOL_PORTS.0 + rng.below(u64::from(POOL_PORTS.1 - POOL_PORTS.0 + 1)) as u16,
        _ => rng.next() as u16,
    }
}

/// A TCP segment with flags that open, answer, carry and close; from a
/// client to port 80, or back.
fn tcp_segment(rng: &mut Rng, to_server: bool) -> Vec<u8> {
    let client = port(rng);
    let (sport, dport) = if to_server { (client, 80) } else { (80, client) };
    let mut segment = tcp(sport, dport, &payload(rng));
    segment[13] = rng.pick(&[0x02, 0x12, 0x10, 0x18, 0x11, 0x04]);
    segment
}

fn payload(rng: &mut Rng) -> Vec<u8> {
    let n = if rng.below(4) == 0 { rng.below(1400) } else { rng.below(64) };
    rng.bytes(n as usize)
}

/// An ICMP/ICMPv6 message with a random type and code (mostly meaningful ones).
fn icmp_message(rng: &mut Rng, v6: bool, quote: &[u8]) -> Vec<u8> {
    let (kind, code) = if v6 {
        (rng.pick(&[1, 2, 3, 4, 128, 129, 130, 135, 200]), rng.below(8) as u8)
    } else {
        (rng.pick(&[0, 3, 4, 5, 8, 11, 12, 13, 17]), rng.below(16) as u8)
    };
    let mut rest: [u8; 4] = rng.bytes(4).try_into().unwrap();
    rest[..2].copy_from_slice(&port(rng).to_be_bytes()); // an echo identifier
    icmp(kind, code, rest, if kind < 128 && kind != 0 && kind != 8 { quote } else { &quote[..quote.len().min(16)] })
}

/// A valid IPv6 frame: correct lengths and checksums.
fn valid_ipv6(rng: &mut Rng) -> Vec<u8> {
    let (src, dst, hop) = (v6_addr(rng), v6_addr(rng), rng.pick(&[0, 1, 2, 64, 255]));
    let inner6 = ipv6(V4_HOST_AS_V6, V6_HOST, 63, 17, &udp(1, 2, &payload(rng)), Some(6));
    let l3 = match rng.below(6) {
        0 => ipv6(src, dst, hop, 17, &udp(port(rng), 53, &payload(rng)), Some(6)),
        1 => ipv6(src, dst, hop, 6, &tcp_segment(rng, true), Some(16)),
        2 => ipv6(src, dst, hop, 58, &icmp_message(rng, true, &inner6), Some(2)),
        3 => {
            // A fragment: offset and M flag at random.
            let mut f = vec![17, 0];
            let offset = rng.pick(&[0u16, 0, 8, 185]);
            f.extend_from_slice(&((offset << 3) | rng.below(2) as u16).to_be_bytes());
            f.extend_from_slice(&(rng.next() as u32).to_be_bytes());
            // The checksum as if this fragment held the whole datagram: right
            // for an atomic fragment (offset 0, no M flag), and never zero.
            let mut u = udp(1, 2, &payload(rng));
            let c = fold(pseudo6(&src.octets(), &dst.octets(), 17, u.len()) + sum16(&u));
            u[6..8].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&u);
            ipv6(src, dst, hop, 44, &f, None)
        }
        4 => {
            // Hop-by-hop options before UDP; the checksum covers UDP only.
            let u = udp(1, 2, &payload(rng));
            let mut p = vec![17, 0, 1, 4, 0, 0, 0, 0];
            p.extend_from_slice(&u);
            let mut packet = ipv6(src, dst, hop, 0, &p, None);
            let c = fold(pseudo6(&src.octets(), &dst.octets(), 17, u.len()) + sum16(&u));
            packet[48 + 6..48 + 8].copy_from_slice(&c.to_be_bytes());
            packet
        }
        _ => ipv6(src, dst, hop, rng.pick(&[47, 132, 59]), &payload(rng), None),
    };
    ethernet(ETH_IPV6, &l3)
}

/// A valid IPv4 frame.
fn valid_ipv4(rng: &mut Rng) -> Vec<u8> {
    let (src, dst, ttl) = (v4_addr(rng), v4_addr(rng), rng.pick(&[0, 1, 2, 64, 255]));
    let inner = ipv4(V6_HOST_AS_V4, V4_HOST, 63, 17, 0x4000, &udp(1, 2, &payload(rng)), Some(6));
    let df = rng.pick(&[0u16, 0x4000]);
    let l3 = match rng.below(6) {
        0 => ipv4(src, dst, ttl, 17, df, &udp(53, port(rng), &payload(rng)), Some(6)),
        1 => ipv4(src, dst, ttl, 17, df, &udp(53, port(rng), &payload(rng)), None), // no checksum
        2 => ipv4(src, dst, ttl, 6, df, &tcp_segment(rng, false), Some(16)),
        3 => ipv4(src, dst, ttl, 1, df, &icmp_message(rng, false, &inner), Some(2)),
        4 => {
            let frag = rng.pick(&[0x2000u16, 0x2000 | 8, 185, 0x4000]);
            ipv4(src, dst, ttl, 17, frag, &udp(1, 2, &payload(rng)), Some(6))
        }
        _ => {
            // Options: no-ops and a record route, or a source route.
            let option: [u8; 8] = if rng.below(2) == 0 { [1, 7, 3, 4, 0, 0, 0, 0] } else { [131, 7, 4, 192, 0, 2, 9, 0] };
            with_ipv4_options(ipv4(src, dst, ttl, 17, df, &udp(1, 2, &payload(rng)), Some(6)), option)
        }
    };
    ethernet(ETH_IPV4, &l3)
}

fn embedded(client: Ipv4Addr) -> Ipv6Addr {
    let mut addr = NAT46_PREFIX.octets();
    addr[12..].copy_from_slice(&client.octets());
    addr.into()
}

/// A NAT46 gateway packet: an IPv4 client's to the VIP (a frontend's port
/// mostly), or a backend's (mostly) to an embedded client; one in five is
/// an ICMP error about such a packet that went the other way.
fn gateway_packet(rng: &mut Rng, v6: bool) -> Vec<u8> {
    let proto = rng.pick(&[6u8, 17]);
    let segment = |rng: &mut Rng, sport: u16, dport: u16| {
        if proto == 6 {
            let mut segment = tcp(sport, dport, &payload(rng));
            segment[13] = rng.pick(&[0x02, 0x12, 0x10, 0x18, 0x11, 0x04]);
            segment
        } else {
            udp(sport, dport, &payload(rng))
        }
    };
    let csum_at = Some(if proto == 6 { 16 } else { 6 });
    let error = rng.below(5) == 0;
    if v6 && error {
        let client = embedded(v4_addr(rng));
        let backend = if rng.below(4) == 0 { v6_addr(rng) } else { rng.pick(&BACKENDS) };
        let client_port = port(rng);
        let l4 = segment(rng, client_port, BACKEND_PORT);
        let quote = ipv6(client, backend, 63, proto, &l4, csum_at);
        let from = rng.pick(&[backend, "2001:db8:ff::1".parse().unwrap()]);
        ethernet(ETH_IPV6, &ipv6(from, client, 64, 58, &icmp_message(rng, true, &quote), Some(2)))
    } else if error {
        let client = v4_addr(rng);
        let (vip_port, client_port) = (rng.pick(&VIP_PORTS).0, port(rng));
        let l4 = segment(rng, vip_port, client_port);
        let quote = ipv4(VIP, client, 63, proto, 0x4000, &l4, csum_at);
        let from = rng.pick(&[client, Ipv4Addr::new(198, 18, 0, 1)]);
        ethernet(ETH_IPV4, &ipv4(from, VIP, 64, 1, 0, &icmp_message(rng, false, &quote), Some(2)))
    } else if v6 {
        let src = if rng.below(4) == 0 { v6_addr(rng) } else { rng.pick(&BACKENDS) };
        let sport = if rng.below(4) == 0 { port(rng) } else { BACKEND_PORT };
        let dport = port(rng);
        let l4 = segment(rng, sport, dport);
        ethernet(ETH_IPV6, &ipv6(src, embedded(v4_addr(rng)), rng.pick(&[1, 64, 64, 64]), proto, &l4, csum_at))
    } else {
        let dport = if rng.below(4) == 0 { rng.pick(&[22, 53, 80]) } else { rng.pick(&VIP_PORTS).0 };
        let sport = port(rng);
        let l4 = segment(rng, sport, dport);
        let frag = rng.pick(&[0x4000u16, 0, 0x2000]);
        ethernet(ETH_IPV4, &ipv4(v4_addr(rng), VIP, rng.pick(&[1, 64, 64, 64]), proto, frag, &l4, csum_at))
    }
}

/// Whether a frame's transport checksum is valid: None when there is none to
/// check (fragments, other protocols, IPv4 UDP without one, bad headers).
fn transport_checksum_ok(frame: &[u8]) -> Option<bool> {
    let l3 = frame.get(14..)?;
    match [frame[12], frame[13]] {
        ETH_IPV4 => {
            let ihl = usize::from(*l3.first()? & 0xf) * 4;
            let total = usize::from(u16::from_be_bytes([*l3.get(2)?, *l3.get(3)?]));
            if l3[0] >> 4 != 4 || ihl < 20 || total < ihl || total > l3.len() || u16::from_be_bytes([l3[6], l3[7]]) & 0x3fff != 0
            {
                return None;
            }
            let payload = &l3[ihl..total];
            let (src, dst) = (&l3[12..16], &l3[16..20]);
            match l3[9] {
                1 => Some(fold(sum16(payload)) == 0),
                6 if payload.len() >= 20 => Some(fold(pseudo4(src, dst, 6, payload.len()) + sum16(payload)) == 0),
                17 if payload.len() >= 8 && payload[6..8] != [0, 0] => {
                    Some(fold(pseudo4(src, dst, 17, payload.len()) + sum16(payload)) == 0)
                }
                _ => None,
            }
        }
        ETH_IPV6 => {
            let plen = usize::from(u16::from_be_bytes([*l3.get(4)?, *l3.get(5)?]));
            if l3[0] >> 4 != 6 || 40 + plen > l3.len() {
                return None;
            }
            let (src, dst) = (&l3[8..24], &l3[24..40]);
            let (mut next, mut payload) = (l3[6], &l3[40..40 + plen]);
            for _ in 0..4 {
                match next {
                    0 | 60 | 43 => {
                        let len = (usize::from(*payload.get(1)?) + 1) * 8;
                        next = payload[0];
                        payload = payload.get(len..)?;
                    }
                    44 => {
                        if payload.len() < 8 || u16::from_be_bytes([payload[2], payload[3]]) != 0 {
                            return None; // a fragment other than a whole datagram
                        }
                        next = payload[0];
                        payload = &payload[8..];
                    }
                    _ => break,
                }
            }
            match next {
                6 | 17 | 58 => Some(fold(pseudo6(src, dst, next, payload.len()) + sum16(payload)) == 0),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The header-level half of assert_well_formed, as a Result.
fn headers_well_formed(frame: &[u8]) -> Result<(), String> {
    let l3 = frame.get(14..).ok_or("runt")?;
    match [frame[12], frame[13]] {
        ETH_IPV4 => {
            if l3.len() < 20 || l3[0] != 0x45 {
                return Err("IPv4 header".into());
            }
            if fold(sum16(&l3[..20])) != 0 {
                return Err("IPv4 header checksum".into());
            }
            if usize::from(u16::from_be_bytes([l3[2], l3[3]])) != l3.len() {
                return Err("IPv4 total length".into());
            }
        }
        ETH_IPV6 => {
            if l3.len() < 40 || l3[0] >> 4 != 6 {
                return Err("IPv6 header".into());
            }
            if 40 + usize::from(u16::from_be_bytes([l3[4], l3[5]])) != l3.len() {
                return Err("IPv6 payload length".into());
            }
        }
        _ => return Err("not IP".into()),
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Stateful NAT64's bindings as the translated packets show them, checked
/// one to one: (client, protocol, client port) <-> (protocol, pool port).
#[derive(Default)]
struct Bindings {
    by_client: HashMap<(Ipv6Addr, u8, u16), u16>,
    by_pool: HashMap<(u8, u16), (Ipv6Addr, u16)>,
}

/// The NAT46 gateway's flows as the translated packets show them:
/// (client, client port, VIP port, protocol) -> (backend, backend port).
#[derive(Default)]
struct Flows46 {
    backend_of: HashMap<(Ipv4Addr, u16, u16, u8), (Ipv6Addr, u16)>,
    errors: usize,
}

impl Flows46 {
    /// Notes what `input` became as `output`, if it went through the
    /// gateway; Err when a flow changed backend, or a backend's packet left
    /// from a VIP port that is not its flow's. A flow opened by a packet
    /// dropped later on its way (none came out to note) is looked up in
    /// the gateway's table.
    fn observe(&mut self, input: &[u8], output: &[u8], xlat: &Xlat) -> Result<(), String> {
        let (i, o) = (&input[14..], &output[14..]);
        match ([input[12], input[13]], [output[12], output[13]]) {
            // An ICMP error to the VIP about what it sent a client: to that
            // flow's backend, quoting what the backend sent.
            (ETH_IPV4, ETH_IPV6) if i.len() >= 56 && i[9] == 1 && i[16..20] == VIP.octets() => {
                let quote = &i[28..];
                let (proto, client) = (quote[9], Ipv4Addr::new(quote[16], quote[17], quote[18], quote[19]));
                let (vip_port, client_port) = (port_at(quote, 20, proto, 0), port_at(quote, 20, proto, 2));
                let (Some(vip_port), Some(client_port), true) = (vip_port, client_port, o.len() >= 92) else {
                    return Err("an ICMP error to the VIP about no flow was translated".into());
                };
                let (backend, quoted_from): ([u8; 16], [u8; 16]) = (o[24..40].try_into().unwrap(), o[56..72].try_into().unwrap());
                let backend_port = u16::from_be_bytes([o[88], o[89]]);
                if quoted_from != backend
                    || o[72..88] != embedded(client).octets()
                    || port_at(o, 88, proto, 2) != Some(client_port)
                {
                    return Err("an ICMP error's quote is not what the backend sent".into());
                }
                self.errors += 1;
                self.check((client, client_port, vip_port, proto), (backend.into(), backend_port), xlat)
            }
            // An ICMPv6 error to an embedded client about what it sent a
            // backend: from the VIP, quoting what the client sent.
            (ETH_IPV6, ETH_IPV4) if i.len() >= 92 && i[6] == 58 && i[24..36] == NAT46_PREFIX.octets()[..12] => {
                let quote = &i[48..];
                let (proto, backend): (u8, [u8; 16]) = (quote[6], quote[24..40].try_into().unwrap());
                let client = Ipv4Addr::new(i[36], i[37], i[38], i[39]);
                let (client_port, backend_port) = (port_at(quote, 40, proto, 0), port_at(quote, 40, proto, 2));
                let (Some(client_port), Some(backend_port), true) = (client_port, backend_port, o.len() >= 52) else {
                    return Err("an ICMPv6 error to a client about no flow was translated".into());
                };
                let out_quote = &o[28..];
                if o[12..16] != VIP.octets()
                    || o[16..20] != client.octets()
                    || out_quote[12..16] != client.octets()
                    || out_quote[16..20] != VIP.octets()
                    || port_at(out_quote, 20, proto, 0) != Some(client_port)
                {
                    return Err("an ICMPv6 error left from elsewhere than the VIP, or quoting another packet".into());
                }
                let Some(vip_port) = port_at(out_quote, 20, proto, 2) else { return Err("no ports in the quote".into()) };
                self.errors += 1;
                self.check((client, client_port, vip_port, proto), (backend.into(), backend_port), xlat)
            }
            (ETH_IPV4, ETH_IPV6) if i.len() >= 20 && i[16..20] == VIP.octets() && o.len() >= 44 => {
                let (proto, l4) = (i[9], usize::from(i[0] & 0xf) * 4);
                let client = Ipv4Addr::new(i[12], i[13], i[14], i[15]);
                let (Some(client_port), Some(vip_port)) = (port_at(i, l4, proto, 0), port_at(i, l4, proto, 2)) else {
                    return Ok(());
                };
                let src: [u8; 16] = o[8..24].try_into().unwrap();
                let backend: [u8; 16] = o[24..40].try_into().unwrap();
                let (Some(sport), Some(backend_port)) = (port_at(o, 40, o[6], 0), port_at(o, 40, o[6], 2)) else {
                    return Err("no ports out".into());
                };
                if Ipv6Addr::from(src) != embedded(client) || sport != client_port {
                    return Err(format!("{client} port {client_port} left as {} port {sport}", Ipv6Addr::from(src)));
                }
                let now = (Ipv6Addr::from(backend), backend_port);
                let flow = (client, client_port, vip_port, proto);
                if let Some(was) = self.backend_of.insert(flow, now) {
                    if was != now {
                        return Err(format!("flow {flow:?} moved from {was:?} to {now:?}"));
                    }
                }
                Ok(())
            }
            (ETH_IPV6, ETH_IPV4) if i.len() >= 44 && i[24..36] == NAT46_PREFIX.octets()[..12] && o.len() >= 24 => {
                let proto = o[9];
                let backend: [u8; 16] = i[8..24].try_into().unwrap();
                let client = Ipv4Addr::new(i[36], i[37], i[38], i[39]);
                let (Some(backend_port), Some(client_port)) = (port_at(i, 40, i[6], 0), port_at(i, 40, i[6], 2)) else {
                    return Ok(());
                };
                let Some(vip_port) = port_at(o, 20, proto, 0) else { return Err("no ports out".into()) };
                if o[12..16] != VIP.octets() || o[16..20] != client.octets() {
                    return Err("a backend's packet left from another address than the VIP, or to another client".into());
                }
                self.check((client, client_port, vip_port, proto), (backend.into(), backend_port), xlat)
            }
            _ => Ok(()),
        }
    }

    /// Err unless `flow` is `backend`'s: seen so, or opened so by a packet
    /// that was dropped later on its way (none came out to note).
    fn check(&self, flow: (Ipv4Addr, u16, u16, u8), backend: (Ipv6Addr, u16), xlat: &Xlat) -> Result<(), String> {
        let (client, client_port, vip_port, proto) = flow;
        let opened_unseen = || {
            xlat.nat46_state().iter().any(|(k, v)| {
                k.saddr == client.to_ipv6_mapped().octets()
                    && k.daddr == VIP.to_ipv6_mapped().octets()
                    && (k.sport, k.dport, k.proto) == (client_port.to_be(), vip_port.to_be(), proto)
                    && (v.daddr, v.dport) == (backend.0.octets(), backend.1.to_be())
            })
        };
        match self.backend_of.get(&flow) {
            Some(&seen) if seen == backend => Ok(()),
            None if opened_unseen() => Ok(()),
            other => Err(format!(
                "{} port {} to {client} port {client_port} left from VIP port {vip_port}, whose flow is {other:?}",
                backend.0, backend.1
            )),
        }
    }
}

/// The transport port (ICMP: echo identifier) at `l4`, by protocol: `at` 0
/// for the source port, 2 for the destination.
fn port_at(l3: &[u8], l4: usize, proto: u8, at: usize) -> Option<u16> {
    let offset = match proto {
        6 | 17 => l4 + at,
        1 | 58 if matches!(l3.get(l4), Some(0 | 8 | 128 | 129)) => l4 + 4,
        _ => return None,
    };
    Some(u16::from_be_bytes([*l3.get(offset)?, *l3.get(offset + 1)?]))
}

impl Bindings {
    /// Notes what `input` became as `output`, if it went through a binding;
    /// Err when that contradicts a binding seen before.
    fn observe(&mut self, input: &[u8], output: &[u8]) -> Result<(), String> {
        let (i, o) = (&input[14..], &output[14..]);
        let (client, proto, client_port, pool_port) = match ([input[12], input[13]], [output[12], output[13]]) {
            (ETH_IPV6, ETH_IPV4) if o.len() >= 28 && o[12..16] == POOL.octets() && i[6] != 44 => {
                let proto = o[9];
                let addr: [u8; 16] = i[8..24].try_into().unwrap();
                let (Some(client_port), Some(pool_port)) = (port_at(i, 40, i[6], 0), port_at(o, 20, proto, 0)) else {
                    return Ok(()); // an error, quoting
                };
                (Ipv6Addr::from(addr), proto, client_port, pool_port)
            }
            (ETH_IPV4, ETH_IPV6) if i.len() >= 28 && i[16..20] == POOL.octets() && o.len() >= 48 && o[6] != 44 => {
                let proto = i[9];
                let addr: [u8; 16] = o[24..40].try_into().unwrap();
                let (Some(pool_port), Some(client_port)) = (port_at(i, 20, proto, 2), port_at(o, 40, o[6], 2)) else {
                    return Ok(());
                };
                (Ipv6Addr::from(addr), proto, client_port, pool_port)
            }
            _ => return Ok(()),
        };
        let proto = if proto == 58 { 1 } else { proto };
        if let Some(&held) = self.by_client.get(&(client, proto, client_port)) {
            if held != pool_port {
                return Err(format!("{client} port {client_port} had pool port {held}, now {pool_port}"));
            }
        }
        if let Some(&(owner, owner_port)) = self.by_pool.get(&(proto, pool_port)) {
            if (owner, owner_port) != (client, client_port) {
                return Err(format!("pool port {pool_port} belongs to {owner} port {owner_port}, not {client} {client_port}"));
            }
        }
        self.by_client.insert((client, proto, client_port), pool_port);
        self.by_pool.insert((proto, pool_port), (client, client_port));
        Ok(())
    }
}

/// Runs `count` packets from `make` and checks the invariant for each.
fn fuzz(name: &str, seed: u64, count: usize, mutate: bool, mode: Mode) {
    let net = Net::enter();
    let mut xlat = Xlat::load(name);
    let mut bindings = Bindings::default();
    let mut flows = Flows46::default();
    if mode == Mode::Stateful {
        let client: Ipv6Addr = "2001:db8:6::100".parse().unwrap();
        xlat.enable_stateful(&[POOL], client, 126, POOL_PORTS.0, POOL_PORTS.1, NAT64_FILTER_ENDPOINT_INDEPENDENT);
    }
    if mode == Mode::Gateway {
        xlat.enable_nat46(NAT46_PREFIX);
        for (id, backend) in BACKENDS.iter().enumerate() {
            xlat.set_nat46_backend(id as u32 + 1, *backend, BACKEND_PORT);
        }
        // Two frontends share backend 1: one client port through both clashes.
        for (id, (port, proto)) in VIP_PORTS.iter().enumerate() {
            let pattern: &[u32] = [&[1, 2][..], &[2], &[1], &[]][id];
            xlat.set_nat46_frontend(VIP, *port, *proto, id as u32 + 1, pattern);
        }
    }
    let mut rng = Rng(seed);
    let (mut passed, mut dropped, mut translated, mut replied, mut skipped) = (0, 0, 0, 0, 0);
    let mut drops = std::collections::BTreeMap::new();
    for i in 0..count {
        let v6 = rng.below(2) == 0;
        let mut packet = if mode == Mode::Gateway && rng.below(2) == 0 {
            gateway_packet(&mut rng, v6)
        } else if v6 {
            valid_ipv6(&mut rng)
        } else {
            valid_ipv4(&mut rng)
        };
        if mutate {
            for _ in 0..1 + rng.below(8) {
                let at = 14 + rng.below((packet.len() - 14) as u64) as usize;
                packet[at] = rng.byte();
            }
            if rng.below(4) == 0 {
                // Never inside the IP header: the kernel refuses such frames
                // before the program runs (tests/netns sends one instead).
                let header = if v6 { 54 } else { 34 };
                let keep = header + rng.below((packet.len() - header + 1) as u64) as usize;
                packet.truncate(keep);
            }
        }
        let input_ok = transport_checksum_ok(&packet);
        assert!(mutate || input_ok != Some(false), "generator made a bad checksum: {}", hex(&packet));
        let before = by_reason(&xlat);
        let ifindex = if v6 { net.v6 } else { net.v4 };
        let run = match xlat.try_run(&packet, ifindex) {
            Ok(run) => run,
            Err(_) => {
                // BPF_PROG_TEST_RUN refuses some frames (EINVAL) before the program runs.
                skipped += 1;
                continue;
            }
        };
        let after = by_reason(&xlat);
        let context = || format!("{name} seed {seed:#x} packet {i}: {}\n  out: {}", hex(&packet), hex(&run.packet));
        let grew: Vec<Reason> = Reason::ALL.into_iter().filter(|r| after[*r as usize] > before[*r as usize]).collect();
        let counted: u64 = after.iter().sum::<u64>() - before.iter().sum::<u64>();
        match run.verdict {
            TC_ACT_UNSPEC => {
                assert_eq!(run.packet, packet, "passed but changed; {}", context());
                assert_eq!(counted, 0, "passed but counted; {}", context());
                passed += 1;
            }
            TC_ACT_SHOT => {
                assert_eq!(counted, 1, "dropped, counted {counted} times; {}", context());
                let reason = grew[0];
                assert!(reason.is_drop(), "dropped but counted as {}; {}", reason.name(), context());
                if !mutate {
                    assert_ne!(reason, Reason::V6N_REASON_DROP_MALFORMED, "a valid packet called malformed; {}", context());
                }
                *drops.entry(reason.name()).or_insert(0) += 1;
                dropped += 1;
            }
            TC_ACT_OK | TC_ACT_REDIRECT => {
                assert_eq!(counted, 1, "counted {counted} times; {}", context());
                headers_well_formed(&run.packet).unwrap_or_else(|e| panic!("{e}; {}", context()));
                let output_ok = transport_checksum_ok(&run.packet);
                if input_ok == Some(true) {
                    assert_ne!(output_ok, Some(false), "valid checksum in, invalid out; {}", context());
                }

                if [run.packet[12], run.packet[13]] == [packet[12], packet[13]] {
                    // Same family out: an ICMP error back to the sender.
                    assert!(grew[0].is_drop(), "same family out but counted {}; {}", grew[0].name(), context());
                    replied += 1;
                } else {
                    assert!(!grew[0].is_drop(), "translated but counted {}; {}", grew[0].name(), context());
                    bindings.observe(&packet, &run.packet).unwrap_or_else(|e| panic!("{e}; {}", context()));
                    flows.observe(&packet, &run.packet, &xlat).unwrap_or_else(|e| panic!("{e}; {}", context()));
                    translated += 1;
                }
            }
            other => panic!("verdict {other}; {}", context()),
        }
    }
    eprintln!(
        "{name}: seed {seed:#x}, {count} packets: {passed} passed untouched, {translated} translated, \
         {replied} answered with an ICMP error, {dropped} dropped {drops:?}, {skipped} refused by BPF_PROG_TEST_RUN, \
         {} bindings, {} gateway flows and {} ICMP errors about them seen",
        bindings.by_client.len(),
        flows.backend_of.len(),
        flows.errors
    );
    if mode == Mode::Gateway && !mutate {
        assert!(flows.backend_of.len() >= 500, "too few gateway flows ({}): the generator is off", flows.backend_of.len());
        assert!(flows.errors >= 100, "too few ICMP errors about gateway flows ({}): the generator is off", flows.errors);
    }
    if mode == Mode::Stateful && !mutate {
        assert!(bindings.by_client.len() >= 16, "the pool's 16 ports per protocol should all have been seen in use");
    }
    // Mutated version or length fields still make the kernel refuse a few.
    assert!(skipped * 20 < count, "too many frames refused by the kernel: {skipped}");
    // Mutated gateway packets: most backends' packets name no flow, and
    // mutations make more of them strangers.
    let floor = if mode == Mode::Gateway && mutate { count / 30 } else { count / 20 };
    assert!(translated > floor, "too few translated ({translated}): the generator is off");
}

#[test]
fn valid_packets_are_translated_well_formed_or_dropped_with_a_reason() {
    fuzz("fuzzvalid", 0x7636_0001, 50_000, false, Mode::Stateless);
}

#[test]
fn mutated_packets_never_come_out_malformed() {
    fuzz("fuzzmutated", 0x7636_0002, 50_000, true, Mode::Stateless);
}

#[test]
fn stateful_packets_come_out_well_formed_and_never_with_another_flows_binding() {
    fuzz("fuzzstateful", 0x7636_0003, 50_000, false, Mode::Stateful);
}

#[test]
fn mutated_stateful_packets_never_come_out_malformed_or_with_another_flows_binding() {
    fuzz("fuzzstatefulmut", 0x7636_0004, 50_000, true, Mode::Stateful);
}

#[test]
fn gateway_packets_come_out_well_formed_and_every_flow_keeps_its_backend() {
    fuzz("fuzzgateway", 0x7636_0005, 50_000, false, Mode::Gateway);
}

#[test]
fn mutated_gateway_packets_never_come_out_malformed_or_from_another_flows_vip_port() {
    fuzz("fuzzgatewaymut", 0x7636_0006, 50_000, true, Mode::Gateway);
}
