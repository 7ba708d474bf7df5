// SPDX-License-Identifier: Apache-2.0
//! What each pod of this node may receive and send under the cluster's
//! NetworkPolicies (networking.k8s.io/v1), as IPv6 prefixes and port ranges
//! the dataplane can match on. Pure, so it is tested without a cluster; what
//! it refuses or clamps it names in `problems` with the policy and the reason.
//!
//! The semantics are the API's: a pod is isolated for a direction once any
//! policy of that type selects it, and is then allowed exactly the union of
//! those policies' rules for that direction; a pod no policy selects is not
//! isolated (`None`) and allowed everything. Selectors match the pods of the
//! whole cluster, each IPv6 address as a /128, but never host-network pods:
//! those share their node's addresses, so only an ipBlock can name them.
//!
//! Where v6node has to choose, or to add to what the policies say:
//! - Traffic between a pod and its own node is always allowed, as the API's
//!   documentation promises ("traffic to and from the node where a Pod is
//!   running is always allowed"), so kubelet's probes reach an isolated pod:
//!   both directions' rules end with one for this node's addresses. A pod's
//!   traffic to itself never crosses the policy hook, except hairpinned
//!   through a Service, where it comes from the node's masquerade address.
//! - IPv4 ipBlocks mean something on an IPv6-only node only through NAT64:
//!   with the cluster's /96 prefix they become the addresses pods reach those
//!   IPv4 hosts at; without one they match nothing.
//! - A named port is the subject pod's own container port on ingress, and the
//!   destination pod's on egress, so an egress rule with named ports is split
//!   into one rule per destination pod that has the port.
//! - What the API server would have refused (an unknown operator or protocol,
//!   an endPort below its port, an unparsable cidr) is named in `problems`,
//!   and the part it spoils matches nothing rather than everything (for a
//!   policy's own podSelector that means it selects, so isolates, no pod).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv6Addr},
};

use ipnet::{IpNet, Ipv6Net};
use k8s_openapi::{
    api::{
        core::v1::{Namespace, Node, Pod},
        networking::v1::{IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec},
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use serde::{Deserialize, Serialize};

pub mod classes;
pub mod cluster;

pub use cluster::ClusterNetworkPolicy;

/// IP protocol numbers of what a NetworkPolicy port may name.
pub const PROTOCOL_TCP: u8 = 6;
pub const PROTOCOL_UDP: u8 = 17;
pub const PROTOCOL_SCTP: u8 = 132;

/// The label the API server puts on every Namespace (its name), so a
/// namespaceSelector can pick one namespace by name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PolicyView {
    /// Each pod of this node that has an IPv6 address, keyed by that address
    /// (every IPv6 address in status.podIPs gets an entry).
    pub pods: BTreeMap<Ipv6Addr, PodPolicy>,
    /// What was refused or clamped, with the policy and the reason. Sorted,
    /// each once.
    pub problems: Vec<PolicyProblem>,
}

/// A NetworkPolicy (or a part of it) that was refused or clamped, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PolicyProblem {
    pub namespace: String,
    pub name: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodPolicy {
    pub namespace: String,
    pub name: String,
    /// None: no policy isolates the pod for ingress (everything allowed).
    pub ingress: Option<DirectionRules>,
    /// None: no policy isolates the pod for egress (everything allowed).
    pub egress: Option<DirectionRules>,
}

/// What applies to one direction of a pod, tier by tier: the first rule
/// that matches decides (a Pass goes on to the next tier); none matching
/// allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DirectionRules {
    /// Each policy that selects the pod for this direction, sorted,
    /// deduplicated: a NetworkPolicy as "namespace/name", a
    /// ClusterNetworkPolicy as "Admin:name" or "Baseline:name".
    pub policies: Vec<String>,
    /// The ClusterNetworkPolicies' Admin tier, in precedence order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin: Vec<TierRule>,
    /// Whether a NetworkPolicy selects the pod: then `rules` decide, and
    /// what none of them allows is denied.
    #[serde(default)]
    pub isolated: bool,
    /// The NetworkPolicies' rules: allowed iff one matches both the peer
    /// and the port. In policy order (policies by namespace/name, then
    /// their rules), each rule once.
    pub rules: Vec<Rule>,
    /// The ClusterNetworkPolicies' Baseline tier, in precedence order
    /// (reached only when no NetworkPolicy selects the pod).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline: Vec<TierRule>,
}

/// The tiers, in the order they are consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Tier {
    Admin,
    NetworkPolicy,
    Baseline,
}

/// What a ClusterNetworkPolicy rule does with what it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Action {
    Accept,
    Deny,
    /// Skip the rest of this tier.
    Pass,
}

/// A rule of a ClusterNetworkPolicy tier.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TierRule {
    pub action: Action,
    #[serde(flatten)]
    pub rule: Rule,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Rule {
    pub peers: Peers,
    pub ports: Ports,
}

/// Who is at the other end: the source for ingress, the destination for
/// egress.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peers {
    Any,
    /// An address in any of the blocks. `Blocks(vec![])` matches nothing.
    Blocks(Vec<Block>),
}

/// `net` but none of `except` (each within `net`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Block {
    pub net: Ipv6Net,
    pub except: Vec<Ipv6Net>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ports {
    /// Every protocol (ICMPv6 included) and port.
    Any,
    /// Only these; `Ranges(vec![])` matches nothing.
    Ranges(Vec<PortRange>),
}

/// Ports `first..=last` of one protocol (6 TCP, 17 UDP, 132 SCTP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PortRange {
    pub protocol: u8,
    pub first: u16,
    pub last: u16,
}

/// The cluster as policy sees it: its Pods, Namespaces, Nodes (for
/// ClusterNetworkPolicies' `nodes` peers), NetworkPolicies and
/// ClusterNetworkPolicies.
#[derive(Clone, Copy, Default)]
pub struct Objects<'a> {
    pub pods: &'a [&'a Pod],
    pub namespaces: &'a [&'a Namespace],
    pub nodes: &'a [&'a Node],
    pub policies: &'a [&'a NetworkPolicy],
    pub cluster_policies: &'a [&'a ClusterNetworkPolicy],
}

