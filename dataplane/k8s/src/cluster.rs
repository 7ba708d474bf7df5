// SPDX-License-Identifier: Apache-2.0
//! The desired cluster view, from Nodes alone: this node's pod prefixes and,
//! for every other node, the prefixes to route to it and the address to
//! route them via. Pure, so it is tested without a cluster; what it refuses
//! it names in `problems` with the Node and the reason.

use std::net::Ipv6Addr;

use ipnet::{IpNet, Ipv6Net};
use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClusterView {
    /// This node's IPv6 pod prefixes (`spec.podCIDRs`); `None` until the API
    /// server has this node.
    pub local_prefixes: Option<Vec<Ipv6Net>>,
    /// This node's first IPv6 InternalIP, once the API server has it.
    pub local_address: Option<Ipv6Addr>,
    /// Every other node with an address and at least one prefix, by name.
    pub peers: Vec<Peer>,
    pub problems: Vec<NodeProblem>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Peer {
    pub name: String,
    /// Its first IPv6 InternalIP: what its pod prefixes are routed via.
    pub address: Ipv6Addr,
    pub pod_prefixes: Vec<Ipv6Net>,
}

/// A Node (or one of its fields) the view could not use, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProblem {
    pub node: String,
    pub reason: String,
}

/// One Node as far as routing cares.
struct Candidate<'a> {
    name: &'a str,
    local: bool,
    address: Option<Ipv6Addr>,
    prefixes: Vec<Ipv6Net>,
}

fn overlaps(a: &Ipv6Net, b: &Ipv6Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

impl ClusterView {
    /// `local` is this node's name. When two Nodes claim overlapping
    /// prefixes, this node keeps its own; among others the older Node
    /// (creation time, then name) keeps it and the other's is ignored, so a
    /// newcomer can never take routes away from a working node.
    pub fn from_nodes<'a>(local: &str, nodes: impl IntoIterator<Item = &'a Node>) -> Self {
        let mut view = ClusterView::default();
        let mut nodes: Vec<&Node> = nodes.into_iter().collect();
        nodes.sort_by(|a, b| {
            let key = |n: &Node| {
                (
                    n.metadata.name.as_deref() != Some(local),
                    n.metadata.creation_timestamp.clone().map(|t| t.0),
                    n.metadata.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        let candidates: Vec<Candidate> = nodes
            .into_iter()
            .filter_map(|node| {
                let name = node.metadata.name.as_deref()?;
                Some(view.candidate(name, name == local, node))
            })
            .collect();

        let mut claimed: Vec<(Ipv6Net, &str)> = Vec::new();
        for candidate in candidates {
            let mut accepted = Vec::new();
            for prefix in candidate.prefixes {
                if let Some((other, owner)) = claimed.iter().find(|(c, _)| overlaps(c, &prefix)) {
                    view.problem(candidate.name, format!("pod CIDR {prefix} overlaps {other} of node {owner}: ignored"));
                    continue;
                }
                claimed.push((prefix, candidate.name));
                accepted.push(prefix);
            }
            if candidate.local {
                view.local_prefixes = Some(accepted);
                view.local_address = candidate.address;
                continue;
            }
            match (candidate.address, accepted.is_empty()) {
                (_, true) => {}
                (None, false) => {
                    view.problem(candidate.name, "no IPv6 InternalIP in status.addresses: its pods cannot be routed to".into())
                }
                (Some(address), false) => {
                    view.peers.push(Peer { name: candidate.name.to_string(), address, pod_prefixes: accepted })
                }
            }
        }
        view.peers.sort_by(|a, b| a.name.cmp(&b.name));
        view.problems.sort_by(|a, b| a.node.cmp(&b.node));
        view
    }

    fn problem(&mut self, node: &str, reason: String) {
        self.problems.push(NodeProblem { node: node.to_string(), reason });
    }

    fn candidate<'a>(&mut self, name: &'a str, local: bool, node: &Node) -> Candidate<'a> {
        let spec = node.spec.as_ref();
        // podCIDRs supersedes podCIDR; a Node from an old writer has only the latter.
        let cidrs: Vec<&str> = match spec.and_then(|s| s.pod_cidrs.as_ref()) {
            Some(list) if !list.is_empty() => list.iter().map(String::as_str).collect(),
            _ => spec.and_then(|s| s.pod_cidr.as_deref()).into_iter().collect(),
        };
        let mut prefixes = Vec::new();
        let mut ipv4 = Vec::new();
        for cidr in &cidrs {
            match cidr.parse::<IpNet>() {
                Ok(IpNet::V6(net)) if net.trunc() == net => prefixes.push(net),
                Ok(IpNet::V6(net)) => {
                    self.problem(name, format!("pod CIDR {net} has host bits set (the network is {}): ignored", net.trunc()))
                }
                Ok(IpNet::V4(net)) => ipv4.push(net.to_string()),
                Err(e) => self.problem(name, format!("pod CIDR {cidr:?} is not a prefix ({e}): ignored")),
            }
        }
        if prefixes.is_empty() && !ipv4.is_empty() {
            self.problem(name, format!("only IPv4 pod CIDRs ({}): no IPv6 pods to route", ipv4.join(", ")));
        }
        let address = internal_ipv6(node).next();
        Candidate { name, local, address, prefixes }
    }
}

/// Whether the Node's kubelet says it is Ready.
fn is_ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The node that speaks for the cluster where one is enough (Events on
/// Services): the Ready Node whose name sorts first, or the first of all
/// while none is Ready. Every agent sees the same Nodes, so all agree.
pub fn reporter<'a>(nodes: impl Iterator<Item = &'a Node> + Clone) -> Option<&'a str> {
    let ready = nodes.clone().filter(|n| is_ready(n)).filter_map(|n| n.metadata.name.as_deref()).min();
    ready.or_else(|| nodes.filter_map(|n| n.metadata.name.as_deref()).min())
}

/// A Node's IPv6 InternalIPs, in the order its status lists them.
pub fn internal_ipv6(node: &Node) -> impl Iterator<Item = Ipv6Addr> + '_ {
    ipv6_of(node, |kind| kind == "InternalIP")
}

