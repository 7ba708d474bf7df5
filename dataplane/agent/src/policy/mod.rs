// SPDX-License-Identifier: Apache-2.0
//! Network policy: the policy view (v6node-k8s) compiled per pod and
//! direction and written to the policy tables (abi.h, "Network policy").
//!
//! A pod's changed rules are written under a new id, the pod's entry is
//! switched to it in one map update, and only then are the old id's entries
//! deleted: a packet meets the old rules or the new ones, never a mix, and
//! what both allow is never dropped. Rules that cannot be compiled or
//! written (more port sets than classes, a full table) leave the pod with
//! its last good rules, the reason in `status`; a pod that has none yet is
//! isolated with no rule (it fails closed).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv6Addr,
    path::Path,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::maps::{
    lpm_trie::{Key, LpmTrie},
    HashMap as BpfHashMap, MapData, PerCpuHashMap,
};
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CounterValue, EndpointKey, PolicyClasses, PolicyPeer, PolicyPod, PolicyPort, PolicyRules, POLICY_AUDIT};
use v6node_config::PolicyMode;
use v6node_k8s::policy::{
    classes::{self, CompiledRules},
    DirectionRules, PolicyProblem, PolicyView,
};

use crate::bpf;

/// The two directions, in the order of `struct v6n_policy_pod`.
const DIRECTIONS: [&str; 2] = ["ingress", "egress"];

/// What `status` shows of one direction of one pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionState {
    /// "namespace/name" of the policies that select the pod for it.
    pub policies: Vec<String>,
    /// The id its rules are written under (0: none written yet).
    pub id: u32,
    /// Entries of the peer and port tables the rules take.
    pub entries: usize,
    /// Packets denied under ids this direction had before its current one.
    #[serde(default)]
    pub denied_before: u64,
    /// Why the wanted rules are not in force (the last good ones are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl DirectionState {
    /// Packets these rules, and the ids before them, denied: `live` is
    /// `denied_by_id`'s reading of the kernel's counts.
    pub fn denied(&self, live: &BTreeMap<u32, u64>) -> u64 {
        self.denied_before + live.get(&self.id).copied().unwrap_or(0)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodState {
    pub address: Ipv6Addr,
    /// "namespace/name".
    pub pod: String,
    pub ingress: Option<DirectionState>,
    pub egress: Option<DirectionState>,
}

/// The policy tables as `status` shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    pub mode: String,
    /// Pods of this node some policy isolates.
    pub pods: Vec<PodState>,
    pub problems: Vec<PolicyProblem>,
    /// Peer and port entries in the tables.
    pub entries: usize,
    /// The last sync that changed something: pods rewritten, and its time.
    pub rewritten: usize,
    pub sync_ms: f64,
}

impl PolicyState {
    /// Each pod direction whose rules are not in force, as a problem of
    /// every policy that selects it there, so the policy's Events say it.
    pub fn table_problems(&self) -> Vec<PolicyProblem> {
        let mut problems = Vec::new();
        for pod in &self.pods {
            for (direction, state) in DIRECTIONS.iter().zip([&pod.ingress, &pod.egress]) {
                let Some((state, error)) = state.as_ref().and_then(|s| s.error.as_ref().map(|e| (s, e))) else { continue };
                for policy in &state.policies {
                    // "namespace/name", or a ClusterNetworkPolicy's "Tier:name".
                    let (namespace, name) = match policy.split_once('/') {
                        Some((namespace, name)) => (namespace, name),
                        None => ("", policy.split_once(':').map_or(policy.as_str(), |(_, name)| name)),
                    };
                    problems.push(PolicyProblem {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                        message: format!("pod {} ({}), {direction}: {error}; its last good rules stay", pod.pod, pod.address),
                    });
                }
            }
        }
        problems
    }
}

/// One direction's rules as written.
#[derive(Clone, PartialEq)]
struct Written {
    id: u32,
    flags: u32,
    compiled: CompiledRules,
}

struct Tables {
    pods: BpfHashMap<MapData, EndpointKey, PolicyPod>,
    peers: LpmTrie<MapData, PolicyPeer, PolicyClasses>,
    ports: LpmTrie<MapData, PolicyPort, PolicyClasses>,
    denied: PerCpuHashMap<MapData, u32, CounterValue>,
}

impl Tables {
    fn open(pin_dir: &Path) -> Result<Tables> {
        Ok(Tables {
            pods: bpf::open_pinned_map(pin_dir, maps::POLICY_PODS)?,
            peers: bpf::open_pinned_map(pin_dir, maps::POLICY_PEERS)?,
            ports: bpf::open_pinned_map(pin_dir, maps::POLICY_PORTS)?,
            denied: bpf::open_pinned_map(pin_dir, maps::POLICY_DENIED)?,
        })
    }