/// `nat64_prefix` is the cluster's NAT64 /96, through which IPv4 ipBlocks
/// are reached; `node_addresses` this node's own, which an isolated pod
/// always lets in. `cni_addresses` are this node's pods' addresses as
/// v6node-cni gave them, by "namespace/name": a pod's status shows its
/// address only once it runs, and its policy must be in force before its
/// containers start. Equal input gives equal output, whatever its order.
pub fn build(
    node_name: &str,
    node_addresses: &[Ipv6Addr],
    nat64_prefix: Option<Ipv6Net>,
    objects: Objects,
    cni_addresses: &BTreeMap<String, Vec<Ipv6Addr>>,
) -> PolicyView {
    let Objects { pods, namespaces, nodes, policies, cluster_policies } = objects;
    // Sorted by address, so every list of pods below comes out in address
    // order and a (stale) address two pods claim goes to the same one each time.
    let mut cluster: Vec<PeerPod> = pods.iter().filter_map(|pod| PeerPod::new(pod, node_name, cni_addresses)).collect();
    cluster.sort_by(|a, b| (&a.addresses, a.namespace, a.name).cmp(&(&b.addresses, b.namespace, b.name)));

    let mut namespace_labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for namespace in namespaces.iter() {
        let Some(name) = namespace.metadata.name.clone() else { continue };
        namespace_labels.insert(name, namespace.metadata.labels.clone().unwrap_or_default());
    }
    // A pod's Namespace may be missing for a moment (the watches are not in
    // step); it still has the label the API server gives every Namespace.
    for pod in &cluster {
        namespace_labels.entry(pod.namespace.to_string()).or_default();
    }
    for (name, labels) in &mut namespace_labels {
        labels.entry(NAMESPACE_NAME_LABEL.to_string()).or_insert_with(|| name.clone());
    }

    let mut policies: Vec<&NetworkPolicy> = policies.iter().copied().filter(|p| p.metadata.name.is_some()).collect();
    policies.sort_by_cached_key(|p| (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone()));

    let mut ingress: BTreeMap<usize, DirectionRules> = BTreeMap::new();
    let mut egress: BTreeMap<usize, DirectionRules> = BTreeMap::new();
    let mut problems = BTreeSet::new();
    let no_spec = NetworkPolicySpec::default();
    for policy in policies {
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        let id = format!("{namespace}/{name}");
        let spec = policy.spec.as_ref().unwrap_or(&no_spec);
        let mut compiler = Compiler {
            cluster: &cluster,
            namespace_labels: &namespace_labels,
            nat64_prefix,
            namespace: &namespace,
            messages: Vec::new(),
        };
        let (isolates_ingress, isolates_egress) = compiler.policy_types(spec);
        let subjects = compiler.subjects(spec);

        if isolates_ingress {
            let rules: Vec<CompiledRule> = spec
                .ingress
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, rule)| compiler.rule(rule.from.as_ref(), rule.ports.as_ref(), &format!("spec.ingress[{i}]"), "from"))
                .collect();
            for &subject in &subjects {
                let isolation = ingress.entry(subject).or_insert_with(isolated);
                isolation.policies.push(id.clone());
                isolation.rules.extend(rules.iter().map(|rule| rule.for_subject(&cluster[subject])));
            }
        }
        if isolates_egress {
            let rules: Vec<Rule> = spec
                .egress
                .iter()
                .flatten()
                .enumerate()
                .flat_map(|(i, rule)| {
                    compiler
                        .rule(rule.to.as_ref(), rule.ports.as_ref(), &format!("spec.egress[{i}]"), "to")
                        .by_destination(&cluster)
                })
                .collect();
            for &subject in &subjects {
                let isolation = egress.entry(subject).or_insert_with(isolated);
                isolation.policies.push(id.clone());
                isolation.rules.extend(rules.iter().cloned());
            }
        }
        problems.extend(compiler.messages.into_iter().map(|message| PolicyProblem {
            namespace: namespace.clone(),
            name: name.clone(),
            message,
        }));
    }

    // ClusterNetworkPolicies, by tier and direction: rules and policy names by subject.
    let mut tiers: BTreeMap<(Tier, usize), cluster::BySubject> = BTreeMap::new();
    for (policy, spec) in cluster::sorted(cluster_policies.to_vec()) {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let mut compiler = Compiler {
            cluster: &cluster,
            namespace_labels: &namespace_labels,
            nat64_prefix,
            namespace: "",
            messages: Vec::new(),
        };
        match cluster::tier(spec) {
            None => compiler.problem(format!("spec.tier {:?} is neither Admin nor Baseline; the policy is ignored", spec.tier)),
            Some(tier) => {
                let label = format!("{tier:?}:{name}");
                let subjects = compiler.cluster_subjects(&spec.subject);
                for (direction, rules, side) in [(0, &spec.ingress, "ingress"), (1, &spec.egress, "egress")] {
                    if rules.is_empty() {
                        continue;
                    }
                    let compiled = compiler.cluster_rules(rules, side, nodes);
                    let by_subject = tiers.entry((tier, direction)).or_default();
                    for &subject in &subjects {
                        by_subject.rules.entry(subject).or_default().extend(compiled.for_subject(&cluster[subject]));
                        by_subject.names.entry(subject).or_default().push(label.clone());
                    }
                }
            }
        }
        problems.extend(compiler.messages.into_iter().map(|message| PolicyProblem {
            namespace: String::new(),
            name: name.clone(),
            message,
        }));
    }

    // Kubelet probes the pod from the node's own addresses; the pod may always answer, and reach its node.
    let mut node_blocks: Vec<Block> = Vec::new();
    for &address in node_addresses {
        let block = host_block(address);
        if !node_blocks.contains(&block) {
            node_blocks.push(block);
        }
    }
    let with_node = (!node_blocks.is_empty()).then_some(Rule { peers: Peers::Blocks(node_blocks), ports: Ports::Any });

    let mut view = PolicyView { pods: BTreeMap::new(), problems: problems.into_iter().collect() };
    for (index, pod) in cluster.iter().enumerate().filter(|(_, pod)| pod.local) {
        let mut direction = |direction: usize, network_policies: Option<DirectionRules>| {
            let mut tier = |tier: Tier| {
                let by_subject = tiers.get_mut(&(tier, direction));
                let (rules, names) = by_subject.map(|t| (t.rules.remove(&index), t.names.remove(&index))).unwrap_or_default();
                (rules.unwrap_or_default(), names.unwrap_or_default())
            };
            let ((admin, admin_names), (baseline, baseline_names)) = (tier(Tier::Admin), tier(Tier::Baseline));
            if network_policies.is_none() && admin_names.is_empty() && baseline_names.is_empty() {
                return None;
            }
            let mut rules = network_policies.unwrap_or_default();
            if rules.isolated {
                rules.rules.extend(with_node.clone());
            }
            rules.policies.extend(admin_names.into_iter().chain(baseline_names));
            rules.admin = admin;
            rules.baseline = baseline;
            Some(tidy(rules))
        };
        let ingress = direction(0, ingress.remove(&index));
        let egress = direction(1, egress.remove(&index));
        let policy = PodPolicy { namespace: pod.namespace.to_string(), name: pod.name.to_string(), ingress, egress };
        for &address in &pod.addresses {
            view.pods.entry(address).or_insert_with(|| policy.clone());
        }
    }
    view
}

fn isolated() -> DirectionRules {
    DirectionRules { isolated: true, ..DirectionRules::default() }
}

/// Policies sorted and each once; rules each once, the first kept where it
/// is (in a tier, a later copy of a rule can never be the first to match).
fn tidy(mut rules: DirectionRules) -> DirectionRules {
    rules.policies.sort();
    rules.policies.dedup();
    let mut seen = BTreeSet::new();
    rules.rules.retain(|rule| seen.insert(rule.clone()));
    for tier in [&mut rules.admin, &mut rules.baseline] {
        let mut seen = BTreeSet::new();
        tier.retain(|r| seen.insert(r.rule.clone()));
    }
    rules
}

fn host_block(address: Ipv6Addr) -> Block {
    Block { net: Ipv6Net::from(address), except: Vec::new() }
}

/// A pod a selector can match: not host-network, not finished, with an
/// IPv6 address.
struct PeerPod<'a> {
    pod: &'a Pod,
    namespace: &'a str,
    name: &'a str,
    /// Sorted, each once.
    addresses: Vec<Ipv6Addr>,
    /// On this node: a subject as well as a peer.
    local: bool,
}

/// A pod by its addresses, as flows name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAddresses {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub node: String,
    pub addresses: Vec<Ipv6Addr>,
}

/// Every pod network pod with an address (this node's from v6node-cni
/// until its status shows one), as policy sees them as peers.
pub fn pod_addresses(pods: &[&Pod], node_name: &str, cni_addresses: &BTreeMap<String, Vec<Ipv6Addr>>) -> Vec<PodAddresses> {
    pods.iter()
        .filter_map(|pod| PeerPod::new(pod, node_name, cni_addresses))
        .map(|peer| PodAddresses {
            namespace: peer.namespace.to_string(),
            name: peer.name.to_string(),
            labels: peer.labels().cloned().unwrap_or_default(),
            node: peer.pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
            addresses: peer.addresses,
        })
        .collect()
}

impl<'a> PeerPod<'a> {
    fn new(pod: &'a Pod, node_name: &str, cni_addresses: &BTreeMap<String, Vec<Ipv6Addr>>) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        if spec.host_network == Some(true) {
            return None;
        }
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let mut addresses: Vec<Ipv6Addr> = match status.pod_ips.as_deref() {
            Some(ips) if !ips.is_empty() => ips.iter().filter_map(|ip| ipv6(&ip.ip)).collect(),
            _ => status.pod_ip.as_deref().and_then(ipv6).into_iter().collect(),
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let local = spec.node_name.as_deref() == Some(node_name);
        if addresses.is_empty() && local {
            addresses = cni_addresses.get(&format!("{namespace}/{name}")).cloned().unwrap_or_default();
        }
        addresses.sort();
        addresses.dedup();
        if addresses.is_empty() {
            return None;
        }
        Some(PeerPod { pod, namespace, name, addresses, local })
    }

    fn labels(&self) -> Option<&'a BTreeMap<String, String>> {
        self.pod.metadata.labels.as_ref()
    }

    /// The numbers of the pod's container ports called `name` for
    /// `protocol`, sorted, each once (a well-formed pod has at most one).
    fn named_port(&self, name: &str, protocol: u8) -> Vec<u16> {
        let mut numbers: Vec<u16> = self
            .pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .flat_map(|container| container.ports.iter().flatten())
            .filter(|port| port.name.as_deref() == Some(name))
            .filter(|port| protocol_number(port.protocol.as_deref()) == Some(protocol))
            .filter_map(|port| u16::try_from(port.container_port).ok().filter(|n| *n != 0))
            .collect();
        numbers.sort();
        numbers.dedup();
        numbers
    }
}

