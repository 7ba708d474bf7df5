// SPDX-License-Identifier: Apache-2.0
//! The bandwidth manager's departure times (bpf/lib/bandwidth.h) as the
//! kernel computes them through BPF_PROG_TEST_RUN, on the node of
//! `common::node`: a limited pod's packets leave pod A's program with
//! skb->tstamp set on the pod's schedule. A test run does not queue, so
//! "now" advances between packets by the run's own cost (microseconds):
//! tests that check the arithmetic give the pacer a backlog first, so that
//! each packet's departure is the one before it plus its cost, exactly.

mod common;

use std::net::Ipv6Addr;

use aya::maps::{HashMap, MapData};
use common::{
    node::{Node, HOST_A_MAC, POD_A, POD_A_MAC, POD_B, REMOTE, UPLINK_MAC},
    try_run_skb, Run, SkbIn, TC_ACT_REDIRECT, TC_ACT_SHOT,
};
use etherparse::PacketBuilder;
use v6node_abi::{maps, BandwidthValue, Direction, Pacer, Reason, ENDPOINT_NETKIT};

const SECOND_NS: u64 = 1_000_000_000;

fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * SECOND_NS + now.tv_nsec as u64
}

/// A TCP segment from pod A to `dst` whose frame is `frame_bytes` long.
fn frame(dst: Ipv6Addr, source_port: u16, frame_bytes: usize) -> Vec<u8> {
    let payload = vec![0u8; frame_bytes - 14 - 40 - 20];
    let builder =
        PacketBuilder::ethernet2(POD_A_MAC, HOST_A_MAC).ipv6(POD_A.octets(), dst.octets(), 64).tcp(source_port, 8080, 1, 65535);
    let mut packet = Vec::new();
    builder.write(&mut packet, &payload).unwrap();
    assert_eq!(packet.len(), frame_bytes);
    packet
}

/// The same from outside, arriving on the uplink for pod `dst`.
fn from_outside(dst: Ipv6Addr, frame_bytes: usize) -> Vec<u8> {
    let payload = vec![0u8; frame_bytes - 14 - 40 - 20];
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 1, 0xff], UPLINK_MAC)
        .ipv6(REMOTE.octets(), dst.octets(), 64)
        .tcp(443, 40000, 1, 65535);
    let mut packet = Vec::new();
    builder.write(&mut packet, &payload).unwrap();
    packet
}

fn bandwidth_map(node: &mut Node) -> HashMap<&mut MapData, u32, BandwidthValue> {
    HashMap::try_from(node.pod.map_mut(maps::BANDWIDTH).unwrap()).unwrap()
}

/// Gives pod A's host side an egress and ingress pacer, with `value`'s
/// clock and backlog.
fn limit(node: &mut Node, ifindex: u32, value: BandwidthValue) {
    bandwidth_map(node).insert(ifindex, value, 0).unwrap();
}

fn read(node: &mut Node, ifindex: u32) -> BandwidthValue {
    bandwidth_map(node).get(&ifindex, 0).unwrap()
}

/// A pacer at `bits` per second whose schedule is `backlog_ns` ahead of now.
/// Returns it with the time its backlog ends.
fn backlogged(bits: u64, backlog_ns: u64) -> (Pacer, u64) {
    let free_at = monotonic_ns() + backlog_ns;
    let mut pacer = Pacer::limiting(Some(bits));
    pacer.next_free_ps = free_at * 1000;
    (pacer, free_at)
}

/// Egress pacing at `bits`, a backlog of `backlog_ns` ahead of now.
fn egress_backlogged(bits: u64, backlog_ns: u64, horizon_ns: u64) -> (BandwidthValue, u64) {
    let (egress, free_at) = backlogged(bits, backlog_ns);
    (BandwidthValue { origin_ns: 0, horizon_ns, egress, ..BandwidthValue::default() }, free_at)
}

