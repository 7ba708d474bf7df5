// SPDX-License-Identifier: Apache-2.0
//! The stateful NAT46 gateway's tables (`bpf/lib/nat46_gw.h`, layout in
//! `abi.h`): frontends, their backends and weighted Maglev tables, kept
//! equal to `[nat46]`; and the sweep that ends idle flows.
//!
//! Ids outlive reloads and restarts: a frontend keeps its id while its VIP,
//! port and protocol stay configured, and a backend keeps its id while it
//! stays one of its frontend's backends, whatever its weight. Flows hold
//! their backend's id, so they keep their backend through any change but
//! its removal.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::{Ipv4Addr, Ipv6Addr, SocketAddrV6},
    path::Path,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CtKey, CtValue, L4Addr, MaglevTable, Nat46Frontend, Nat46FrontendKey};
use v6node_config::{Nat46, Nat46Gateway};

use super::health::{BackendOf, Health};
use crate::{
    bpf,
    conntrack::{self, monotonic_ns, StateTable},
    services::maglev,
    sync::Ids,
};

/// A backend's id is its frontend's id times this plus its slot, so that
/// the frontend each backend belongs to is read back from the tables alone.
const SLOTS_PER_FRONTEND: u32 = v6node_abi::BACKENDS_PER_SERVICE_MAX;

/// One backend as `status` shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BackendUse {
    pub address: String,
    pub weight: u32,
    /// Its share of the frontend's Maglev table.
    pub buckets: usize,
    /// Flows it serves, as of the last sweep.
    pub flows: usize,
    /// What its health checks found (`healthy` without any).
    #[serde(default)]
    pub health: Health,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FrontendUse {
    pub frontend: String,
    pub protocol: String,
    pub backends: Vec<BackendUse>,
}

/// What `status` shows of the gateway.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Nat46Stats {
    pub source_prefix: String,
    pub frontends: Vec<FrontendUse>,
    pub flows: usize,
    /// Flows the sweep has ended since the agent started.
    pub expired: u64,
    pub last_sweep_micros: u64,
}

fn frontend_key(gateway: &Nat46Gateway) -> Nat46FrontendKey {
    Nat46FrontendKey {
        addr: gateway.frontend.ip().octets(),
        port: gateway.frontend.port().to_be(),
        proto: gateway.protocol.number(),
        pad: 0,
    }
}

fn l4_addr(address: &SocketAddrV6, proto: u8) -> L4Addr {
    L4Addr { addr: address.ip().octets(), port: address.port().to_be(), proto, pad: 0 }
}

/// The ids `[nat46]` is written under: kept from the tables where the same
/// frontend or backend is there already, else the lowest free ones.
struct Assigned {
    frontends: Vec<u32>,
    backends: Vec<Vec<u32>>,
}

fn assign_ids(
    gateways: &[Nat46Gateway],
    frontends: &HashMap<Nat46FrontendKey, u32>,
    backends: &HashMap<u32, L4Addr>,
) -> Assigned {
    let wanted: Vec<Option<u32>> = gateways.iter().map(|g| frontends.get(&frontend_key(g)).copied()).collect();
    let mut taken: BTreeSet<u32> = wanted.iter().flatten().copied().collect();
    let mut free = Ids::from(&mut taken, 1);
    let frontend_ids: Vec<u32> = wanted.into_iter().map(|id| id.unwrap_or_else(|| free.take())).collect();
    let backend_ids = gateways
        .iter()
        .zip(&frontend_ids)
        .map(|(gateway, &fid)| {
            let base = fid * SLOTS_PER_FRONTEND;
            let proto = gateway.protocol.number();
            let held: HashMap<L4Addr, u32> =
                backends.iter().filter(|(id, _)| **id / SLOTS_PER_FRONTEND == fid).map(|(id, addr)| (*addr, *id)).collect();
            let mut used: BTreeSet<u32> =
                gateway.backends.iter().filter_map(|b| held.get(&l4_addr(&b.address, proto)).copied()).collect();
            let mut free = Ids::from(&mut used, base);
            gateway
                .backends
                .iter()
                .map(|b| held.get(&l4_addr(&b.address, proto)).copied().unwrap_or_else(|| free.take()))
                .collect()
        })
        .collect();
    Assigned { frontends: frontend_ids, backends: backend_ids }
}

