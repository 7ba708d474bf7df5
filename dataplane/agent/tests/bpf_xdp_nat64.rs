// SPDX-License-Identifier: Apache-2.0
//! The translator in the uplinks' XDP program (bpf/lib/xlat_xdp.h) against
//! tc's (bpf/nat64.bpf.c), through BPF_PROG_TEST_RUN on a one-armed
//! gateway: IPv6 and IPv4 neighbours on the same uplink, so translated
//! frames go back out of the device they came in by. Both objects share
//! their maps, as on a node: each frame goes through XDP first (which makes
//! the state) and then, the same input, through tc (which finds it), and
//! the two outputs must be the same bytes, but for the IPv4 identification
//! (and with it the header checksum) both draw at random. What XDP leaves
//! to tc must pass unchanged and unrecorded. Needs root and a bpffs.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::{
    maps::{DevMapHash, HashMap, MapData},
    Ebpf,
};
use common::{nat64::*, packet::*, *};
use v6node_abi::{maps, CtKey, Direction, Reason, NAT64_FILTER_ENDPOINT_INDEPENDENT};

static XDP_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp.bpf.o"));

const XDP: Direction = Direction::V6N_DIRECTION_XDP;
const CLIENT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0x100);
const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 80);
const NAT46_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, 0, 0);
const BACKENDS: [Ipv6Addr; 2] =
    [Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xa), Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 0xb)];
const BACKEND_PORT: u16 = 8080;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
const TCP_FIN: u8 = 0x01;

/// A gateway with one uplink, `uplink`, for both families; the translator on
/// it at tc and in XDP, sharing their maps.
struct Gateway {
    xlat: Xlat,
    xdp: Ebpf,
    _xdp_pins: PinDir,
    up: u32,
}