    fn write(&mut self, id: u32, compiled: &CompiledRules) -> Result<()> {
        for (net, classes) in &compiled.peers {
            let key = Key::new(32 + u32::from(net.prefix_len()), PolicyPeer { id: id.to_be(), addr: net.addr().octets() });
            self.peers
                .insert(&key, PolicyClasses { classes: *classes }, 0)
                .with_context(|| format!("writing peer {net} (the peer table holds {})", v6node_abi::POLICY_PEERS_MAX))?;
        }
        for p in &compiled.ports {
            let key = Key::new(
                48 + u32::from(p.len),
                PolicyPort { id: id.to_be(), protocol: p.protocol, pad: 0, port: p.port.to_be() },
            );
            self.ports.insert(&key, PolicyClasses { classes: p.classes }, 0).with_context(|| {
                format!("writing port {}/{} (the port table holds {})", p.port, p.len, v6node_abi::POLICY_PORTS_MAX)
            })?;
        }
        Ok(())
    }

    /// Deletes the entries of `id` (those already gone are no error: a
    /// write that failed halfway is undone with this too).
    fn remove(&mut self, id: u32, compiled: &CompiledRules) {
        for (net, _) in &compiled.peers {
            let _ = self
                .peers
                .remove(&Key::new(32 + u32::from(net.prefix_len()), PolicyPeer { id: id.to_be(), addr: net.addr().octets() }));
        }
        for p in &compiled.ports {
            let _ = self.ports.remove(&Key::new(
                48 + u32::from(p.len),
                PolicyPort { id: id.to_be(), protocol: p.protocol, pad: 0, port: p.port.to_be() },
            ));
        }
    }

    fn denied(&self, id: u32) -> u64 {
        self.denied.get(&id, 0).map(|per_cpu| per_cpu.iter().map(|v| v.packets).sum()).unwrap_or(0)
    }

    /// Entries of ids no pod has (a previous agent's, or a write cut short):
    /// one pass over both tables.
    fn collect_garbage(&mut self, live: &BTreeSet<u32>) -> usize {
        let stale_peers: Vec<Key<PolicyPeer>> =
            self.peers.keys().filter_map(Result::ok).filter(|k| !live.contains(&u32::from_be(k.data().id))).collect();
        let stale_ports: Vec<Key<PolicyPort>> =
            self.ports.keys().filter_map(Result::ok).filter(|k| !live.contains(&u32::from_be(k.data().id))).collect();
        for key in &stale_peers {
            let _ = self.peers.remove(key);
        }
        for key in &stale_ports {
            let _ = self.ports.remove(key);
        }
        stale_peers.len() + stale_ports.len()
    }
}

/// The written rules of this node's pods, and the ids they hold.
#[derive(Default)]
pub struct PolicyTables {
    written: BTreeMap<Ipv6Addr, [Option<Written>; 2]>,
    /// Denied packets counted under each pod's retired ids.
    denied_before: BTreeMap<(Ipv6Addr, usize), u64>,
    next_id: u32,
    /// Whether the tables were read since this agent started (a previous
    /// agent's ids are avoided, and its stale entries removed, once).
    adopted: bool,
}