/// The tables as a sync finds them: what its plan keeps, rewrites or
/// removes.
#[derive(Default)]
struct Current {
    /// Each frontend's id.
    frontends: HashMap<Nat46FrontendKey, u32>,
    backends: HashMap<u32, L4Addr>,
    /// The VIPs, in network order.
    vips: BTreeSet<u32>,
    /// The ids of the frontends with a Maglev table.
    maglev: BTreeSet<u32>,
}

/// One frontend's writes, in the order they go: the backends and table it
/// points packets at before the frontend itself.
struct FrontendWrites {
    /// `nat46 gateway tcp 198.51.100.80:80`, for errors.
    name: String,
    /// (id, as the table holds it, as configured): new backends, and ids
    /// that named another address; a backend already there is not rewritten.
    backends: Vec<(u32, L4Addr, SocketAddrV6)>,
    /// Rebuilt each sync, under the frontend's id; None when no backend
    /// has weight.
    maglev: Option<(u32, MaglevTable)>,
    key: Nat46FrontendKey,
    value: Nat46Frontend,
}

/// Entries the tables hold that `[nat46]` no longer names.
#[derive(Debug, Default, PartialEq)]
struct Stale {
    vips: Vec<u32>,
    frontends: Vec<Nat46FrontendKey>,
    maglev: Vec<u32>,
    backends: Vec<u32>,
}

/// What making the tables hold `[nat46]` takes, worked out from the tables
/// as read, apart from the writing so that it is checked without BPF.
struct GatewayPlan {
    frontends: Vec<FrontendWrites>,
    /// Each VIP with the number of frontends on it, once they are written.
    vips: Vec<(Ipv4Addr, u32)>,
    /// Out last, once nothing written points at them.
    stale: Stale,
    /// `status`'s frontends; their flows are the sweep's to count.
    status: Vec<FrontendUse>,
}

/// The weight a backend has in its frontend's Maglev table: 0 while
/// quarantined, unless every backend with weight is (then the health checks
/// are not believed over the configuration, and all keep theirs).
fn effective_weights(gateway: &Nat46Gateway, quarantined: &BTreeSet<BackendOf>) -> Vec<(u32, Health)> {
    let health = |b: &v6node_config::Nat46Backend| {
        if quarantined.contains(&(gateway.frontend, gateway.protocol, b.address)) {
            Health::Quarantined
        } else {
            Health::Healthy
        }
    };
    let any_healthy = gateway.backends.iter().any(|b| b.weight > 0 && health(b) == Health::Healthy);
    gateway
        .backends
        .iter()
        .map(|b| {
            let health = health(b);
            (if health == Health::Quarantined && any_healthy { 0 } else { b.weight }, health)
        })
        .collect()
}

