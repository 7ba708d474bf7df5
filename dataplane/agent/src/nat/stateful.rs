// SPDX-License-Identifier: Apache-2.0
//! Stateful NAT64's tables (`bpf/lib/nat64_state.h`, layout in `abi.h`):
//! the pool, the sources that may use it and the queues of free ports,
//! kept equal to `[nat64.stateful]`; and the sweep, the timer that ends
//! expired bindings and gives their ports back.

use std::{
    collections::{HashMap, HashSet},
    net::Ipv4Addr,
    path::Path,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::maps::{lpm_trie::Key, HashMap as BpfHashMap, LpmTrie, MapData, Queue};
use ipnet::Ipv6Net;
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CtKey, CtValue, Nat64Config, Nat64PoolValue, Nat64Port};
use v6node_config::{Nat64Stateful, PortRange};

use crate::{
    bpf,
    conntrack::{self, monotonic_ns, StateTable},
    sync,
};

const TCP: u8 = libc::IPPROTO_TCP as u8;
const UDP: u8 = libc::IPPROTO_UDP as u8;
const ICMP: u8 = libc::IPPROTO_ICMP as u8;
const PROTOCOLS: [(u8, &str, &str); 3] =
    [(TCP, "tcp", maps::NAT64_FREE_TCP), (UDP, "udp", maps::NAT64_FREE_UDP), (ICMP, "icmp", maps::NAT64_FREE_ICMP)];

/// Use of one pool address for one protocol.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PoolUse {
    pub address: String,
    pub protocol: String,
    pub ports: usize,
    pub in_use: usize,
}

/// What `status` shows of stateful NAT64.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatefulStats {
    pub pool: Vec<PoolUse>,
    pub sources: usize,
    pub filtering: String,
    /// The pool and ranges the free-port queues hold; a change refills them.
    pub layout: String,
    pub bindings: usize,
    /// Address-dependent filtering: (binding, server address) pairs.
    pub permits: usize,
    /// Bindings the sweep has ended since the agent started.
    pub expired: u64,
    /// Those the last sweep ended, in last_sweep_micros: the tear-down rate.
    pub last_sweep_expired: u64,
    pub last_sweep_micros: u64,
}

fn layout(stateful: &Nat64Stateful) -> String {
    let pool: Vec<String> = stateful.pool.iter().map(Ipv4Addr::to_string).collect();
    format!("{} tcp {} udp {} icmp {}", pool.join(","), stateful.tcp_ports, stateful.udp_ports, stateful.icmp_ids)
}

/// The layout's fingerprint kept beside the maps (`pool_layout` in the
/// translator's config), so that it lives and dies with the queues it
/// describes. FNV-1a: stable across builds of the agent.
fn fingerprint(layout: &str) -> u32 {
    layout.bytes().fold(0x811c9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x01000193)).max(1)
}

fn range_of(stateful: &Nat64Stateful, proto: u8) -> PortRange {
    match proto {
        TCP => stateful.tcp_ports,
        UDP => stateful.udp_ports,
        _ => stateful.icmp_ids,
    }
}

fn ipv4_of(mapped: &[u8; 16]) -> Ipv4Addr {
    Ipv4Addr::new(mapped[12], mapped[13], mapped[14], mapped[15])
}

const ZERO16: [u8; 16] = [0; 16];

/// The three kinds of entry in the state table (abi.h).
enum Entry {
    ClientSide,
    PoolSide,
    Permit,
}

fn kind(key: &CtKey) -> Entry {
    if key.daddr == ZERO16 {
        Entry::ClientSide
    } else if key.saddr == ZERO16 {
        Entry::PoolSide
    } else {
        Entry::Permit
    }
}

fn pool_key_of_permit(permit: &CtKey) -> CtKey {
    CtKey { saddr: ZERO16, ..*permit }
}

fn pool_key_of_client(value: &CtValue, proto: u8) -> CtKey {
    CtKey { daddr: value.saddr, dport: value.sport, proto, ..CtKey::default() }
}

