// SPDX-License-Identifier: Apache-2.0
//! Keeps the service tables (bpf/lib/lb.h) equal to the Services view the
//! watch derives (`v6node_k8s::services`). Every write is one atomic map
//! update, in an order that never shows a reader a half-written Service:
//! backends and frontend addresses first, then each frontend's backend slots,
//! then its slot 0 (the count), and only then what is stale.
//!
//! A backend keeps its slot while it stays (so ClientIP affinity, which
//! remembers the slot, holds); a leaving backend's slot is taken by a new
//! one, or by the last slot when there is none.
//!
//! A backend that leaves a frontend is returned with it, so that the
//! connections the frontend gave it can be ended (`connections`).
//!
//! A frontend reached from outside also has a Maglev table (v6n_maglev) over
//! the backends such connections may go to, written before its slot 0 names
//! it external, and the uplink masquerades as the address in v6n_lb_cfg.
//!
//! A sync is planned first (`plan`: the tables as they are and the view in,
//! the ordered writes out; unit-tested without BPF), then applied.

pub mod connections;
pub mod health_checks;
pub mod maglev;
pub mod proxy;
pub mod sockets;

pub use proxy::ServiceProxy;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuHashMap};
use serde::{Deserialize, Serialize};
use v6node_abi::{
    maps, L4Addr, LbConfig, MaglevTable, ServiceKey, ServiceStats, ServiceValue, LB_DSR, LB_DSR_IP6IP6, SERVICE_AFFINITY,
    SERVICE_EXTERNAL,
};
use v6node_k8s::{
    services::{Address, Frontend, Protocol},
    ServiceProblem, ServicesView,
};

use crate::{
    bpf,
    sync::{Ids, SyncStats},
};
use connections::LeftBackend;

/// A backend as the tables know it: its transport address.
type BackendAddr = (std::net::Ipv6Addr, u16, u8);

/// What one frontend is in the kernel: its slot 0 and the backend in each slot.
#[derive(Clone, Debug, PartialEq)]
struct Written {
    id: u32,
    flags: u16,
    affinity_seconds: u32,
    /// Backend ids, slot 1 first.
    slots: Vec<u32>,
    /// The backend ids its Maglev table was made of, in the order of their
    /// addresses; empty: no table. `[0]`: a table of unknown content (read
    /// from the kernel), written again.
    maglev: Vec<u32>,
}

/// How a connection from outside reaches a backend on another node
/// (v6n_lb_cfg): from `masquerade`, or with direct server return, bare or
/// inside an outer IPv6 header from `masquerade` (`ip6ip6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outside {
    pub masquerade: std::net::Ipv6Addr,
    pub dsr: bool,
    pub ip6ip6: bool,
}

/// The service tables as last read or written.
#[derive(Clone, Default)]
struct Current {
    frontends: BTreeMap<Address, Written>,
    backends: BTreeMap<BackendAddr, u32>,
    /// Frontend ids with a Maglev table.
    maglev: BTreeSet<u32>,
    outside: Option<Outside>,
    /// Per frontend, the endpoints its slices listed at the last sync
    /// (`Frontend::listed`); not in the kernel, so empty after a restart.
    listed: BTreeMap<Address, BTreeSet<(std::net::Ipv6Addr, u16)>>,
}

#[derive(Default)]
pub struct ServiceTables {
    /// `None`: read the kernel's tables before the next sync (first sync,
    /// and every resync, which repairs what someone else changed).
    current: Option<Current>,
}

/// The Services as `status` shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServicesState {
    pub frontends: Vec<FrontendState>,
    pub backends: usize,
    pub problems: Vec<ServiceProblem>,
    pub sync: SyncStats,
    pub error: Option<String>,
    /// How connections from outside reach backends on other nodes:
    /// `masquerade as ADDR`, `direct server return`, or `none` (no pod
    /// prefix yet, so such connections are dropped).
    #[serde(default)]
    pub remote_backends: String,
}

