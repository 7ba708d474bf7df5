// SPDX-License-Identifier: Apache-2.0
//! A pod's rules for one direction as the BPF side reads them (abi.h,
//! "Network policy"): the tiers' rules in precedence order, cut into groups
//! of consecutive rules with one action; within a group each distinct set of
//! ports is a class, one bit of 64, lower bits first, so the lowest matching
//! class is the rule that decides. A peer prefix carries the classes of
//! every rule whose peers contain all of it, a port prefix the classes that
//! contain it. Entries never overlap in meaning: where prefixes nest, the
//! longer one carries its own answer, excepts included, so the longest match
//! alone decides. The datapath's cost is so three lookups however many
//! rules a pod has.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::Ipv6Addr,
};

use ipnet::Ipv6Net;
use serde::{Deserialize, Serialize};

use super::{Action, DirectionRules, Peers, PortRange, Ports, Rule, Tier};

/// Classes one direction of a pod may have (bits of the class mask).
pub const CLASSES_MAX: usize = v6node_abi::POLICY_CLASSES_MAX as usize;

/// One port prefix of one protocol and the classes containing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PortPrefix {
    pub protocol: u8,
    pub port: u16,
    /// Leading bits of `port` that count, 0..=16.
    pub len: u8,
    pub classes: u64,
}

/// What the maps hold for one direction of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledRules {
    /// Classes of rules without ports: every protocol and port.
    pub any_port_classes: u64,
    /// Classes of Accept rules; of Pass rules; of the Admin tier. A
    /// matching class in none of the first two denies.
    pub accept_classes: u64,
    pub pass_classes: u64,
    pub admin_classes: u64,
    /// Each peer prefix and its classes (0: an except, nothing allowed).
    pub peers: Vec<(Ipv6Net, u64)>,
    pub ports: Vec<PortPrefix>,
}

impl CompiledRules {
    /// Entries this takes in the peer and port tries.
    pub fn entries(&self) -> usize {
        self.peers.len() + self.ports.len()
    }

    /// The pod entry's half for these rules, written under `id`.
    pub fn pod_entry(&self, id: u32, flags: u32) -> v6node_abi::PolicyRules {
        v6node_abi::PolicyRules {
            id,
            flags,
            any_port_classes: self.any_port_classes,
            accept_classes: self.accept_classes,
            pass_classes: self.pass_classes,
            admin_classes: self.admin_classes,
        }
    }
}

/// A port set in one canonical form: per protocol, sorted disjoint ranges.
type PortSet = BTreeMap<u8, Vec<(u16, u16)>>;

fn canonical(ranges: &[PortRange]) -> PortSet {
    let mut set: PortSet = BTreeMap::new();
    for range in ranges {
        set.entry(range.protocol).or_default().push((range.first, range.last));
    }
    for ranges in set.values_mut() {
        ranges.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
        for &(first, last) in ranges.iter() {
            match merged.last_mut() {
                Some(prev) if u32::from(first) <= u32::from(prev.1) + 1 => prev.1 = prev.1.max(last),
                _ => merged.push((first, last)),
            }
        }
        *ranges = merged;
    }
    set
}

