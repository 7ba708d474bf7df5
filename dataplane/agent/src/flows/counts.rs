// SPDX-License-Identifier: Apache-2.0
//! Flows by verdict, reason, protocol and direction since the agent
//! started, for the metrics endpoint: the process's one tally, as a metrics
//! registry is, bounded by the product of the few values of each label.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use v6node_abi::{Direction, EventKind, FlowEvent, Reason};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowLabels {
    pub verdict: &'static str,
    pub reason: &'static str,
    pub protocol: &'static str,
    pub direction: &'static str,
}

static FLOWS: Mutex<BTreeMap<FlowLabels, u64>> = Mutex::new(BTreeMap::new());
/// Flows clients following them missed for being too slow.
pub static LOST_TO_FOLLOWERS: AtomicU64 = AtomicU64::new(0);

pub fn labels(event: &FlowEvent) -> FlowLabels {
    let reason = Reason::from_u8(event.reason).unwrap_or(Reason::V6N_REASON_COUNT);
    let verdict = if event.kind == EventKind::V6N_EVENT_DROP as u8 {
        "dropped"
    } else if reason == Reason::V6N_REASON_POLICY_AUDIT {
        "audit"
    } else {
        "forwarded"
    };
    let protocol = match event.protocol {
        6 => "tcp",
        17 => "udp",
        132 => "sctp",
        58 => "icmpv6",
        1 => "icmpv4",
        _ => "other",
    };
    let direction = Direction::from_u8(event.direction).map_or("unknown", Direction::name);
    FlowLabels { verdict, reason: reason.name(), protocol, direction }
}

pub fn record(event: &FlowEvent) {
    *FLOWS.lock().unwrap_or_else(|e| e.into_inner()).entry(labels(event)).or_default() += 1;
}

pub fn lost_to_followers(missed: u64) {
    LOST_TO_FOLLOWERS.fetch_add(missed, Ordering::Relaxed);
}

pub fn snapshot() -> Vec<(FlowLabels, u64)> {
    FLOWS.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (*k, *v)).collect()
}