/// A frontend as the view has it, with the id the tables gave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrontendState {
    pub id: u32,
    #[serde(flatten)]
    pub frontend: Frontend,
}

fn key(address: &Address, slot: u16) -> ServiceKey {
    ServiceKey {
        addr: address.ip.octets(),
        port: address.port.to_be(),
        proto: address.protocol.number(),
        slot,
        ..ServiceKey::default()
    }
}

fn l4(ip: std::net::Ipv6Addr, port: u16, proto: u8) -> L4Addr {
    L4Addr { addr: ip.octets(), port: port.to_be(), proto, pad: 0 }
}

fn protocol(number: u8) -> Option<Protocol> {
    [Protocol::Tcp, Protocol::Udp, Protocol::Sctp].into_iter().find(|p| p.number() == number)
}

struct Tables {
    services: BpfHashMap<MapData, ServiceKey, ServiceValue>,
    backends: BpfHashMap<MapData, u32, L4Addr>,
    frontends: BpfHashMap<MapData, u32, L4Addr>,
    stats: PerCpuHashMap<MapData, u32, ServiceStats>,
    maglev: BpfHashMap<MapData, u32, MaglevTable>,
    config: BpfHashMap<MapData, u32, LbConfig>,
}

impl Tables {
    fn open(pin_dir: &Path) -> Result<Tables> {
        Ok(Tables {
            services: bpf::open_pinned_map(pin_dir, maps::SERVICES)?,
            backends: bpf::open_pinned_map(pin_dir, maps::BACKENDS)?,
            frontends: bpf::open_pinned_map(pin_dir, maps::FRONTENDS)?,
            stats: bpf::open_pinned_map(pin_dir, maps::SERVICE_STATS)?,
            maglev: bpf::open_pinned_map(pin_dir, maps::MAGLEV)?,
            config: bpf::open_pinned_map(pin_dir, maps::LB_CONFIG)?,
        })
    }

    /// The tables as the kernel has them. Slots of a frontend past its
    /// count (an interrupted sync) are read too, so they are removed.
    fn read(&self) -> Result<Current> {
        let mut current = Current::default();
        for entry in self.backends.iter() {
            let (id, addr) = entry.context("reading v6n_backends")?;
            current.backends.insert((addr.addr.into(), u16::from_be(addr.port), addr.proto), id);
        }
        let mut slots: BTreeMap<Address, BTreeMap<u16, u32>> = BTreeMap::new();
        for entry in self.services.iter() {
            let (key, value) = entry.context("reading v6n_services")?;
            let Some(protocol) = protocol(key.proto) else { continue };
            let address = Address { ip: key.addr.into(), port: u16::from_be(key.port), protocol };
            if key.slot == 0 {
                current.frontends.insert(
                    address,
                    Written {
                        id: value.id,
                        flags: value.flags,
                        affinity_seconds: value.affinity_seconds,
                        slots: Vec::new(),
                        maglev: Vec::new(),
                    },
                );
            } else {
                slots.entry(address).or_default().insert(key.slot, value.backend_id);
            }
        }
        for (address, slots) in slots {
            let written = current.frontends.entry(address).or_insert(Written {
                id: 0,
                flags: 0,
                affinity_seconds: 0,
                slots: vec![],
                maglev: vec![],
            });
            let last = slots.keys().next_back().copied().unwrap_or(0);
            // A hole (an interrupted sync) reads as backend 0, which no backend has.
            written.slots = (1..=last).map(|slot| slots.get(&slot).copied().unwrap_or(0)).collect();
        }
        for id in self.maglev.keys() {
            current.maglev.insert(id.context("reading v6n_maglev")?);
        }
        for written in current.frontends.values_mut() {
            if current.maglev.contains(&written.id) {
                written.maglev = vec![0];
            }
        }
        current.outside = self.config.get(&0, 0).ok().map(|c| Outside {
            masquerade: c.masquerade_addr.into(),
            dsr: c.flags & LB_DSR != 0,
            ip6ip6: c.flags & LB_DSR_IP6IP6 != 0,
        });
        Ok(current)
    }
}