/// Compiles one direction's rules. Fails, naming the limit, when the rules
/// need more classes than there are.
pub fn compile(rules: &DirectionRules) -> Result<CompiledRules, String> {
    let deny_the_rest = Rule { peers: Peers::Any, ports: Ports::Any };
    let mut ordered: Vec<(Tier, Action, &Rule)> = Vec::new();
    ordered.extend(rules.admin.iter().map(|r| (Tier::Admin, r.action, &r.rule)));
    if rules.isolated {
        // NetworkPolicies decide for the pods they select: the Baseline tier is never reached.
        ordered.extend(rules.rules.iter().map(|r| (Tier::NetworkPolicy, Action::Accept, r)));
        ordered.push((Tier::NetworkPolicy, Action::Deny, &deny_the_rest));
    } else {
        ordered.extend(rules.baseline.iter().map(|r| (Tier::Baseline, r.action, &r.rule)));
    }

    // Classes: one per group and distinct port set, `None` standing for every port.
    let mut class_of: BTreeMap<(usize, Option<PortSet>), usize> = BTreeMap::new();
    let mut compiled = CompiledRules::default();
    let mut rule_class = Vec::with_capacity(ordered.len());
    let mut group = 0;
    for (i, &(tier, action, rule)) in ordered.iter().enumerate() {
        if i > 0 && (ordered[i - 1].0, ordered[i - 1].1) != (tier, action) {
            group += 1;
        }
        let set = match &rule.ports {
            Ports::Any => None,
            Ports::Ranges(ranges) => Some(canonical(ranges)),
        };
        let next = class_of.len();
        let any_port = set.is_none();
        let class = *class_of.entry((group, set)).or_insert(next);
        if class >= CLASSES_MAX {
            return Err(format!(
                "the rules of {} need {} classes (distinct sets of ports in runs of rules with one action); one direction of a pod can have {CLASSES_MAX}",
                rules.policies.join(", "),
                class + 1,
            ));
        }
        let bit = 1u64 << class;
        match action {
            Action::Accept => compiled.accept_classes |= bit,
            Action::Pass => compiled.pass_classes |= bit,
            Action::Deny => {}
        }
        if tier == Tier::Admin {
            compiled.admin_classes |= bit;
        }
        if any_port {
            compiled.any_port_classes |= bit;
        }
        rule_class.push((rule, bit));
    }
    compiled.ports = port_prefixes(class_of.iter().filter_map(|((_, set), &class)| set.as_ref().map(|s| (s, 1u64 << class))));
    compiled.peers = peer_prefixes(&rule_class);
    Ok(compiled)
}

/// What a pod whose rules cannot be compiled gets when it has no last good
/// ones: everything denied (it fails closed, never open).
pub fn deny_all() -> CompiledRules {
    compile(&DirectionRules { isolated: true, ..DirectionRules::default() }).expect("one class")
}

/// Per protocol, the port line cut where any class's range starts or ends:
/// each piece has one set of classes, written as the prefixes that tile it.
fn port_prefixes<'a>(classes: impl Iterator<Item = (&'a PortSet, u64)>) -> Vec<PortPrefix> {
    let mut by_protocol: BTreeMap<u8, Vec<(u16, u16, u64)>> = BTreeMap::new();
    for (set, class) in classes {
        for (&protocol, ranges) in set {
            by_protocol.entry(protocol).or_default().extend(ranges.iter().map(|&(f, l)| (f, l, class)));
        }
    }
    let mut prefixes = Vec::new();
    for (protocol, ranges) in by_protocol {
        let mut cuts: BTreeSet<u32> = BTreeSet::new();
        for &(first, last, _) in &ranges {
            cuts.insert(u32::from(first));
            cuts.insert(u32::from(last) + 1);
        }
        let cuts: Vec<u32> = cuts.into_iter().collect();
        for piece in cuts.windows(2) {
            let (first, end) = (piece[0], piece[1]);
            let classes = ranges
                .iter()
                .filter(|&&(f, l, _)| u32::from(f) <= first && end <= u32::from(l) + 1)
                .fold(0, |acc, &(_, _, c)| acc | c);
            if classes != 0 {
                for (port, len) in tile(first, end) {
                    prefixes.push(PortPrefix { protocol, port, len, classes });
                }
            }
        }
    }
    prefixes
}

/// The prefixes of 16-bit ports that cover [first, end) exactly.
fn tile(mut first: u32, end: u32) -> Vec<(u16, u8)> {
    let mut out = Vec::new();
    while first < end {
        let mut size = if first == 0 { 1 << 16 } else { 1u32 << first.trailing_zeros().min(16) };
        while first + size > end {
            size >>= 1;
        }
        out.push((first as u16, (16 - size.trailing_zeros()) as u8));
        first += size;
    }
    out
}