/// Ingress pacing at 100 Mbit/s, 10 ms of backlog: 121.12 µs per 1514-byte frame.
fn ingress_backlogged() -> BandwidthValue {
    let (ingress, _) = backlogged(100_000_000, 10_000_000);
    BandwidthValue { origin_ns: 0, horizon_ns: 2 * SECOND_NS, ingress, ..BandwidthValue::default() }
}

fn send(node: &Node, packet: &[u8], skb: SkbIn) -> Run {
    try_run_skb(&node.pod, "v6n_from_pod", packet, node.host_a, skb).expect("BPF_PROG_TEST_RUN")
}

#[test]
fn departures_follow_the_rate_from_one_kbit_to_one_hundred_gbit() {
    let mut node = Node::new("bw-rates", 0);
    let a = node.host_a;
    // (rate, frame size, packets): each run's backlog holds them all.
    for (bits, bytes, count) in [
        (1_000u64, 86usize, 20u64),
        (10_000_000, 1514, 100),
        (1_000_000_000, 1514, 200),
        (100_000_000_000, 86, 500),
        (100_000_000_000, 1514, 500),
    ] {
        let (value, first) = egress_backlogged(bits, 50_000_000, 60 * SECOND_NS);
        limit(&mut node, a, value);
        let packet = frame(REMOTE, 40000, bytes);
        let departures: Vec<u64> = (0..count)
            .map(|_| {
                let run = send(&node, &packet, SkbIn::default());
                assert_eq!(run.verdict, TC_ACT_REDIRECT, "{bits} bit/s");
                run.tstamp
            })
            .collect();
        // Each packet leaves when the one before it has had its time:
        // bytes * 8 / rate, to the nanosecond over the whole run.
        let expected_span = (count - 1) as f64 * bytes as f64 * 8.0 * 1e9 / bits as f64;
        let span = (departures[count as usize - 1] - departures[0]) as f64;
        assert!(
            (span - expected_span).abs() <= 1.0 + expected_span * 1e-4,
            "{bits} bit/s, {bytes} B: span {span} ns, expected {expected_span}"
        );
        assert!(departures.windows(2).all(|w| w[1] > w[0]), "{bits} bit/s: departures not increasing");
        assert!(departures[0].abs_diff(first) <= 1, "{bits} bit/s: the first waits for the backlog");
        let counted = read(&mut node, a).egress;
        assert_eq!((counted.packets, counted.bytes, counted.drops), (count, count * bytes as u64, 0));
    }
}

#[test]
fn a_pacer_idle_sends_at_once_then_paces_the_burst() {
    let mut node = Node::new("bw-idle", 0);
    let a = node.host_a;
    let horizon_ns = 2 * SECOND_NS;
    limit(
        &mut node,
        a,
        BandwidthValue { origin_ns: monotonic_ns(), horizon_ns, egress: Pacer::limiting(Some(10_000_000)), ..Default::default() },
    );
    let packet = frame(REMOTE, 40000, 1514);
    let before = monotonic_ns();
    let first = send(&node, &packet, SkbIn::default());
    let after = monotonic_ns();
    // Idle: no departure time, the packet goes now.
    assert_eq!((first.verdict, first.tstamp), (TC_ACT_REDIRECT, 0));
    // A realtime receive stamp on the packet is no departure time to keep.
    let second = send(&node, &packet, SkbIn { tstamp: 1_800_000_000 * SECOND_NS, ..SkbIn::default() });
    // 1514 B at 10 Mbit/s: 1,211,200 ns after the first.
    assert!(
        second.tstamp >= before + 1_211_200 && second.tstamp <= after + 1_211_200 + 1,
        "{} not 1.2112 ms after the first",
        second.tstamp
    );
}