fn plan(gateways: &[Nat46Gateway], current: &Current, quarantined: &BTreeSet<BackendOf>) -> GatewayPlan {
    let ids = assign_ids(gateways, &current.frontends, &current.backends);
    let mut frontends = Vec::with_capacity(gateways.len());
    let mut status = Vec::with_capacity(gateways.len());
    let mut vips: BTreeMap<Ipv4Addr, u32> = BTreeMap::new();
    for ((gateway, &fid), backend_ids) in gateways.iter().zip(&ids.frontends).zip(&ids.backends) {
        let proto = gateway.protocol.number();
        let backends = gateway
            .backends
            .iter()
            .zip(backend_ids)
            .map(|(backend, &id)| (id, l4_addr(&backend.address, proto), backend.address))
            .filter(|(id, addr, _)| current.backends.get(id) != Some(addr))
            .collect();
        let weights = effective_weights(gateway, quarantined);
        let named: Vec<([u8; 18], u32, u32)> = gateway
            .backends
            .iter()
            .zip(backend_ids)
            .zip(&weights)
            .map(|((b, &id), &(weight, _))| (maglev::name(b.address.ip(), b.address.port()), weight, id))
            .collect();
        let (maglev, shares) = match maglev::kernel_table(&named) {
            Some((table, shares)) => (Some((fid, table)), shares),
            None => (None, vec![0; gateway.backends.len()]),
        };
        let live = weights.iter().filter(|(weight, _)| *weight > 0).count() as u32;
        frontends.push(FrontendWrites {
            name: format!("nat46 gateway {} {}", gateway.protocol, gateway.frontend),
            backends,
            maglev,
            key: frontend_key(gateway),
            value: Nat46Frontend { id: fid, backends: live },
        });
        *vips.entry(*gateway.frontend.ip()).or_default() += 1;
        status.push(FrontendUse {
            frontend: gateway.frontend.to_string(),
            protocol: gateway.protocol.to_string(),
            backends: gateway
                .backends
                .iter()
                .zip(shares)
                .zip(&weights)
                .map(|((b, buckets), &(_, health))| BackendUse {
                    address: b.address.to_string(),
                    weight: b.weight,
                    buckets,
                    flows: 0,
                    health,
                })
                .collect(),
        });
    }

    let live_vips: BTreeSet<u32> = vips.keys().map(|v| u32::from_ne_bytes(v.octets())).collect();
    let live_frontends: HashSet<Nat46FrontendKey> = gateways.iter().map(frontend_key).collect();
    let mut stale_frontends: Vec<Nat46FrontendKey> =
        current.frontends.keys().filter(|k| !live_frontends.contains(k)).copied().collect();
    stale_frontends.sort_by_key(|k| (k.addr, k.port, k.proto));
    let with_table: BTreeSet<u32> = frontends.iter().filter_map(|f| f.maglev.as_ref().map(|(id, _)| *id)).collect();
    let live_backends: BTreeSet<u32> = ids.backends.iter().flatten().copied().collect();
    let mut stale_backends: Vec<u32> = current.backends.keys().filter(|id| !live_backends.contains(id)).copied().collect();
    stale_backends.sort_unstable();
    GatewayPlan {
        frontends,
        vips: vips.into_iter().collect(),
        stale: Stale {
            vips: current.vips.difference(&live_vips).copied().collect(),
            frontends: stale_frontends,
            maglev: current.maglev.difference(&with_table).copied().collect(),
            backends: stale_backends,
        },
        status,
    }
}

struct Tables {
    frontends: BpfHashMap<MapData, Nat46FrontendKey, Nat46Frontend>,
    vips: BpfHashMap<MapData, u32, u32>,
    backends: BpfHashMap<MapData, u32, L4Addr>,
    maglev: BpfHashMap<MapData, u32, MaglevTable>,
}

impl Tables {
    fn open(pin_dir: &Path) -> Result<Tables> {
        Ok(Tables {
            frontends: bpf::open_pinned_map(pin_dir, maps::NAT46_FRONTENDS)?,
            vips: bpf::open_pinned_map(pin_dir, maps::NAT46_VIPS)?,
            backends: bpf::open_pinned_map(pin_dir, maps::NAT46_BACKENDS)?,
            maglev: bpf::open_pinned_map(pin_dir, maps::NAT46_MAGLEV)?,
        })
    }

    fn frontend_ids(&self) -> Result<HashMap<Nat46FrontendKey, u32>> {
        let mut frontends = HashMap::new();
        for entry in self.frontends.iter() {
            let (key, value) = entry.context("reading v6n_nat46_frontends")?;
            frontends.insert(key, value.id);
        }
        Ok(frontends)
    }

    /// Only the agent writes these tables, so what is stale after its
    /// writes is known from what they held before them.
    fn read(&self) -> Result<Current> {
        let frontends = self.frontend_ids()?;
        let mut backends = HashMap::new();
        for entry in self.backends.iter() {
            let (id, addr) = entry.context("reading v6n_nat46_backends")?;
            backends.insert(id, addr);
        }
        let vips = self.vips.keys().collect::<Result<_, _>>().context("reading v6n_nat46_vips")?;
        let maglev = self.maglev.keys().collect::<Result<_, _>>().context("reading v6n_nat46_maglev")?;
        Ok(Current { frontends, backends, vips, maglev })
    }