/// The slots a frontend should have: backends that stay keep their slot, new
/// ones fill the slots of leaving ones, then the tail moves into what is left.
fn place(old: &[u32], wanted: &BTreeSet<u32>) -> Vec<u32> {
    let mut slots: Vec<Option<u32>> = old.iter().map(|id| wanted.contains(id).then_some(*id)).collect();
    let placed: BTreeSet<u32> = slots.iter().flatten().copied().collect();
    let mut new = wanted.iter().filter(|id| !placed.contains(id)).copied();
    for slot in slots.iter_mut().filter(|s| s.is_none()) {
        *slot = new.next();
    }
    slots.extend(new.map(Some));
    // Holes left: fill each from the end.
    let mut i = 0;
    while i < slots.len() {
        if slots[i].is_none() {
            while slots.last() == Some(&None) {
                slots.pop();
            }
            if i < slots.len() {
                slots[i] = slots.pop().flatten();
            }
        }
        i += 1;
    }
    slots.into_iter().flatten().collect()
}

/// The endpoints a frontend had: the backends in its slots and what its
/// slices listed.
fn endpoints_known(
    addresses: &BTreeMap<u32, BackendAddr>,
    slots: &[u32],
    listed: Option<&BTreeSet<(std::net::Ipv6Addr, u16)>>,
) -> BTreeSet<(std::net::Ipv6Addr, u16)> {
    let in_slots = slots.iter().filter_map(|id| addresses.get(id)).map(|&(ip, port, _)| (ip, port));
    in_slots.chain(listed.into_iter().flatten().copied()).collect()
}

impl ServiceTables {
    /// Reads the kernel's tables before the next sync.
    pub fn forget(&mut self) {
        self.current = None;
    }

    /// Syncs the tables to `view` and says what changed against `previous`
    /// (the journal gets the counts and every new problem); a failed sync
    /// keeps `previous` with the error, so `status` shows both. Also
    /// returns the backends that left a frontend, now out of its slots.
    pub fn apply(
        &mut self,
        pin_dir: &Path,
        view: &ServicesView,
        outside: Option<Outside>,
        previous: Option<&ServicesState>,
    ) -> (ServicesState, Vec<LeftBackend>) {
        let (next, left) = match self.sync(pin_dir, view, outside) {
            Ok(synced) => synced,
            Err(e) => {
                log::error!("syncing {} service frontend(s): {e:#}", view.frontends.len());
                let kept = ServicesState { error: Some(format!("{e:#}")), ..previous.cloned().unwrap_or_default() };
                return (kept, Vec::new());
            }
        };
        let sync = &next.sync;
        if sync.inserted + sync.updated + sync.removed > 0 {
            log::info!(
                "services: {} frontend(s), {} backend(s) ({} added, {} changed, {} removed in {} µs)",
                next.frontends.len(),
                next.backends,
                sync.inserted,
                sync.updated,
                sync.removed,
                sync.write_micros
            );
        }
        for problem in next.problems.iter().filter(|p| previous.is_none_or(|s| !s.problems.contains(p))) {
            log::warn!("service {}: {}", problem.service, problem.reason);
        }
        (next, left)
    }

    /// Makes the tables hold exactly `view`. On an error the tables hold a
    /// mix of before and after that is still consistent per frontend, and
    /// the next sync reads them again.
    fn sync(
        &mut self,
        pin_dir: &Path,
        view: &ServicesView,
        outside: Option<Outside>,
    ) -> Result<(ServicesState, Vec<LeftBackend>)> {
        let result = self.sync_inner(pin_dir, view, outside);
        if result.is_err() {
            self.current = None;
        }
        result
    }