fn ipv6(s: &str) -> Option<Ipv6Addr> {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) if ip.to_ipv4_mapped().is_none() => Some(ip),
        _ => None,
    }
}

fn protocol_number(name: Option<&str>) -> Option<u8> {
    match name.unwrap_or("TCP") {
        "TCP" => Some(PROTOCOL_TCP),
        "UDP" => Some(PROTOCOL_UDP),
        "SCTP" => Some(PROTOCOL_SCTP),
        _ => None,
    }
}

/// One entry of a rule's ports, before a named port is known as a number.
#[derive(Clone, Debug)]
enum PortEntry {
    Range(PortRange),
    Named { name: String, protocol: u8 },
}

/// A rule of a policy as far as the policy alone says: its named ports wait
/// for the pod that gives them a number.
struct CompiledRule {
    peers: Peers,
    /// The pods the rule's selectors chose (indices into the cluster's).
    pods: Vec<usize>,
    /// None: every port.
    ports: Option<Vec<PortEntry>>,
}

impl CompiledRule {
    /// The rule on ingress to `subject`: a named port is the subject's own
    /// container port, and one it lacks matches nothing (normal: a policy
    /// may name a port only some of its pods have).
    fn for_subject(&self, subject: &PeerPod) -> Rule {
        let Some(entries) = &self.ports else { return Rule { peers: self.peers.clone(), ports: Ports::Any } };
        let mut ranges = Vec::new();
        for entry in entries {
            match entry {
                PortEntry::Range(range) => ranges.push(*range),
                PortEntry::Named { name, protocol } => {
                    ranges.extend(subject.named_port(name, *protocol).into_iter().map(|n| PortRange {
                        protocol: *protocol,
                        first: n,
                        last: n,
                    }))
                }
            }
        }
        Rule { peers: self.peers.clone(), ports: Ports::Ranges(dedup(ranges)) }
    }

    /// The rule on egress: the numbered ports stay one rule with the rule's
    /// peers; each named port becomes one rule per destination pod that has a
    /// port of that name (among the pods the rule's selectors chose, or all
    /// the cluster's for a rule open to any peer). An ipBlock never matches a
    /// named port: nothing says what number the name has outside the
    /// cluster's pods (nor for a host-network pod, which no selector picks).
    fn by_destination(self, cluster: &[PeerPod]) -> Vec<Rule> {
        let Some(entries) = self.ports else { return vec![Rule { peers: self.peers, ports: Ports::Any }] };
        let mut numbered = Vec::new();
        let mut named = Vec::new();
        for entry in entries {
            match entry {
                PortEntry::Range(range) => numbered.push(range),
                PortEntry::Named { name, protocol } => named.push((name, protocol)),
            }
        }
        let destinations: Vec<usize> = match self.peers {
            Peers::Any => (0..cluster.len()).collect(),
            Peers::Blocks(_) => self.pods,
        };
        let mut rules = Vec::new();
        // A rule whose every port was refused stays, matching nothing.
        if !numbered.is_empty() || named.is_empty() {
            rules.push(Rule { peers: self.peers, ports: Ports::Ranges(dedup(numbered)) });
        }
        for (name, protocol) in named {
            for &index in &destinations {
                let destination = &cluster[index];
                let numbers = destination.named_port(&name, protocol);
                if numbers.is_empty() {
                    continue;
                }
                rules.push(Rule {
                    peers: Peers::Blocks(destination.addresses.iter().copied().map(host_block).collect()),
                    ports: Ports::Ranges(numbers.into_iter().map(|n| PortRange { protocol, first: n, last: n }).collect()),
                });
            }
        }
        rules
    }
}

fn dedup<T: Ord + Clone>(items: Vec<T>) -> Vec<T> {
    let mut seen = BTreeSet::new();
    items.into_iter().filter(|item| seen.insert(item.clone())).collect()
}

/// Why a cidr (or an except) is no IPv6 prefix.
enum PrefixError {
    Unparsable,
    NoNat64,
    Nat64NotSlash96(Ipv6Net),
}

impl std::fmt::Display for PrefixError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrefixError::Unparsable => write!(f, "not a CIDR (address/length)"),
            PrefixError::NoNat64 => write!(f, "IPv4 needs the cluster's NAT64 prefix, which this node has none of"),
            PrefixError::Nat64NotSlash96(prefix) => {
                write!(f, "IPv4 needs the cluster's NAT64 prefix as a /96, and {prefix} is not one")
            }
        }
    }
}

/// One policy's selectors, peers and ports in terms of the cluster's pods,
/// collecting what it refuses.
struct Compiler<'a, 'p> {
    cluster: &'a [PeerPod<'p>],
    namespace_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    nat64_prefix: Option<Ipv6Net>,
    /// The policy's namespace.
    namespace: &'a str,
    messages: Vec<String>,
}

impl Compiler<'_, '_> {
    fn problem(&mut self, message: String) {
        if !self.messages.contains(&message) {
            self.messages.push(message);
        }
    }

    /// Whether the policy isolates its pods for ingress and for egress. As
    /// the API server defaults it: without policyTypes, Ingress always, and
    /// Egress as soon as there is an `egress` list, even an empty one.
    fn policy_types(&mut self, spec: &NetworkPolicySpec) -> (bool, bool) {
        let Some(types) = spec.policy_types.as_ref().filter(|t| !t.is_empty()) else {
            return (true, spec.egress.is_some());
        };
        let (mut ingress, mut egress) = (false, false);
        for policy_type in types {
            match policy_type.as_str() {
                "Ingress" => ingress = true,
                "Egress" => egress = true,
                other => self.problem(format!("policyTypes: {other:?} is neither Ingress nor Egress; ignored")),
            }
        }
        (ingress, egress)
    }

    /// This node's pods the policy applies to: those of its namespace its
    /// podSelector matches (an absent or empty one matches them all).
    fn subjects(&mut self, spec: &NetworkPolicySpec) -> Vec<usize> {
        let everything = LabelSelector::default();
        let selector = spec.pod_selector.as_ref().unwrap_or(&everything);
        let usable = self.usable(selector, "spec.podSelector");
        (0..self.cluster.len())
            .filter(|&i| {
                let pod = &self.cluster[i];
                usable && pod.local && pod.namespace == self.namespace && selects(selector, pod.labels())
            })
            .collect()
    }

    /// Whether the selector's operators are all known; one that is not makes
    /// it match nothing.
    fn usable(&mut self, selector: &LabelSelector, place: &str) -> bool {
        for requirement in selector.match_expressions.iter().flatten() {
            if !matches!(requirement.operator.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist") {
                self.problem(format!(
                    "{place}: operator {:?} (key {:?}) is not In, NotIn, Exists or DoesNotExist; the selector matches nothing",
                    requirement.operator, requirement.key
                ));
                return false;
            }
        }
        true
    }

    /// `peers` is a rule's `from` or `to` (`side` says which), `place` the
    /// rule's path in the policy.
    fn rule(
        &mut self,
        peers: Option<&Vec<NetworkPolicyPeer>>,
        ports: Option<&Vec<NetworkPolicyPort>>,
        place: &str,
        side: &str,
    ) -> CompiledRule {
        let (peers, pods) = match peers.filter(|p| !p.is_empty()) {
            None => (Peers::Any, Vec::new()),
            Some(peers) => self.peers(peers, &format!("{place}.{side}")),
        };
        let ports = ports.filter(|p| !p.is_empty()).map(|ports| {
            ports.iter().enumerate().filter_map(|(i, port)| self.port(port, &format!("{place}.ports[{i}]"))).collect()
        });
        CompiledRule { peers, pods, ports }
    }