impl Gateway {
    fn new(test: &str) -> Gateway {
        enter_netns();
        ip("link add uplink type veth peer name uplinkpeer");
        ip("link add other type veth peer name otherpeer");
        for dev in ["uplink", "uplinkpeer", "other", "otherpeer"] {
            ip(&format!("link set {dev} up"));
        }
        ip("addr add 2001:db8:6::1/64 dev uplink nodad");
        ip("addr add 192.0.2.1/24 dev uplink");
        ip("addr add 192.0.3.1/24 dev other");
        for (addr, mac) in [
            ("2001:db8:6::2", "02:00:00:00:06:02"),
            ("2001:db8:6::100", "02:00:00:00:06:64"),
            ("2001:db8:6::a", "02:00:00:00:06:0a"),
            ("2001:db8:6::b", "02:00:00:00:06:0b"),
            ("192.0.2.2", "02:00:00:00:04:02"),
        ] {
            ip(&format!("neigh add {addr} lladdr {mac} dev uplink nud permanent"));
        }
        ip("neigh add 192.0.3.2 lladdr 02:00:00:00:04:32 dev other nud permanent");
        for (path, value) in [("/proc/sys/net/ipv4/ip_forward", "1"), ("/proc/sys/net/ipv6/conf/all/forwarding", "1")] {
            std::fs::write(path, value).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        let xlat = Xlat::load(test);
        let (mut xdp, _xdp_pins) = load_object(XDP_OBJECT, &["v6n_xdp_uplink"], test);
        let up = ifindex("uplink");
        let mut devices: HashMap<&mut MapData, u32, u8> = HashMap::try_from(xdp.map_mut(maps::XLAT_DEVICES).unwrap()).unwrap();
        devices.insert(up, 1, 0).unwrap();
        Gateway { xlat, xdp, _xdp_pins, up }
    }

    fn run_xdp(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        run_xdp(&self.xdp, "v6n_xdp_uplink", frame, self.up)
    }

    /// A second arm: `device` translates at tc and runs the XDP program
    /// natively, so XDP may send out of it (v6n_xdp_ports).
    fn second_arm(&mut self, device: &str) -> u32 {
        let ifindex = ifindex(device);
        let mut devices: HashMap<&mut MapData, u32, u8> =
            HashMap::try_from(self.xdp.map_mut(maps::XLAT_DEVICES).unwrap()).unwrap();
        devices.insert(ifindex, 1, 0).unwrap();
        let mut ports: DevMapHash<&mut MapData> = DevMapHash::try_from(self.xdp.map_mut(maps::XDP_PORTS).unwrap()).unwrap();
        for port in [self.up, ifindex] {
            ports.insert(port, port, None, 0).unwrap();
        }
        ifindex
    }

    /// `frame` through XDP, then through tc: both send it back out of the
    /// uplink, the same bytes. Returns what XDP sent.
    fn translates_as_tc(&self, frame: &[u8], what: &str) -> Vec<u8> {
        self.sends_as_tc(frame, self.up, XDP_TX, what)
    }

    /// `frame`, arriving on `ingress`, through XDP, which returns `verdict`
    /// (XDP_TX, or XDP_REDIRECT to another arm), then through tc: the same
    /// bytes. Returns what XDP sent.
    fn sends_as_tc(&self, frame: &[u8], ingress: u32, verdict: u32, what: &str) -> Vec<u8> {
        let (sent, mut xdp) = run_xdp(&self.xdp, "v6n_xdp_uplink", frame, ingress);
        assert_eq!(sent, verdict, "{what}: XDP's verdict");
        assert_well_formed(&xdp);
        let tc = self.xlat.run(frame, ingress);
        assert_eq!(tc.verdict, TC_ACT_REDIRECT, "{what}: tc redirects it");
        let mut tc = tc.packet;
        if xdp[12..14] == ETH_IPV4 {
            for out in [&mut xdp, &mut tc] {
                out[18..20].fill(0); // identification
                out[24..26].fill(0); // header checksum
            }
        }
        assert_eq!(hex(&xdp), hex(&tc), "{what}: XDP's frame against tc's");
        xdp
    }

    /// `frame` passes XDP unchanged, for tc.
    fn leaves_to_tc(&self, frame: &[u8], what: &str) {
        let (verdict, out) = self.run_xdp(frame);
        assert_eq!(verdict, XDP_PASS, "{what}: left to tc");
        assert_eq!(hex(&out), hex(frame), "{what}: untouched");
    }

    fn counted_in_xdp(&self, reason: Reason) -> u64 {
        counted(&self.xdp, XDP, reason)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An IPv4 host's IPv6 face under the well-known prefix.
fn face(v4: Ipv4Addr) -> Ipv6Addr {
    let o = v4.octets();
    Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([o[2], o[3]]))
}

fn tcp_with(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut segment = tcp(sport, dport, b"payload");
    segment[13] = flags;
    segment
}

fn echo(request: bool, v6: bool, id: u16) -> Vec<u8> {
    let kind = match (request, v6) {
        (true, true) => 128,
        (false, true) => 129,
        (true, false) => 8,
        (false, false) => 0,
    };
    let id = id.to_be_bytes();
    icmp(kind, 0, [id[0], id[1], 0, 7], b"ping")
}

fn v6_frame(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
    let csum_at = match next {
        6 => 16,
        17 => 6,
        _ => 2,
    };
    ethernet(ETH_IPV6, &ipv6(src, dst, 64, next, payload, Some(csum_at)))
}

fn v4_frame(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let csum_at = match proto {
        6 => 16,
        17 => 6,
        _ => 2,
    };
    ethernet(ETH_IPV4, &ipv4(src, dst, 64, proto, 0x4000, payload, Some(csum_at)))
}

#[test]
fn xdp_translates_stateless_traffic_both_ways_as_tc_does() {
    let gw = Gateway::new("xdp-stateless");
    let server = face(V4_HOST);
    for (what, next, payload) in [
        ("UDP", 17, udp(40000, 53, b"query")),
        ("TCP", 6, tcp_with(40000, 443, TCP_ACK)),
        ("echo request", 58, echo(true, true, 7)),
    ] {
        let out = gw.translates_as_tc(&v6_frame(V6_HOST, server, next, &payload), &format!("6to4 {what}"));
        assert_eq!(&out[0..6], &V4_HOST_MAC, "to the IPv4 host's MAC");
        assert_eq!(&out[26..34], &[V6_HOST_AS_V4.octets(), V4_HOST.octets()].concat());
    }
    for (what, proto, payload) in [
        ("UDP", 17, udp(53, 40000, b"answer")),
        ("TCP", 6, tcp_with(443, 40000, TCP_ACK)),
        ("echo reply", 1, echo(false, false, 7)),
    ] {
        let out = gw.translates_as_tc(&v4_frame(V4_HOST, V6_HOST_AS_V4, proto, &payload), &format!("4to6 {what}"));
        assert_eq!(&out[0..6], &V6_HOST_MAC, "to the IPv6 host's MAC");
        assert_eq!(&out[22..54], &[server.octets(), V6_HOST.octets()].concat());
    }
    assert_eq!(gw.counted_in_xdp(Reason::V6N_REASON_XLAT_FORWARDED), 6);
}

#[test]
fn xdp_binds_stateful_clients_and_brings_the_answers_back_as_tc_does() {
    let mut gw = Gateway::new("xdp-stateful");
    gw.xlat.enable_stateful(&[POOL], CLIENT, 127, 1024, 1031, NAT64_FILTER_ENDPOINT_INDEPENDENT);
    let server = face(V4_HOST);
    let mut udp_bound = 0;
    for (what, next, proto, out, back) in [
        ("UDP", 17, 17, udp(40000, 53, b"query"), udp(53, 0, b"answer")),
        ("TCP", 6, 6, tcp_with(40000, 443, TCP_SYN), tcp_with(443, 0, TCP_SYN | TCP_ACK)),
        ("echo", 58, 1, echo(true, true, 40000), echo(false, false, 0)),
    ] {
        let translated = gw.translates_as_tc(&v6_frame(CLIENT, server, next, &out), &format!("{what} out"));
        assert_eq!(&translated[26..30], &POOL.octets(), "{what}: from the pool");
        let at = if proto == 1 { 38 } else { 34 };
        let pool_port = u16::from_be_bytes([translated[at], translated[at + 1]]);
        assert!((1024..=1031).contains(&pool_port), "{what}: a port of the range, {pool_port}");
        if proto == 17 {
            udp_bound = pool_port;
        }
        let binding = CtKey { daddr: POOL.to_ipv6_mapped().octets(), dport: pool_port.to_be(), proto, ..CtKey::default() };
        assert!(gw.xlat.state().iter().any(|(k, _)| *k == binding), "{what}: XDP made the binding tc then used");

        let mut back = back.clone();
        let port_at = if proto == 1 { 4 } else { 2 };
        back[port_at..port_at + 2].copy_from_slice(&pool_port.to_be_bytes());
        let answer = gw.translates_as_tc(&v4_frame(V4_HOST, POOL, proto, &back), &format!("{what} back"));
        assert_eq!(&answer[38..54], &CLIENT.octets(), "{what}: to the client");
        let at = if proto == 1 { 58 } else { 56 };
        assert_eq!(&answer[at..at + 2], &40000u16.to_be_bytes(), "{what}: its own port again");
    }
    // A pool port nobody holds: tc refuses it and counts it (XDP cannot
    // know whether the answer would have been its to send). Ports are drawn
    // at random, so the one taken is the UDP binding's neighbour.
    let unbound = if udp_bound == 1031 { 1024 } else { udp_bound + 1 };
    gw.leaves_to_tc(&v4_frame(V4_HOST, POOL, 17, &udp(53, unbound, b"scan")), "an unbound pool port");
    assert_eq!(gw.counted_in_xdp(Reason::V6N_REASON_DROP_NO_BINDING), 0);
}

#[test]
fn xdp_leaves_a_stateful_client_whose_server_is_out_of_another_device_to_tc_binding_nothing() {
    let mut gw = Gateway::new("xdp-two-armed");
    gw.xlat.enable_stateful(&[POOL], CLIENT, 127, 1024, 1031, NAT64_FILTER_ENDPOINT_INDEPENDENT);
    gw.leaves_to_tc(&v6_frame(CLIENT, face(Ipv4Addr::new(192, 0, 3, 2)), 17, &udp(40000, 53, b"q")), "server on `other`");
    assert!(gw.xlat.state().is_empty(), "no binding made: tc makes it, and reports it");
}

#[test]
fn xdp_sends_a_two_armed_gateways_frames_out_of_the_other_arm_when_it_runs_xdp() {
    let mut gw = Gateway::new("xdp-two-arms");
    gw.xlat.enable_stateful(&[POOL], CLIENT, 127, 1024, 1031, NAT64_FILTER_ENDPOINT_INDEPENDENT);
    let other = gw.second_arm("other");
    let server = Ipv4Addr::new(192, 0, 3, 2);
    let query = v6_frame(CLIENT, face(server), 17, &udp(40000, 53, b"query"));
    let out = gw.sends_as_tc(&query, gw.up, XDP_REDIRECT, "IPv6 arm to IPv4 arm");
    assert_eq!(&out[0..6], &[2, 0, 0, 0, 4, 0x32], "to the server's MAC, on `other`");
    let pool_port = u16::from_be_bytes([out[34], out[35]]);
    let binding = CtKey { daddr: POOL.to_ipv6_mapped().octets(), dport: pool_port.to_be(), proto: 17, ..CtKey::default() };
    assert!(gw.xlat.state().iter().any(|(k, _)| *k == binding), "XDP made the binding");

    let answer = v4_frame(server, POOL, 17, &udp(53, pool_port, b"answer"));
    let back = gw.sends_as_tc(&answer, other, XDP_REDIRECT, "IPv4 arm to IPv6 arm");
    assert_eq!(&back[0..6], &[2, 0, 0, 0, 6, 0x64], "to the client's MAC, on `uplink`");
    assert_eq!(&back[38..54], &CLIENT.octets(), "to the client");
    assert_eq!(gw.counted_in_xdp(Reason::V6N_REASON_XLAT_FORWARDED), 2);

    // An IPv4 arm that does not forward IPv6: the FIB, asked from it, says
    // "forwarding off", and is asked again from the loopback device, as tc
    // asks it. Past the answers XDP keeps (100 ms), the first frame asks
    // the FIB; the second is answered from this CPU's table, both times.
    stay_on_this_cpu();
    std::fs::write("/proc/sys/net/ipv6/conf/other/forwarding", "0").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    for round in ["asked of the FIB", "answered from the table"] {
        let back = gw.sends_as_tc(&answer, other, XDP_REDIRECT, &format!("`other` not forwarding IPv6, {round}"));
        assert_eq!(&back[0..6], &[2, 0, 0, 0, 6, 0x64], "{round}: to the client's MAC, on `uplink`");
    }
    assert_eq!(gw.counted_in_xdp(Reason::V6N_REASON_XLAT_FORWARDED), 4);
}

#[test]
fn xdp_runs_the_nat46_gateway_both_ways_as_tc_does() {
    let mut gw = Gateway::new("xdp-nat46");
    gw.xlat.enable_nat46(NAT46_PREFIX);
    for (i, backend) in BACKENDS.iter().enumerate() {
        gw.xlat.set_nat46_backend(101 + i as u32, *backend, BACKEND_PORT);
    }
    gw.xlat.set_nat46_frontend(VIP, 80, 6, 1, &[101, 102]);
    let mut client_as_v6 = NAT46_PREFIX.octets();
    client_as_v6[12..].copy_from_slice(&V4_HOST.octets());
    let client_as_v6 = Ipv6Addr::from(client_as_v6);
    for port in [40000u16, 40001, 40002, 40003] {
        // A new flow is tc's to make (its backend decides whether the
        // packets leave by this uplink); its next packets are XDP's.
        let syn = v4_frame(V4_HOST, VIP, 6, &tcp_with(port, 80, TCP_SYN));
        gw.leaves_to_tc(&syn, "a new flow's first packet");
        assert_eq!(gw.xlat.run(&syn, gw.up).verdict, TC_ACT_REDIRECT, "tc makes the flow");
        let syn = gw.translates_as_tc(&v4_frame(V4_HOST, VIP, 6, &tcp_with(port, 80, TCP_ACK)), "client to VIP");
        assert_eq!(&syn[22..38], &client_as_v6.octets(), "from the client, embedded");
        let backend: [u8; 16] = syn[38..54].try_into().unwrap();
        assert!(BACKENDS.contains(&Ipv6Addr::from(backend)), "to a backend");
        assert_eq!(&syn[56..58], &BACKEND_PORT.to_be_bytes());
        let reply = v6_frame(backend.into(), client_as_v6, 6, &tcp_with(BACKEND_PORT, port, TCP_SYN | TCP_ACK));
        let back = gw.translates_as_tc(&reply, "backend to client");
        assert_eq!(&back[26..34], &[VIP.octets(), V4_HOST.octets()].concat(), "from the VIP");
        assert_eq!(&back[34..36], &80u16.to_be_bytes(), "from the frontend's port");
    }
    assert_eq!(gw.xlat.nat46_state().len(), 8, "four flows, each two entries");

    // The first connection closes from both sides; its flow lives on, and a
    // new connection from the same port is a new flow: tc's, as any other.
    let fin = v4_frame(V4_HOST, VIP, 6, &tcp_with(40000, 80, TCP_FIN | TCP_ACK));
    let to_backend = gw.translates_as_tc(&fin, "the client's FIN");
    let backend: [u8; 16] = to_backend[38..54].try_into().unwrap();
    gw.translates_as_tc(
        &v6_frame(backend.into(), client_as_v6, 6, &tcp_with(BACKEND_PORT, 40000, TCP_FIN | TCP_ACK)),
        "the backend's FIN",
    );
    gw.translates_as_tc(&v4_frame(V4_HOST, VIP, 6, &tcp_with(40000, 80, TCP_ACK)), "the last ACK");
    gw.leaves_to_tc(&v4_frame(V4_HOST, VIP, 6, &tcp_with(40000, 80, TCP_SYN)), "a new connection from a closed flow's port");

    // A flow whose backend left the gateway is tc's again, which moves it to
    // a backend still there; its next packets are XDP's.
    let ack = v4_frame(V4_HOST, VIP, 6, &tcp_with(40001, 80, TCP_ACK));
    let old: [u8; 16] = gw.translates_as_tc(&ack, "before the backend leaves")[38..54].try_into().unwrap();
    let (gone, stays) = if Ipv6Addr::from(old) == BACKENDS[0] { (101, 102) } else { (102, 101) };
    gw.xlat.set_nat46_frontend(VIP, 80, 6, 1, &[stays]);
    gw.xlat.remove_nat46_backend(gone);
    gw.leaves_to_tc(&ack, "a flow whose backend left");
    assert_eq!(gw.xlat.run(&ack, gw.up).verdict, TC_ACT_REDIRECT, "tc moves the flow");
    let moved = gw.translates_as_tc(&ack, "after the move");
    assert_eq!(&moved[38..54], &BACKENDS[(stays - 101) as usize].octets(), "to the backend that stays");
}

#[test]
fn xdp_leaves_to_tc_whatever_it_does_not_translate() {
    let gw = Gateway::new("xdp-leaves");
    let server = face(V4_HOST);
    let error = icmp(1, 4, [0, 0, 0, 0], &[0; 28]);
    let mut fragment = v6_frame(V6_HOST, server, 44, &[17, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0]);
    fragment[14 + 6] = 44;
    let mut padded = v4_frame(V4_HOST, V6_HOST_AS_V4, 17, &udp(53, 40000, b"x"));
    padded.extend_from_slice(&[0; 8]);
    let mut udp_no_checksum = v4_frame(V4_HOST, V6_HOST_AS_V4, 17, &udp(53, 40000, b"answer"));
    udp_no_checksum[40..42].fill(0);
    for (what, frame) in [
        ("an ICMPv4 error", v4_frame(V4_HOST, V6_HOST_AS_V4, 1, &error)),
        (
            "IPv4 options",
            ethernet(
                ETH_IPV4,
                &with_ipv4_options(ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0, &udp(53, 40000, b"o"), Some(6)), [1; 8]),
            ),
        ),
        ("an IPv4 fragment", ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 64, 17, 0x2000, &udp(53, 40000, b"f"), Some(6)))),
        ("TTL 1", ethernet(ETH_IPV4, &ipv4(V4_HOST, V6_HOST_AS_V4, 1, 17, 0, &udp(53, 40000, b"t"), Some(6)))),
        ("Ethernet padding", padded),
        ("UDP without a checksum", udp_no_checksum),
        ("an IPv6 extension header", fragment),
        ("hop limit 1", ethernet(ETH_IPV6, &ipv6(V6_HOST, server, 1, 17, &udp(40000, 53, b"h"), Some(6)))),
        ("a next hop on another device", v6_frame(V6_HOST, face(Ipv4Addr::new(192, 0, 3, 2)), 17, &udp(40000, 53, b"n"))),
        ("outside the mapping", v6_frame(V6_HOST, BACKENDS[0], 17, &udp(40000, 53, b"m"))),
    ] {
        gw.leaves_to_tc(&frame, what);
    }
    assert_eq!(counter_slots(&gw.xdp).len(), 0, "nothing recorded");

    // A device tc's translator does not run on: XDP does not translate either.
    let mut gw = gw;
    {
        let mut devices: HashMap<&mut MapData, u32, u8> = HashMap::try_from(gw.xdp.map_mut(maps::XLAT_DEVICES).unwrap()).unwrap();
        devices.remove(&gw.up).unwrap();
    }
    gw.leaves_to_tc(&v6_frame(V6_HOST, server, 17, &udp(40000, 53, b"query")), "not in nat64.devices");
}