#[test]
fn the_clock_wraps_without_a_jump() {
    let mut node = Node::new("bw-wrap", 0);
    let a = node.host_a;
    // The pacer's picosecond clock, (now - origin) * 1000 mod 2^64, is
    // 100 ms before its wrap, and the schedule's backlog crosses it. The
    // backlog outlasts a busy machine's delay before the first packet.
    let now = monotonic_ns();
    let origin_ns = now.wrapping_add(100_000_000);
    let mut egress = Pacer::limiting(Some(1_000_000_000));
    let now_ps = now.wrapping_sub(origin_ns).wrapping_mul(1000);
    // 99.97 ms of backlog: the schedule wraps 30 µs after it starts, after
    // the third packet (12.112 µs each).
    egress.next_free_ps = now_ps.wrapping_add(99_970_000_000);
    limit(&mut node, a, BandwidthValue { origin_ns, horizon_ns: SECOND_NS, egress, ..Default::default() });
    assert!(egress.next_free_ps > u64::MAX - 100_000_000, "the schedule starts just before the wrap");
    let packet = frame(REMOTE, 40000, 1514);
    let departures: Vec<u64> = (0..50).map(|_| send(&node, &packet, SkbIn::default()).tstamp).collect();
    assert!(read(&mut node, a).egress.next_free_ps < 1_000_000_000, "the schedule wrapped");
    for pair in departures.windows(2) {
        assert!((pair[1] - pair[0]).abs_diff(12_112) <= 1, "{pair:?}: not 12.112 µs apart across the wrap");
    }
}

#[test]
fn many_flows_of_one_pod_share_its_rate_and_other_pods_keep_theirs() {
    let mut node = Node::new("bw-flows", 0);
    let a = node.host_a;
    let (value, _) = egress_backlogged(100_000_000, 10_000_000, 2 * SECOND_NS);
    limit(&mut node, a, value);
    // 64 flows, interleaved: one schedule for the pod, whatever the flow.
    let mut departures = Vec::new();
    for round in 0..4 {
        for port in 0..64u16 {
            let run = send(&node, &frame(REMOTE, 40000 + port, 1514), SkbIn::default());
            assert_eq!(run.verdict, TC_ACT_REDIRECT, "round {round} port {port}");
            departures.push(run.tstamp);
        }
    }
    // 1514 B at 100 Mbit/s: 121.12 µs apart, one after another.
    for pair in departures.windows(2) {
        assert!((pair[1] - pair[0]).abs_diff(121_120) <= 1, "{pair:?}");
    }
    // Pod B has no limit: its packets get no departure time.
    let b = PacketBuilder::ethernet2(common::node::POD_B_MAC, common::node::HOST_B_MAC)
        .ipv6(POD_B.octets(), REMOTE.octets(), 64)
        .tcp(40000, 8080, 1, 65535);
    let mut packet = Vec::new();
    b.write(&mut packet, &[0u8; 1000]).unwrap();
    let run = try_run_skb(&node.pod, "v6n_from_pod", &packet, node.host_b, SkbIn::default()).unwrap();
    assert_eq!((run.verdict, run.tstamp), (TC_ACT_REDIRECT, 0));
}

#[test]
fn a_gso_packet_costs_every_segment_with_its_headers() {
    let mut node = Node::new("bw-gso", 0);
    let a = node.host_a;
    let (value, _) = egress_backlogged(1_000_000_000, 10_000_000, 2 * SECOND_NS);
    limit(&mut node, a, value);
    // One skb of 2 segments of 1428 bytes (a test run takes no bigger
    // packet): 2 frames of 1502 on the wire, the 74 bytes of headers
    // (Ethernet, IPv6, TCP) once in the skb and twice on the wire.
    let packet = frame(REMOTE, 40000, 14 + 40 + 20 + 2 * 1428);
    let gso = SkbIn { gso_segs: 2, gso_size: 1428, ..SkbIn::default() };
    let first = send(&node, &packet, gso).tstamp;
    let second = send(&node, &packet, gso).tstamp;
    // 2 * 1502 B at 1 Gbit/s: 24.032 µs (the skb's own length would say 23.44).
    assert!((second - first).abs_diff(24_032) <= 1, "{} ns", second - first);
    assert_eq!(read(&mut node, a).egress.bytes, 2 * 2 * 1502);
    // What a virtio device hands in whole (guest TSO) has a segment size and
    // no count yet: counted the same.
    let third = send(&node, &packet, SkbIn { gso_segs: 0, ..gso }).tstamp;
    assert!((third - second).abs_diff(24_032) <= 1, "{} ns without gso_segs", third - second);
    assert_eq!(read(&mut node, a).egress.bytes, 3 * 2 * 1502);
}