impl PolicyTables {
    fn take_id(&mut self, used: &BTreeSet<u32>) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            if self.next_id != 0 && !used.contains(&self.next_id) {
                return self.next_id;
            }
        }
    }

    /// Brings the tables in line with `view`. Returns the state for
    /// `status`, or an error when the tables cannot be opened (they are
    /// pinned with the pod object, at the first pod device).
    pub fn sync(&mut self, pin_dir: &Path, view: &PolicyView, mode: PolicyMode) -> Result<PolicyState> {
        let started = Instant::now();
        let mut tables = Tables::open(pin_dir)?;
        let mut used: BTreeSet<u32> = self.written.values().flatten().flatten().map(|w| w.id).collect();
        if !self.adopted {
            // A previous agent's ids stay in force until replaced: never reuse them.
            for (_, pod) in tables.pods.iter().filter_map(Result::ok) {
                used.extend(pod.direction.iter().map(|d| d.id).filter(|&id| id != 0));
            }
            self.next_id = used.iter().max().copied().unwrap_or(0);
        }
        let flags = if mode == PolicyMode::Audit { POLICY_AUDIT } else { 0 };
        let mut state =
            PolicyState { mode: format!("{mode:?}").to_lowercase(), problems: view.problems.clone(), ..Default::default() };

        for (&address, pod) in &view.pods {
            let wanted: [Option<&DirectionRules>; 2] = [pod.ingress.as_ref(), pod.egress.as_ref()];
            let before = self.written.get(&address).cloned().unwrap_or_default();
            let mut after = before.clone();
            let mut errors: [Option<String>; 2] = [None, None];
            for (d, rules) in wanted.iter().enumerate() {
                let Some(rules) = rules else {
                    after[d] = None;
                    continue;
                };
                let compiled = match classes::compile(rules) {
                    Ok(compiled) => compiled,
                    // Last good rules stay; a pod that has none yet is
                    // isolated with none: fail closed, never open.
                    Err(e) => {
                        errors[d] = Some(e);
                        if before[d].is_some() {
                            continue;
                        }
                        classes::deny_all()
                    }
                };
                if before[d].as_ref().is_some_and(|w| w.compiled == compiled && w.flags == flags) {
                    continue;
                }
                let id = self.take_id(&used);
                if let Err(e) = tables.write(id, &compiled) {
                    tables.remove(id, &compiled);
                    errors[d] = Some(format!("{e:#}"));
                    continue;
                }
                used.insert(id);
                after[d] = Some(Written { id, flags, compiled });
            }
            if after != before {
                let entry = PolicyPod {
                    direction: [0, 1]
                        .map(|d| after[d].as_ref().map_or(PolicyRules::default(), |w| w.compiled.pod_entry(w.id, w.flags))),
                };
                let key = EndpointKey { addr: address.octets() };
                let switched = if after.iter().all(Option::is_none) {
                    tables
                        .pods
                        .remove(&key)
                        .or_else(|e| if matches!(e, aya::maps::MapError::KeyNotFound) { Ok(()) } else { Err(e) })
                } else {
                    tables.pods.insert(key, entry, 0)
                };
                match switched {
                    Ok(()) => {
                        for d in 0..2 {
                            if let Some(old) = before[d].as_ref().filter(|old| after[d].as_ref().map(|w| w.id) != Some(old.id)) {
                                *self.denied_before.entry((address, d)).or_default() += tables.denied(old.id);
                                let _ = tables.denied.remove(&old.id);
                                tables.remove(old.id, &old.compiled);
                                used.remove(&old.id);
                            }
                        }
                        state.rewritten += 1;
                        self.written.insert(address, after.clone());
                    }
                    Err(e) => {
                        // The pod keeps its rules: the new ids' entries go.
                        for d in 0..2 {
                            if let Some(new) = after[d].as_ref().filter(|w| before[d].as_ref().map(|b| b.id) != Some(w.id)) {
                                tables.remove(new.id, &new.compiled);
                                used.remove(&new.id);
                            }
                        }
                        errors = [0, 1].map(|_| Some(format!("switching the pod's rules: {e}")));
                        after = before.clone();
                    }
                }
            }
            let direction_state = |d: usize| -> Option<DirectionState> {
                let rules = wanted[d]?;
                let written = after[d].as_ref();
                Some(DirectionState {
                    policies: rules.policies.clone(),
                    id: written.map_or(0, |w| w.id),
                    entries: written.map_or(0, |w| w.compiled.entries()),
                    denied_before: self.denied_before.get(&(address, d)).copied().unwrap_or(0),
                    error: errors[d].clone(),
                })
            };
            let (ingress, egress) = (direction_state(0), direction_state(1));
            for (d, error) in errors.iter().enumerate() {
                if let Some(error) = error {
                    log::warn!(
                        "pod {}/{} ({address}), {}: {error}; its last good rules stay",
                        pod.namespace,
                        pod.name,
                        DIRECTIONS[d]
                    );
                }
            }
            if ingress.is_some() || egress.is_some() {
                state.pods.push(PodState { address, pod: format!("{}/{}", pod.namespace, pod.name), ingress, egress });
            }
        }

        // Pods that left the view (deleted, or no longer isolated by anything).
        let gone: Vec<Ipv6Addr> = self.written.keys().filter(|a| !view.pods.contains_key(a)).copied().collect();
        for address in gone {
            let written = self.written.remove(&address).unwrap_or_default();
            let _ = tables.pods.remove(&EndpointKey { addr: address.octets() });
            for (d, w) in written.iter().enumerate() {
                if let Some(w) = w {
                    let _ = tables.denied.remove(&w.id);
                    tables.remove(w.id, &w.compiled);
                }
                self.denied_before.remove(&(address, d));
            }
        }
        if !self.adopted {
            let live: BTreeSet<u32> = self.written.values().flatten().flatten().map(|w| w.id).collect();
            // A previous agent's pods this view no longer isolates.
            let stale_pods: Vec<EndpointKey> = tables
                .pods
                .keys()
                .filter_map(Result::ok)
                .filter(|k| !self.written.contains_key(&Ipv6Addr::from(k.addr)))
                .collect();
            for key in stale_pods {
                let _ = tables.pods.remove(&key);
            }
            let removed = tables.collect_garbage(&live);
            if removed > 0 {
                log::info!("policy: {removed} entries of a previous agent's rules removed");
            }
            self.adopted = true;
        }
        state.entries = self.written.values().flatten().flatten().map(|w| w.compiled.entries()).sum();
        state.sync_ms = started.elapsed().as_secs_f64() * 1000.0;
        Ok(state)
    }
}

/// Packets each rules id denied, live from the kernel (for `status` and metrics).
pub fn denied_by_id(pin_dir: &Path) -> BTreeMap<u32, u64> {
    let Ok(map) = bpf::open_pinned_map::<PerCpuHashMap<MapData, u32, CounterValue>>(pin_dir, maps::POLICY_DENIED) else {
        return BTreeMap::new();
    };
    map.iter().filter_map(Result::ok).map(|(id, per_cpu)| (id, per_cpu.iter().map(|v| v.packets).sum())).collect()
}