    /// Writes what `plan` says: each frontend after the backends and table
    /// it points at, the VIPs after their frontends, then the stale entries
    /// out, users before what they use.
    fn apply(&mut self, plan: &GatewayPlan) -> Result<()> {
        for frontend in &plan.frontends {
            let what = &frontend.name;
            for (id, addr, configured) in &frontend.backends {
                self.backends.insert(id, addr, 0).with_context(|| format!("writing backend {configured} of {what}"))?;
            }
            if let Some((id, table)) = &frontend.maglev {
                self.maglev.insert(id, table, 0).with_context(|| format!("writing the Maglev table of {what}"))?;
            }
            self.frontends.insert(frontend.key, frontend.value, 0).with_context(|| format!("writing {what}"))?;
        }
        for (vip, count) in &plan.vips {
            self.vips.insert(u32::from_ne_bytes(vip.octets()), count, 0).with_context(|| format!("writing VIP {vip}"))?;
        }
        for vip in &plan.stale.vips {
            self.vips.remove(vip).context("removing a stale VIP")?;
        }
        for key in &plan.stale.frontends {
            self.frontends.remove(key).context("removing a stale NAT46 frontend")?;
        }
        for id in &plan.stale.maglev {
            self.maglev.remove(id).context("removing a stale Maglev table")?;
        }
        for id in &plan.stale.backends {
            self.backends.remove(id).context("removing a stale NAT46 backend")?;
        }
        Ok(())
    }
}

/// Makes the tables hold `[nat46]` (or nothing, flows included). New
/// backends and tables go in first, then the frontends and VIPs that use
/// them, then what is stale comes out: a frontend present before and after
/// never stops serving, and its flows keep their backends (the flow table
/// is the sweep's while there is a gateway).
/// `quarantined`: backends whose health checks failed, which get no new
/// flows.
pub fn sync(pin_dir: &Path, nat46: Option<&Nat46>, quarantined: &BTreeSet<BackendOf>) -> Result<Option<Nat46Stats>> {
    let mut tables = Tables::open(pin_dir)?;
    let gateways = nat46.map_or(&[][..], |n| &n.gateways[..]);
    let plan = plan(gateways, &tables.read()?, quarantined);
    tables.apply(&plan)?;
    let Some(nat46) = nat46 else {
        // No gateway, no sweep: its flows go now.
        let state = StateTable::open(pin_dir, maps::NAT46_STATE)?;
        let keys: Vec<CtKey> = state.entries()?.into_iter().map(|(key, _)| key).collect();
        state.remove(&keys)?;
        return Ok(None);
    };
    Ok(Some(Nat46Stats { source_prefix: nat46.source_prefix.to_string(), frontends: plan.status, ..Nat46Stats::default() }))
}

/// A forward entry's key holds the client as ::ffff:a.b.c.d (abi.h).
fn is_forward(key: &CtKey) -> bool {
    key.saddr[..10] == [0; 10] && key.saddr[10..12] == [0xff, 0xff]
}

/// The reverse entry a forward entry's flow has, under `prefix`.
fn reverse_key(prefix: &Ipv6Addr, forward: &CtKey, flow: &CtValue) -> CtKey {
    let mut daddr = prefix.octets();
    daddr[12..].copy_from_slice(&forward.saddr[12..]);
    CtKey { saddr: flow.daddr, daddr, sport: flow.dport, dport: forward.sport, proto: forward.proto, ..CtKey::default() }
}

fn forward_key(reverse: &CtKey, value: &CtValue) -> CtKey {
    CtKey {
        saddr: value.daddr,
        daddr: value.saddr,
        sport: value.dport,
        dport: value.sport,
        proto: reverse.proto,
        ..CtKey::default()
    }
}

