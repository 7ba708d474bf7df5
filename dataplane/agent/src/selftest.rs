// SPDX-License-Identifier: Apache-2.0
//! The dataplane's self-test: one packet the node passes to its own stack
//! (an ICMPv6 echo request from a link-local address to all-nodes) run with
//! BPF_PROG_TEST_RUN through every host program the agent attached by tcx,
//! opened from its pin: the program the device runs, not a fresh load. The
//! program must let the packet through and count it in the pinned counters
//! that `status` and the metrics read. A program that drops it, does not
//! run, or counts nothing fails the test, `status` reports the failure, and
//! the boot health gate (v6node-boot-health) does not bless the boot.
//!
//! It runs at start, on each reload and whenever what is attached changes.
//! Its packets count under `lo` (BPF_PROG_TEST_RUN runs a packet as if it
//! came from the loopback device): one `pass` per program and run.

use std::{net::Ipv6Addr, path::Path};

use anyhow::{bail, Context, Result};
use aya::{
    maps::{MapData, PerCpuHashMap},
    programs::{SchedClassifier, TestRun, TestRunOptions},
};
use etherparse::PacketBuilder;
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CounterKey, CounterValue, Direction, Reason};

use crate::{
    attach::{self, AttachPoint, Attachment, Hook},
    bpf,
    paths::Paths,
};

/// tc's "no verdict, next program" (TCX_NEXT): how the host programs pass
/// a packet on.
const TC_ACT_UNSPEC: i32 = -1;

/// One host program's self-test.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTest {
    pub device: String,
    pub direction: String,
    pub program_id: Option<u32>,
    /// Why the program failed the test; None when it passed.
    pub error: Option<String>,
}

/// The self-test packet: what the host programs must pass to the stack.
pub fn packet() -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 0x01], [0x33, 0x33, 0, 0, 0, 0x01])
        .ipv6(
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0x5e1f, 0x7e57).octets(),
            Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets(),
            255,
        )
        .icmpv6_echo_request(0x7e57, 1);
    let payload = b"v6node self-test";
    let mut packet = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut packet, payload).expect("writing to a Vec cannot fail");
    packet
}

/// Runs the self-test through each host program attached by tcx in
/// `attachments`. Programs attached another way (clsact, netkit pods) are
/// not tested: they are not pinned as programs, or carry pod traffic only.
pub fn run(paths: &Paths, attachments: &[Attachment]) -> Vec<SelfTest> {
    let packet = packet();
    attachments
        .iter()
        .filter(|a| a.error.is_none() && a.mode == Hook::Tcx && AttachPoint::HOST.contains(&a.direction))
        .map(|a| SelfTest {
            device: a.device.clone(),
            direction: a.direction.name().to_owned(),
            program_id: a.program_id,
            error: test_one(paths, a, &packet).err().map(|e| format!("{e:#}")),
        })
        .collect()
}

fn test_one(paths: &Paths, attachment: &Attachment, packet: &[u8]) -> Result<()> {
    let pin = attach::program_pin(paths, &attachment.device, attachment.direction);
    let program = SchedClassifier::from_pin(&pin).with_context(|| format!("opening {}", pin.display()))?;
    let id = program.info()?.id();
    if attachment.program_id.is_some_and(|attached| attached != id) {
        bail!("{} is program {id}, the device runs {:?}", pin.display(), attachment.program_id);
    }
    let direction = match attachment.direction {
        AttachPoint::Egress => Direction::V6N_DIRECTION_EGRESS,
        _ => Direction::V6N_DIRECTION_INGRESS,
    };
    let before = passed_on_loopback(&paths.pin_dir, direction)?;
    let result =
        program.test_run(TestRunOptions { data_in: Some(packet), ..TestRunOptions::new() }).context("BPF_PROG_TEST_RUN")?;
    let verdict = result.return_value as i32;
    if verdict != TC_ACT_UNSPEC {
        bail!("program {id} returned {verdict} for the self-test packet, expected {TC_ACT_UNSPEC} (pass)");
    }
    let after = passed_on_loopback(&paths.pin_dir, direction)?;
    if after <= before {
        bail!("program {id} passed the self-test packet but did not count it ({before} -> {after} pass on lo)");
    }
    Ok(())
}

/// Packets counted as `pass` in `direction` on the loopback device, where
/// test runs count.
fn passed_on_loopback(pin_dir: &Path, direction: Direction) -> Result<u64> {
    let lo = crate::netdev::devices()?.get("lo").copied().context("no loopback device")?;
    let counters: PerCpuHashMap<MapData, CounterKey, CounterValue> = bpf::open_pinned_map(pin_dir, maps::COUNTERS)?;
    let mut packets = 0;
    for entry in counters.iter() {
        let (key, per_cpu) = entry.context("reading counters")?;
        if key.ifindex == lo && key.direction == direction as u8 && key.reason == Reason::V6N_REASON_PASS as u8 {
            packets += per_cpu.iter().map(|v| v.packets).sum::<u64>();
        }
    }
    Ok(packets)
}

#[cfg(test)]
mod tests {
    use etherparse::{Icmpv6Type, SlicedPacket, TransportSlice};

    use super::*;

    #[test]
    fn the_packet_is_an_echo_request_from_link_local_to_all_nodes_with_a_valid_checksum() {
        let packet = packet();
        let sliced = SlicedPacket::from_ethernet(&packet).expect("parses");
        let Some(etherparse::NetSlice::Ipv6(ip)) = &sliced.net else { panic!("not IPv6") };
        let (source, destination) = (ip.header().source_addr(), ip.header().destination_addr());
        assert!(source.is_unicast_link_local(), "{source}");
        assert_eq!(destination, Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1));
        let Some(TransportSlice::Icmpv6(icmp)) = &sliced.transport else { panic!("not ICMPv6") };
        assert!(matches!(icmp.icmp_type(), Icmpv6Type::EchoRequest(_)));
        let expected = icmp.icmp_type().calc_checksum(source.octets(), destination.octets(), icmp.payload()).expect("checksum");
        assert_eq!(icmp.checksum(), expected);
    }
}
