// SPDX-License-Identifier: Apache-2.0
//! A node in a network namespace of the test thread's own, for the tests of
//! packets between pods, the uplink and the stack: the host sides of two
//! pods' device pairs and an uplink with a default route, so FIB answers are
//! the kernel's, with both entry objects over one set of pinned maps.

use std::net::Ipv6Addr;

use aya::{
    maps::{HashMap, MapData},
    Ebpf,
};
use v6node_abi::{maps, Direction, EndpointKey, EndpointValue, Reason};
use v6node_api::format_mac;

use super::{counted, enter_netns, ifindex, ip, load_object, try_run_program, PinDir, Run};

pub static POD_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pod.bpf.o"));
pub static HOST_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host.bpf.o"));
pub static XDP_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp.bpf.o"));

pub const POD_A: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0, 0, 0, 0xa);
pub const POD_B: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 1, 0, 0, 0, 0xb);
pub const NODE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
pub const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0xff];
pub const UPLINK_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
pub const REMOTE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
pub const POD_A_MAC: [u8; 6] = [2, 0xa, 0, 0, 0, 1];
pub const POD_B_MAC: [u8; 6] = [2, 0xb, 0, 0, 0, 1];
pub const HOST_A_MAC: [u8; 6] = [2, 0xa, 0, 0, 0, 2];
pub const HOST_B_MAC: [u8; 6] = [2, 0xb, 0, 0, 0, 2];

/// Both entry objects over one set of pinned maps, in the test's own netns:
/// `hosta`/`hostb` stand for the host sides of pods A and B, `uplink` for the
/// uplink (2001:db8:1::1/64, default route via a router with a known MAC).
/// `Node::with_xdp` adds the uplink's XDP object over the same maps.
pub struct Node {
    pub pod: Ebpf,
    pub host: Ebpf,
    pub xdp: Option<Ebpf>,
    _pins: PinDir,
    pub host_a: u32,
    pub host_b: u32,
    pub uplink: u32,
}

impl Node {
    pub fn new(test: &str, flags: u8) -> Node {
        Node::build(test, flags, false)
    }

    pub fn with_xdp(test: &str) -> Node {
        Node::build(test, 0, true)
    }

    fn build(test: &str, flags: u8, with_xdp: bool) -> Node {
        enter_netns();
        for (dev, mac) in [("hosta", HOST_A_MAC), ("hostb", HOST_B_MAC)] {
            ip(&format!("link add {dev} address {} type veth peer name {dev}peer", format_mac(&mac)));
            ip(&format!("link set {dev} up"));
        }
        ip(&format!("link add uplink address {} type veth peer name uplinkpeer", format_mac(&UPLINK_MAC)));
        ip("link set uplink up");
        ip("addr add 2001:db8:1::1/64 dev uplink nodad");
        ip("route add default via 2001:db8:1::ff dev uplink");
        ip(&format!("neigh add 2001:db8:1::ff lladdr {} dev uplink nud permanent", format_mac(&ROUTER_MAC)));
        ip("route add unreachable 2001:db8:dead::/48");
        ip(&format!("route add {POD_A}/128 dev hosta"));
        ip(&format!("route add {POD_B}/128 dev hostb"));
        std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1").unwrap();

        let (mut pod, pins) = load_object(POD_OBJECT, &["v6n_from_pod", "v6n_to_pod"], test);
        // Each load opens the maps the first one pinned; the pins go when
        // the last guard does.
        let (host, _host_pins) = load_object(HOST_OBJECT, &["v6n_from_dev", "v6n_to_dev"], test);
        let xdp = with_xdp.then(|| load_object(XDP_OBJECT, &["v6n_xdp_uplink"], test));
        let (xdp, _xdp_pins) = xdp.map_or((None, None), |(ebpf, pins)| (Some(ebpf), Some(pins)));
        let mut endpoints: HashMap<&mut MapData, EndpointKey, EndpointValue> =
            HashMap::try_from(pod.map_mut(maps::ENDPOINTS).unwrap()).unwrap();
        for (addr, dev, pod_mac, host_mac) in [(POD_A, "hosta", POD_A_MAC, HOST_A_MAC), (POD_B, "hostb", POD_B_MAC, HOST_B_MAC)] {
            let value = EndpointValue { ifindex: ifindex(dev), pod_mac, host_mac, flags, pad: [0; 3] };
            endpoints.insert(EndpointKey { addr: addr.octets() }, value, 0).unwrap();
        }
        Node { pod, host, xdp, _pins: pins, host_a: ifindex("hosta"), host_b: ifindex("hostb"), uplink: ifindex("uplink") }
    }

    pub fn sent_by_pod(&self, packet: &[u8], device: u32) -> Run {
        try_run_program(&self.pod, "v6n_from_pod", packet, device).expect("BPF_PROG_TEST_RUN")
    }

    pub fn counted(&self, direction: Direction, reason: Reason) -> u64 {
        counted(&self.pod, direction, reason)
    }
}