    /// The blocks of a rule's peers in their order (a selector's pods by
    /// address), each once; and the pods the selectors chose.
    fn peers(&mut self, peers: &[NetworkPolicyPeer], place: &str) -> (Peers, Vec<usize>) {
        let mut blocks = Vec::new();
        let mut pods = BTreeSet::new();
        for (i, peer) in peers.iter().enumerate() {
            let place = format!("{place}[{i}]");
            let by_selector = peer.pod_selector.is_some() || peer.namespace_selector.is_some();
            match (&peer.ip_block, by_selector) {
                (Some(_), true) => {
                    self.problem(format!("{place}: an ipBlock with a selector, which the API forbids; the peer matches nothing"))
                }
                (None, false) => {
                    self.problem(format!("{place}: neither a selector nor an ipBlock; the peer matches nothing"));
                }
                (Some(ip_block), false) => blocks.extend(self.block(ip_block)),
                (None, true) => {
                    for index in self.selected(peer, &place) {
                        pods.insert(index);
                        blocks.extend(self.cluster[index].addresses.iter().copied().map(host_block));
                    }
                }
            }
        }
        (Peers::Blocks(dedup(blocks)), pods.into_iter().collect())
    }

    /// The pods a selector peer picks: podSelector alone, in the policy's
    /// namespace; namespaceSelector alone, every pod of the namespaces it
    /// matches; both, the pods of those namespaces podSelector matches.
    fn selected(&mut self, peer: &NetworkPolicyPeer, place: &str) -> Vec<usize> {
        let pods_usable = peer.pod_selector.as_ref().is_none_or(|s| self.usable(s, &format!("{place}.podSelector")));
        let namespaces_usable =
            peer.namespace_selector.as_ref().is_none_or(|s| self.usable(s, &format!("{place}.namespaceSelector")));
        if !pods_usable || !namespaces_usable {
            return Vec::new();
        }
        (0..self.cluster.len())
            .filter(|&i| {
                let pod = &self.cluster[i];
                let in_namespace = match &peer.namespace_selector {
                    None => pod.namespace == self.namespace,
                    Some(selector) => selects(selector, self.namespace_labels.get(pod.namespace)),
                };
                in_namespace && peer.pod_selector.as_ref().is_none_or(|selector| selects(selector, pod.labels()))
            })
            .collect()
    }

    /// An ipBlock as IPv6; None if it matches nothing.
    fn block(&mut self, ip_block: &IPBlock) -> Option<Block> {
        let what = format!("ipBlock {}", ip_block.cidr);
        let net = match self.prefix(&ip_block.cidr, &what) {
            Ok(net) => net,
            Err(why) => {
                self.problem(format!("{what}: {why}; the block matches nothing"));
                return None;
            }
        };
        let mut except = Vec::new();
        for text in ip_block.except.iter().flatten() {
            let what = format!("{what}: except {text}");
            match self.prefix(text, &what) {
                // Dropping an except would let in what the policy keeps out.
                Err(why) => {
                    self.problem(format!("{what}: {why}; the block matches nothing, as what it takes out is unknown"));
                    return None;
                }
                Ok(hole) if net.contains(&hole) => except.push(hole),
                Ok(hole) if hole.contains(&net) => {
                    self.problem(format!("{what} covers all of the cidr; the block matches nothing"));
                    except.push(net);
                }
                Ok(_) => self.problem(format!("{what} is outside the cidr; it removes nothing and is dropped")),
            }
        }
        Some(Block { net, except: dedup(except) })
    }

    /// A cidr as an IPv6 prefix, host bits cleared (and named); IPv4 through
    /// the cluster's NAT64 prefix, the IPv4 address in its last 32 bits.
    fn prefix(&mut self, text: &str, what: &str) -> Result<Ipv6Net, PrefixError> {
        let parsed: IpNet = text.trim().parse().map_err(|_| PrefixError::Unparsable)?;
        let net = parsed.trunc();
        let mapped = match net {
            IpNet::V6(net) => net,
            IpNet::V4(net) => {
                let prefix = self.nat64_prefix.ok_or(PrefixError::NoNat64)?;
                if prefix.prefix_len() != 96 {
                    return Err(PrefixError::Nat64NotSlash96(prefix));
                }
                let mut octets = prefix.network().octets();
                octets[12..].copy_from_slice(&net.network().octets());
                Ipv6Net::new(Ipv6Addr::from(octets), 96 + net.prefix_len()).expect("96 + at most 32 bits")
            }
        };
        if net != parsed {
            self.problem(format!("{what}: host bits are set; taken as {net}"));
        }
        Ok(mapped)
    }

    /// One entry of a rule's ports; None (and a problem) if it is refused.
    fn port(&mut self, port: &NetworkPolicyPort, place: &str) -> Option<PortEntry> {
        let described = describe_port(port);
        let Some(protocol) = protocol_number(port.protocol.as_deref()) else {
            self.problem(format!("{place} ({described}): the protocol is not TCP, UDP or SCTP; the entry is skipped"));
            return None;
        };
        let refuse = |compiler: &mut Self, why: &str| {
            compiler.problem(format!("{place} ({described}): {why}; the entry is skipped"));
            None
        };
        match &port.port {
            None if port.end_port.is_some() => refuse(self, "endPort without a port"),
            None => Some(PortEntry::Range(PortRange { protocol, first: 0, last: u16::MAX })),
            Some(IntOrString::String(_)) if port.end_port.is_some() => refuse(self, "endPort with a named port"),
            Some(IntOrString::String(name)) => Some(PortEntry::Named { name: name.clone(), protocol }),
            Some(IntOrString::Int(number)) => {
                let Some(first) = u16::try_from(*number).ok().filter(|n| *n != 0) else {
                    return refuse(self, "the port is not within 1..=65535");
                };
                let last = match port.end_port {
                    None => first,
                    Some(end) => match u16::try_from(end) {
                        Ok(last) if last >= first => last,
                        Ok(_) => return refuse(self, "endPort is below port"),
                        Err(_) => return refuse(self, "endPort is not within 1..=65535"),
                    },
                };
                Some(PortEntry::Range(PortRange { protocol, first, last }))
            }
        }
    }
}

/// A port entry as written, for messages: `8080-8090/TCP`, `http/UDP`.
fn describe_port(port: &NetworkPolicyPort) -> String {
    let number = match &port.port {
        None => "every port".to_string(),
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(name)) => name.clone(),
    };
    let end = port.end_port.map(|e| format!("-{e}")).unwrap_or_default();
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    format!("{number}{end}/{protocol}")
}