    fn sync_inner(
        &mut self,
        pin_dir: &Path,
        view: &ServicesView,
        outside: Option<Outside>,
    ) -> Result<(ServicesState, Vec<LeftBackend>)> {
        let mut tables = Tables::open(pin_dir)?;
        let started = Instant::now();
        if self.current.is_none() {
            self.current = Some(tables.read()?);
        }
        let read_micros = started.elapsed().as_micros() as u64;
        let started = Instant::now();
        let plan = plan(self.current.as_ref().expect("read above"), view, outside);
        for write in &plan.writes {
            write.apply(&mut tables, view)?;
        }
        let stats = SyncStats {
            entries: view.frontends.len(),
            read_micros,
            write_micros: started.elapsed().as_micros() as u64,
            ..plan.stats
        };
        let state = ServicesState {
            frontends: plan.states,
            backends: plan.next.backends.len(),
            problems: view.problems.clone(),
            sync: stats,
            error: None,
            remote_backends: match plan.next.outside {
                Some(Outside { dsr: true, ip6ip6: true, masquerade }) => {
                    format!("direct server return inside IPv6 from {masquerade}")
                }
                Some(Outside { dsr: true, .. }) => "direct server return".to_string(),
                Some(Outside { masquerade, .. }) => format!("masquerade as {masquerade}"),
                None => "none".to_string(),
            },
        };
        self.current = Some(plan.next);
        Ok((state, plan.left))
    }
}

/// One write to the service tables; a plan lists them in the order that
/// never shows a reader a half-written Service. Frontends are named by
/// their index in the view.
#[derive(Debug, PartialEq)]
enum Write {
    /// v6n_lb_cfg: how remote backends are reached; None removes it.
    Outside(Option<Outside>),
    Backend(u32, BackendAddr),
    FrontendAddress(u32, usize),
    /// A frontend's Maglev table over these backend ids, in its view order.
    Maglev(u32, usize, Vec<u32>),
    /// A frontend's changed slots, its slot 0, then slots past its count.
    Frontend {
        frontend: usize,
        old_slots: Vec<u32>,
        next: Written,
    },
    RemoveMaglev(u32),
    RemoveSlot(Address, u16),
    /// A frontend id's address and its counters.
    RemoveFrontend(u32),
    RemoveBackend(u32),
}

impl Write {
    fn apply(&self, tables: &mut Tables, view: &ServicesView) -> Result<()> {
        match self {
            Write::Outside(Some(o)) => {
                let flags = match (o.dsr, o.ip6ip6) {
                    (true, true) => LB_DSR | LB_DSR_IP6IP6,
                    (true, false) => LB_DSR,
                    (false, _) => 0,
                };
                tables
                    .config
                    .insert(0, LbConfig { masquerade_addr: o.masquerade.octets(), flags }, 0)
                    .with_context(|| format!("setting the masquerade address {} (dsr {})", o.masquerade, o.dsr))
            }
            Write::Outside(None) => remove(&mut tables.config, &0),
            Write::Backend(id, addr) => tables
                .backends
                .insert(id, l4(addr.0, addr.1, addr.2), 0)
                .with_context(|| format!("adding backend [{}]:{}", addr.0, addr.1)),
            Write::FrontendAddress(id, frontend) => {
                let address = view.frontends[*frontend].address;
                tables
                    .frontends
                    .insert(id, l4(address.ip, address.port, address.protocol.number()), 0)
                    .with_context(|| format!("adding frontend {address}"))
            }
            Write::Maglev(id, frontend, backend_ids) => write_maglev(tables, &view.frontends[*frontend], *id, backend_ids),
            Write::Frontend { frontend, old_slots, next } => write_frontend(tables, &view.frontends[*frontend], old_slots, next),
            Write::RemoveMaglev(id) => remove(&mut tables.maglev, id),
            Write::RemoveSlot(address, slot) => remove(&mut tables.services, &key(address, *slot)),
            Write::RemoveFrontend(id) => {
                remove(&mut tables.frontends, id)?;
                let _ = tables.stats.remove(id);
                Ok(())
            }
            Write::RemoveBackend(id) => remove(&mut tables.backends, id),
        }
    }
}

