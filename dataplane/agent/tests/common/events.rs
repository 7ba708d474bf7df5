// SPDX-License-Identifier: Apache-2.0
//! Fixtures for the flow event tests: events turned on as the agent turns
//! them on, the ring read as the agent reads it, and the counters kept.

use aya::{
    maps::{Array, MapData, PerCpuArray, RingBuf},
    Ebpf,
};
use v6node_abi::{maps, EventConfig, EventKind, EventStats, FlowEvent, Reason};

pub fn set_events(ebpf: &mut Ebpf, enabled: bool, per_second: u32, burst: u32) {
    let mut config: Array<&mut MapData, EventConfig> = Array::try_from(ebpf.map_mut(maps::EVENT_CONFIG).unwrap()).unwrap();
    config.set(0, EventConfig { enabled: enabled.into(), per_second, burst }, 0).unwrap();
}

/// Every event in the ring now, oldest first.
pub fn events(ebpf: &mut Ebpf) -> Vec<FlowEvent> {
    let mut ring = RingBuf::try_from(ebpf.map_mut(maps::EVENTS).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(item) = ring.next() {
        assert_eq!(item.len(), std::mem::size_of::<FlowEvent>(), "an event of the size abi.h gives it");
        // SAFETY: a FlowEvent's bytes, size checked.
        out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<FlowEvent>()) });
    }
    out
}

pub fn stats(ebpf: &Ebpf, reason: Reason) -> EventStats {
    let map: PerCpuArray<&MapData, EventStats> = PerCpuArray::try_from(ebpf.map(maps::EVENT_STATS).unwrap()).unwrap();
    map.get(&(reason as u32), 0).unwrap().iter().fold(EventStats::default(), |a, s| EventStats {
        sent: a.sent + s.sent,
        rate_limited: a.rate_limited + s.rate_limited,
        ring_full: a.ring_full + s.ring_full,
    })
}

pub fn kind(event: &FlowEvent) -> EventKind {
    if event.kind == EventKind::V6N_EVENT_DROP as u8 {
        EventKind::V6N_EVENT_DROP
    } else {
        EventKind::V6N_EVENT_FLOW
    }
}
