// SPDX-License-Identifier: Apache-2.0
//! A datapath event (abi.h, struct v6n_flow_event) as a Hubble flow, with
//! the names in force when it arrived.

use std::net::{IpAddr, Ipv6Addr};

use prost_types::Timestamp;
use v6node_abi::{Direction, EventKind, FlowEvent, Reason, EVENT_NAT46, EVENT_SERVICE, EVENT_XLAT};
use v6node_hubble::flow::{
    layer4::Protocol, CiliumEventType, DropReason, Flow, FlowType, IcmPv4, IcmPv6, Ip, IpVersion, Layer4, NetworkInterface, Sctp,
    Tcp, TcpFlags, TraceObservationPoint, TraceReason, TrafficDirection, Udp, Verdict,
};

use super::names::Names;

/// Cilium's monitor message types, which `hubble observe --type` filters on.
pub const EVENT_TYPE_DROP: i32 = 1;
pub const EVENT_TYPE_TRACE: i32 = 4;
pub const EVENT_TYPE_POLICY_VERDICT: i32 = 5;

/// The clock flows are stamped with: events carry CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Wall-clock nanoseconds at monotonic 0.
    offset_ns: i128,
}

impl Clock {
    pub fn now() -> Clock {
        let read = |id| {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime fills the timespec it is given.
            unsafe { libc::clock_gettime(id, &mut t) };
            i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
        };
        Clock { offset_ns: read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC) }
    }

    pub fn timestamp(&self, monotonic_ns: u64) -> Timestamp {
        let ns = self.offset_ns + i128::from(monotonic_ns);
        Timestamp { seconds: (ns / 1_000_000_000) as i64, nanos: (ns % 1_000_000_000) as i32 }
    }
}

/// Hubble's nearest drop reason for ours; the name of ours is in the flow's
/// summary either way.
fn drop_reason(reason: Reason) -> DropReason {
    match reason {
        Reason::V6N_REASON_DROP_POLICY_INGRESS | Reason::V6N_REASON_DROP_POLICY_EGRESS => DropReason::PolicyDenied,
        Reason::V6N_REASON_DROP_MALFORMED => DropReason::InvalidPacketDropped,
        Reason::V6N_REASON_DROP_SPOOFED => DropReason::InvalidSourceIp,
        Reason::V6N_REASON_DROP_NOT_IPV6 => DropReason::UnsupportedL3Protocol,
        // Cilium counts a VIP's unknown port (its DROP_NO_SERVICE) under the same code.
        Reason::V6N_REASON_DROP_NO_BACKEND | Reason::V6N_REASON_DROP_NO_FRONTEND => DropReason::ServiceBackendNotFound,
        Reason::V6N_REASON_DROP_HOP_LIMIT => DropReason::TtlExceeded,
        Reason::V6N_REASON_DROP_DENIED_SOURCE => DropReason::DeniedByLbSrcRangeCheck,
        Reason::V6N_REASON_DROP_POOL_EXHAUSTED | Reason::V6N_REASON_DROP_NAT_PORTS => DropReason::SnatNoMapFound,
        Reason::V6N_REASON_DROP_UNMAPPED
        | Reason::V6N_REASON_DROP_UNTRANSLATABLE
        | Reason::V6N_REASON_DROP_NO_BINDING
        | Reason::V6N_REASON_DROP_FILTERED
        | Reason::V6N_REASON_DROP_STATE_FULL => DropReason::Nat64,
        Reason::V6N_REASON_DROP_NAT46_CLASH
        | Reason::V6N_REASON_DROP_NAT46_NO_FLOW
        | Reason::V6N_REASON_DROP_NAT46_STATE_FULL => DropReason::Nat46,
        _ => DropReason::Unknown,
    }
}

