// SPDX-License-Identifier: Apache-2.0
//! ClusterNetworkPolicy (sigs.k8s.io/network-policy-api v0.3.0,
//! policy.networking.k8s.io/v1beta1; v1alpha2 has the same schema and the
//! API server serves its objects as v1beta1 too): the Admin tier, consulted
//! before NetworkPolicies, and the Baseline tier, consulted for pods no
//! NetworkPolicy selects. In a tier, policies go by priority (lower first;
//! equal priorities by name, which the API leaves to the implementation),
//! then each policy's rules in the order written; the first rule that
//! matches decides: Accept, Deny, or Pass (on to the next tier).
//!
//! As the API defines them: subjects and pod peers are never host-network
//! pods; a `nodes` peer is the IPv6 addresses in the selected Nodes'
//! status.addresses; a `networks` peer is a CIDR, IPv4 through the cluster's
//! NAT64 prefix as for a NetworkPolicy's ipBlock. A peer or protocol with no
//! field v6node knows (a newer CRD) fails closed: an Accept rule then matches
//! nothing, a Deny or Pass rule denies everything. `domainNames` would need
//! the pods' DNS answers, which v6node does not follow: such a peer matches
//! nothing (the API allows it in Accept rules only), with a problem named.

use std::{borrow::Cow, collections::BTreeMap};

use k8s_openapi::{
    api::core::v1::Node,
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use serde::{Deserialize, Serialize};

use super::{
    dedup, host_block, selects, Action, Block, CompiledRule, Compiler, PeerPod, Peers, PortEntry, PortRange, Ports, Rule,
    TierRule, PROTOCOL_SCTP, PROTOCOL_TCP, PROTOCOL_UDP,
};

/// The API group and the version v6node reads.
pub const GROUP: &str = "policy.networking.k8s.io";
pub const VERSION: &str = "v1beta1";

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ClusterNetworkPolicy {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<Spec>,
}

impl kube::Resource for ClusterNetworkPolicy {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ClusterNetworkPolicy".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "clusternetworkpolicies".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub tier: String,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub subject: PodsOrNamespaces,
    #[serde(default)]
    pub ingress: Vec<PolicyRule>,
    #[serde(default)]
    pub egress: Vec<PolicyRule>,
}

/// A subject, or an ingress peer: exactly one field.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodsOrNamespaces {
    pub namespaces: Option<LabelSelector>,
    pub pods: Option<NamespacedPod>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedPod {
    #[serde(default)]
    pub namespace_selector: LabelSelector,
    #[serde(default)]
    pub pod_selector: LabelSelector,
}

/// An ingress rule (`from`) or an egress rule (`to`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub name: Option<String>,
    pub action: String,
    #[serde(default, alias = "to")]
    pub from: Vec<PolicyPeer>,
    #[serde(default)]
    pub protocols: Option<Vec<Protocol>>,
}