/// Every prefix named by a rule (blocks and excepts), each with the classes
/// of the rules that allow all of it: a block containing it, with no except
/// of that block containing it. Containing blocks are found by truncating
/// the prefix to each length blocks have, so the work grows with the number
/// of prefixes, not with their product.
fn peer_prefixes(rules: &[(&Rule, u64)]) -> Vec<(Ipv6Net, u64)> {
    let any = Ipv6Net::new(Ipv6Addr::UNSPECIFIED, 0).expect("::/0");
    // Block net -> (class, excepts) of each rule's block with that net.
    let mut blocks: HashMap<Ipv6Net, Vec<(u64, &[Ipv6Net])>> = HashMap::new();
    let mut named: BTreeSet<Ipv6Net> = BTreeSet::new();
    for &(rule, class) in rules {
        match &rule.peers {
            Peers::Any => {
                blocks.entry(any).or_default().push((class, &[]));
                named.insert(any);
            }
            Peers::Blocks(list) => {
                for block in list {
                    let net = block.net.trunc();
                    blocks.entry(net).or_default().push((class, &block.except));
                    named.insert(net);
                    named.extend(block.except.iter().map(|e| e.trunc()));
                }
            }
        }
    }
    let lengths: BTreeSet<u8> = blocks.keys().map(|net| net.prefix_len()).collect();
    named
        .into_iter()
        .map(|prefix| {
            let mut classes = 0;
            for &len in lengths.range(..=prefix.prefix_len()) {
                let outer = Ipv6Net::new(prefix.addr(), len).expect("a shorter length").trunc();
                for (class, excepts) in blocks.get(&outer).into_iter().flatten() {
                    if !excepts.iter().any(|e| e.contains(&prefix)) {
                        classes |= class;
                    }
                }
            }
            (prefix, classes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Block, Rule};

    fn net(s: &str) -> Ipv6Net {
        s.parse().unwrap()
    }

    fn tcp(first: u16, last: u16) -> PortRange {
        PortRange { protocol: 6, first, last }
    }

    fn rules(rules: Vec<Rule>) -> DirectionRules {
        DirectionRules { policies: vec!["default/p".into()], isolated: true, rules, ..DirectionRules::default() }
    }

    fn block(s: &str, except: &[&str]) -> Block {
        Block { net: net(s), except: except.iter().map(|e| net(e)).collect() }
    }

    /// What the BPF side answers for (peer, protocol, port): longest-match
    /// lookups in the compiled entries, then the same mask test.
    fn allows(c: &CompiledRules, peer: &str, protocol: u8, port: u16) -> bool {
        let peer: Ipv6Addr = peer.parse().unwrap();
        let Some(peer_classes) =
            c.peers.iter().filter(|(n, _)| n.contains(&peer)).max_by_key(|(n, _)| n.prefix_len()).map(|&(_, m)| m)
        else {
            return true;
        };
        let port_classes = c
            .ports
            .iter()
            .filter(|p| p.protocol == protocol && (p.len == 0 || (port ^ p.port) >> (16 - p.len) == 0))
            .max_by_key(|p| p.len)
            .map_or(0, |p| p.classes);
        let matching = peer_classes & (port_classes | c.any_port_classes);
        let mut first = matching & matching.wrapping_neg();
        if first & c.pass_classes & c.admin_classes != 0 {
            let later = matching & !c.admin_classes;
            first = later & later.wrapping_neg();
        }
        first == 0 || first & (c.accept_classes | c.pass_classes) != 0
    }

    #[test]
    fn tiles_are_exact_prefixes() {
        assert_eq!(tile(0, 65536), vec![(0, 0)]);
        assert_eq!(tile(80, 81), vec![(80, 16)]);
        assert_eq!(tile(8000, 8011), vec![(8000, 13), (8008, 15), (8010, 16)]);
        for (first, end) in [(1u32, 65536u32), (1000, 2001), (32768, 60999), (5, 6)] {
            let covered: u32 = tile(first, end).iter().map(|&(_, len)| 1u32 << (16 - len)).sum();
            assert_eq!(covered, end - first, "[{first}, {end})");
        }
    }

    #[test]
    fn a_port_in_two_classes_carries_both() {
        let c = compile(&rules(vec![
            Rule { peers: Peers::Blocks(vec![block("fd00::a/128", &[])]), ports: Ports::Ranges(vec![tcp(80, 90)]) },
            Rule { peers: Peers::Blocks(vec![block("fd00::b/128", &[])]), ports: Ports::Ranges(vec![tcp(85, 100)]) },
        ]))
        .unwrap();
        assert!(allows(&c, "fd00::a", 6, 80) && allows(&c, "fd00::a", 6, 88) && !allows(&c, "fd00::a", 6, 95));
        assert!(allows(&c, "fd00::b", 6, 88) && allows(&c, "fd00::b", 6, 100) && !allows(&c, "fd00::b", 6, 84));
        assert!(!allows(&c, "fd00::a", 17, 80), "UDP is not TCP");
        assert!(!allows(&c, "fd00::c", 6, 88), "no rule names fd00::c");
    }

    #[test]
    fn excepts_and_nested_blocks_answer_by_the_longest_match() {
        let c = compile(&rules(vec![
            Rule { peers: Peers::Blocks(vec![block("fd00::/48", &["fd00:0:0:1::/64"])]), ports: Ports::Any },
            Rule {
                peers: Peers::Blocks(vec![block("fd00:0:0:1::/64", &["fd00:0:0:1::5/128"])]),
                ports: Ports::Ranges(vec![tcp(443, 443)]),
            },
        ]))
        .unwrap();
        assert!(allows(&c, "fd00::1", 58, 0), "in the /48, not in its except: any protocol");
        assert!(!allows(&c, "fd00:0:0:1::1", 6, 80), "the except of the first rule");
        assert!(allows(&c, "fd00:0:0:1::1", 6, 443), "but the second rule allows its port");
        assert!(!allows(&c, "fd00:0:0:1::5", 6, 443), "the second rule's except");
        assert!(!allows(&c, "fd01::1", 6, 443));
    }

    #[test]
    fn rules_with_the_same_ports_share_a_class() {
        let rule = |peer: &str| Rule { peers: Peers::Blocks(vec![block(peer, &[])]), ports: Ports::Ranges(vec![tcp(80, 80)]) };
        let c = compile(&rules(vec![rule("fd00::a/128"), rule("fd00::b/128"), rule("fd00::c/128")])).unwrap();
        // Class 0: port 80; class 1: NetworkPolicies' "deny the rest", which every peer is in.
        assert!(c.peers.iter().all(|&(net, m)| m == if net.prefix_len() == 0 { 0b10 } else { 0b11 }), "{:?}", c.peers);
        assert_eq!(c.ports, vec![PortPrefix { protocol: 6, port: 80, len: 16, classes: 1 }]);
    }

    #[test]
    fn no_rules_deny_everything_and_any_allows_everything() {
        let c = compile(&rules(vec![])).unwrap();
        assert_eq!(c.peers, vec![(net("::/0"), 1)]);
        assert!(!allows(&c, "fd00::1", 6, 80) && c.accept_classes == 0);
        let c = compile(&rules(vec![Rule { peers: Peers::Any, ports: Ports::Any }])).unwrap();
        assert!(allows(&c, "2001:db8::1", 6, 1) && allows(&c, "::1", 132, 65535) && allows(&c, "fd00::1", 58, 0));
    }

    #[test]
    fn more_port_sets_than_classes_are_refused_by_name() {
        let many = (0..=CLASSES_MAX as u16)
            .map(|i| Rule { peers: Peers::Any, ports: Ports::Ranges(vec![tcp(1000 + i, 1000 + i)]) })
            .collect();
        let err = compile(&rules(many)).unwrap_err();
        assert!(err.contains("need 65 classes") && err.contains("default/p"), "{err}");
    }

    fn tiered(action: Action, peer: Peers, ports: Ports) -> super::super::TierRule {
        super::super::TierRule { action, rule: Rule { peers: peer, ports } }
    }

    fn host(s: &str) -> Peers {
        Peers::Blocks(vec![block(s, &[])])
    }

    #[test]
    fn the_first_matching_rule_decides_across_tiers() {
        let c = compile(&DirectionRules {
            admin: vec![
                tiered(Action::Deny, host("fd00::a/128"), Ports::Ranges(vec![tcp(80, 80)])),
                tiered(Action::Accept, Peers::Any, Ports::Ranges(vec![tcp(80, 90)])),
                tiered(Action::Pass, host("fd00::b/128"), Ports::Any),
            ],
            baseline: vec![tiered(Action::Deny, Peers::Any, Ports::Any)],
            ..DirectionRules::default()
        })
        .unwrap();
        assert!(!allows(&c, "fd00::a", 6, 80), "the Admin Deny comes before the Accept");
        assert!(allows(&c, "fd00::a", 6, 81) && allows(&c, "fd00::c", 6, 85));
        assert!(!allows(&c, "fd00::b", 6, 22), "passed to the Baseline tier, which denies");
        assert!(!allows(&c, "fd00::c", 17, 53), "no Admin rule: the Baseline tier denies");
    }

    #[test]
    fn an_admin_pass_hands_the_flow_to_network_policies_which_then_decide() {
        let c = compile(&DirectionRules {
            admin: vec![
                tiered(Action::Pass, host("fd00::b/128"), Ports::Any),
                tiered(Action::Deny, Peers::Any, Ports::Ranges(vec![tcp(443, 443)])),
            ],
            isolated: true,
            rules: vec![Rule { peers: host("fd00::b/128"), ports: Ports::Ranges(vec![tcp(443, 443)]) }],
            baseline: vec![tiered(Action::Accept, Peers::Any, Ports::Any)],
            ..DirectionRules::default()
        })
        .unwrap();
        assert!(allows(&c, "fd00::b", 6, 443), "passed over the Admin Deny, allowed by the NetworkPolicy");
        assert!(!allows(&c, "fd00::b", 6, 80), "passed; no NetworkPolicy rule allows it");
        assert!(!allows(&c, "fd00::c", 6, 443), "the Admin Deny");
        assert!(!allows(&c, "fd00::c", 6, 80), "the NetworkPolicies decide: the Baseline Accept is never reached");
    }

    #[test]
    fn a_baseline_pass_allows_and_nothing_matching_allows() {
        let c = compile(&DirectionRules {
            baseline: vec![
                tiered(Action::Pass, host("fd00::b/128"), Ports::Any),
                tiered(Action::Deny, host("fd00::/64"), Ports::Any),
            ],
            ..DirectionRules::default()
        })
        .unwrap();
        assert!(allows(&c, "fd00::b", 6, 80) && !allows(&c, "fd00::c", 6, 80) && allows(&c, "fd01::c", 6, 80));
    }

    #[test]
    fn consecutive_rules_with_one_action_share_classes_and_others_do_not() {
        let port80 = || Ports::Ranges(vec![tcp(80, 80)]);
        let c = compile(&DirectionRules {
            admin: vec![
                tiered(Action::Accept, host("fd00::a/128"), port80()),
                tiered(Action::Accept, host("fd00::b/128"), port80()),
                tiered(Action::Deny, host("fd00::c/128"), port80()),
                tiered(Action::Accept, host("fd00::d/128"), port80()),
            ],
            ..DirectionRules::default()
        })
        .unwrap();
        assert_eq!((c.accept_classes, c.admin_classes, c.pass_classes), (0b101, 0b111, 0));
    }

    #[test]
    fn thousands_of_peers_compile_quickly() {
        let peers = (0..20_000u32).map(|i| block(&format!("fd00:10::{:x}:{:x}/128", i >> 16, i & 0xffff), &[])).collect();
        let start = std::time::Instant::now();
        let c = compile(&rules(vec![Rule { peers: Peers::Blocks(peers), ports: Ports::Ranges(vec![tcp(80, 80)]) }])).unwrap();
        assert_eq!(c.peers.len(), 20_001, "each peer, and ::/0 for the rest");
        assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
    }
}
