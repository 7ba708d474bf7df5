// SPDX-License-Identifier: Apache-2.0
//! The host programs (bpf/host.bpf.c) run by the kernel through
//! BPF_PROG_TEST_RUN, one scenario per test: generate a packet, set up the
//! tables, run it through a program, check the verdict and the counters.
//! Needs root (CAP_BPF) and a bpffs at /sys/fs/bpf, as `tests/run rust` has.

mod common;

use std::net::Ipv6Addr;

use aya::{
    programs::{SchedClassifier, TestRun, TestRunOptions},
    Ebpf,
};
use common::{
    counted_with_bytes, deny_source, load_object,
    packet::{arp, udp6},
    PinDir, TC_ACT_SHOT, TC_ACT_UNSPEC,
};
use v6node_abi::{Direction, Reason};

static HOST_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host.bpf.o"));

/// The host object loaded with its pinned maps in a directory of its own,
/// removed again when the test ends.
struct Host {
    ebpf: Ebpf,
    _pins: PinDir,
}

impl Host {
    fn load(test: &str) -> Host {
        let (ebpf, _pins) = load_object(HOST_OBJECT, &["v6n_from_dev", "v6n_to_dev"], test);
        Host { ebpf, _pins }
    }

    fn run(&self, program: &str, packet: &[u8]) -> u32 {
        let program: &SchedClassifier = self.ebpf.program(program).unwrap().try_into().unwrap();
        let options = TestRunOptions { data_in: Some(packet), ..TestRunOptions::new() };
        program.test_run(options).expect("BPF_PROG_TEST_RUN").return_value
    }

    /// Packets and bytes counted for (direction, reason), over all devices:
    /// test runs count under the loopback device of the caller's namespace.
    fn counted(&self, direction: Direction, reason: Reason) -> (u64, u64) {
        counted_with_bytes(&self.ebpf, direction, reason)
    }

    fn deny(&mut self, net: Ipv6Addr, prefix_len: u32) {
        deny_source(&mut self.ebpf, net, prefix_len);
    }
}

const NODE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x6e, 0, 0, 0, 0, 0, 2);
const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x6e, 0, 0, 0, 0, 0, 1);

#[test]
fn ipv6_passes_and_is_counted_with_its_bytes() {
    let host = Host::load("pass");
    let packet = udp6(PEER, NODE);
    assert_eq!(host.run("v6n_from_dev", &packet), TC_ACT_UNSPEC);
    assert_eq!(host.counted(Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_PASS), (1, packet.len() as u64));
    assert_eq!(host.run("v6n_to_dev", &packet), TC_ACT_UNSPEC);
    assert_eq!(host.counted(Direction::V6N_DIRECTION_EGRESS, Reason::V6N_REASON_PASS), (1, packet.len() as u64));
}

// A frame with the IPv6 ethertype but less than an IPv6 header cannot be
// injected here: BPF_PROG_TEST_RUN refuses it with EINVAL before the program
// runs. tests/netns sends one over a veth instead, where tc does see it.

#[test]
fn ipv6_ethertype_with_another_ip_version_is_malformed_both_ways() {
    let host = Host::load("version");
    let mut packet = udp6(PEER, NODE);
    packet[14] = (4 << 4) | (packet[14] & 0x0f);
    for (program, direction) in
        [("v6n_from_dev", Direction::V6N_DIRECTION_INGRESS), ("v6n_to_dev", Direction::V6N_DIRECTION_EGRESS)]
    {
        assert_eq!(host.run(program, &packet), TC_ACT_SHOT, "{program}");
        assert_eq!(host.counted(direction, Reason::V6N_REASON_DROP_MALFORMED), (1, packet.len() as u64), "{program}");
        assert_eq!(host.counted(direction, Reason::V6N_REASON_PASS).0, 0, "{program}");
    }
}

#[test]
fn denied_source_prefix_is_dropped_at_ingress_only() {
    let mut host = Host::load("deny");
    host.deny(Ipv6Addr::new(0xfd00, 0xbad, 0, 0, 0, 0, 0, 0), 32);
    let denied = udp6(Ipv6Addr::new(0xfd00, 0xbad, 0, 0, 0, 0, 0, 7), NODE);
    let allowed = udp6(Ipv6Addr::new(0xfd00, 0xbae, 0, 0, 0, 0, 0, 7), NODE);
    assert_eq!(host.run("v6n_from_dev", &denied), TC_ACT_SHOT);
    assert_eq!(host.run("v6n_from_dev", &allowed), TC_ACT_UNSPEC);
    assert_eq!(host.counted(Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_DROP_DENIED_SOURCE).0, 1);
    assert_eq!(host.counted(Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_PASS).0, 1);
    // The node's own replies to such a source are not filtered on the way out.
    assert_eq!(host.run("v6n_to_dev", &denied), TC_ACT_UNSPEC);
}

#[test]
fn frames_other_than_ipv6_pass_untouched() {
    let host = Host::load("other");
    let arp = arp();
    assert_eq!(host.run("v6n_from_dev", &arp), TC_ACT_UNSPEC);
    assert_eq!(host.counted(Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_PASS).0, 1);
    assert_eq!(host.counted(Direction::V6N_DIRECTION_INGRESS, Reason::V6N_REASON_DROP_MALFORMED).0, 0);
}
