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

use v6node_abi::{Direction, FlowEvent, Reason};
use v6node_hubble::flow::{layer4::Protocol, Flow, Verdict};

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
/// Flows the flow log missed: it fell behind, or its disk did.
pub static LOST_TO_LOG: AtomicU64 = AtomicU64::new(0);

/// The labels of `flow`, made of `event`: the verdict and transport as the
/// flow has them, our reason and direction as the event does.
pub fn labels(event: &FlowEvent, flow: &Flow) -> FlowLabels {
    let verdict = match Verdict::try_from(flow.verdict) {
        Ok(Verdict::Dropped) => "dropped",
        Ok(Verdict::Audit) => "audit",
        _ => "forwarded",
    };
    let protocol = match flow.l4.as_ref().and_then(|l| l.protocol.as_ref()) {
        Some(Protocol::Tcp(_)) => "tcp",
        Some(Protocol::Udp(_)) => "udp",
        Some(Protocol::Sctp(_)) => "sctp",
        Some(Protocol::IcmPv6(_)) => "icmpv6",
        Some(Protocol::IcmPv4(_)) => "icmpv4",
        _ => "other",
    };
    let reason = Reason::from_u8(event.reason).unwrap_or(Reason::V6N_REASON_COUNT);
    let direction = Direction::from_u8(event.direction).map_or("unknown", Direction::name);
    FlowLabels { verdict, reason: reason.name(), protocol, direction }
}

pub fn record(event: &FlowEvent, flow: &Flow) {
    *FLOWS.lock().unwrap_or_else(|e| e.into_inner()).entry(labels(event, flow)).or_default() += 1;
}

/// Events the agent could not read as a flow event (of a size it does not know).
pub static UNREADABLE: AtomicU64 = AtomicU64::new(0);

pub fn lost_to_followers(missed: u64) {
    LOST_TO_FOLLOWERS.fetch_add(missed, Ordering::Relaxed);
}

pub fn snapshot() -> Vec<(FlowLabels, u64)> {
    FLOWS.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (*k, *v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use v6node_hubble::flow::{Layer4, Udp};

    #[test]
    fn the_labels_are_the_flows_verdict_and_transport_and_the_events_reason_and_place() {
        let event = FlowEvent {
            reason: Reason::V6N_REASON_DROP_POLICY_INGRESS as u8,
            direction: Direction::V6N_DIRECTION_FROM_POD as u8,
            ..Default::default()
        };
        let flow = Flow {
            verdict: Verdict::Dropped as i32,
            l4: Some(Layer4 { protocol: Some(Protocol::Udp(Udp { source_port: 1, destination_port: 53 })) }),
            ..Default::default()
        };
        let labels = labels(&event, &flow);
        assert_eq!(
            (labels.verdict, labels.reason, labels.protocol, labels.direction),
            ("dropped", "policy_denied_ingress", "udp", "from_pod")
        );
        let audited = Flow { verdict: Verdict::Audit as i32, ..Default::default() };
        assert_eq!((labels_of(&audited).verdict, labels_of(&audited).protocol), ("audit", "other"));
    }

    fn labels_of(flow: &Flow) -> FlowLabels {
        labels(&FlowEvent::default(), flow)
    }
}