/// Ends idle flows (forward entry, then reverse) and removes reverse
/// entries no flow names any more (left by a flow moved to another
/// backend). `status` then counts each backend's flows.
pub fn sweep(pin_dir: &Path, nat46: &Nat46, mut stats: Nat46Stats) -> Result<Nat46Stats> {
    let started = Instant::now();
    let state = StateTable::open(pin_dir, maps::NAT46_STATE)?;
    let lookup: BpfHashMap<MapData, CtKey, CtValue> = bpf::open_pinned_map(pin_dir, maps::NAT46_STATE)?;
    let now = monotonic_ns();
    let lifetimes = conntrack::nat46_lifetimes(nat46);
    let prefix = nat46.source_prefix.network();
    let (mut forward, mut reverse): (HashMap<CtKey, CtValue>, Vec<(CtKey, CtValue)>) = (HashMap::new(), Vec::new());
    for (key, value) in state.entries()? {
        if is_forward(&key) {
            forward.insert(key, value);
        } else {
            reverse.push((key, value));
        }
    }
    let expired: Vec<CtKey> = forward
        .iter()
        .filter(|(key, flow)| conntrack::is_expired(&lifetimes, key.proto, flow, now))
        .map(|(key, _)| *key)
        .collect();
    state.remove(&expired)?;
    let mut gone: Vec<CtKey> = expired.iter().map(|key| reverse_key(&prefix, key, &forward[key])).collect();
    for key in &expired {
        forward.remove(key);
    }
    let old = |made: u64| conntrack::is_old(made, now);
    for (key, value) in &reverse {
        let named = forward.get(&forward_key(key, value)).is_some_and(|flow| flow.daddr == key.saddr && flow.dport == key.sport);
        // Read again: a packet may have just made this entry new.
        if !named && old(value.last_seen_ns) && lookup.get(key, 0).ok().is_some_and(|now_value| now_value == *value) {
            gone.push(*key);
        }
    }
    gone.sort_by_key(|k| (k.saddr, k.daddr, k.sport, k.dport, k.proto));
    gone.dedup();
    state.remove(&gone)?;

    // Flows per backend: the backend ids hold their frontend's id.
    let frontends = Tables::open(pin_dir)?.frontend_ids()?;
    let mut flows: HashMap<(u32, [u8; 16], u16), usize> = HashMap::new();
    for flow in forward.values() {
        *flows.entry((flow.frontend_id, flow.daddr, flow.dport)).or_default() += 1;
    }
    for (frontend, gateway) in stats.frontends.iter_mut().zip(&nat46.gateways) {
        let fid = frontends.get(&frontend_key(gateway)).copied().unwrap_or(0);
        for (backend, config) in frontend.backends.iter_mut().zip(&gateway.backends) {
            backend.flows = flows.get(&(fid, config.address.ip().octets(), config.address.port().to_be())).copied().unwrap_or(0);
        }
    }
    stats.flows = forward.len();
    stats.expired += expired.len() as u64;
    stats.last_sweep_micros = started.elapsed().as_micros() as u64;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(gateways: &str) -> Nat46 {
        let text = format!("[nat64]\ndevices = [\"eth0\"]\n[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n{gateways}");
        v6node_config::parse_str(Path::new("test.toml"), &text).expect("valid").config.nat46.expect("a gateway")
    }

    #[test]
    fn ids_survive_a_reload_that_reorders_and_reweighs() {
        let before = config(
            "[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::a]:80\" }, { address = \"[2001:db8::b]:80\" }]\n\
             [[nat46.gateway]]\nfrontend = \"198.51.100.80:443\"\nbackends = [{ address = \"[2001:db8::a]:443\" }]\n",
        );
        let ids = assign_ids(&before.gateways, &HashMap::new(), &HashMap::new());
        assert_eq!(ids.frontends, [1, 2]);
        assert_eq!(ids.backends, [vec![SLOTS_PER_FRONTEND, SLOTS_PER_FRONTEND + 1], vec![2 * SLOTS_PER_FRONTEND]]);
        let frontends: HashMap<_, _> = before.gateways.iter().zip(&ids.frontends).map(|(g, id)| (frontend_key(g), *id)).collect();
        let backends: HashMap<_, _> = before
            .gateways
            .iter()
            .zip(&ids.backends)
            .flat_map(|(g, ids)| g.backends.iter().zip(ids).map(|(b, id)| (*id, l4_addr(&b.address, 6))))
            .collect();

        // Frontends swapped, ::a dropped and ::c added to :80, ::b reweighed.
        let after = config(
            "[[nat46.gateway]]\nfrontend = \"198.51.100.80:443\"\nbackends = [{ address = \"[2001:db8::a]:443\" }]\n\
             [[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::c]:80\" }, { address = \"[2001:db8::b]:80\", weight = 5 }]\n",
        );
        let ids = assign_ids(&after.gateways, &frontends, &backends);
        assert_eq!(ids.frontends, [2, 1]);
        assert_eq!(
            ids.backends,
            [vec![2 * SLOTS_PER_FRONTEND], vec![SLOTS_PER_FRONTEND, SLOTS_PER_FRONTEND + 1]],
            "::b keeps its id, ::c takes the slot ::a left"
        );
        assert_eq!(backends[&(SLOTS_PER_FRONTEND + 1)], l4_addr(&"[2001:db8::b]:80".parse().unwrap(), 6));
    }

    /// The tables once `plan` is written over `current`, as the kernel
    /// would hold them.
    fn applied(mut current: Current, plan: &GatewayPlan) -> Current {
        for frontend in &plan.frontends {
            current.backends.extend(frontend.backends.iter().map(|(id, addr, _)| (*id, *addr)));
            current.maglev.extend(frontend.maglev.as_ref().map(|(id, _)| *id));
            current.frontends.insert(frontend.key, frontend.value.id);
        }
        current.vips.extend(plan.vips.iter().map(|(vip, _)| u32::from_ne_bytes(vip.octets())));
        for vip in &plan.stale.vips {
            current.vips.remove(vip);
        }
        for key in &plan.stale.frontends {
            current.frontends.remove(key);
        }
        for id in &plan.stale.maglev {
            current.maglev.remove(id);
        }
        for id in &plan.stale.backends {
            current.backends.remove(id);
        }
        current
    }

    fn gateway(frontend: &str, backends: &[&str]) -> String {
        let backends: Vec<String> = backends.iter().map(|b| format!("{{ address = \"{b}\" }}")).collect();
        format!("[[nat46.gateway]]\nfrontend = \"{frontend}\"\nbackends = [{}]\n", backends.join(", "))
    }

    #[test]
    fn a_kept_frontend_keeps_its_id_and_its_unchanged_backends_are_not_rewritten() {
        let before = config(&gateway("198.51.100.80:80", &["[2001:db8::a]:80", "[2001:db8::b]:80"]));
        let first = plan(&before.gateways, &Current::default(), &BTreeSet::new());
        assert_eq!(first.frontends[0].value, Nat46Frontend { id: 1, backends: 2 });
        let written: Vec<u32> = first.frontends[0].backends.iter().map(|(id, _, _)| *id).collect();
        assert_eq!(written, [SLOTS_PER_FRONTEND, SLOTS_PER_FRONTEND + 1], "an empty table takes every backend");
        assert_eq!(first.vips, [("198.51.100.80".parse().unwrap(), 1)]);
        let tables = applied(Current::default(), &first);

        // ::b reweighed and listed first: the same ids, nothing to rewrite.
        let after = config(
            "[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n\
             backends = [{ address = \"[2001:db8::b]:80\", weight = 3 }, { address = \"[2001:db8::a]:80\" }]\n",
        );
        let again = plan(&after.gateways, &tables, &BTreeSet::new());
        assert_eq!(again.frontends[0].value, Nat46Frontend { id: 1, backends: 2 });
        assert!(again.frontends[0].backends.is_empty());
        let table = &again.frontends[0].maglev.as_ref().expect("weights: a table").1;
        assert!(table.backend_ids.iter().all(|id| [SLOTS_PER_FRONTEND, SLOTS_PER_FRONTEND + 1].contains(id)));
        assert_eq!(again.stale, Stale::default());
        let buckets: Vec<usize> = again.status[0].backends.iter().map(|b| b.buckets).collect();
        assert!(buckets[0] > 2 * buckets[1], "::b's weight of 3 shows in its share: {buckets:?}");
    }

    #[test]
    fn what_is_no_longer_configured_is_stale() {
        let before = config(&format!(
            "{}{}",
            gateway("198.51.100.80:80", &["[2001:db8::a]:80", "[2001:db8::b]:80"]),
            gateway("198.51.100.81:443", &["[2001:db8::c]:443"])
        ));
        let tables = applied(Current::default(), &plan(&before.gateways, &Current::default(), &BTreeSet::new()));
        let after = config(&gateway("198.51.100.80:80", &["[2001:db8::b]:80"]));
        let plan = plan(&after.gateways, &tables, &BTreeSet::new());
        assert!(plan.frontends[0].backends.is_empty(), "::b stays where it is");
        assert_eq!(plan.frontends[0].value, Nat46Frontend { id: 1, backends: 1 });
        let gone = frontend_key(&before.gateways[1]);
        assert_eq!(
            plan.stale,
            Stale {
                vips: vec![u32::from_ne_bytes([198, 51, 100, 81])],
                frontends: vec![gone],
                maglev: vec![2],
                backends: vec![SLOTS_PER_FRONTEND, 2 * SLOTS_PER_FRONTEND],
            },
            "::a, the :443 frontend, its backend, table and VIP"
        );
        let emptied = applied(tables, &plan);
        let none = super::plan(&[], &emptied, &BTreeSet::new());
        assert!(none.frontends.is_empty() && none.vips.is_empty() && none.status.is_empty());
        assert_eq!(none.stale.backends, [SLOTS_PER_FRONTEND + 1]);
        assert_eq!((none.stale.frontends.len(), none.stale.maglev.as_slice(), none.stale.vips.len()), (1, &[1][..], 1));
    }

    #[test]
    fn a_new_frontend_takes_the_lowest_free_id() {
        let ports = |ports: &[u16]| {
            let text: String =
                ports.iter().map(|p| gateway(&format!("198.51.100.80:{p}"), &[&format!("[2001:db8::a]:{p}")])).collect();
            config(&text)
        };
        let tables = applied(Current::default(), &plan(&ports(&[80, 443, 8080]).gateways, &Current::default(), &BTreeSet::new()));
        let without_443 = plan(&ports(&[80, 8080]).gateways, &tables, &BTreeSet::new());
        let tables = applied(tables, &without_443);
        let plan = plan(&ports(&[53, 80, 8080]).gateways, &tables, &BTreeSet::new());
        let ids: Vec<u32> = plan.frontends.iter().map(|f| f.value.id).collect();
        assert_eq!(ids, [2, 1, 3], ":53 takes the id :443 left");
        assert_eq!(plan.frontends[0].backends.iter().map(|(id, _, _)| *id).collect::<Vec<_>>(), [2 * SLOTS_PER_FRONTEND]);
        assert_eq!(plan.vips, [("198.51.100.80".parse().unwrap(), 3)], "one VIP, three frontends");
    }

    #[test]
    fn a_backend_of_weight_0_is_not_counted_live() {
        let drained = config(
            "[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n\
             backends = [{ address = \"[2001:db8::a]:80\", weight = 0 }, { address = \"[2001:db8::b]:80\", weight = 2 }]\n",
        );
        let first = plan(&drained.gateways, &Current::default(), &BTreeSet::new());
        assert_eq!(first.frontends[0].value.backends, 1);
        assert_eq!(first.frontends[0].backends.len(), 2, "a drained backend keeps its id: its flows go on");
        let buckets: Vec<usize> = first.status[0].backends.iter().map(|b| b.buckets).collect();
        assert_eq!(buckets, [0, v6node_abi::MAGLEV_SIZE as usize]);

        let all_drained = config(
            "[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n\
             backends = [{ address = \"[2001:db8::a]:80\", weight = 0 }, { address = \"[2001:db8::b]:80\", weight = 0 }]\n",
        );
        let plan = plan(&all_drained.gateways, &applied(Current::default(), &first), &BTreeSet::new());
        assert_eq!(plan.frontends[0].value, Nat46Frontend { id: 1, backends: 0 });
        assert!(plan.frontends[0].maglev.is_none());
        assert_eq!(plan.stale, Stale { maglev: vec![1], ..Stale::default() }, "no weight, no table");
    }

    #[test]
    fn a_quarantined_backend_leaves_the_table_unless_every_backend_is() {
        let c = config(&gateway("198.51.100.80:80", &["[2001:db8::a]:80", "[2001:db8::b]:80"]));
        let g = &c.gateways[0];
        let of = |b: &str| (g.frontend, g.protocol, b.parse().unwrap());
        let one: BTreeSet<BackendOf> = [of("[2001:db8::a]:80")].into();
        let first = plan(&c.gateways, &Current::default(), &one);
        assert_eq!(first.frontends[0].value.backends, 1, "one backend takes new flows");
        let table = &first.frontends[0].maglev.as_ref().expect("a table").1;
        let b_id = first.frontends[0].backends[1].0;
        assert!(table.backend_ids.iter().all(|id| *id == b_id), "every bucket is ::b's");
        let health: Vec<Health> = first.status[0].backends.iter().map(|b| b.health).collect();
        assert_eq!(health, [Health::Quarantined, Health::Healthy]);
        assert_eq!(first.frontends[0].backends.len(), 2, "::a stays listed: its flows keep it");

        let both: BTreeSet<BackendOf> = [of("[2001:db8::a]:80"), of("[2001:db8::b]:80")].into();
        let all_down = plan(&c.gateways, &Current::default(), &both);
        assert_eq!(all_down.frontends[0].value.backends, 2, "all quarantined: the checks are not believed");
        let shares: Vec<usize> = all_down.status[0].backends.iter().map(|b| b.buckets).collect();
        assert!(shares.iter().all(|s| *s > 0), "both keep their share: {shares:?}");
    }
}