/// Makes the tables hold `[nat64.stateful]` (or nothing, when it is
/// absent). Runs after `translator::sync_nat64` has written the lifetimes. The
/// free-port queues are refilled only when the pool or a range changed
/// (by the fingerprint beside them), so a restart or reload keeps every
/// binding and hands out no port twice.
pub fn sync(pin_dir: &Path, stateful: Option<&Nat64Stateful>) -> Result<Option<StatefulStats>> {
    let mut config: BpfHashMap<MapData, u32, Nat64Config> = bpf::open_pinned_map(pin_dir, maps::NAT64_CONFIG)?;
    let mut translator = config.get(&0, 0).context("reading the NAT64 config (written first)")?;
    let filled = translator.pool_layout;
    let mut sources: LpmTrie<MapData, [u8; 16], u8> = bpf::open_pinned_map(pin_dir, maps::NAT64_SOURCES)?;
    let mut pool: BpfHashMap<MapData, u32, Nat64PoolValue> = bpf::open_pinned_map(pin_dir, maps::NAT64_POOL)?;
    let wanted_sources: Vec<((u32, [u8; 16]), u8)> = stateful
        .map(|s| s.sources.iter().map(|n: &Ipv6Net| ((u32::from(n.prefix_len()), n.network().octets()), 1u8)).collect())
        .unwrap_or_default();
    let mut ignored = sync::SyncStats::default();
    let stale = sync::sync_trie(&mut sources, &wanted_sources, &mut ignored, "NAT64 sources")?;
    for (len, addr) in stale {
        sources.remove(&Key::new(len, addr)).context("removing a stale NAT64 source")?;
    }

    let wanted_pool: HashMap<u32, u32> = stateful
        .map(|s| s.pool.iter().enumerate().map(|(i, a)| (u32::from_ne_bytes(a.octets()), i as u32)).collect())
        .unwrap_or_default();
    for (&addr, &index) in &wanted_pool {
        if pool.get(&addr, 0).ok().map(|v| v.index) != Some(index) {
            pool.insert(addr, Nat64PoolValue { index }, 0).context("writing a NAT64 pool address")?;
        }
    }
    let current: Vec<u32> = pool.keys().collect::<Result<_, _>>().context("reading the NAT64 pool")?;
    for addr in current.into_iter().filter(|a| !wanted_pool.contains_key(a)) {
        pool.remove(&addr).context("removing a NAT64 pool address")?;
    }

    let Some(stateful) = stateful else {
        if filled != 0 {
            for (_, _, queue) in PROTOCOLS {
                drain(pin_dir, queue)?;
            }
            let state = StateTable::open(pin_dir, maps::NAT64_STATE)?;
            let keys: Vec<CtKey> = state.entries()?.into_iter().map(|(key, _)| key).collect();
            state.remove(&keys)?;
            translator.pool_layout = 0;
            config.insert(0, translator, 0).context("writing the NAT64 config")?;
        }
        return Ok(None);
    };
    let layout = layout(stateful);
    if filled != fingerprint(&layout) {
        refill(pin_dir, stateful)?;
        translator.pool_layout = fingerprint(&layout);
        config.insert(0, translator, 0).context("writing the NAT64 config")?;
        log::info!("NAT64 pool {layout}: free ports queued");
    }
    let mut stats = sweep(pin_dir, stateful)?;
    stats.layout = layout;
    Ok(Some(stats))
}

fn drain(pin_dir: &Path, name: &str) -> Result<usize> {
    let mut queue: Queue<MapData, Nat64Port> = bpf::open_pinned_map(pin_dir, name)?;
    let mut drained = 0;
    while queue.pop(0).is_ok() {
        drained += 1;
    }
    Ok(drained)
}

/// Empties each free-port queue and fills it with every port of the
/// ranges no live binding holds, shuffled: ports are hard to guess (RFC
/// 6056) and spread over the pool's addresses.
fn refill(pin_dir: &Path, stateful: &Nat64Stateful) -> Result<()> {
    let now = monotonic_ns();
    let lifetimes = conntrack::nat64_lifetimes(stateful);
    let mut held: HashSet<(u8, [u8; 16], u16)> = HashSet::new();
    for (key, value) in StateTable::open(pin_dir, maps::NAT64_STATE)?.entries()? {
        if matches!(kind(&key), Entry::PoolSide) && conntrack::is_live(&lifetimes, key.proto, &value, now) {
            held.insert((key.proto, key.daddr, key.dport));
        }
    }
    for (proto, _, name) in PROTOCOLS {
        drain(pin_dir, name)?;
        let range = range_of(stateful, proto);
        let mut free: Vec<Nat64Port> = Vec::with_capacity(range.count() * stateful.pool.len());
        for addr in &stateful.pool {
            let mapped = addr.to_ipv6_mapped().octets();
            for port in range.iter() {
                if !held.contains(&(proto, mapped, port.to_be())) {
                    free.push(Nat64Port { addr: addr.octets(), port: port.to_be(), pad: 0 });
                }
            }
        }
        fastrand::shuffle(&mut free);
        let mut queue: Queue<MapData, Nat64Port> = bpf::open_pinned_map(pin_dir, name)?;
        for port in free {
            queue.push(port, 0).with_context(|| format!("queueing a free port in {name}"))?;
        }
    }
    Ok(())
}