/// What a sync does, worked out before any write: the writes in order, the
/// tables as they will be, what `status` shows, and the backends that leave.
struct Plan {
    writes: Vec<Write>,
    next: Current,
    states: Vec<FrontendState>,
    left: Vec<LeftBackend>,
    /// Frontends added, changed and removed.
    stats: SyncStats,
}

/// Plans making the tables, now `current`, hold exactly `view`.
fn plan(current: &Current, view: &ServicesView, outside: Option<Outside>) -> Plan {
    let mut next = current.clone();
    let mut writes = Vec::new();
    let mut stats = SyncStats::default();

    // How remote backends are reached, before any table names one.
    if next.outside != outside {
        writes.push(Write::Outside(outside));
        next.outside = outside;
    }

    // What each backend id was, for the backends that leave.
    let addresses: BTreeMap<u32, BackendAddr> = next.backends.iter().map(|(addr, id)| (*id, *addr)).collect();
    let mut left = Vec::new();

    // Backends: ids kept, new ones given the lowest free id, written first.
    let mut used: BTreeSet<u32> = next.backends.values().copied().collect();
    let mut backend_ids = Ids::from(&mut used, 1);
    let mut wanted_backends: BTreeSet<BackendAddr> = BTreeSet::new();
    for frontend in &view.frontends {
        for b in frontend.backends.iter().chain(frontend.from_outside.iter().flatten()) {
            let addr = (b.ip, b.port, frontend.address.protocol.number());
            wanted_backends.insert(addr);
            if let std::collections::btree_map::Entry::Vacant(slot) = next.backends.entry(addr) {
                let id = backend_ids.take();
                writes.push(Write::Backend(id, addr));
                slot.insert(id);
            }
        }
    }

    // Frontends: address for replies, slots, then slot 0.
    let mut used_frontends: BTreeSet<u32> = next.frontends.values().map(|w| w.id).filter(|id| *id != 0).collect();
    let mut frontend_ids = Ids::from(&mut used_frontends, 1);
    let mut states = Vec::with_capacity(view.frontends.len());
    for (index, frontend) in view.frontends.iter().enumerate() {
        let address = frontend.address;
        let proto = address.protocol.number();
        let old = next.frontends.get(&address).cloned();
        let id = match old.as_ref().map(|w| w.id).filter(|id| *id != 0) {
            Some(id) => id,
            None => {
                let id = frontend_ids.take();
                writes.push(Write::FrontendAddress(id, index));
                id
            }
        };
        let wanted: BTreeSet<u32> = frontend.backends.iter().map(|b| next.backends[&(b.ip, b.port, proto)]).collect();
        let old_slots = old.as_ref().map(|w| w.slots.clone()).unwrap_or_default();
        let slots = place(&old_slots, &wanted);
        let mut flags = if frontend.affinity_seconds.is_some() { SERVICE_AFFINITY as u16 } else { 0 };
        if frontend.from_outside.is_some() {
            flags |= SERVICE_EXTERNAL as u16;
        }
        // Sorted by address (the view's order): the same on every node.
        let maglev: Vec<u32> = frontend.from_outside.iter().flatten().map(|b| next.backends[&(b.ip, b.port, proto)]).collect();
        let written = Written {
            id,
            flags,
            affinity_seconds: frontend.affinity_seconds.unwrap_or(0),
            slots: slots.clone(),
            maglev: maglev.clone(),
        };
        // A backend leaves when its endpoint is gone from the slices
        // (`listed` holds every backend); one still listed (not ready,
        // terminating) finishes what it has. Unchanged frontends, most
        // of them in a large cluster, cost nothing here.
        if old_slots != slots || next.listed.get(&address) != Some(&frontend.listed) {
            let before = endpoints_known(&addresses, &old_slots, next.listed.get(&address));
            left.extend(before.difference(&frontend.listed).map(|&(ip, port)| LeftBackend {
                frontend: id,
                ip,
                port,
                protocol: address.protocol,
            }));
            next.listed.insert(address, frontend.listed.clone());
        }
        if old.as_ref() != Some(&written) {
            let old_maglev = old.as_ref().map(|w| w.maglev.clone()).unwrap_or_default();
            if !maglev.is_empty() && maglev != old_maglev {
                writes.push(Write::Maglev(id, index, maglev.clone()));
                next.maglev.insert(id);
            }
            writes.push(Write::Frontend { frontend: index, old_slots, next: written.clone() });
            if maglev.is_empty() && next.maglev.remove(&id) {
                writes.push(Write::RemoveMaglev(id));
            }
            match old {
                Some(_) => stats.updated += 1,
                None => stats.inserted += 1,
            }
            next.frontends.insert(address, written);
        }
        states.push(FrontendState { id, frontend: frontend.clone() });
    }

    // Stale frontends: slot 0 first (new connections stop), then the rest.
    let wanted_addresses: BTreeSet<Address> = view.frontends.iter().map(|f| f.address).collect();
    let stale: Vec<Address> = next.frontends.keys().filter(|a| !wanted_addresses.contains(a)).copied().collect();
    for address in stale {
        let written = next.frontends.remove(&address).expect("listed above");
        writes.push(Write::RemoveSlot(address, 0));
        let listed = next.listed.remove(&address);
        if written.id != 0 {
            let before = endpoints_known(&addresses, &written.slots, listed.as_ref());
            left.extend(before.into_iter().map(|(ip, port)| LeftBackend {
                frontend: written.id,
                ip,
                port,
                protocol: address.protocol,
            }));
        }
        for slot in 1..=written.slots.len() {
            writes.push(Write::RemoveSlot(address, slot as u16));
        }
        if written.id != 0 {
            writes.push(Write::RemoveFrontend(written.id));
            if next.maglev.remove(&written.id) {
                writes.push(Write::RemoveMaglev(written.id));
            }
        }
        stats.removed += 1;
    }
    // Tables of frontends that are gone (an interrupted sync).
    let live: BTreeSet<u32> = next.frontends.values().map(|w| w.id).collect();
    for id in next.maglev.iter().filter(|id| !live.contains(id)).copied().collect::<Vec<_>>() {
        writes.push(Write::RemoveMaglev(id));
        next.maglev.remove(&id);
    }
    // Backends no frontend names any more.
    let stale: Vec<BackendAddr> = next.backends.keys().filter(|b| !wanted_backends.contains(b)).copied().collect();
    for addr in stale {
        let id = next.backends.remove(&addr).expect("listed above");
        writes.push(Write::RemoveBackend(id));
    }
    // An SCTP association has no socket the hooks connected: the datapath
    // tracks it per packet and starts it over once its backend left.
    left.retain(|l| l.protocol != Protocol::Sctp);
    Plan { writes, next, states, left, stats }
}

