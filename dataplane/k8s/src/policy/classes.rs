// SPDX-License-Identifier: Apache-2.0
//! A pod's rules for one direction as the BPF side reads them (abi.h,
//! "Network policy"): each distinct set of ports is a class, one bit of 64;
//! a peer prefix carries the classes of every rule whose peers contain all
//! of it, a port prefix the classes that contain it. Entries never overlap
//! in meaning: where prefixes nest, the longer one carries its own answer,
//! excepts included, so the longest match alone decides. The datapath's
//! cost is so three lookups however many rules a pod has.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::Ipv6Addr,
};

use ipnet::Ipv6Net;
use serde::{Deserialize, Serialize};

use super::{DirectionRules, Peers, PortRange, Ports};

/// Distinct port sets one direction of a pod may have (bits of the class mask).
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
    /// Each peer prefix and its classes (0: an except, nothing allowed).
    pub peers: Vec<(Ipv6Net, u64)>,
    pub ports: Vec<PortPrefix>,
}

impl CompiledRules {
    /// Entries this takes in the peer and port tries.
    pub fn entries(&self) -> usize {
        self.peers.len() + self.ports.len()
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
/// have more distinct port sets than there are classes.
pub fn compile(rules: &DirectionRules) -> Result<CompiledRules, String> {
    // Classes: one per distinct port set, `None` standing for every port.
    let mut class_of: BTreeMap<Option<PortSet>, usize> = BTreeMap::new();
    let mut rule_class = Vec::with_capacity(rules.rules.len());
    for rule in &rules.rules {
        let set = match &rule.ports {
            Ports::Any => None,
            Ports::Ranges(ranges) => Some(canonical(ranges)),
        };
        let next = class_of.len();
        let class = *class_of.entry(set).or_insert(next);
        if class >= CLASSES_MAX {
            return Err(format!(
                "{} distinct sets of ports in the rules of {}; one direction of a pod can have {CLASSES_MAX}",
                class + 1,
                rules.policies.join(", ")
            ));
        }
        rule_class.push(1u64 << class);
    }
    let mut compiled = CompiledRules::default();
    for (set, &class) in &class_of {
        if set.is_none() {
            compiled.any_port_classes |= 1u64 << class;
        }
    }
    compiled.ports = port_prefixes(class_of.iter().filter_map(|(set, &class)| set.as_ref().map(|s| (s, 1u64 << class))));
    compiled.peers = peer_prefixes(rules, &rule_class);
    Ok(compiled)
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
fn peer_prefixes(rules: &DirectionRules, rule_class: &[u64]) -> Vec<(Ipv6Net, u64)> {
    let any = Ipv6Net::new(Ipv6Addr::UNSPECIFIED, 0).expect("::/0");
    // Block net -> (class, excepts) of each rule's block with that net.
    let mut blocks: HashMap<Ipv6Net, Vec<(u64, &[Ipv6Net])>> = HashMap::new();
    let mut named: BTreeSet<Ipv6Net> = BTreeSet::new();
    for (rule, &class) in rules.rules.iter().zip(rule_class) {
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
        DirectionRules { policies: vec!["default/p".into()], rules }
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
            return false;
        };
        let port_classes = c
            .ports
            .iter()
            .filter(|p| p.protocol == protocol && (p.len == 0 || (port ^ p.port) >> (16 - p.len) == 0))
            .max_by_key(|p| p.len)
            .map_or(0, |p| p.classes);
        peer_classes & (port_classes | c.any_port_classes) != 0
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
        assert!(c.peers.iter().all(|&(_, m)| m == 1));
        assert_eq!(c.ports, vec![PortPrefix { protocol: 6, port: 80, len: 16, classes: 1 }]);
    }

    #[test]
    fn no_rules_deny_everything_and_any_allows_everything() {
        let c = compile(&rules(vec![])).unwrap();
        assert!(c.peers.is_empty() && !allows(&c, "fd00::1", 6, 80));
        let c = compile(&rules(vec![Rule { peers: Peers::Any, ports: Ports::Any }])).unwrap();
        assert!(allows(&c, "2001:db8::1", 6, 1) && allows(&c, "::1", 132, 65535) && allows(&c, "fd00::1", 58, 0));
    }

    #[test]
    fn more_port_sets_than_classes_are_refused_by_name() {
        let many = (0..=CLASSES_MAX as u16)
            .map(|i| Rule { peers: Peers::Any, ports: Ports::Ranges(vec![tcp(1000 + i, 1000 + i)]) })
            .collect();
        let err = compile(&rules(many)).unwrap_err();
        assert!(err.contains("65 distinct sets of ports") && err.contains("default/p"), "{err}");
    }

    #[test]
    fn thousands_of_peers_compile_quickly() {
        let peers = (0..20_000u32).map(|i| block(&format!("fd00:10::{:x}:{:x}/128", i >> 16, i & 0xffff), &[])).collect();
        let start = std::time::Instant::now();
        let c = compile(&rules(vec![Rule { peers: Peers::Blocks(peers), ports: Ports::Ranges(vec![tcp(80, 80)]) }])).unwrap();
        assert_eq!(c.peers.len(), 20_000);
        assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
    }
}