#[test]
fn beyond_the_horizon_is_dropped_and_counted_for_the_pod() {
    let mut node = Node::new("bw-horizon", 0);
    let a = node.host_a;
    // A 5 ms horizon at 10 Mbit/s: frames of 1514 B take 1.2112 ms each.
    limit(
        &mut node,
        a,
        BandwidthValue { origin_ns: 0, horizon_ns: 5_000_000, egress: Pacer::limiting(Some(10_000_000)), ..Default::default() },
    );
    let packet = frame(REMOTE, 40000, 1514);
    let verdicts: Vec<u32> = (0..10).map(|_| send(&node, &packet, SkbIn::default()).verdict).collect();
    // 1.2112 ms each: due at 0, 1.2, 2.4, 3.6, 4.8 ms fit a 5 ms horizon.
    assert_eq!(verdicts[..5], [TC_ACT_REDIRECT; 5]);
    assert_eq!(verdicts[5..], [TC_ACT_SHOT; 5]);
    let counted = read(&mut node, a).egress;
    assert_eq!((counted.packets, counted.drops), (5, 5));
    assert_eq!(node.counted(Direction::V6N_DIRECTION_FROM_POD, Reason::V6N_REASON_DROP_BANDWIDTH), 5);
}

#[test]
fn a_netkit_pod_limited_on_ingress_is_paced_and_queued_from_the_uplink() {
    let mut node = Node::new("bw-ingress-netkit", ENDPOINT_NETKIT as u8);
    let a = node.host_a;
    limit(&mut node, a, ingress_backlogged());
    let packet = from_outside(POD_A, 1514);
    let runs: Vec<Run> =
        (0..3).map(|_| try_run_skb(&node.host, "v6n_from_dev", &packet, node.uplink, SkbIn::default()).unwrap()).collect();
    assert!(runs.iter().all(|r| r.verdict == TC_ACT_REDIRECT));
    assert!((runs[1].tstamp - runs[0].tstamp).abs_diff(121_120) <= 1 && (runs[2].tstamp - runs[1].tstamp).abs_diff(121_120) <= 1);
    assert_eq!(read(&mut node, a).ingress.packets, 3);
    // Pod B is not limited: straight in, no departure time.
    let run = try_run_skb(&node.host, "v6n_from_dev", &from_outside(POD_B, 1514), node.uplink, SkbIn::default()).unwrap();
    assert_eq!((run.verdict, run.tstamp), (TC_ACT_REDIRECT, 0));
}

#[test]
fn a_veth_pod_limited_on_ingress_is_paced_before_its_queue() {
    let mut node = Node::new("bw-ingress-veth", 0);
    let a = node.host_a;
    limit(&mut node, a, ingress_backlogged());
    // What the stack (or a redirect to the device) sends pod A passes
    // v6n_to_pod at tc egress of its host side, before the qdisc.
    let packet = from_outside(POD_A, 1514);
    let runs: Vec<Run> =
        (0..2).map(|_| try_run_skb(&node.pod, "v6n_to_pod", &packet, node.host_a, SkbIn::default()).unwrap()).collect();
    assert!((runs[1].tstamp - runs[0].tstamp).abs_diff(121_120) <= 1, "{} {}", runs[0].tstamp, runs[1].tstamp);
    // The uplink hands it to the device's egress (and so to v6n_to_pod),
    // paced there, not here.
    let run = try_run_skb(&node.host, "v6n_from_dev", &packet, node.uplink, SkbIn::default()).unwrap();
    assert_eq!((run.verdict, run.tstamp), (TC_ACT_REDIRECT, 0));
    assert_eq!(read(&mut node, a).ingress.packets, 2);
}
