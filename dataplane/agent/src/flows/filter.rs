// SPDX-License-Identifier: Apache-2.0
//! Hubble's flow filters as the `hubble` CLI sends them: a flow passes a
//! filter when every field the filter sets matches (a field matches when
//! any of its values does); it is sent when it passes any allow-list filter
//! (or there are none) and no deny-list filter. A field this agent cannot
//! judge is refused with its name rather than ignored, so that no client
//! takes an unfiltered answer for a filtered one.

use std::net::IpAddr;

use ipnet::IpNet;
use v6node_hubble::flow::{layer4::Protocol, Endpoint, Flow, FlowFilter, Service};

/// One FlowFilter, checked.
#[derive(Debug)]
pub struct Filter {
    source_ip: Vec<IpNet>,
    destination_ip: Vec<IpNet>,
    source_pod: Vec<(String, String)>,
    destination_pod: Vec<(String, String)>,
    source_service: Vec<(String, String)>,
    destination_service: Vec<(String, String)>,
    verdict: Vec<i32>,
    drop_reason: Vec<i32>,
    traffic_direction: Vec<i32>,
    event_type: Vec<(i32, Option<i32>)>,
    protocol: Vec<String>,
    source_port: Vec<u32>,
    destination_port: Vec<u32>,
    reply: Vec<bool>,
    node_name: Vec<String>,
    ip_version: Vec<i32>,
}

/// "namespace/name-prefix"; a name alone is in "default", as Hubble reads it.
fn namespaced(field: &str, value: &str) -> Result<(String, String), String> {
    if value.is_empty() {
        return Err(format!("{field}: a name must not be empty"));
    }
    Ok(match value.split_once('/') {
        Some((namespace, prefix)) => (namespace.to_string(), prefix.to_string()),
        None => ("default".to_string(), value.to_string()),
    })
}