/// Ends what has expired: a binding (its pool side, then its client side)
/// and its permits, its port back in its queue when the pool still has it.
/// Client sides whose pool side names another client are removed too.
/// Counts what is left, per pool address and protocol.
pub fn sweep(pin_dir: &Path, stateful: &Nat64Stateful) -> Result<StatefulStats> {
    let started = Instant::now();
    let state = StateTable::open(pin_dir, maps::NAT64_STATE)?;
    let mut lookup: BpfHashMap<MapData, CtKey, CtValue> = bpf::open_pinned_map(pin_dir, maps::NAT64_STATE)?;
    let now = monotonic_ns();
    let lifetimes = conntrack::nat64_lifetimes(stateful);
    let mut pool_sides: HashMap<CtKey, CtValue> = HashMap::new();
    let mut client_sides: Vec<(CtKey, CtValue)> = Vec::new();
    let mut permits: Vec<(CtKey, CtValue)> = Vec::new();
    for (key, value) in state.entries()? {
        match kind(&key) {
            Entry::PoolSide => {
                pool_sides.insert(key, value);
            }
            Entry::ClientSide => client_sides.push((key, value)),
            Entry::Permit => permits.push((key, value)),
        }
    }
    let expired: HashSet<CtKey> = pool_sides
        .iter()
        .filter(|(key, value)| conntrack::is_expired(&lifetimes, key.proto, value, now))
        .map(|(key, _)| *key)
        .collect();
    // Permits first: none may outlive its binding into the port's next one.
    // An entry made while the table was read may have a binding the read
    // missed: what is missing counts only for entries older than the read.
    let old = |made: u64| conntrack::is_old(made, now);
    let (gone_permits, kept_permits): (Vec<(CtKey, CtValue)>, Vec<_>) = permits.into_iter().partition(|(permit, value)| {
        let binding = pool_key_of_permit(permit);
        expired.contains(&binding) || (!pool_sides.contains_key(&binding) && old(value.last_seen_ns))
    });
    let gone_permits: Vec<CtKey> = gone_permits.into_iter().map(|(key, _)| key).collect();
    state.remove(&gone_permits)?;
    let mut queues: HashMap<u8, Queue<MapData, Nat64Port>> = HashMap::new();
    for (proto, _, name) in PROTOCOLS {
        queues.insert(proto, bpf::open_pinned_map(pin_dir, name)?);
    }
    let expired_keys: Vec<CtKey> = expired.iter().copied().collect();
    state.remove(&expired_keys)?;
    for key in &expired_keys {
        let addr = ipv4_of(&key.daddr);
        let port = u16::from_be(key.dport);
        let range = range_of(stateful, key.proto);
        if stateful.pool.contains(&addr) && (range.first..=range.last).contains(&port) {
            let queue = queues.get_mut(&key.proto).expect("one queue per protocol");
            queue.push(Nat64Port { addr: addr.octets(), port: key.dport, pad: 0 }, 0).context("giving a port back")?;
        }
    }
    for (key, value) in &client_sides {
        let pool_key = pool_key_of_client(value, key.proto);
        let live = match pool_sides.get(&pool_key) {
            Some(b) => !expired.contains(&pool_key) && b.daddr == key.saddr && b.dport == key.sport,
            None => !old(value.last_seen_ns),
        };
        // Read again: a packet may have just made this side new.
        if !live && lookup.get(key, 0).ok().is_some_and(|now_value| now_value == *value) {
            let _ = lookup.remove(key);
        }
    }

    let mut in_use: HashMap<(Ipv4Addr, u8), usize> = HashMap::new();
    for key in pool_sides.keys().filter(|k| !expired.contains(k)) {
        *in_use.entry((ipv4_of(&key.daddr), key.proto)).or_default() += 1;
    }
    let mut pool = Vec::new();
    for addr in &stateful.pool {
        for (proto, name, _) in PROTOCOLS {
            pool.push(PoolUse {
                address: addr.to_string(),
                protocol: name.into(),
                ports: range_of(stateful, proto).count(),
                in_use: in_use.get(&(*addr, proto)).copied().unwrap_or(0),
            });
        }
    }
    Ok(StatefulStats {
        pool,
        sources: stateful.sources.len(),
        filtering: stateful.filtering.to_string(),
        layout: layout(stateful),
        bindings: pool_sides.len() - expired.len(),
        permits: kept_permits.len(),
        expired: expired.len() as u64,
        last_sweep_expired: expired.len() as u64,
        last_sweep_micros: started.elapsed().as_micros() as u64,
    })
}