/// A frontend's Maglev table over `backend_ids` (in the order of their
/// addresses), one atomic update: a packet sees the old table or the new.
fn write_maglev(tables: &mut Tables, frontend: &Frontend, id: u32, backend_ids: &[u32]) -> Result<()> {
    let backends: Vec<([u8; 18], u32, u32)> =
        frontend.from_outside.iter().flatten().zip(backend_ids).map(|(b, &id)| (maglev::name(&b.ip, b.port), 1, id)).collect();
    // Called only for a frontend with backends from outside, all of weight 1.
    let Some((table, _)) = maglev::kernel_table(&backends) else { return Ok(()) };
    tables
        .maglev
        .insert(id, table, 0)
        .with_context(|| format!("writing the Maglev table of {} ({})", frontend.address, frontend.service))
}

/// One frontend: changed slots, then slot 0, then slots past the new count.
fn write_frontend(tables: &mut Tables, frontend: &Frontend, old_slots: &[u32], next: &Written) -> Result<()> {
    let address = &frontend.address;
    for (i, backend_id) in next.slots.iter().enumerate() {
        if old_slots.get(i) == Some(backend_id) {
            continue;
        }
        let value = ServiceValue { backend_id: *backend_id, id: next.id, ..ServiceValue::default() };
        tables
            .services
            .insert(key(address, i as u16 + 1), value, 0)
            .with_context(|| format!("writing {address} slot {}", i + 1))?;
    }
    let head = ServiceValue {
        backend_id: 0,
        id: next.id,
        count: next.slots.len() as u16,
        flags: next.flags,
        affinity_seconds: next.affinity_seconds,
    };
    tables.services.insert(key(address, 0), head, 0).with_context(|| format!("writing {address} ({})", frontend.service))?;
    for slot in next.slots.len() + 1..=old_slots.len() {
        remove(&mut tables.services, &key(address, slot as u16))?;
    }
    Ok(())
}