fn address(bytes: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(bytes);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// A translated flow's source port is the one its client chose.
fn layer4(event: &FlowEvent) -> Option<Layer4> {
    let sport = if event.translated & EVENT_XLAT as u8 != 0 { event.xlat_sport } else { event.sport };
    let (sport, dport) = (u32::from(u16::from_be(sport)), u32::from(u16::from_be(event.dport)));
    let protocol = match event.protocol {
        6 => {
            let f = event.tcp_flags;
            let flags = TcpFlags {
                fin: f & 0x01 != 0,
                syn: f & 0x02 != 0,
                rst: f & 0x04 != 0,
                psh: f & 0x08 != 0,
                ack: f & 0x10 != 0,
                urg: f & 0x20 != 0,
                ece: f & 0x40 != 0,
                cwr: f & 0x80 != 0,
                ns: false,
            };
            Protocol::Tcp(Tcp { source_port: sport, destination_port: dport, flags: Some(flags) })
        }
        17 => Protocol::Udp(Udp { source_port: sport, destination_port: dport }),
        132 => Protocol::Sctp(Sctp { source_port: sport, destination_port: dport, ..Default::default() }),
        58 => Protocol::IcmPv6(IcmPv6 { r#type: event.icmp_type.into(), code: event.icmp_code.into() }),
        1 => Protocol::IcmPv4(IcmPv4 { r#type: event.icmp_type.into(), code: event.icmp_code.into() }),
        _ => return None,
    };
    Some(Layer4 { protocol: Some(protocol) })
}

/// Our reason's name, and a translation's two sides: a Service's frontend
/// and the backend chosen, a NAT64 binding's client and pool address.
fn summary(event: &FlowEvent, reason: Reason, translated: bool) -> String {
    let mut summary = reason.name().to_string();
    if reason == Reason::V6N_REASON_DROP_KERNEL {
        summary += &format!(": {}", super::kernel_drops::reason_name(event.kernel_reason));
    }
    if translated {
        let port = |p: u16| u16::from_be(p);
        let side = |addr: [u8; 16], p: u16| match address(addr) {
            IpAddr::V4(v4) => format!("{v4}:{}", port(p)),
            IpAddr::V6(v6) => format!("[{v6}]:{}", port(p)),
        };
        // A Service's, or a NAT46 gateway's frontend (IPv4, as it came).
        if event.translated & (EVENT_SERVICE | EVENT_NAT46) as u8 != 0 {
            summary +=
                &format!("; frontend {} to backend {}", side(event.xlat_daddr, event.xlat_dport), side(event.daddr, event.dport));
        } else {
            summary += &format!("; {} bound to {}", side(event.xlat_saddr, event.xlat_sport), side(event.saddr, event.sport));
        }
    }
    summary
}

/// The flow of `event`, seen on `node`; `device` names its ifindex.
pub fn flow(event: &FlowEvent, clock: &Clock, names: &Names, node: &str, mut device: impl FnMut(u32) -> Option<String>) -> Flow {
    let reason = Reason::from_u8(event.reason).unwrap_or(Reason::V6N_REASON_COUNT);
    let direction = Direction::from_u8(event.direction);
    // A translated flow is shown from its client, as it was before the
    // translation; the packet's own source is what it was translated to.
    let translated = event.translated & EVENT_XLAT as u8 != 0;
    let (source, destination) = (address(if translated { event.xlat_saddr } else { event.saddr }), address(event.daddr));
    let source_xlated = address(event.saddr);
    let dropped = event.kind == EventKind::V6N_EVENT_DROP as u8;
    let audited = reason == Reason::V6N_REASON_POLICY_AUDIT;
    let verdict = if dropped {
        Verdict::Dropped
    } else if audited {
        Verdict::Audit
    } else {
        Verdict::Forwarded
    };
    // A policy drop is the judged pod's direction, wherever it was dropped
    // (a pod's ingress is judged as the packet leaves a pod on this node).
    let direction = match reason {
        Reason::V6N_REASON_DROP_POLICY_INGRESS => Some(Direction::V6N_DIRECTION_TO_POD),
        Reason::V6N_REASON_DROP_POLICY_EGRESS => Some(Direction::V6N_DIRECTION_FROM_POD),
        _ => direction,
    };
    let (traffic_direction, observation) = match direction {
        Some(Direction::V6N_DIRECTION_FROM_POD) => (TrafficDirection::Egress, TraceObservationPoint::FromEndpoint),
        Some(Direction::V6N_DIRECTION_TO_POD) => (TrafficDirection::Ingress, TraceObservationPoint::ToEndpoint),
        Some(Direction::V6N_DIRECTION_INGRESS | Direction::V6N_DIRECTION_XLAT_4TO6 | Direction::V6N_DIRECTION_XDP) => {
            (TrafficDirection::Ingress, TraceObservationPoint::FromNetwork)
        }
        Some(Direction::V6N_DIRECTION_EGRESS | Direction::V6N_DIRECTION_XLAT_6TO4) => {
            (TrafficDirection::Egress, TraceObservationPoint::ToNetwork)
        }
        _ => (TrafficDirection::Unknown, TraceObservationPoint::UnknownPoint),
    };
    let endpoint = |addr: IpAddr| match addr {
        IpAddr::V6(v6) => names.endpoint(v6),
        IpAddr::V4(_) => None,
    };
    // Summary is deprecated in flow.proto, yet it is the one field of free
    // text, which `hubble observe` prints: our reason's own name goes there.
    #[allow(deprecated)]
    let mut flow = Flow {
        time: Some(clock.timestamp(event.time_ns)),
        verdict: verdict as i32,
        ip: Some(Ip {
            source: source.to_string(),
            source_xlated: if translated && source_xlated != source { source_xlated.to_string() } else { String::new() },
            destination: destination.to_string(),
            ip_version: if destination.is_ipv4() { IpVersion::IPv4 } else { IpVersion::IPv6 } as i32,
            ..Default::default()
        }),
        l4: layer4(event),
        source: endpoint(source),
        destination: endpoint(destination),
        r#type: FlowType::L3L4 as i32,
        node_name: node.to_string(),
        event_type: Some(CiliumEventType {
            r#type: if dropped {
                EVENT_TYPE_DROP
            } else if audited {
                EVENT_TYPE_POLICY_VERDICT
            } else {
                EVENT_TYPE_TRACE
            },
            sub_type: 0,
        }),
        traffic_direction: traffic_direction as i32,
        trace_observation_point: observation as i32,
        trace_reason: if dropped { TraceReason::Unknown } else { TraceReason::New } as i32,
        is_reply: Some(false),
        interface: (event.ifindex != 0)
            .then(|| NetworkInterface { index: event.ifindex, name: device(event.ifindex).unwrap_or_default() }),
        socket_cookie: event.cookie,
        summary: summary(event, reason, translated),
        ..Default::default()
    };
    if dropped {
        flow.drop_reason_desc = drop_reason(reason) as i32;
    }
    if event.translated & EVENT_SERVICE as u8 != 0 {
        flow.destination_service = names.service(event.frontend);
    }
    if event.policy_id != 0 {
        let policies = names.policies(event.policy_id);
        let ingress = traffic_direction == TrafficDirection::Ingress;
        match (dropped || audited, ingress) {
            (true, true) => flow.ingress_denied_by = policies,
            (true, false) => flow.egress_denied_by = policies,
            (false, true) => flow.ingress_allowed_by = policies,
            (false, false) => flow.egress_allowed_by = policies,
        }
    }
    flow
}

#[cfg(test)]
#[allow(deprecated)] // Flow::summary, as above
mod tests {
    use super::*;
    use crate::flows::names::PodName;
    use std::net::Ipv4Addr;

    const CLIENT: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 0, 0, 0, 0, 0xc);
    const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 0, 0, 0, 0, 0x5);

    fn names() -> Names {
        let mut names = Names::default();
        for (addr, name) in [(CLIENT, "client"), (SERVER, "server")] {
            let pod =
                PodName { namespace: "team-a".into(), name: name.into(), labels: vec![format!("app={name}")], node: "a".into() };
            names.pods.insert(addr, pod);
        }
        names.policies.insert(3, vec!["team-a/only-client".into()]);
        names.services.insert(9, "team-a/web".into());
        names
    }

    fn event(kind: EventKind, reason: Reason, direction: Direction) -> FlowEvent {
        FlowEvent {
            time_ns: 1_500_000_000,
            kind: kind as u8,
            reason: reason as u8,
            direction: direction as u8,
            protocol: 6,
            saddr: CLIENT.octets(),
            daddr: SERVER.octets(),
            sport: 40000u16.to_be(),
            dport: 8080u16.to_be(),
            tcp_flags: 0x02,
            ifindex: 7,
            ..Default::default()
        }
    }

    #[test]
    fn a_policy_drop_names_both_pods_and_the_policy() {
        let mut e = event(EventKind::V6N_EVENT_DROP, Reason::V6N_REASON_DROP_POLICY_INGRESS, Direction::V6N_DIRECTION_TO_POD);
        e.policy_id = 3;
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "node-a", |i| Some(format!("dev{i}")));
        assert_eq!(flow.verdict, Verdict::Dropped as i32);
        assert_eq!(flow.drop_reason_desc, DropReason::PolicyDenied as i32);
        assert_eq!(flow.traffic_direction, TrafficDirection::Ingress as i32);
        assert_eq!(flow.source.as_ref().unwrap().pod_name, "client");
        assert_eq!(flow.destination.as_ref().unwrap().pod_name, "server");
        assert_eq!(flow.ingress_denied_by.len(), 1);
        assert_eq!(flow.ingress_denied_by[0].name, "only-client");
        assert!(flow.egress_denied_by.is_empty());
        assert_eq!(flow.summary, "policy_denied_ingress");
        assert_eq!(flow.interface.as_ref().unwrap().name, "dev7");
        assert_eq!(flow.time, Some(Timestamp { seconds: 1, nanos: 500_000_000 }));
        let Some(Layer4 { protocol: Some(Protocol::Tcp(tcp)) }) = flow.l4 else { panic!("{:?}", flow.l4) };
        assert_eq!((tcp.source_port, tcp.destination_port, tcp.flags.unwrap().syn), (40000, 8080, true));
    }

    #[test]
    fn an_ingress_policy_drop_where_the_client_sent_it_is_the_servers_ingress() {
        let mut e = event(EventKind::V6N_EVENT_DROP, Reason::V6N_REASON_DROP_POLICY_INGRESS, Direction::V6N_DIRECTION_FROM_POD);
        e.policy_id = 3;
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "node-a", |_| None);
        assert_eq!(flow.traffic_direction, TrafficDirection::Ingress as i32);
        assert_eq!(flow.ingress_denied_by[0].name, "only-client");
        assert!(flow.egress_denied_by.is_empty());
    }

    #[test]
    fn a_nat46_flow_is_shown_from_its_ipv4_client_with_its_frontend_and_backend() {
        let mut e = event(EventKind::V6N_EVENT_FLOW, Reason::V6N_REASON_XLAT_FORWARDED, Direction::V6N_DIRECTION_XLAT_4TO6);
        e.translated = (EVENT_NAT46 | EVENT_XLAT) as u8;
        e.frontend = 9;
        e.xlat_saddr = Ipv4Addr::new(198, 51, 100, 7).to_ipv6_mapped().octets();
        e.xlat_sport = 40001u16.to_be();
        e.xlat_daddr = Ipv4Addr::new(192, 0, 2, 80).to_ipv6_mapped().octets();
        e.xlat_dport = 80u16.to_be();
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "gw", |_| None);
        let ip = flow.ip.as_ref().unwrap();
        assert_eq!((ip.source.as_str(), ip.destination.as_str()), ("198.51.100.7", "fd00:10::5"));
        #[allow(deprecated)]
        let summary = flow.summary.clone();
        assert_eq!(summary, "translated; frontend 192.0.2.80:80 to backend [fd00:10::5]:8080");
        // The frontend id is the gateway's, no Service's.
        assert_eq!(flow.destination_service, None);
    }

    #[test]
    fn a_kernel_drop_says_the_kernels_reason() {
        let mut e = event(EventKind::V6N_EVENT_DROP, Reason::V6N_REASON_DROP_KERNEL, Direction::V6N_DIRECTION_TO_POD);
        e.kernel_reason = 4242;
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "node-a", |_| None);
        assert_eq!(flow.verdict, Verdict::Dropped as i32);
        #[allow(deprecated)]
        let summary = flow.summary.clone();
        // Named from the running kernel's BTF once the program is loaded; by number before.
        assert_eq!(summary, "kernel_drop: reason 4242");
    }

    #[test]
    fn a_new_flow_to_a_service_names_the_service_and_what_allowed_it() {
        let mut e = event(EventKind::V6N_EVENT_FLOW, Reason::V6N_REASON_ROUTED, Direction::V6N_DIRECTION_FROM_POD);
        e.translated = EVENT_SERVICE as u8;
        e.frontend = 9;
        e.policy_id = 3;
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "node-a", |_| None);
        assert_eq!(flow.verdict, Verdict::Forwarded as i32);
        assert_eq!(flow.drop_reason_desc, 0);
        assert_eq!(flow.destination_service.as_ref().map(|s| (s.namespace.as_str(), s.name.as_str())), Some(("team-a", "web")));
        assert_eq!(flow.egress_allowed_by[0].name, "only-client");
        assert_eq!(flow.event_type.unwrap().r#type, EVENT_TYPE_TRACE);
    }

    #[test]
    fn a_nat64_binding_shows_its_client_and_the_pool_address_it_was_given() {
        let mut e = event(EventKind::V6N_EVENT_FLOW, Reason::V6N_REASON_XLAT_FORWARDED, Direction::V6N_DIRECTION_XLAT_6TO4);
        let pool = std::net::Ipv4Addr::new(192, 0, 2, 7);
        let server = std::net::Ipv4Addr::new(198, 51, 100, 1);
        e.translated = EVENT_XLAT as u8;
        e.xlat_saddr = CLIENT.octets();
        e.xlat_sport = 40000u16.to_be();
        e.xlat_daddr = server.to_ipv6_mapped().octets();
        e.saddr = pool.to_ipv6_mapped().octets();
        e.sport = 61001u16.to_be();
        e.daddr = server.to_ipv6_mapped().octets();
        e.dport = 80u16.to_be();
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "node-a", |_| None);
        let ip = flow.ip.as_ref().unwrap();
        assert_eq!(
            (ip.source.as_str(), ip.source_xlated.as_str(), ip.destination.as_str()),
            ("fd00:10::c", "192.0.2.7", "198.51.100.1")
        );
        assert_eq!(flow.source.as_ref().unwrap().pod_name, "client");
        assert_eq!(flow.summary, "translated; [fd00:10::c]:40000 bound to 192.0.2.7:61001");
        let Some(Layer4 { protocol: Some(Protocol::Tcp(tcp)) }) = flow.l4 else { panic!() };
        assert_eq!(tcp.source_port, 40000);
    }

    #[test]
    fn an_ipv4_mapped_address_is_ipv4() {
        let mut e = event(EventKind::V6N_EVENT_DROP, Reason::V6N_REASON_DROP_NOT_IPV6, Direction::V6N_DIRECTION_FROM_POD);
        e.saddr = std::net::Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped().octets();
        e.daddr = std::net::Ipv4Addr::new(192, 0, 2, 2).to_ipv6_mapped().octets();
        let flow = flow(&e, &Clock { offset_ns: 0 }, &names(), "node-a", |_| None);
        let ip = flow.ip.unwrap();
        assert_eq!((ip.source.as_str(), ip.ip_version), ("192.0.2.1", IpVersion::IPv4 as i32));
        assert!(flow.source.is_none());
    }
}
