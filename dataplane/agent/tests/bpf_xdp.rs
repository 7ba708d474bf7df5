// SPDX-License-Identifier: Apache-2.0
//! The uplinks' XDP program (bpf/xdp.bpf.c) run by the kernel through
//! BPF_PROG_TEST_RUN, as frames arriving on the test namespace's loopback:
//! what it drops it counts and reports as tc's program does the same
//! packet, under the XDP direction; everything else passes unchanged and
//! unrecorded, for tc to decide. Needs root and a bpffs at /sys/fs/bpf.

mod common;

use std::net::Ipv6Addr;

use aya::{
    programs::{SchedClassifier, TestRun, TestRunOptions},
    Ebpf,
};
use common::{
    counted_with_bytes, counter_slots, deny_source, enter_netns,
    events::{events, kind, set_events},
    load_object,
    packet::{arp, udp6},
    run_xdp, PinDir, TC_ACT_SHOT, XDP_DROP, XDP_PASS,
};
use v6node_abi::{Direction, EventKind, Reason};

static XDP_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp.bpf.o"));
static HOST_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host.bpf.o"));

const NODE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x6e, 0, 0, 0, 0, 0, 2);
const DENIED_NET: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xbad, 0, 0, 0, 0, 0, 0);
const DENIED: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xbad, 0, 0, 0, 0, 0, 7);
const ALLOWED: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xbae, 0, 0, 0, 0, 0, 7);

struct Loaded {
    ebpf: Ebpf,
    _pins: PinDir,
}

impl Loaded {
    /// The XDP object in a namespace of the test's own, DENIED_NET on its
    /// deny list, flow events on.
    fn xdp_denying(test: &str) -> Loaded {
        enter_netns();
        let (mut ebpf, _pins) = load_object(XDP_OBJECT, &["v6n_xdp_uplink"], test);
        deny_source(&mut ebpf, DENIED_NET, 32);
        set_events(&mut ebpf, true, 1000, 1000);
        Loaded { ebpf, _pins }
    }

    fn host(test: &str) -> Loaded {
        let (ebpf, _pins) = load_object(HOST_OBJECT, &["v6n_from_dev"], test);
        Loaded { ebpf, _pins }
    }

    /// The XDP program on `frame`, arriving on loopback's first queue:
    /// its verdict and the frame as it left.
    fn run_xdp(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        run_xdp(&self.ebpf, "v6n_xdp_uplink", frame, 1)
    }

    fn run_tc(&self, frame: &[u8]) -> u32 {
        let program: &SchedClassifier = self.ebpf.program("v6n_from_dev").unwrap().try_into().unwrap();
        program
            .test_run(TestRunOptions { data_in: Some(frame), ..TestRunOptions::new() })
            .expect("BPF_PROG_TEST_RUN")
            .return_value
    }
}

#[test]
fn a_denied_source_is_dropped_in_the_driver_counted_and_reported_as_tc_would() {
    let mut xdp = Loaded::xdp_denying("deny");
    let frame = udp6(DENIED, NODE);
    assert_eq!(xdp.run_xdp(&frame).0, XDP_DROP);
    assert_eq!(
        counted_with_bytes(&xdp.ebpf, Direction::V6N_DIRECTION_XDP, Reason::V6N_REASON_DROP_DENIED_SOURCE),
        (1, frame.len() as u64)
    );
    let events = events(&mut xdp.ebpf);
    assert_eq!(events.len(), 1, "one drop, one event");
    let event = &events[0];
    assert_eq!(kind(event), EventKind::V6N_EVENT_DROP);
    assert_eq!(
        (event.reason, event.direction),
        (Reason::V6N_REASON_DROP_DENIED_SOURCE as u8, Direction::V6N_DIRECTION_XDP as u8)
    );
    assert_eq!((Ipv6Addr::from(event.saddr), Ipv6Addr::from(event.daddr)), (DENIED, NODE));
    assert_eq!((u16::from_be(event.sport), u16::from_be(event.dport), event.protocol), (40000, 53, 17));
    assert_eq!((event.ifindex, event.len), (1, frame.len() as u32));

    // tc's program drops the same frame for the same reason.
    let mut host = Loaded::host("deny-tc");
    deny_source(&mut host.ebpf, DENIED_NET, 32);
    assert_eq!(host.run_tc(&frame), TC_ACT_SHOT);
    assert_eq!(counted_with_bytes(&host.ebpf, Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_DROP_DENIED_SOURCE).0, 1);
}

#[test]
fn everything_else_passes_unchanged_and_unrecorded_for_tc_to_decide() {
    let mut xdp = Loaded::xdp_denying("pass");
    // The IPv6 ethertype with another version: malformed, which tc drops and
    // counts as such; XDP leaves the verdict to it.
    let mut not_v6 = udp6(DENIED, NODE);
    not_v6[14] = (4 << 4) | (not_v6[14] & 0x0f);
    for (what, frame) in [("an allowed source", udp6(ALLOWED, NODE)), ("ARP", arp()), ("IPv6 ethertype, version 4", not_v6)] {
        let (verdict, out) = xdp.run_xdp(&frame);
        assert_eq!(verdict, XDP_PASS, "{what}");
        assert_eq!(out, frame, "{what} left unchanged");
    }
    assert!(counter_slots(&xdp.ebpf).is_empty(), "nothing recorded: {:?}", counter_slots(&xdp.ebpf));
    assert!(events(&mut xdp.ebpf).is_empty());
}