fn remove<K: aya::Pod, V: aya::Pod>(map: &mut BpfHashMap<MapData, K, V>, key: &K) -> Result<()> {
    match map.remove(key) {
        Ok(()) => Ok(()),
        Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e).context("removing a stale service table entry"),
    }
}

/// Per frontend id: sockets given a backend, connections refused (summed
/// over CPUs), read live from v6n_service_stats.
pub fn stats(pin_dir: &Path) -> Result<BTreeMap<u32, (u64, u64)>> {
    let map: PerCpuHashMap<MapData, u32, ServiceStats> = bpf::open_pinned_map(pin_dir, maps::SERVICE_STATS)?;
    let mut totals = BTreeMap::new();
    for entry in map.iter() {
        let (id, per_cpu) = entry.context("reading v6n_service_stats")?;
        let sum = per_cpu.iter().fold((0, 0), |(t, r), s| (t + s.translated, r + s.refused));
        totals.insert(id, sum);
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn staying_backends_keep_their_slots_and_new_ones_fill_the_gaps() {
        assert_eq!(place(&[], &ids(&[3, 1, 2])), vec![1, 2, 3]);
        assert_eq!(place(&[1, 2, 3], &ids(&[1, 2, 3])), vec![1, 2, 3]);
        // 2 leaves, 9 arrives: 9 takes slot 2.
        assert_eq!(place(&[1, 2, 3], &ids(&[1, 3, 9])), vec![1, 9, 3]);
        // 1 leaves, nothing arrives: the last moves into slot 1.
        assert_eq!(place(&[1, 2, 3], &ids(&[2, 3])), vec![3, 2]);
        // the last leaves: nothing moves.
        assert_eq!(place(&[1, 2, 3], &ids(&[1, 2])), vec![1, 2]);
        assert_eq!(place(&[1, 2, 3, 4], &ids(&[4])), vec![4]);
        assert_eq!(place(&[1, 2, 3], &ids(&[])), Vec::<u32>::new());
        assert_eq!(place(&[5, 6], &ids(&[5, 6, 7, 8])), vec![5, 6, 7, 8]);
    }

    #[test]
    fn a_hole_from_an_interrupted_sync_is_filled() {
        assert_eq!(place(&[1, 0, 3], &ids(&[1, 3])), vec![1, 3]);
    }

    const TCP: Protocol = Protocol::Tcp;

    fn backend(last: u16) -> v6node_k8s::services::Backend {
        v6node_k8s::services::Backend { ip: format!("fd00:10:244::{last:x}").parse().unwrap(), port: 8080, terminating: false }
    }

    /// A ClusterIP fd00:96::N:80 over backends fd00:10:244::B for each B,
    /// all of them listed.
    fn frontend(n: u16, backends: &[u16]) -> Frontend {
        let backends: Vec<_> = backends.iter().map(|&b| backend(b)).collect();
        Frontend {
            address: Address { ip: format!("fd00:96::{n:x}").parse().unwrap(), port: 80, protocol: TCP },
            service: format!("default/s{n}"),
            port_name: String::new(),
            kind: v6node_k8s::services::FrontendKind::ClusterIp,
            listed: backends.iter().map(|b| (b.ip, b.port)).collect(),
            backends,
            affinity_seconds: None,
            from_outside: None,
        }
    }

    fn view(frontends: Vec<Frontend>) -> ServicesView {
        ServicesView { frontends, ..ServicesView::default() }
    }

    /// Where in `writes` the first write matching `is` stands.
    fn at(writes: &[Write], is: impl Fn(&Write) -> bool) -> usize {
        writes.iter().position(is).expect("a write of that kind")
    }

    #[test]
    fn a_new_service_is_written_backends_first_and_its_count_last() {
        let plan = plan(&Current::default(), &view(vec![frontend(1, &[1, 2])]), None);
        assert_eq!(plan.stats.inserted, 1);
        let backends: Vec<usize> =
            plan.writes.iter().enumerate().filter(|(_, w)| matches!(w, Write::Backend(..))).map(|(i, _)| i).collect();
        assert_eq!(backends.len(), 2);
        let address = at(&plan.writes, |w| matches!(w, Write::FrontendAddress(..)));
        let Write::Frontend { next, old_slots, .. } = &plan.writes[at(&plan.writes, |w| matches!(w, Write::Frontend { .. }))]
        else {
            unreachable!()
        };
        assert!(old_slots.is_empty());
        assert_eq!(next.slots.len(), 2, "both backends in slots");
        let slot_zero = at(&plan.writes, |w| matches!(w, Write::Frontend { .. }));
        assert!(backends.iter().all(|&b| b < slot_zero) && address < slot_zero, "{:?}", plan.writes);
        assert!(plan.left.is_empty());
        assert_eq!(plan.next.backends.len(), 2);
    }

    #[test]
    fn the_same_view_again_writes_nothing() {
        let wanted = view(vec![frontend(1, &[1, 2]), frontend(2, &[2, 3])]);
        let first = plan(&Current::default(), &wanted, None);
        let again = plan(&first.next, &wanted, None);
        assert_eq!(again.writes, vec![]);
        assert_eq!(again.stats, SyncStats::default());
        assert_eq!(again.states, first.states, "ids kept");
    }

    #[test]
    fn a_removed_service_stops_at_slot_zero_first_and_its_backends_go_last() {
        let first = plan(&Current::default(), &view(vec![frontend(1, &[1]), frontend(2, &[2, 3])]), None);
        let gone = plan(&first.next, &view(vec![frontend(1, &[1])]), None);
        assert_eq!(gone.stats.removed, 1);
        let address = frontend(2, &[]).address;
        let slot_zero = at(&gone.writes, |w| *w == Write::RemoveSlot(address, 0));
        let slots = at(&gone.writes, |w| matches!(w, Write::RemoveSlot(_, 1..)));
        let id = at(&gone.writes, |w| matches!(w, Write::RemoveFrontend(_)));
        let backends = at(&gone.writes, |w| matches!(w, Write::RemoveBackend(_)));
        assert!(slot_zero < slots && slots < id && id < backends, "{:?}", gone.writes);
        assert_eq!(gone.writes.iter().filter(|w| matches!(w, Write::RemoveBackend(_))).count(), 2);
        let left: BTreeSet<u16> = gone.left.iter().map(|l| l.ip.segments()[7]).collect();
        assert_eq!(left, BTreeSet::from([2, 3]), "the removed Service's connections end");
    }

    #[test]
    fn a_backend_still_listed_keeps_its_connections_and_one_gone_loses_them() {
        let first = plan(&Current::default(), &view(vec![frontend(1, &[1, 2, 3])]), None);
        // 2 is not ready but still listed; 3 is gone from the slices.
        let mut next = frontend(1, &[1]);
        next.listed.insert((backend(2).ip, 8080));
        let second = plan(&first.next, &view(vec![next]), None);
        let left: Vec<u16> = second.left.iter().map(|l| l.ip.segments()[7]).collect();
        assert_eq!(left, vec![3]);
        assert_eq!(second.stats.updated, 1);
    }
}
