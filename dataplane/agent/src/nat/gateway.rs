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
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{Ipv4Addr, Ipv6Addr, SocketAddrV6},
    path::Path,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CtKey, CtValue, L4Addr, MaglevTable, Nat46Frontend, Nat46FrontendKey};
use v6node_config::{Nat46, Nat46Gateway};

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

    fn read(&self) -> Result<(HashMap<Nat46FrontendKey, u32>, HashMap<u32, L4Addr>)> {
        let mut frontends = HashMap::new();
        for entry in self.frontends.iter() {
            let (key, value) = entry.context("reading v6n_nat46_frontends")?;
            frontends.insert(key, value.id);
        }
        let mut backends = HashMap::new();
        for entry in self.backends.iter() {
            let (id, addr) = entry.context("reading v6n_nat46_backends")?;
            backends.insert(id, addr);
        }
        Ok((frontends, backends))
    }
}

/// Makes the tables hold `[nat46]` (or nothing, flows included). New
/// backends and tables go in first, then the frontends and VIPs that use
/// them, then what is stale comes out: a frontend present before and after
/// never stops serving, and its flows keep their backends (the flow table
/// is the sweep's while there is a gateway).
pub fn sync(pin_dir: &Path, nat46: Option<&Nat46>) -> Result<Option<Nat46Stats>> {
    let mut tables = Tables::open(pin_dir)?;
    let (current_frontends, current_backends) = tables.read()?;
    let gateways = nat46.map_or(&[][..], |n| &n.gateways[..]);
    let ids = assign_ids(gateways, &current_frontends, &current_backends);

    let mut stats =
        Nat46Stats { source_prefix: nat46.map(|n| n.source_prefix.to_string()).unwrap_or_default(), ..Nat46Stats::default() };
    let mut vips: BTreeMap<Ipv4Addr, u32> = BTreeMap::new();
    for ((gateway, &fid), backend_ids) in gateways.iter().zip(&ids.frontends).zip(&ids.backends) {
        let proto = gateway.protocol.number();
        let what = format!("nat46 gateway {} {}", gateway.protocol, gateway.frontend);
        for (backend, id) in gateway.backends.iter().zip(backend_ids) {
            let addr = l4_addr(&backend.address, proto);
            if current_backends.get(id) != Some(&addr) {
                tables.backends.insert(id, addr, 0).with_context(|| format!("writing backend {} of {what}", backend.address))?;
            }
        }
        let named: Vec<([u8; 18], u32, u32)> = gateway
            .backends
            .iter()
            .zip(backend_ids)
            .map(|(b, &id)| (maglev::name(b.address.ip(), b.address.port()), b.weight, id))
            .collect();
        let mut shares = vec![0usize; gateway.backends.len()];
        if let Some((table, filled)) = maglev::kernel_table(&named) {
            shares = filled;
            tables.maglev.insert(fid, table, 0).with_context(|| format!("writing the Maglev table of {what}"))?;
        }
        let live = gateway.backends.iter().filter(|b| b.weight > 0).count() as u32;
        tables
            .frontends
            .insert(frontend_key(gateway), Nat46Frontend { id: fid, backends: live }, 0)
            .with_context(|| format!("writing {what}"))?;
        *vips.entry(*gateway.frontend.ip()).or_default() += 1;
        stats.frontends.push(FrontendUse {
            frontend: gateway.frontend.to_string(),
            protocol: gateway.protocol.to_string(),
            backends: gateway
                .backends
                .iter()
                .zip(shares)
                .map(|(b, buckets)| BackendUse { address: b.address.to_string(), weight: b.weight, buckets, flows: 0 })
                .collect(),
        });
    }
    for (vip, count) in &vips {
        tables.vips.insert(u32::from_ne_bytes(vip.octets()), count, 0).with_context(|| format!("writing VIP {vip}"))?;
    }

    // Stale entries out, users before what they use.
    let live_vips: BTreeSet<u32> = vips.keys().map(|v| u32::from_ne_bytes(v.octets())).collect();
    for vip in tables.vips.keys().collect::<Result<Vec<_>, _>>().context("reading v6n_nat46_vips")? {
        if !live_vips.contains(&vip) {
            tables.vips.remove(&vip).context("removing a stale VIP")?;
        }
    }
    let live_frontends: std::collections::HashSet<Nat46FrontendKey> = gateways.iter().map(frontend_key).collect();
    for key in current_frontends.keys().filter(|k| !live_frontends.contains(k)) {
        tables.frontends.remove(key).context("removing a stale NAT46 frontend")?;
    }
    let with_table: BTreeSet<u32> =
        gateways.iter().zip(&ids.frontends).filter(|(g, _)| g.backends.iter().any(|b| b.weight > 0)).map(|(_, id)| *id).collect();
    for id in tables.maglev.keys().collect::<Result<Vec<_>, _>>().context("reading v6n_nat46_maglev")? {
        if !with_table.contains(&id) {
            tables.maglev.remove(&id).context("removing a stale Maglev table")?;
        }
    }
    let live_backends: BTreeSet<u32> = ids.backends.iter().flatten().copied().collect();
    for id in current_backends.keys().filter(|id| !live_backends.contains(id)) {
        tables.backends.remove(id).context("removing a stale NAT46 backend")?;
    }
    if nat46.is_none() {
        // No gateway, no sweep: its flows go now.
        let state = StateTable::open(pin_dir, maps::NAT46_STATE)?;
        let keys: Vec<CtKey> = state.entries()?.into_iter().map(|(key, _)| key).collect();
        state.remove(&keys)?;
    }
    Ok(nat46.map(|_| stats))
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
    let tables = Tables::open(pin_dir)?;
    let (frontends, _) = tables.read()?;
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
}