/// A Node's IPv6 addresses of every type (a ClusterNetworkPolicy's `nodes`
/// peer takes them all).
pub fn every_ipv6(node: &Node) -> impl Iterator<Item = Ipv6Addr> + '_ {
    ipv6_of(node, |_| true)
}

fn ipv6_of(node: &Node, wanted: fn(&str) -> bool) -> impl Iterator<Item = Ipv6Addr> + '_ {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(move |a| wanted(&a.type_))
        .filter_map(|a| a.address.parse::<Ipv6Addr>().ok())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::core::v1::{NodeAddress, NodeSpec, NodeStatus},
        apimachinery::pkg::apis::meta::v1::Time,
        jiff::Timestamp,
    };
    use kube::api::ObjectMeta;

    use super::*;

    #[test]
    fn the_first_ready_node_by_name_reports_for_the_cluster() {
        let ready = |name: &str, is_ready: bool| {
            let mut n = node(name, 0, &[], &[]);
            n.status.as_mut().unwrap().conditions = Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: if is_ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]);
            n
        };
        let nodes = [ready("node-b", true), ready("node-a", false), ready("node-c", true)];
        assert_eq!(reporter(nodes.iter()), Some("node-b"), "node-a is not Ready");
        let none_ready = [ready("node-b", false), ready("node-a", false)];
        assert_eq!(reporter(none_ready.iter()), Some("node-a"), "none Ready: the first of all");
        assert_eq!(reporter([].iter()), None);
    }

    fn node(name: &str, created: i64, cidrs: &[&str], addresses: &[&str]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec { pod_cidrs: Some(cidrs.iter().map(|c| c.to_string()).collect()), ..NodeSpec::default() }),
            status: Some(NodeStatus {
                addresses: Some(
                    addresses.iter().map(|a| NodeAddress { type_: "InternalIP".into(), address: a.to_string() }).collect(),
                ),
                ..NodeStatus::default()
            }),
        }
    }

    fn net(s: &str) -> Ipv6Net {
        s.parse().unwrap()
    }

    #[test]
    fn peers_are_routed_via_their_ipv6_internal_ip() {
        let nodes = [
            node("b", 2, &["10.244.1.0/24", "fd00:10:244:2::/64"], &["192.0.2.2", "fd00:9::2"]),
            node("a", 1, &["fd00:10:244:1::/64"], &["fd00:9::1"]),
            node("c", 3, &["fd00:10:244:3::/64"], &["fd00:9::3"]),
        ];
        let view = ClusterView::from_nodes("a", &nodes);
        assert_eq!(view.local_prefixes, Some(vec![net("fd00:10:244:1::/64")]));
        assert_eq!(view.local_address, Some("fd00:9::1".parse().unwrap()));
        assert_eq!(
            view.peers,
            vec![
                Peer { name: "b".into(), address: "fd00:9::2".parse().unwrap(), pod_prefixes: vec![net("fd00:10:244:2::/64")] },
                Peer { name: "c".into(), address: "fd00:9::3".parse().unwrap(), pod_prefixes: vec![net("fd00:10:244:3::/64")] },
            ]
        );
        assert!(view.problems.is_empty(), "{:?}", view.problems);
    }

    #[test]
    fn the_local_node_absent_means_no_prefix_yet() {
        let view = ClusterView::from_nodes("a", &[node("b", 1, &["fd00:1::/64"], &["fd00:9::2"])]);
        assert_eq!((view.local_prefixes, view.local_address), (None, None));
        assert_eq!(view.peers.len(), 1);
    }

    #[test]
    fn ipv4_only_and_malformed_cidrs_are_named() {
        let nodes = [
            node("a", 1, &["fd00:1::/64"], &["fd00:9::1"]),
            node("v4", 2, &["10.244.0.0/24"], &["192.0.2.9"]),
            node("bad", 3, &["fd00:2::/64x", "fd00:3::1/64"], &["fd00:9::3"]),
        ];
        let view = ClusterView::from_nodes("a", &nodes);
        assert!(view.peers.is_empty(), "{:?}", view.peers);
        let reasons: Vec<String> = view.problems.iter().map(|p| format!("{}: {}", p.node, p.reason)).collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].starts_with("bad: pod CIDR \"fd00:2::/64x\" is not a prefix"), "{reasons:?}");
        assert!(reasons[1].starts_with("bad: pod CIDR fd00:3::1/64 has host bits set"), "{reasons:?}");
        assert_eq!(reasons[2], "v4: only IPv4 pod CIDRs (10.244.0.0/24): no IPv6 pods to route");
    }

    #[test]
    fn overlaps_keep_the_local_node_then_the_older_one() {
        let nodes = [
            // Older than the local node, yet the local node's claim wins.
            node("old", 1, &["fd00:10:244::/56"], &["fd00:9::5"]),
            node("a", 2, &["fd00:10:244:1::/64"], &["fd00:9::1"]),
            node("b", 3, &["fd00:10:244:2::/64"], &["fd00:9::2"]),
            node("newer", 4, &["fd00:10:244:2::/64", "fd00:10:244:9::/64"], &["fd00:9::4"]),
        ];
        let view = ClusterView::from_nodes("a", &nodes);
        assert_eq!(view.local_prefixes, Some(vec![net("fd00:10:244:1::/64")]));
        let names: Vec<_> = view.peers.iter().map(|p| (p.name.as_str(), p.pod_prefixes.clone())).collect();
        assert_eq!(names, vec![("b", vec![net("fd00:10:244:2::/64")]), ("newer", vec![net("fd00:10:244:9::/64")])]);
        let reasons: Vec<String> = view.problems.iter().map(|p| format!("{}: {}", p.node, p.reason)).collect();
        assert_eq!(
            reasons,
            vec![
                "newer: pod CIDR fd00:10:244:2::/64 overlaps fd00:10:244:2::/64 of node b: ignored",
                "old: pod CIDR fd00:10:244::/56 overlaps fd00:10:244:1::/64 of node a: ignored",
            ]
        );
    }

    #[test]
    fn a_peer_without_an_ipv6_address_is_named() {
        let view = ClusterView::from_nodes("a", &[node("b", 1, &["fd00:2::/64"], &["192.0.2.2"])]);
        assert!(view.peers.is_empty());
        assert_eq!(view.problems[0].node, "b");
        assert!(view.problems[0].reason.starts_with("no IPv6 InternalIP"));
    }
}