/// Label selector semantics: every matchLabels pair and every
/// matchExpressions requirement (an unknown operator matches nothing; see
/// `Compiler::usable`). `labels` None: an object without labels.
fn selects(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let value = |key: &str| labels.and_then(|l| l.get(key));
    selector.match_labels.iter().flatten().all(|(key, wanted)| value(key) == Some(wanted))
        && selector.match_expressions.iter().flatten().all(|requirement| {
            let values = requirement.values.as_deref().unwrap_or_default();
            let found = value(&requirement.key);
            match requirement.operator.as_str() {
                "In" => found.is_some_and(|v| values.contains(v)),
                "NotIn" => found.is_none_or(|v| !values.contains(v)),
                "Exists" => found.is_some(),
                "DoesNotExist" => found.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
pub(crate) mod tests {
    //! NetworkPolicies, Pods and Namespaces as the API server returns them
    //! (JSON), and what this node's pods may then receive and send.

    use serde_json::{json, Value};

    use super::*;

    pub(crate) const NODE: &str = "node-a";

    /// A running pod with these addresses, labels and container ports.
    pub(crate) fn pod(namespace: &str, name: &str, node: &str, ips: &[&str], labels: Value, ports: Value) -> Pod {
        let ips: Vec<Value> = ips.iter().map(|ip| json!({ "ip": ip })).collect();
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": namespace, "labels": labels },
            "spec": { "nodeName": node, "containers": [{ "name": "main", "ports": ports }] },
            "status": { "phase": "Running", "podIPs": ips },
        }))
        .unwrap()
    }

    pub(crate) fn plain_pod(namespace: &str, name: &str, node: &str, ip: &str, labels: Value) -> Pod {
        pod(namespace, name, node, &[ip], labels, json!([]))
    }

    pub(crate) fn namespace(name: &str, labels: Value) -> Namespace {
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels } })).unwrap()
    }

    fn policy(namespace: &str, name: &str, spec: Value) -> NetworkPolicy {
        serde_json::from_value(json!({ "metadata": { "name": name, "namespace": namespace }, "spec": spec })).unwrap()
    }

    pub(crate) fn ip(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    pub(crate) fn net(s: &str) -> Ipv6Net {
        s.parse().unwrap()
    }

    pub(crate) fn host(s: &str) -> Block {
        host_block(ip(s))
    }

    fn block(cidr: &str, except: &[&str]) -> Block {
        Block { net: net(cidr), except: except.iter().map(|e| net(e)).collect() }
    }

    pub(crate) fn hosts(addresses: &[&str]) -> Peers {
        Peers::Blocks(addresses.iter().map(|a| host(a)).collect())
    }

    pub(crate) fn tcp(first: u16, last: u16) -> PortRange {
        PortRange { protocol: PROTOCOL_TCP, first, last }
    }

    pub(crate) fn rule(peers: Peers, ports: Ports) -> Rule {
        Rule { peers, ports }
    }

    /// The view for node-a, without node addresses (so no rule from the
    /// node) and with 64:ff9b::/96 as the NAT64 prefix.
    fn view(pods: &[Pod], namespaces: &[Namespace], policies: &[NetworkPolicy]) -> PolicyView {
        built(&[], Some(net("64:ff9b::/96")), pods, namespaces, policies, &[], &BTreeMap::new())
    }

    /// `build` for NODE over owned objects.
    pub(super) fn built(
        node_addresses: &[Ipv6Addr],
        nat64: Option<Ipv6Net>,
        pods: &[Pod],
        namespaces: &[Namespace],
        policies: &[NetworkPolicy],
        cluster_policies: &[ClusterNetworkPolicy],
        cni: &BTreeMap<String, Vec<Ipv6Addr>>,
    ) -> PolicyView {
        let (pods, namespaces): (Vec<&Pod>, Vec<&Namespace>) = (pods.iter().collect(), namespaces.iter().collect());
        let (policies, cluster_policies): (Vec<&NetworkPolicy>, Vec<&ClusterNetworkPolicy>) =
            (policies.iter().collect(), cluster_policies.iter().collect());
        let objects = Objects {
            pods: &pods,
            namespaces: &namespaces,
            nodes: &[],
            policies: &policies,
            cluster_policies: &cluster_policies,
        };
        build(NODE, node_addresses, nat64, objects, cni)
    }

    pub(crate) fn reversed<T: Clone>(items: &[T]) -> Vec<T> {
        items.iter().rev().cloned().collect()
    }

    fn ingress<'v>(view: &'v PolicyView, address: &str) -> &'v DirectionRules {
        let pod = view.pods.get(&ip(address)).unwrap_or_else(|| panic!("no pod at {address} in {view:#?}"));
        pod.ingress.as_ref().unwrap_or_else(|| panic!("{address} is not isolated for ingress: {pod:#?}"))
    }

    fn egress<'v>(view: &'v PolicyView, address: &str) -> &'v DirectionRules {
        let pod = view.pods.get(&ip(address)).unwrap_or_else(|| panic!("no pod at {address} in {view:#?}"));
        pod.egress.as_ref().unwrap_or_else(|| panic!("{address} is not isolated for egress: {pod:#?}"))
    }

    pub(crate) fn messages(view: &PolicyView) -> Vec<String> {
        view.problems.iter().map(|p| format!("{}/{}: {}", p.namespace, p.name, p.message)).collect()
    }

    /// One ingress rule from `from` on `ports` for the pods labelled app=web.
    fn web_ingress(name: &str, from: Value, ports: Value) -> NetworkPolicy {
        policy(
            "default",
            name,
            json!({ "podSelector": { "matchLabels": { "app": "web" } },
                                        "ingress": [{ "from": from, "ports": ports }] }),
        )
    }

    #[test]
    fn an_empty_pod_selector_without_rules_denies_all_ingress_to_its_namespace_only() {
        let pods =
            [plain_pod("default", "web", NODE, "fd00:a::1", json!({})), plain_pod("other", "db", NODE, "fd00:a::2", json!({}))];
        let deny = policy("default", "deny", json!({ "podSelector": {} }));
        let view = view(&pods, &[], &[deny]);
        let web = &view.pods[&ip("fd00:a::1")];
        assert_eq!((web.namespace.as_str(), web.name.as_str()), ("default", "web"));
        assert_eq!(
            web.ingress,
            Some(DirectionRules { policies: vec!["default/deny".into()], isolated: true, ..DirectionRules::default() })
        );
        assert_eq!(web.egress, None, "no egress list, no policyTypes: not isolated for egress");
        let db = &view.pods[&ip("fd00:a::2")];
        assert_eq!((db.ingress.as_ref(), db.egress.as_ref()), (None, None));
        assert!(view.problems.is_empty(), "{:?}", view.problems);
    }

    #[test]
    fn a_pod_selector_peer_is_the_matching_pods_of_the_policys_namespace() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            pod("default", "client", NODE, &["fd00:a::3", "fd00:a::2"], json!({ "role": "client" }), json!([])),
            plain_pod("default", "other", NODE, "fd00:a::4", json!({ "role": "other" })),
            plain_pod("elsewhere", "client", NODE, "fd00:a::5", json!({ "role": "client" })),
        ];
        let allow = web_ingress("allow", json!([{ "podSelector": { "matchLabels": { "role": "client" } } }]), json!(null));
        let view = view(&pods, &[], &[allow]);
        let rules = ingress(&view, "fd00:a::1");
        assert_eq!(rules.policies, vec!["default/allow".to_string()]);
        assert_eq!(rules.rules, vec![rule(hosts(&["fd00:a::2", "fd00:a::3"]), Ports::Any)]);
        // Only web is selected; the others stay open.
        assert!(view.pods.values().filter(|p| p.name != "web").all(|p| p.ingress.is_none()));
        // Both of the client's addresses are subjects in their own right.
        assert_eq!(view.pods[&ip("fd00:a::2")], view.pods[&ip("fd00:a::3")]);
    }

    #[test]
    fn a_namespace_selector_peer_is_every_pod_of_the_matching_namespaces() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("monitoring", "prometheus", "node-b", "fd00:b::1", json!({})),
            plain_pod("monitoring", "grafana", NODE, "fd00:a::2", json!({})),
            plain_pod("kube-system", "dns", NODE, "fd00:a::3", json!({})),
            plain_pod("default", "client", NODE, "fd00:a::4", json!({})),
        ];
        let namespaces = [namespace("monitoring", json!({ "team": "ops" })), namespace("default", json!({}))];
        let by_label = web_ingress("by-label", json!([{ "namespaceSelector": { "matchLabels": { "team": "ops" } } }]), json!([]));
        // kube-system has no Namespace object yet: its name label still counts.
        let by_name = web_ingress(
            "by-name",
            json!([{ "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "kube-system" } } }]),
            json!([]),
        );
        let view = view(&pods, &namespaces, &[by_name, by_label]);
        let rules = ingress(&view, "fd00:a::1");
        assert_eq!(rules.policies, vec!["default/by-label".to_string(), "default/by-name".to_string()]);
        assert_eq!(
            rules.rules,
            vec![rule(hosts(&["fd00:a::2", "fd00:b::1"]), Ports::Any), rule(hosts(&["fd00:a::3"]), Ports::Any)]
        );
    }

    #[test]
    fn pod_and_namespace_selectors_in_one_peer_must_both_match() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("monitoring", "prometheus", NODE, "fd00:a::2", json!({ "app": "prometheus" })),
            plain_pod("monitoring", "grafana", NODE, "fd00:a::3", json!({ "app": "grafana" })),
            plain_pod("default", "prometheus", NODE, "fd00:a::4", json!({ "app": "prometheus" })),
        ];
        let namespaces = [namespace("monitoring", json!({ "team": "ops" }))];
        let and = web_ingress(
            "and",
            json!([{ "namespaceSelector": { "matchLabels": { "team": "ops" } },
                     "podSelector": { "matchLabels": { "app": "prometheus" } } }]),
            json!(null),
        );
        // Two peers instead: either.
        let or = web_ingress(
            "or",
            json!([{ "namespaceSelector": { "matchLabels": { "team": "ops" } } },
                   { "podSelector": { "matchLabels": { "app": "prometheus" } } }]),
            json!(null),
        );
        let and_view = view(&pods, &namespaces, std::slice::from_ref(&and));
        assert_eq!(ingress(&and_view, "fd00:a::1").rules, vec![rule(hosts(&["fd00:a::2"]), Ports::Any)]);
        let or_view = view(&pods, &namespaces, &[or]);
        assert_eq!(ingress(&or_view, "fd00:a::1").rules, vec![rule(hosts(&["fd00:a::2", "fd00:a::3", "fd00:a::4"]), Ports::Any)]);
    }

    #[test]
    fn an_ipv6_block_keeps_its_excepts_and_host_bits_are_masked_with_a_problem() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let blocks = web_ingress(
            "blocks",
            json!([{ "ipBlock": { "cidr": "2001:db8::/32", "except": ["2001:db8:1::/48", "2001:db8:2::1/48"] } },
                   { "ipBlock": { "cidr": "2001:db9::1/64" } }]),
            json!(null),
        );
        let view = view(&pods, &[], &[blocks]);
        assert_eq!(
            ingress(&view, "fd00:a::1").rules,
            vec![rule(
                Peers::Blocks(vec![block("2001:db8::/32", &["2001:db8:1::/48", "2001:db8:2::/48"]), block("2001:db9::/64", &[])]),
                Ports::Any
            )]
        );
        assert_eq!(
            messages(&view),
            vec![
                "default/blocks: ipBlock 2001:db8::/32: except 2001:db8:2::1/48: host bits are set; taken as 2001:db8:2::/48",
                "default/blocks: ipBlock 2001:db9::1/64: host bits are set; taken as 2001:db9::/64",
            ]
        );
    }

    #[test]
    fn an_except_outside_its_cidr_is_dropped_with_a_problem_and_one_around_it_empties_the_block() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let blocks = web_ingress(
            "blocks",
            json!([{ "ipBlock": { "cidr": "2001:db8::/32", "except": ["2001:db9::/48", "2001:db8:1::/48"] } },
                   { "ipBlock": { "cidr": "2001:db8:ff::/48", "except": ["2001:db8::/32"] } }]),
            json!(null),
        );
        let view = view(&pods, &[], &[blocks]);
        assert_eq!(
            ingress(&view, "fd00:a::1").rules,
            vec![rule(
                Peers::Blocks(vec![
                    block("2001:db8::/32", &["2001:db8:1::/48"]),
                    block("2001:db8:ff::/48", &["2001:db8:ff::/48"])
                ]),
                Ports::Any
            )]
        );
        assert_eq!(
            messages(&view),
            vec![
                "default/blocks: ipBlock 2001:db8::/32: except 2001:db9::/48 is outside the cidr; it removes nothing and is dropped",
                "default/blocks: ipBlock 2001:db8:ff::/48: except 2001:db8::/32 covers all of the cidr; the block matches nothing",
            ]
        );
    }

    #[test]
    fn an_ipv4_block_is_reached_through_the_nat64_prefix() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let v4 = policy(
            "default",
            "v4",
            json!({ "podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{ "to": [{ "ipBlock": { "cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"] } },
                                        { "ipBlock": { "cidr": "0.0.0.0/0" } }] }] }),
        );
        let view = view(&pods, &[], std::slice::from_ref(&v4));
        assert_eq!(
            egress(&view, "fd00:a::1").rules,
            vec![rule(
                Peers::Blocks(vec![block("64:ff9b::a00:0/104", &["64:ff9b::a01:0/112"]), block("64:ff9b::/96", &[])]),
                Ports::Any
            )]
        );
        assert!(view.problems.is_empty(), "{:?}", view.problems);

        // Without a NAT64 prefix no IPv4 host is reachable: the blocks match nothing.
        let view = built(&[], None, &pods, &[], &[v4], &[], &BTreeMap::new());
        assert_eq!(egress(&view, "fd00:a::1").rules, vec![rule(Peers::Blocks(vec![]), Ports::Any)]);
        assert_eq!(
            messages(&view),
            vec![
                "default/v4: ipBlock 0.0.0.0/0: IPv4 needs the cluster's NAT64 prefix, which this node has none of; the block matches nothing",
                "default/v4: ipBlock 10.0.0.0/8: IPv4 needs the cluster's NAT64 prefix, which this node has none of; the block matches nothing",
            ]
        );
    }

    #[test]
    fn an_ipv4_except_of_an_ipv6_block_goes_through_nat64_and_without_it_empties_the_block() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let all_but =
            web_ingress("all-but", json!([{ "ipBlock": { "cidr": "::/0", "except": ["192.168.0.0/16"] } }]), json!(null));
        let view = view(&pods, &[], std::slice::from_ref(&all_but));
        assert_eq!(
            ingress(&view, "fd00:a::1").rules,
            vec![rule(Peers::Blocks(vec![block("::/0", &["64:ff9b::c0a8:0/112"])]), Ports::Any)]
        );
        let view = built(&[], None, &pods, &[], &[all_but], &[], &BTreeMap::new());
        assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(Peers::Blocks(vec![]), Ports::Any)]);
        assert_eq!(view.problems.len(), 1, "{:?}", view.problems);
    }

    #[test]
    fn an_unparsable_cidr_is_a_problem_and_matches_nothing() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let bad = web_ingress("bad", json!([{ "ipBlock": { "cidr": "fd00::" } }]), json!(null));
        let view = view(&pods, &[], &[bad]);
        assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(Peers::Blocks(vec![]), Ports::Any)]);
        assert_eq!(messages(&view), vec!["default/bad: ipBlock fd00::: not a CIDR (address/length); the block matches nothing"]);
    }

    #[test]
    fn ports_by_number_and_range_tcp_by_default_udp_and_sctp() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let ports = web_ingress(
            "ports",
            json!(null),
            json!([{ "port": 80 },
                   { "port": 8000, "endPort": 8080, "protocol": "TCP" },
                   { "port": 53, "protocol": "UDP" },
                   { "port": 3868, "protocol": "SCTP" },
                   { "protocol": "UDP" }]),
        );
        let view = view(&pods, &[], &[ports]);
        assert_eq!(
            ingress(&view, "fd00:a::1").rules,
            vec![rule(
                Peers::Any,
                Ports::Ranges(vec![
                    tcp(80, 80),
                    tcp(8000, 8080),
                    PortRange { protocol: PROTOCOL_UDP, first: 53, last: 53 },
                    PortRange { protocol: PROTOCOL_SCTP, first: 3868, last: 3868 },
                    PortRange { protocol: PROTOCOL_UDP, first: 0, last: 65535 },
                ])
            )]
        );
        assert!(view.problems.is_empty(), "{:?}", view.problems);
    }

    #[test]
    fn a_port_with_an_unknown_protocol_or_an_end_below_it_is_skipped_with_a_problem() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let ports = web_ingress(
            "ports",
            json!(null),
            json!([{ "port": 80, "protocol": "ICMP" }, { "port": 9000, "endPort": 8000 }, { "port": 443 }]),
        );
        let only_bad = web_ingress("only-bad", json!(null), json!([{ "port": 80, "protocol": "ICMP" }]));
        let view = view(&pods, &[], &[ports, only_bad]);
        // Refusing every entry must not open every port.
        assert_eq!(
            ingress(&view, "fd00:a::1").rules,
            vec![rule(Peers::Any, Ports::Ranges(vec![])), rule(Peers::Any, Ports::Ranges(vec![tcp(443, 443)]))]
        );
        assert_eq!(
            messages(&view),
            vec![
                "default/only-bad: spec.ingress[0].ports[0] (80/ICMP): the protocol is not TCP, UDP or SCTP; the entry is skipped",
                "default/ports: spec.ingress[0].ports[0] (80/ICMP): the protocol is not TCP, UDP or SCTP; the entry is skipped",
                "default/ports: spec.ingress[0].ports[1] (9000-8000/TCP): endPort is below port; the entry is skipped",
            ]
        );
    }

    #[test]
    fn a_named_port_on_ingress_is_each_subject_pods_own() {
        let pods = [
            pod(
                "default",
                "web-1",
                NODE,
                &["fd00:a::1"],
                json!({ "app": "web" }),
                json!([{ "name": "http", "containerPort": 8080 }, { "name": "dns", "containerPort": 53, "protocol": "UDP" }]),
            ),
            pod(
                "default",
                "web-2",
                NODE,
                &["fd00:a::2"],
                json!({ "app": "web" }),
                json!([{ "name": "http", "containerPort": 9090 }]),
            ),
            pod("default", "web-3", NODE, &["fd00:a::3"], json!({ "app": "web" }), json!([])),
        ];
        let named = web_ingress(
            "named",
            json!(null),
            json!([{ "port": "http" }, { "port": "dns", "protocol": "UDP" }, { "port": "dns" }, { "port": 443 }]),
        );
        let view = view(&pods, &[], &[named]);
        let udp53 = PortRange { protocol: PROTOCOL_UDP, first: 53, last: 53 };
        assert_eq!(
            ingress(&view, "fd00:a::1").rules,
            vec![rule(Peers::Any, Ports::Ranges(vec![tcp(8080, 8080), udp53, tcp(443, 443)]))]
        );
        assert_eq!(
            ingress(&view, "fd00:a::2").rules,
            vec![rule(Peers::Any, Ports::Ranges(vec![tcp(9090, 9090), tcp(443, 443)]))]
        );
        // A pod without the port: only the numbered one. Not a problem.
        assert_eq!(ingress(&view, "fd00:a::3").rules, vec![rule(Peers::Any, Ports::Ranges(vec![tcp(443, 443)]))]);
        assert!(view.problems.is_empty(), "{:?}", view.problems);
    }

    #[test]
    fn a_named_port_on_egress_is_split_by_destination_pod() {
        let pods = [
            plain_pod("default", "client", NODE, "fd00:a::1", json!({ "app": "client" })),
            pod(
                "default",
                "api-1",
                "node-b",
                &["fd00:b::1", "fd00:b::2"],
                json!({ "app": "api" }),
                json!([{ "name": "http", "containerPort": 8080 }]),
            ),
            pod(
                "default",
                "api-2",
                NODE,
                &["fd00:a::2"],
                json!({ "app": "api" }),
                json!([{ "name": "http", "containerPort": 9090 }]),
            ),
            pod(
                "default",
                "api-3",
                NODE,
                &["fd00:a::3"],
                json!({ "app": "api" }),
                json!([{ "name": "metrics", "containerPort": 9100 }]),
            ),
            pod(
                "default",
                "db",
                NODE,
                &["fd00:a::4"],
                json!({ "app": "db" }),
                json!([{ "name": "http", "containerPort": 7070 }]),
            ),
        ];
        let to_api = policy(
            "default",
            "to-api",
            json!({ "podSelector": { "matchLabels": { "app": "client" } }, "policyTypes": ["Egress"],
                    "egress": [{ "to": [{ "podSelector": { "matchLabels": { "app": "api" } } },
                                        { "ipBlock": { "cidr": "2001:db8::/32" } }],
                                 "ports": [{ "port": "http" }, { "port": 443 }] },
                               { "ports": [{ "port": "metrics" }] }] }),
        );
        let view = view(&pods, &[], &[to_api]);
        let api_peers = Peers::Blocks(vec![
            host("fd00:a::2"),
            host("fd00:a::3"),
            host("fd00:b::1"),
            host("fd00:b::2"),
            block("2001:db8::/32", &[]),
        ]);
        assert_eq!(
            egress(&view, "fd00:a::1").rules,
            vec![
                // The numbered port, with the rule's peers, ipBlock included.
                rule(api_peers, Ports::Ranges(vec![tcp(443, 443)])),
                // "http" on each api pod that has it: not api-3, not db, not the ipBlock.
                rule(hosts(&["fd00:a::2"]), Ports::Ranges(vec![tcp(9090, 9090)])),
                rule(hosts(&["fd00:b::1", "fd00:b::2"]), Ports::Ranges(vec![tcp(8080, 8080)])),
                // Open to any peer: every pod of the cluster with "metrics".
                rule(hosts(&["fd00:a::3"]), Ports::Ranges(vec![tcp(9100, 9100)])),
            ]
        );
        assert_eq!(view.pods[&ip("fd00:a::1")].ingress, None, "an Egress-only policy");
    }

    #[test]
    fn without_policy_types_an_egress_list_isolates_both_directions() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let both = policy("default", "both", json!({ "podSelector": {}, "egress": [] }));
        let view = view(&pods, &[], &[both]);
        let expected =
            Some(DirectionRules { policies: vec!["default/both".into()], isolated: true, ..DirectionRules::default() });
        assert_eq!(view.pods[&ip("fd00:a::1")].ingress, expected);
        assert_eq!(view.pods[&ip("fd00:a::1")].egress, expected);
    }

    #[test]
    fn an_egress_only_policy_leaves_ingress_open_even_with_ingress_rules() {
        let pods = [plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let egress_only = policy(
            "default",
            "egress-only",
            json!({ "podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}],
                    "egress": [{ "to": [{ "ipBlock": { "cidr": "2001:db8::/32" } }] }] }),
        );
        let view = view(&pods, &[], &[egress_only]);
        let web = &view.pods[&ip("fd00:a::1")];
        assert_eq!(web.ingress, None);
        assert_eq!(egress(&view, "fd00:a::1").rules, vec![rule(Peers::Blocks(vec![block("2001:db8::/32", &[])]), Ports::Any)]);
    }

    #[test]
    fn pods_of_other_nodes_are_peers_but_not_subjects() {
        let pods = [
            plain_pod("default", "web-a", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("default", "web-b", "node-b", "fd00:b::1", json!({ "app": "web" })),
        ];
        let web_to_web = web_ingress("web", json!([{ "podSelector": { "matchLabels": { "app": "web" } } }]), json!(null));
        let view = view(&pods, &[], &[web_to_web]);
        assert_eq!(view.pods.keys().copied().collect::<Vec<_>>(), vec![ip("fd00:a::1")]);
        assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(hosts(&["fd00:a::1", "fd00:b::1"]), Ports::Any)]);
    }

    #[test]
    fn host_network_and_finished_pods_are_neither_subjects_nor_peers() {
        let mut host_pod = plain_pod("default", "agent", NODE, "fd00::100", json!({ "app": "web" }));
        host_pod.spec.as_mut().unwrap().host_network = Some(true);
        let mut done = plain_pod("default", "job", NODE, "fd00:a::9", json!({ "app": "web" }));
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut failed = plain_pod("default", "crashed", "node-b", "fd00:b::9", json!({ "app": "web" }));
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        let pods = [host_pod, done, failed, plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }))];
        let web_to_web = web_ingress("web", json!([{ "podSelector": {} }]), json!(null));
        let view = view(&pods, &[], &[web_to_web]);
        assert_eq!(view.pods.keys().copied().collect::<Vec<_>>(), vec![ip("fd00:a::1")]);
        assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(hosts(&["fd00:a::1"]), Ports::Any)]);
    }

    #[test]
    fn every_ipv6_address_of_a_pod_is_a_key_and_pod_ip_is_the_fallback() {
        let dual = pod("default", "dual", NODE, &["10.0.0.1", "fd00:a::1", "fd00:a::2"], json!({}), json!([]));
        let old: Pod = serde_json::from_value(json!({
            "metadata": { "name": "old", "namespace": "default" },
            "spec": { "nodeName": NODE, "containers": [{ "name": "main" }] },
            "status": { "phase": "Running", "podIP": "fd00:a::3" },
        }))
        .unwrap();
        let v4_only = plain_pod("default", "v4", NODE, "10.0.0.2", json!({}));
        let view = view(&[dual, old, v4_only], &[], &[]);
        assert_eq!(view.pods.keys().copied().collect::<Vec<_>>(), vec![ip("fd00:a::1"), ip("fd00:a::2"), ip("fd00:a::3")]);
        assert_eq!(view.pods[&ip("fd00:a::2")].name, "dual");
        assert_eq!(view.pods[&ip("fd00:a::3")].name, "old");
    }

    #[test]
    fn the_nodes_addresses_close_both_directions_rules_of_an_isolated_pod_only() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("default", "open", NODE, "fd00:a::2", json!({})),
        ];
        let both = policy(
            "default",
            "both",
            json!({ "podSelector": { "matchLabels": { "app": "web" } }, "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{ "ports": [{ "port": 80 }] }] }),
        );
        let node = [ip("fd00::a"), ip("2001:db8::a"), ip("fd00::a")];
        let view = built(&node, None, &pods, &[], &[both], &[], &BTreeMap::new());
        let web = &view.pods[&ip("fd00:a::1")];
        assert_eq!(
            web.ingress.as_ref().unwrap().rules,
            vec![rule(Peers::Any, Ports::Ranges(vec![tcp(80, 80)])), rule(hosts(&["fd00::a", "2001:db8::a"]), Ports::Any),]
        );
        assert_eq!(web.ingress.as_ref().unwrap().policies, vec!["default/both".to_string()]);
        assert_eq!(
            web.egress.as_ref().unwrap().rules,
            vec![rule(hosts(&["fd00::a", "2001:db8::a"]), Ports::Any)],
            "egress: to the node only"
        );
        assert_eq!(view.pods[&ip("fd00:a::2")].ingress, None, "nor for a pod no policy isolates");
    }

    #[test]
    fn match_expressions_operators() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("default", "blue", NODE, "fd00:a::2", json!({ "tier": "front", "color": "blue" })),
            plain_pod("default", "green", NODE, "fd00:a::3", json!({ "tier": "back", "color": "green" })),
            plain_pod("default", "bare", NODE, "fd00:a::4", json!({})),
        ];
        let with = |name: &str, expression: Value| {
            web_ingress(name, json!([{ "podSelector": { "matchExpressions": [expression] } }]), json!(null))
        };
        let cases = [
            (json!({ "key": "color", "operator": "In", "values": ["blue", "red"] }), vec!["fd00:a::2"]),
            (json!({ "key": "color", "operator": "NotIn", "values": ["blue"] }), vec!["fd00:a::1", "fd00:a::3", "fd00:a::4"]),
            (json!({ "key": "tier", "operator": "Exists" }), vec!["fd00:a::2", "fd00:a::3"]),
            (json!({ "key": "tier", "operator": "DoesNotExist" }), vec!["fd00:a::1", "fd00:a::4"]),
        ];
        for (expression, expected) in cases {
            let view = view(&pods, &[], &[with("expr", expression.clone())]);
            assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(hosts(&expected), Ports::Any)], "{expression}");
        }
        // matchLabels and matchExpressions together: both.
        let both = web_ingress(
            "both",
            json!([{ "podSelector": { "matchLabels": { "tier": "back" },
                                      "matchExpressions": [{ "key": "color", "operator": "Exists" }] } }]),
            json!(null),
        );
        let view = view(&pods, &[], &[both]);
        assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(hosts(&["fd00:a::3"]), Ports::Any)]);
    }

    #[test]
    fn an_unknown_operator_is_a_problem_and_its_selector_matches_nothing() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("default", "client", NODE, "fd00:a::2", json!({ "app": "client" })),
        ];
        let odd = web_ingress(
            "odd",
            json!([{ "podSelector": { "matchExpressions": [{ "key": "app", "operator": "Matches", "values": ["c.*"] }] } },
                   { "namespaceSelector": { "matchExpressions": [{ "key": "x", "operator": "Gt", "values": ["1"] }] } }]),
            json!(null),
        );
        let view = view(&pods, &[], &[odd]);
        assert_eq!(ingress(&view, "fd00:a::1").rules, vec![rule(Peers::Blocks(vec![]), Ports::Any)]);
        assert_eq!(
            messages(&view),
            vec![
                "default/odd: spec.ingress[0].from[0].podSelector: operator \"Matches\" (key \"app\") is not In, NotIn, Exists or DoesNotExist; the selector matches nothing",
                "default/odd: spec.ingress[0].from[1].namespaceSelector: operator \"Gt\" (key \"x\") is not In, NotIn, Exists or DoesNotExist; the selector matches nothing",
            ]
        );
    }

    #[test]
    fn policies_add_up_in_name_order_and_each_problem_is_named_once() {
        let pods = [
            plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" })),
            plain_pod("default", "client", "node-b", "fd00:b::1", json!({ "app": "client" })),
        ];
        let b = web_ingress("b", json!([{ "podSelector": { "matchLabels": { "app": "client" } } }]), json!([{ "port": 80 }]));
        let a = web_ingress("a", json!(null), json!([{ "port": 443 }]));
        // The same refused block in two rules: one problem, and the two
        // (equal) rules once.
        let c = policy(
            "default",
            "c",
            json!({ "podSelector": {}, "ingress": [{ "from": [{ "ipBlock": { "cidr": "nonsense" } }] },
                                                   { "from": [{ "ipBlock": { "cidr": "nonsense" } }] }] }),
        );
        let view = view(&pods, &[], &[b, c, a]);
        let rules = ingress(&view, "fd00:a::1");
        assert_eq!(rules.policies, vec!["default/a".to_string(), "default/b".to_string(), "default/c".to_string()]);
        assert_eq!(
            rules.rules,
            vec![
                rule(Peers::Any, Ports::Ranges(vec![tcp(443, 443)])),
                rule(hosts(&["fd00:b::1"]), Ports::Ranges(vec![tcp(80, 80)])),
                rule(Peers::Blocks(vec![]), Ports::Any),
            ]
        );
        assert_eq!(messages(&view), vec!["default/c: ipBlock nonsense: not a CIDR (address/length); the block matches nothing"]);
    }

    #[test]
    fn the_view_is_the_same_whatever_the_order_of_its_input() {
        let pods = vec![
            pod(
                "default",
                "web",
                NODE,
                &["fd00:a::1"],
                json!({ "app": "web" }),
                json!([{ "name": "http", "containerPort": 80 }]),
            ),
            pod(
                "default",
                "api",
                "node-b",
                &["fd00:b::1"],
                json!({ "app": "api" }),
                json!([{ "name": "http", "containerPort": 8080 }]),
            ),
            plain_pod("ops", "prometheus", NODE, "fd00:a::2", json!({ "app": "prometheus" })),
            plain_pod("ops", "grafana", "node-c", "fd00:c::1", json!({ "app": "grafana" })),
        ];
        let namespaces = vec![namespace("ops", json!({ "team": "ops" })), namespace("default", json!({}))];
        let policies = vec![
            web_ingress(
                "from-ops",
                json!([{ "namespaceSelector": { "matchLabels": { "team": "ops" } } }]),
                json!([{ "port": "http" }]),
            ),
            policy(
                "default",
                "egress",
                json!({ "podSelector": {}, "egress": [{ "ports": [{ "port": "http" }, { "port": 53, "protocol": "UDP" }] }] }),
            ),
            policy(
                "ops",
                "deny",
                json!({ "podSelector": {}, "ingress": [{ "from": [{ "ipBlock": { "cidr": "10.0.0.1/8" } }] }] }),
            ),
        ];
        let node = [ip("fd00::a")];
        let nat64 = Some(net("64:ff9b::/96"));
        let forward = built(&node, nat64, &pods, &namespaces, &policies, &[], &BTreeMap::new());
        let backward = built(&node, nat64, &reversed(&pods), &reversed(&namespaces), &reversed(&policies), &[], &BTreeMap::new());
        assert_eq!(forward, backward);
        assert_eq!(forward, built(&node, nat64, &pods, &namespaces, &policies, &[], &BTreeMap::new()));
        assert_eq!(forward.pods.len(), 2);
        assert_eq!(forward.problems.len(), 1, "{:?}", forward.problems);
        // And it survives a round trip through JSON, as the agent may report it.
        let text = serde_json::to_string(&forward).unwrap();
        assert_eq!(serde_json::from_str::<PolicyView>(&text).unwrap(), forward);
    }

    #[test]
    fn a_starting_pod_is_isolated_by_the_address_its_cni_gave_it() {
        // Pending, no address in its status yet: the runtime is still setting it up.
        let mut starting = plain_pod("default", "web", NODE, "fd00:a::1", json!({ "app": "web" }));
        starting.status.as_mut().unwrap().pod_ips = None;
        let elsewhere = {
            let mut pod = plain_pod("default", "far", "node-b", "fd00:b::1", json!({}));
            pod.status.as_mut().unwrap().pod_ips = None;
            pod
        };
        let deny = policy("default", "deny", json!({ "podSelector": {}, "policyTypes": ["Ingress"] }));
        let pods = [starting, elsewhere];
        assert!(built(&[], None, &pods, &[], std::slice::from_ref(&deny), &[], &BTreeMap::new()).pods.is_empty());
        let cni = BTreeMap::from([
            ("default/web".to_string(), vec![ip("fd00:a::1")]),
            ("default/far".to_string(), vec![ip("fd00:b::1")]),
        ]);
        let view = built(&[], None, &pods, &[], &[deny], &[], &cni);
        assert_eq!(view.pods.keys().collect::<Vec<_>>(), [&ip("fd00:a::1")], "only this node's pods are the CNI's");
        assert_eq!(view.pods[&ip("fd00:a::1")].ingress.as_ref().unwrap().policies, ["default/deny"]);
    }
}