/// A peer: exactly one field (`nodes`, `networks` and `domainNames` only
/// on egress).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPeer {
    pub namespaces: Option<LabelSelector>,
    pub pods: Option<NamespacedPod>,
    pub nodes: Option<LabelSelector>,
    pub networks: Option<Vec<String>>,
    pub domain_names: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub tcp: Option<ProtocolPort>,
    pub udp: Option<ProtocolPort>,
    pub sctp: Option<ProtocolPort>,
    pub destination_named_port: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolPort {
    pub destination_port: Option<Port>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Port {
    pub number: Option<i32>,
    pub range: Option<PortSpan>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PortSpan {
    pub start: i32,
    pub end: i32,
}

/// Which tier a policy is in, from its spec (`None`: refused).
pub(super) fn tier(spec: &Spec) -> Option<super::Tier> {
    match spec.tier.as_str() {
        "Admin" => Some(super::Tier::Admin),
        "Baseline" => Some(super::Tier::Baseline),
        _ => None,
    }
}

/// One ClusterNetworkPolicy's direction for its subjects: the rules in
/// order, each either ready for every subject, or waiting for the subject
/// whose named ports it uses.
pub(super) enum Compiled {
    /// The same for every subject (egress, and ingress without named ports).
    Ready(Vec<TierRule>),
    /// Ingress with named ports: resolved per subject.
    PerSubject(Vec<(Action, Option<CompiledRule>)>),
}

impl Compiled {
    pub(super) fn for_subject(&self, subject: &PeerPod) -> Vec<TierRule> {
        match self {
            Compiled::Ready(rules) => rules.clone(),
            Compiled::PerSubject(rules) => rules
                .iter()
                .map(|(action, rule)| match rule {
                    Some(rule) => TierRule { action: *action, rule: rule.for_subject(subject) },
                    None => deny_everything(),
                })
                .collect(),
        }
    }
}

fn deny_everything() -> TierRule {
    TierRule { action: Action::Deny, rule: Rule { peers: Peers::Any, ports: Ports::Any } }
}

impl Compiler<'_, '_> {
    /// This node's pods the policy's subject selects.
    pub(super) fn cluster_subjects(&mut self, subject: &PodsOrNamespaces) -> Vec<usize> {
        match self.pods_or_namespaces(subject, "spec.subject") {
            Some(pods) => pods.into_iter().filter(|&i| self.cluster[i].local).collect(),
            None => {
                self.problem("spec.subject: neither namespaces nor pods; the policy selects no pod".into());
                Vec::new()
            }
        }
    }

    /// The cluster's pods a subject or a pod peer picks; None when it has
    /// no field v6node knows.
    fn pods_or_namespaces(&mut self, what: &PodsOrNamespaces, place: &str) -> Option<Vec<usize>> {
        if let Some(namespaces) = &what.namespaces {
            return Some(self.in_namespaces(namespaces, None, place));
        }
        let pods = what.pods.as_ref()?;
        Some(self.in_namespaces(&pods.namespace_selector, Some(&pods.pod_selector), place))
    }

    fn in_namespaces(&mut self, namespaces: &LabelSelector, pods: Option<&LabelSelector>, place: &str) -> Vec<usize> {
        if !self.usable(namespaces, place) || pods.is_some_and(|p| !self.usable(p, place)) {
            return Vec::new();
        }
        (0..self.cluster.len())
            .filter(|&i| {
                let pod = &self.cluster[i];
                selects(namespaces, self.namespace_labels.get(pod.namespace))
                    && pods.is_none_or(|selector| selects(selector, pod.labels()))
            })
            .collect()
    }

    /// A policy's rules of one direction (`side`: "ingress" or "egress").
    pub(super) fn cluster_rules(&mut self, rules: &[PolicyRule], side: &str, nodes: &[&Node]) -> Compiled {
        let mut compiled = Vec::new();
        let mut named_ports = false;
        for (i, rule) in rules.iter().enumerate() {
            let place = match &rule.name {
                Some(name) => format!("spec.{side}[{i}] ({name})"),
                None => format!("spec.{side}[{i}]"),
            };
            let action = match rule.action.as_str() {
                "Accept" => Action::Accept,
                "Deny" => Action::Deny,
                "Pass" => Action::Pass,
                other => {
                    self.problem(format!("{place}: action {other:?} is not Accept, Deny or Pass; the rule denies everything"));
                    compiled.push((Action::Deny, None));
                    continue;
                }
            };
            match self.cluster_rule(rule, &place, nodes) {
                Some(rule) => {
                    named_ports |= rule.ports.iter().flatten().any(|p| matches!(p, PortEntry::Named { .. }));
                    compiled.push((action, Some(rule)));
                }
                // Fails closed: an Accept that matches nothing, or a Deny of everything.
                None if action == Action::Accept => compiled
                    .push((action, Some(CompiledRule { peers: Peers::Blocks(Vec::new()), pods: Vec::new(), ports: None }))),
                None => compiled.push((action, None)),
            }
        }
        if side == "ingress" && named_ports {
            return Compiled::PerSubject(compiled);
        }
        let mut ready = Vec::new();
        for (action, rule) in compiled {
            match rule {
                None => ready.push(deny_everything()),
                Some(rule) => ready.extend(rule.by_destination(self.cluster).into_iter().map(|rule| TierRule { action, rule })),
            }
        }
        Compiled::Ready(ready)
    }

    /// A rule's peers and protocols; None when a peer or a protocol has no
    /// field v6node knows (the rule then fails closed).
    fn cluster_rule(&mut self, rule: &PolicyRule, place: &str, nodes: &[&Node]) -> Option<CompiledRule> {
        let mut blocks = Vec::new();
        let mut pods = Vec::new();
        for (i, peer) in rule.from.iter().enumerate() {
            let place = format!("{place}.peers[{i}]");
            if let Some(selector) = &peer.nodes {
                if self.usable(selector, &place) {
                    for node in nodes.iter().filter(|n| selects(selector, n.metadata.labels.as_ref())) {
                        blocks.extend(crate::cluster::every_ipv6(node).map(host_block));
                    }
                }
            } else if let Some(networks) = &peer.networks {
                for cidr in networks {
                    let what = format!("{place}: network {cidr}");
                    match self.prefix(cidr, &what) {
                        Ok(net) => blocks.push(Block { net, except: Vec::new() }),
                        Err(why) => self.problem(format!("{what}: {why}; it matches nothing")),
                    }
                }
            } else if peer.domain_names.is_some() {
                self.problem(format!(
                    "{place}: domainNames are not supported (v6node does not follow the pods' DNS answers); the peer matches nothing"
                ));
            } else {
                let selected = PodsOrNamespaces { namespaces: peer.namespaces.clone(), pods: peer.pods.clone() };
                let Some(selected) = self.pods_or_namespaces(&selected, &place) else {
                    self.problem(format!("{place}: no peer field v6node knows; the rule fails closed"));
                    return None;
                };
                for index in selected {
                    blocks.extend(self.cluster[index].addresses.iter().copied().map(host_block));
                    pods.push(index);
                }
            }
        }
        if rule.from.is_empty() {
            self.problem(format!("{place}: no peers; the rule matches nothing"));
        }
        let ports = match &rule.protocols {
            None => None,
            Some(protocols) => {
                let mut entries = Vec::new();
                for (i, protocol) in protocols.iter().enumerate() {
                    let place = format!("{place}.protocols[{i}]");
                    entries.extend(self.cluster_protocol(protocol, &place)?);
                }
                Some(entries)
            }
        };
        pods.sort_unstable();
        pods.dedup();
        Some(CompiledRule { peers: Peers::Blocks(dedup(blocks)), pods, ports })
    }

    /// One protocol entry's ports; None when it has no field v6node knows.
    fn cluster_protocol(&mut self, protocol: &Protocol, place: &str) -> Option<Vec<PortEntry>> {
        if let Some(name) = &protocol.destination_named_port {
            // A container port's name stands for its number and its protocol.
            return Some(
                [PROTOCOL_TCP, PROTOCOL_UDP, PROTOCOL_SCTP]
                    .map(|protocol| PortEntry::Named { name: name.clone(), protocol })
                    .to_vec(),
            );
        }
        let (number, port) = [(PROTOCOL_TCP, &protocol.tcp), (PROTOCOL_UDP, &protocol.udp), (PROTOCOL_SCTP, &protocol.sctp)]
            .into_iter()
            .find_map(|(number, port)| port.as_ref().map(|p| (number, p)))
            .or_else(|| {
                self.problem(format!("{place}: no protocol field v6node knows; the rule fails closed"));
                None
            })?;
        let Some(port) = &port.destination_port else {
            return Some(vec![PortEntry::Range(PortRange { protocol: number, first: 0, last: u16::MAX })]);
        };
        let valid = |n: i32| u16::try_from(n).ok().filter(|&n| n != 0);
        let range = match (port.number, &port.range) {
            (Some(n), None) => valid(n).map(|n| (n, n)),
            (None, Some(span)) => valid(span.start).zip(valid(span.end)).filter(|(first, last)| first <= last),
            _ => None,
        };
        match range {
            Some((first, last)) => Some(vec![PortEntry::Range(PortRange { protocol: number, first, last })]),
            None => {
                self.problem(format!(
                    "{place}: destinationPort is not one number or one range within 1..=65535; the rule fails closed"
                ));
                None
            }
        }
    }
}

/// The policies with a spec, in precedence order (tier, priority, name).
pub(super) fn sorted(policies: Vec<&ClusterNetworkPolicy>) -> Vec<(&ClusterNetworkPolicy, &Spec)> {
    let mut sorted: Vec<(&ClusterNetworkPolicy, &Spec)> =
        policies.into_iter().filter_map(|p| p.spec.as_ref().map(|spec| (p, spec))).collect();
    sorted.sort_by_key(|(p, spec)| (tier(spec), spec.priority, p.metadata.name.clone()));
    sorted
}

/// One tier and direction of the ClusterNetworkPolicies: by subject pod,
/// its rules in precedence order and the policies they come from.
#[derive(Default)]
pub(super) struct BySubject {
    pub rules: BTreeMap<usize, Vec<TierRule>>,
    pub names: BTreeMap<usize, Vec<String>>,
}

#[cfg(test)]
mod tests {
    //! ClusterNetworkPolicies as the API server returns them (JSON), with
    //! Pods, Namespaces and Nodes, and what this node's pods then get.

    use k8s_openapi::api::{
        core::v1::{Namespace, Pod},
        networking::v1::NetworkPolicy,
    };
    use serde_json::{json, Value};

    use super::super::{
        build,
        tests::{hosts, ip, messages, namespace, net, plain_pod, pod, reversed, rule, tcp, NODE},
        DirectionRules, Objects, PolicyView,
    };
    use super::*;

    fn cnp(name: &str, tier: &str, priority: i32, spec: Value) -> ClusterNetworkPolicy {
        let mut spec = spec;
        spec["tier"] = json!(tier);
        spec["priority"] = json!(priority);
        serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).unwrap()
    }

    fn node(name: &str, labels: Value, addresses: &[&str]) -> Node {
        let addresses: Vec<Value> = addresses.iter().map(|a| json!({ "type": "InternalIP", "address": a })).collect();
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels }, "status": { "addresses": addresses } }))
            .unwrap()
    }

    fn view(pods: &[Pod], nodes: &[Node], cluster_policies: &[ClusterNetworkPolicy]) -> PolicyView {
        let namespaces = [namespace("prod", json!({ "env": "prod" })), namespace("dev", json!({ "env": "dev" }))];
        let (pods, namespaces): (Vec<&Pod>, Vec<&Namespace>) = (pods.iter().collect(), namespaces.iter().collect());
        let (nodes, cluster_policies): (Vec<&Node>, Vec<&ClusterNetworkPolicy>) =
            (nodes.iter().collect(), cluster_policies.iter().collect());
        let objects =
            Objects { pods: &pods, namespaces: &namespaces, nodes: &nodes, policies: &[], cluster_policies: &cluster_policies };
        build(NODE, &[], Some(net("64:ff9b::/96")), objects, &BTreeMap::new())
    }

    fn pods() -> Vec<Pod> {
        vec![
            plain_pod("prod", "db", NODE, "fd00:a::1", json!({ "app": "db" })),
            plain_pod("prod", "web", "node-b", "fd00:b::1", json!({ "app": "web" })),
            plain_pod("dev", "tool", "node-b", "fd00:b::2", json!({ "app": "tool" })),
        ]
    }

    fn direction<'v>(view: &'v PolicyView, address: &str, ingress: bool) -> &'v DirectionRules {
        let pod = &view.pods[&ip(address)];
        let rules = if ingress { &pod.ingress } else { &pod.egress };
        rules.as_ref().unwrap_or_else(|| panic!("nothing applies to {address}: {pod:#?}"))
    }

    fn tiered(action: Action, peers: Peers, ports: Ports) -> TierRule {
        TierRule { action, rule: rule(peers, ports) }
    }

    #[test]
    fn tiers_go_by_priority_then_name_and_rules_in_their_order() {
        let policies = [
            cnp(
                "z-late",
                "Admin",
                20,
                json!({ "subject": { "namespaces": {} }, "ingress": [
                    { "action": "Accept", "from": [{ "namespaces": { "matchLabels": { "env": "dev" } } }] },
                ]}),
            ),
            cnp(
                "a-early",
                "Admin",
                10,
                json!({ "subject": { "pods": { "namespaceSelector": {}, "podSelector": { "matchLabels": { "app": "db" } } } },
                "ingress": [
                    { "name": "web", "action": "Pass",
                      "from": [{ "pods": { "namespaceSelector": {}, "podSelector": { "matchLabels": { "app": "web" } } } }],
                      "protocols": [{ "tcp": { "destinationPort": { "number": 5432 } } }] },
                    { "action": "Deny", "from": [{ "namespaces": {} }] },
                ]}),
            ),
            cnp(
                "base",
                "Baseline",
                0,
                json!({ "subject": { "namespaces": { "matchLabels": { "env": "prod" } } },
                    "ingress": [{ "action": "Deny", "from": [{ "namespaces": {} }] }] }),
            ),
        ];
        let all = hosts(&["fd00:a::1", "fd00:b::1", "fd00:b::2"]);
        let forward = view(&pods(), &[], &policies);
        let db = direction(&forward, "fd00:a::1", true);
        assert_eq!(db.policies, vec!["Admin:a-early", "Admin:z-late", "Baseline:base"]);
        assert_eq!(
            db.admin,
            vec![
                tiered(Action::Pass, hosts(&["fd00:b::1"]), Ports::Ranges(vec![tcp(5432, 5432)])),
                tiered(Action::Deny, all.clone(), Ports::Any),
                tiered(Action::Accept, hosts(&["fd00:b::2"]), Ports::Any),
            ]
        );
        assert!(!db.isolated && db.rules.is_empty());
        assert_eq!(db.baseline, vec![tiered(Action::Deny, all, Ports::Any)]);
        assert!(forward.problems.is_empty(), "{:?}", messages(&forward));
        assert_eq!(forward, view(&reversed(&pods()), &[], &reversed(&policies)));
    }

    #[test]
    fn egress_reaches_nodes_networks_and_ipv4_through_nat64() {
        let nodes = [
            node("node-a", json!({ "role": "control-plane" }), &["fd00::10", "192.0.2.10"]),
            node("node-b", json!({}), &["fd00::11"]),
        ];
        let policies = [cnp(
            "egress",
            "Admin",
            1,
            json!({ "subject": { "namespaces": {} }, "egress": [
                { "action": "Accept", "to": [{ "nodes": { "matchLabels": { "role": "control-plane" } } }],
                  "protocols": [{ "tcp": { "destinationPort": { "range": { "start": 6443, "end": 6444 } } } }] },
                { "action": "Deny", "to": [{ "networks": ["::/0", "0.0.0.0/0"] }] },
            ]}),
        )];
        let v = view(&pods(), &nodes, &policies);
        let db = direction(&v, "fd00:a::1", false);
        assert_eq!(
            db.admin,
            vec![
                tiered(Action::Accept, hosts(&["fd00::10"]), Ports::Ranges(vec![tcp(6443, 6444)])),
                tiered(
                    Action::Deny,
                    Peers::Blocks(vec![
                        Block { net: net("::/0"), except: vec![] },
                        Block { net: net("64:ff9b::/96"), except: vec![] }
                    ]),
                    Ports::Any
                ),
            ]
        );
        assert!(v.pods[&ip("fd00:a::1")].ingress.is_none(), "no ingress rules: ingress is not affected");
    }

    #[test]
    fn a_named_port_is_the_subjects_on_ingress_and_the_destinations_on_egress() {
        let pods = vec![
            pod("prod", "db", NODE, &["fd00:a::1"], json!({ "app": "db" }), json!([{ "name": "sql", "containerPort": 5432 }])),
            pod(
                "prod",
                "web",
                "node-b",
                &["fd00:b::1"],
                json!({ "app": "web" }),
                json!([{ "name": "sql", "containerPort": 6432, "protocol": "UDP" }]),
            ),
        ];
        let policies = [cnp(
            "named",
            "Baseline",
            1,
            json!({ "subject": { "namespaces": {} },
                "ingress": [{ "action": "Accept", "from": [{ "namespaces": {} }], "protocols": [{ "destinationNamedPort": "sql" }] }],
                "egress": [{ "action": "Accept", "to": [{ "namespaces": {} }], "protocols": [{ "destinationNamedPort": "sql" }] }] }),
        )];
        let v = view(&pods, &[], &policies);
        let udp = |port| PortRange { protocol: PROTOCOL_UDP, first: port, last: port };
        let both = hosts(&["fd00:a::1", "fd00:b::1"]);
        assert_eq!(
            direction(&v, "fd00:a::1", true).baseline,
            vec![tiered(Action::Accept, both.clone(), Ports::Ranges(vec![tcp(5432, 5432)]))]
        );
        assert_eq!(
            direction(&v, "fd00:a::1", false).baseline,
            vec![
                tiered(Action::Accept, hosts(&["fd00:a::1"]), Ports::Ranges(vec![tcp(5432, 5432)])),
                tiered(Action::Accept, hosts(&["fd00:b::1"]), Ports::Ranges(vec![udp(6432)])),
            ]
        );
    }

    #[test]
    fn what_v6node_does_not_know_fails_closed_with_a_problem() {
        let policies = [cnp(
            "unknown",
            "Admin",
            1,
            json!({ "subject": { "namespaces": {} },
                "ingress": [
                    { "action": "Accept", "from": [{ "someNewPeer": {} }] },
                    { "action": "Pass", "from": [{ "namespaces": {} }], "protocols": [{ "quic": {} }] },
                ],
                "egress": [{ "action": "Accept", "to": [{ "domainNames": ["*.example.com"] }] }] }),
        )];
        let v = view(&pods(), &[], &policies);
        assert_eq!(
            direction(&v, "fd00:a::1", true).admin,
            vec![tiered(Action::Accept, Peers::Blocks(vec![]), Ports::Any), tiered(Action::Deny, Peers::Any, Ports::Any),],
            "an Accept matches nothing; a Pass denies everything"
        );
        assert_eq!(direction(&v, "fd00:a::1", false).admin, vec![tiered(Action::Accept, Peers::Blocks(vec![]), Ports::Any)]);
        let messages = messages(&v);
        assert_eq!(messages.len(), 3, "{messages:#?}");
        assert!(messages[0].starts_with("/unknown: spec.egress[0].peers[0]: domainNames are not supported"), "{messages:#?}");
        assert!(messages[1].contains("spec.ingress[0].peers[0]: no peer field v6node knows"), "{messages:#?}");
        assert!(messages[2].contains("spec.ingress[1].protocols[0]: no protocol field"), "{messages:#?}");
    }

    #[test]
    fn network_policies_and_both_tiers_meet_on_one_pod() {
        let policies = [cnp(
            "base",
            "Baseline",
            5,
            json!({ "subject": { "namespaces": {} }, "ingress": [{ "action": "Deny", "from": [{ "namespaces": {} }] }] }),
        )];
        let np: NetworkPolicy = serde_json::from_value(json!({
            "metadata": { "name": "allow-web", "namespace": "prod" },
            "spec": { "podSelector": {}, "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "app": "web" } } }] }] },
        }))
        .unwrap();
        let pods = pods();
        let (pods, namespaces): (Vec<&Pod>, Vec<&Namespace>) = (pods.iter().collect(), Vec::new());
        let objects =
            Objects { pods: &pods, namespaces: &namespaces, nodes: &[], policies: &[&np], cluster_policies: &[&policies[0]] };
        let v = build(NODE, &[], None, objects, &BTreeMap::new());
        let db = direction(&v, "fd00:a::1", true);
        assert_eq!(db.policies, vec!["Baseline:base", "prod/allow-web"]);
        assert!(db.isolated && db.rules == vec![rule(hosts(&["fd00:b::1"]), Ports::Any)] && db.baseline.len() == 1);
    }
}