fn networks(field: &str, values: &[String]) -> Result<Vec<IpNet>, String> {
    values
        .iter()
        .map(|v| {
            v.parse::<IpNet>()
                .or_else(|_| v.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{field}: {v:?} is neither an address nor a CIDR"))
        })
        .collect()
}

fn ports(field: &str, values: &[String]) -> Result<Vec<u32>, String> {
    values.iter().map(|v| v.parse::<u16>().map(u32::from).map_err(|_| format!("{field}: {v:?} is not a port"))).collect()
}

impl Filter {
    pub fn new(f: &FlowFilter) -> Result<Filter, String> {
        let unsupported = [
            ("uuid", !f.uuid.is_empty()),
            ("source_ip_xlated", !f.source_ip_xlated.is_empty()),
            ("source_fqdn", !f.source_fqdn.is_empty()),
            ("destination_fqdn", !f.destination_fqdn.is_empty()),
            ("source_label", !f.source_label.is_empty()),
            ("destination_label", !f.destination_label.is_empty()),
            ("source_workload", !f.source_workload.is_empty()),
            ("destination_workload", !f.destination_workload.is_empty()),
            ("source_cluster_name", !f.source_cluster_name.is_empty()),
            ("destination_cluster_name", !f.destination_cluster_name.is_empty()),
            ("interface", !f.interface.is_empty()),
            ("http_status_code", !f.http_status_code.is_empty()),
            ("dns_query", !f.dns_query.is_empty()),
            ("source_identity", !f.source_identity.is_empty()),
            ("destination_identity", !f.destination_identity.is_empty()),
            ("http_method", !f.http_method.is_empty()),
            ("http_path", !f.http_path.is_empty()),
            ("http_url", !f.http_url.is_empty()),
            ("http_header", !f.http_header.is_empty()),
            ("tcp_flags", !f.tcp_flags.is_empty()),
            ("node_labels", !f.node_labels.is_empty()),
            ("trace_id", !f.trace_id.is_empty()),
            ("ip_trace_id", !f.ip_trace_id.is_empty()),
            ("encrypted", !f.encrypted.is_empty()),
            ("experimental.cel_expression", f.experimental.as_ref().is_some_and(|e| !e.cel_expression.is_empty())),
        ];
        if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
            return Err(format!("the filter field {field} is not supported by v6node"));
        }
        let names = |field: &str, values: &[String]| values.iter().map(|v| namespaced(field, v)).collect::<Result<Vec<_>, _>>();
        let protocol = f
            .protocol
            .iter()
            .map(|p| {
                let p = p.to_lowercase();
                match p.as_str() {
                    "tcp" | "udp" | "sctp" | "icmp" | "icmpv4" | "icmpv6" => Ok(p),
                    _ => Err(format!("protocol: unknown protocol {p:?}")),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Filter {
            source_ip: networks("source_ip", &f.source_ip)?,
            destination_ip: networks("destination_ip", &f.destination_ip)?,
            source_pod: names("source_pod", &f.source_pod)?,
            destination_pod: names("destination_pod", &f.destination_pod)?,
            source_service: names("source_service", &f.source_service)?,
            destination_service: names("destination_service", &f.destination_service)?,
            verdict: f.verdict.clone(),
            drop_reason: f.drop_reason_desc.clone(),
            traffic_direction: f.traffic_direction.clone(),
            event_type: f.event_type.iter().map(|e| (e.r#type, e.match_sub_type.then_some(e.sub_type))).collect(),
            protocol,
            source_port: ports("source_port", &f.source_port)?,
            destination_port: ports("destination_port", &f.destination_port)?,
            reply: f.reply.clone(),
            node_name: f.node_name.clone(),
            ip_version: f.ip_version.clone(),
        })
    }

    pub fn matches(&self, flow: &Flow) -> bool {
        fn any<T>(values: &[T], test: impl Fn(&T) -> bool) -> bool {
            values.is_empty() || values.iter().any(test)
        }
        let ip = flow.ip.as_ref();
        let address = |s: Option<&String>| s.and_then(|s| s.parse::<IpAddr>().ok());
        let (source, destination) = (address(ip.map(|i| &i.source)), address(ip.map(|i| &i.destination)));
        let pod = |endpoint: Option<&Endpoint>, (namespace, prefix): &(String, String)| {
            endpoint
                .is_some_and(|e| !e.pod_name.is_empty() && e.namespace == *namespace && e.pod_name.starts_with(prefix.as_str()))
        };
        let service = |s: Option<&Service>, (namespace, prefix): &(String, String)| {
            s.is_some_and(|s| s.namespace == *namespace && s.name.starts_with(prefix.as_str()))
        };
        let (source_port, destination_port) = match flow.l4.as_ref().and_then(|l| l.protocol.as_ref()) {
            Some(Protocol::Tcp(t)) => (Some(t.source_port), Some(t.destination_port)),
            Some(Protocol::Udp(u)) => (Some(u.source_port), Some(u.destination_port)),
            Some(Protocol::Sctp(s)) => (Some(s.source_port), Some(s.destination_port)),
            _ => (None, None),
        };
        let protocol = |p: &String| {
            matches!(
                (p.as_str(), flow.l4.as_ref().and_then(|l| l.protocol.as_ref())),
                ("tcp", Some(Protocol::Tcp(_)))
                    | ("udp", Some(Protocol::Udp(_)))
                    | ("sctp", Some(Protocol::Sctp(_)))
                    | ("icmp", Some(Protocol::IcmPv4(_) | Protocol::IcmPv6(_)))
                    | ("icmpv4", Some(Protocol::IcmPv4(_)))
                    | ("icmpv6", Some(Protocol::IcmPv6(_)))
            )
        };
        let event_type = flow.event_type.as_ref().map(|e| (e.r#type, e.sub_type));
        any(&self.source_ip, |n| source.is_some_and(|a| n.contains(&a)))
            && any(&self.destination_ip, |n| destination.is_some_and(|a| n.contains(&a)))
            && any(&self.source_pod, |p| pod(flow.source.as_ref(), p))
            && any(&self.destination_pod, |p| pod(flow.destination.as_ref(), p))
            && any(&self.source_service, |s| service(flow.source_service.as_ref(), s))
            && any(&self.destination_service, |s| service(flow.destination_service.as_ref(), s))
            && any(&self.verdict, |v| *v == flow.verdict)
            && any(&self.drop_reason, |r| *r == flow.drop_reason_desc)
            && any(&self.traffic_direction, |d| *d == flow.traffic_direction)
            && any(&self.event_type, |(t, sub)| event_type.is_some_and(|(et, es)| et == *t && sub.is_none_or(|s| s == es)))
            && any(&self.protocol, protocol)
            && any(&self.source_port, |p| source_port == Some(*p))
            && any(&self.destination_port, |p| destination_port == Some(*p))
            && any(&self.reply, |r| flow.is_reply == Some(*r))
            && any(&self.node_name, |n| glob(n, &flow.node_name))
            && any(&self.ip_version, |v| ip.is_some_and(|i| i.ip_version == *v))
    }
}

/// Hubble's node name patterns: `*` for any run of characters.
fn glob(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head) && (0..=name.len() - head.len()).any(|i| glob(tail, &name[head.len() + i..]))
        }
    }
}

/// A request's allow and deny lists.
#[derive(Debug)]
pub struct Filters {
    allow: Vec<Filter>,
    deny: Vec<Filter>,
}

impl Filters {
    pub fn new(allow: &[FlowFilter], deny: &[FlowFilter]) -> Result<Filters, String> {
        let compile = |list: &[FlowFilter]| list.iter().map(Filter::new).collect::<Result<Vec<_>, _>>();
        Ok(Filters { allow: compile(allow)?, deny: compile(deny)? })
    }

    pub fn pass(&self, flow: &Flow) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|f| f.matches(flow))) && !self.deny.iter().any(|f| f.matches(flow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use v6node_hubble::flow::{Ip, Layer4, Tcp, Verdict};

    fn flow(source_pod: &str, verdict: Verdict) -> Flow {
        Flow {
            verdict: verdict as i32,
            ip: Some(Ip { source: "fd00:10::c".into(), destination: "fd00:10::5".into(), ..Default::default() }),
            l4: Some(Layer4 { protocol: Some(Protocol::Tcp(Tcp { source_port: 40000, destination_port: 8080, flags: None })) }),
            source: Some(Endpoint { namespace: "team-a".into(), pod_name: source_pod.into(), ..Default::default() }),
            node_name: "node-a".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_clis_pod_and_verdict_filters() {
        // `hubble observe --pod team-a/client --verdict DROPPED`: one filter per side.
        let allow = [
            FlowFilter { source_pod: vec!["team-a/client".into()], verdict: vec![Verdict::Dropped as i32], ..Default::default() },
            FlowFilter {
                destination_pod: vec!["team-a/client".into()],
                verdict: vec![Verdict::Dropped as i32],
                ..Default::default()
            },
        ];
        let filters = Filters::new(&allow, &[]).unwrap();
        assert!(filters.pass(&flow("client-7d9f", Verdict::Dropped)));
        assert!(!filters.pass(&flow("client-7d9f", Verdict::Forwarded)));
        assert!(!filters.pass(&flow("server", Verdict::Dropped)));
        // A pod name alone is in namespace default.
        let default = Filters::new(&[FlowFilter { source_pod: vec!["client".into()], ..Default::default() }], &[]).unwrap();
        assert!(!default.pass(&flow("client", Verdict::Dropped)));
    }

    #[test]
    fn addresses_ports_protocols_and_deny_lists() {
        let f = |filter: FlowFilter| Filters::new(&[filter], &[]).unwrap().pass(&flow("client", Verdict::Forwarded));
        assert!(f(FlowFilter { source_ip: vec!["fd00:10::/64".into()], ..Default::default() }));
        assert!(!f(FlowFilter { destination_ip: vec!["fd00:10::6".into()], ..Default::default() }));
        assert!(f(FlowFilter { protocol: vec!["TCP".into()], destination_port: vec!["8080".into()], ..Default::default() }));
        assert!(!f(FlowFilter { protocol: vec!["udp".into()], ..Default::default() }));
        assert!(f(FlowFilter { node_name: vec!["node-*".into()], ..Default::default() }));
        let deny = Filters::new(&[], &[FlowFilter { source_pod: vec!["team-a/".into()], ..Default::default() }]).unwrap();
        assert!(!deny.pass(&flow("client", Verdict::Forwarded)));
    }

    #[test]
    fn malformed_and_unsupported_filters_are_refused_by_name() {
        let error = |filter: FlowFilter| Filters::new(&[filter], &[]).unwrap_err();
        assert_eq!(
            error(FlowFilter { source_ip: vec!["nope".into()], ..Default::default() }),
            "source_ip: \"nope\" is neither an address nor a CIDR"
        );
        assert_eq!(
            error(FlowFilter { protocol: vec!["http".into()], ..Default::default() }),
            "protocol: unknown protocol \"http\""
        );
        assert_eq!(
            error(FlowFilter { source_port: vec!["70000".into()], ..Default::default() }),
            "source_port: \"70000\" is not a port"
        );
        assert_eq!(
            error(FlowFilter { http_path: vec!["/".into()], ..Default::default() }),
            "the filter field http_path is not supported by v6node"
        );
        assert_eq!(
            error(FlowFilter { source_pod: vec!["".into()], ..Default::default() }),
            "source_pod: a name must not be empty"
        );
    }

    #[test]
    fn node_name_patterns() {
        assert!(glob("node-*", "node-a"));
        assert!(glob("*-a", "node-a"));
        assert!(!glob("node-b", "node-a"));
        assert!(glob("*", ""));
    }
}
