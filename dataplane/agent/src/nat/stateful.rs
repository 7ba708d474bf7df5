// SPDX-License-Identifier: Apache-2.0
//! Stateful NAT64's tables (`bpf/lib/nat64_state.h`, layout in `abi.h`):
//! the pool, by address and by place, and the sources that may use it,
//! kept equal to `[nat64.stateful]`; and the sweep, the timer that removes
//! expired bindings to keep the table small. Ports never wait for it: the
//! datapath takes over the port of an expired binding at once.

use std::{
    collections::{HashMap, HashSet},
    net::Ipv4Addr,
    path::Path,
    time::Instant,
};

use anyhow::{Context, Result};
use aya::maps::{Array, HashMap as BpfHashMap, LpmTrie, MapData};
use ipnet::Ipv6Net;
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CtKey, CtValue, Nat64Config, Nat64PoolValue};
use v6node_config::{Nat64Stateful, PortRange};

use crate::{
    bpf,
    conntrack::{self, monotonic_ns, StateTable},
    sync,
};

const TCP: u8 = libc::IPPROTO_TCP as u8;
const UDP: u8 = libc::IPPROTO_UDP as u8;
const ICMP: u8 = libc::IPPROTO_ICMP as u8;
const PROTOCOLS: [(u8, &str); 3] = [(TCP, "tcp"), (UDP, "udp"), (ICMP, "icmp")];

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
    /// The pool and its ranges, as configured.
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

/// The pool table as `pool` wants it, from the table as read: each address
/// (key in network order) under its place in the pool, which the queues'
/// ports are counted by; an address already there under its place is not
/// written again, and the addresses no longer in the pool go after.
#[derive(Debug, PartialEq)]
struct PoolPlan {
    writes: Vec<(u32, Nat64PoolValue)>,
    stale: Vec<u32>,
}

fn plan_pool(current: &HashMap<u32, u32>, pool: &[Ipv4Addr]) -> PoolPlan {
    let wanted: Vec<u32> = pool.iter().map(|a| u32::from_ne_bytes(a.octets())).collect();
    let writes = wanted
        .iter()
        .zip(0u32..)
        .filter(|(addr, index)| current.get(addr) != Some(index))
        .map(|(&addr, index)| (addr, Nat64PoolValue { index }))
        .collect();
    let kept: HashSet<&u32> = wanted.iter().collect();
    let mut stale: Vec<u32> = current.keys().filter(|a| !kept.contains(a)).copied().collect();
    stale.sort_unstable();
    PoolPlan { writes, stale }
}

/// Makes the tables hold `[nat64.stateful]` (or nothing, when it is
/// absent). Runs before `translator::sync_nat64` writes the pool's size:
/// each address is in place (by address, then by place) before a binding
/// may borrow it. A restart or reload keeps every binding.
pub fn sync(pin_dir: &Path, stateful: Option<&Nat64Stateful>) -> Result<Option<StatefulStats>> {
    let config: BpfHashMap<MapData, u32, Nat64Config> = bpf::open_pinned_map(pin_dir, maps::NAT64_CONFIG)?;
    let had_pool = config.get(&0, 0).is_ok_and(|c| c.pool_size != 0);
    let mut sources: LpmTrie<MapData, [u8; 16], u8> = bpf::open_pinned_map(pin_dir, maps::NAT64_SOURCES)?;
    let mut pool: BpfHashMap<MapData, u32, Nat64PoolValue> = bpf::open_pinned_map(pin_dir, maps::NAT64_POOL)?;
    let mut by_place: Array<MapData, u32> = bpf::open_pinned_map(pin_dir, maps::NAT64_POOL_ADDRS)?;
    let wanted_sources: Vec<(sync::Prefix<16>, u8)> = stateful
        .map(|s| s.sources.iter().map(|n: &Ipv6Net| ((u32::from(n.prefix_len()), n.network().octets()), 1u8)).collect())
        .unwrap_or_default();
    let mut ignored = sync::SyncStats::default();
    let stale = sync::sync_trie(&mut sources, &wanted_sources, &mut ignored, "NAT64 sources")?;
    sync::remove_stale(&mut sources, &stale, "removing a stale NAT64 source")?;

    let mut current: HashMap<u32, u32> = HashMap::new();
    for entry in pool.iter() {
        let (addr, value) = entry.context("reading the NAT64 pool")?;
        current.insert(addr, value.index);
    }
    let planned = plan_pool(&current, stateful.map_or(&[][..], |s| &s.pool[..]));
    for (addr, value) in &planned.writes {
        pool.insert(addr, value, 0).context("writing a NAT64 pool address")?;
        by_place.set(value.index, addr, 0).context("writing a NAT64 pool address by place")?;
    }
    for addr in &planned.stale {
        pool.remove(addr).context("removing a NAT64 pool address")?;
    }

    let Some(stateful) = stateful else {
        // No source may bind any more: what is left goes.
        if had_pool {
            let state = StateTable::open(pin_dir, maps::NAT64_STATE)?;
            let keys: Vec<CtKey> = state.entries()?.into_iter().map(|(key, _)| key).collect();
            state.remove(&keys)?;
        }
        return Ok(None);
    };
    if !planned.writes.is_empty() || !planned.stale.is_empty() {
        log::info!("NAT64 pool {}", layout(stateful));
    }
    sweep(pin_dir, stateful).map(Some)
}

/// What a sweep ends, decided from the state table as read at one instant.
#[derive(Debug, Default)]
struct SweepPlan {
    /// Permits of expired bindings, and those whose binding is gone: out
    /// first, so that none outlives its binding into the port's next one.
    gone_permits: Vec<CtKey>,
    kept_permits: usize,
    /// The pool sides of expired bindings, as read: each goes only if it
    /// still holds that value, since a new client may have just taken its
    /// port over.
    expired: Vec<(CtKey, CtValue)>,
    /// Client sides no live binding names, as read: each goes only if it
    /// still holds that value, since a packet may have just made it new.
    gone_clients: Vec<(CtKey, CtValue)>,
    /// Live bindings per pool address and protocol.
    in_use: HashMap<(Ipv4Addr, u8), usize>,
    bindings: usize,
}

/// Decides what a sweep at `now` ends of `entries` (the whole state table).
/// Client sides whose pool side names another client go too. An entry made
/// while the table was read may have a binding the read missed: what is
/// missing counts only for entries older than the read.
fn plan_sweep(entries: Vec<(CtKey, CtValue)>, stateful: &Nat64Stateful, now: u64) -> SweepPlan {
    let lifetimes = conntrack::nat64_lifetimes(stateful);
    let mut pool_sides: HashMap<CtKey, CtValue> = HashMap::new();
    let mut client_sides: Vec<(CtKey, CtValue)> = Vec::new();
    let mut permits: Vec<(CtKey, CtValue)> = Vec::new();
    for (key, value) in entries {
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
    let old = |made: u64| conntrack::is_old(made, now);
    let (gone_permits, kept_permits): (Vec<(CtKey, CtValue)>, Vec<_>) = permits.into_iter().partition(|(permit, value)| {
        let key = pool_key_of_permit(permit);
        match pool_sides.get(&key) {
            // One made for the port's previous client admits nothing.
            Some(binding) => expired.contains(&key) || binding.backend_id != value.backend_id,
            None => old(value.last_seen_ns),
        }
    });
    let gone_clients = client_sides
        .into_iter()
        .filter(|(key, value)| {
            let pool_key = pool_key_of_client(value, key.proto);
            let live = match pool_sides.get(&pool_key) {
                Some(b) => !expired.contains(&pool_key) && b.daddr == key.saddr && b.dport == key.sport,
                None => !old(value.last_seen_ns),
            };
            !live
        })
        .collect();
    let mut expired: Vec<(CtKey, CtValue)> =
        expired.into_iter().filter_map(|key| pool_sides.remove(&key).map(|value| (key, value))).collect();
    expired.sort_unstable_by_key(|(key, _)| (key.proto, key.daddr, u16::from_be(key.dport)));
    let mut in_use: HashMap<(Ipv4Addr, u8), usize> = HashMap::new();
    for key in pool_sides.keys() {
        *in_use.entry((ipv4_of(&key.daddr), key.proto)).or_default() += 1;
    }
    SweepPlan {
        gone_permits: gone_permits.into_iter().map(|(key, _)| key).collect(),
        kept_permits: kept_permits.len(),
        expired,
        gone_clients,
        in_use,
        bindings: pool_sides.len(),
    }
}

/// Ends what has expired: a binding (its pool side, then its client side)
/// and its permits, unless a new client took the port over meanwhile.
/// Counts what is left, per pool address and protocol.
pub fn sweep(pin_dir: &Path, stateful: &Nat64Stateful) -> Result<StatefulStats> {
    let started = Instant::now();
    let state = StateTable::open(pin_dir, maps::NAT64_STATE)?;
    let mut lookup: BpfHashMap<MapData, CtKey, CtValue> = bpf::open_pinned_map(pin_dir, maps::NAT64_STATE)?;
    // Before the read: what the read may have missed is judged from then.
    let now = monotonic_ns();
    let plan = plan_sweep(state.entries()?, stateful, now);
    state.remove(&plan.gone_permits)?;
    for (key, value) in plan.expired.iter().chain(&plan.gone_clients) {
        if lookup.get(key, 0).ok().is_some_and(|now_value| now_value == *value) {
            let _ = lookup.remove(key);
        }
    }

    let mut pool = Vec::new();
    for addr in &stateful.pool {
        for (proto, name) in PROTOCOLS {
            pool.push(PoolUse {
                address: addr.to_string(),
                protocol: name.into(),
                ports: range_of(stateful, proto).count(),
                in_use: plan.in_use.get(&(*addr, proto)).copied().unwrap_or(0),
            });
        }
    }
    Ok(StatefulStats {
        pool,
        sources: stateful.sources.len(),
        filtering: stateful.filtering.to_string(),
        layout: layout(stateful),
        bindings: plan.bindings,
        permits: plan.kept_permits,
        expired: plan.expired.len() as u64,
        last_sweep_expired: plan.expired.len() as u64,
        last_sweep_micros: started.elapsed().as_micros() as u64,
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;

    fn stateful(extra: &str) -> Nat64Stateful {
        let text = format!(
            "[nat64]\ndevices = [\"eth0\"]\nprefix = \"2001:db8:64::/96\"\n[nat64.stateful]\npool = [\"203.0.113.1\", \"203.0.113.2\"]\n\
             sources = [\"fd00:10::/48\"]\nudp_ports = \"20000-20099\"\n{extra}"
        );
        v6node_config::parse_str(Path::new("test.toml"), &text).expect("valid").config.nat64.stateful.expect("stateful")
    }

    fn addrs(items: &[&str]) -> Vec<Ipv4Addr> {
        items.iter().map(|a| a.parse().unwrap()).collect()
    }

    fn key(addr: &str) -> u32 {
        u32::from_ne_bytes(addr.parse::<Ipv4Addr>().unwrap().octets())
    }

    #[test]
    fn the_pool_is_written_by_place_and_what_left_it_goes() {
        let first = plan_pool(&HashMap::new(), &addrs(&["203.0.113.1", "203.0.113.2"]));
        let index = |index| Nat64PoolValue { index };
        assert_eq!(
            first,
            PoolPlan { writes: vec![(key("203.0.113.1"), index(0)), (key("203.0.113.2"), index(1))], stale: vec![] }
        );
        let current = HashMap::from([(key("203.0.113.1"), 0), (key("203.0.113.2"), 1)]);
        assert_eq!(
            plan_pool(&current, &addrs(&["203.0.113.1", "203.0.113.2"])),
            PoolPlan { writes: vec![], stale: vec![] },
            "unchanged: nothing written"
        );
        assert_eq!(
            plan_pool(&current, &addrs(&["203.0.113.2", "203.0.113.3"])),
            PoolPlan {
                writes: vec![(key("203.0.113.2"), index(0)), (key("203.0.113.3"), index(1))],
                stale: vec![key("203.0.113.1")]
            },
            ".2 moves up to .1's place, .3 takes the next"
        );
        let mut everything = vec![key("203.0.113.1"), key("203.0.113.2")];
        everything.sort_unstable();
        assert_eq!(plan_pool(&current, &[]), PoolPlan { writes: vec![], stale: everything });
    }

    const SECOND: u64 = 1_000_000_000;
    const NOW: u64 = 100_000 * SECOND;

    fn mapped(v4: &str) -> [u8; 16] {
        v4.parse::<Ipv4Addr>().unwrap().to_ipv6_mapped().octets()
    }

    fn client(n: u16) -> [u8; 16] {
        Ipv6Addr::new(0xfd00, 0x10, 0, 0, 0, 0, 0, n).octets()
    }

    /// A UDP binding's two sides (abi.h), from client ::`n` port 5000 to
    /// `pool`:`port`, last seen `ago` seconds before NOW.
    fn binding(n: u16, pool: &str, port: u16, ago: u64) -> [(CtKey, CtValue); 2] {
        let seen = NOW - ago * SECOND;
        let pool_side = CtKey { daddr: mapped(pool), dport: port.to_be(), proto: UDP, ..CtKey::default() };
        let to_client = CtValue { daddr: client(n), dport: 5000u16.to_be(), last_seen_ns: seen, ..CtValue::default() };
        let client_side = CtKey { saddr: client(n), sport: 5000u16.to_be(), proto: UDP, ..CtKey::default() };
        let to_pool = CtValue { saddr: mapped(pool), sport: port.to_be(), last_seen_ns: seen, ..CtValue::default() };
        [(pool_side, to_client), (client_side, to_pool)]
    }

    fn permit(pool: &str, port: u16, server: &str, made_ago: u64) -> (CtKey, CtValue) {
        let key = CtKey { saddr: mapped(server), daddr: mapped(pool), dport: port.to_be(), proto: UDP, ..CtKey::default() };
        (key, CtValue { last_seen_ns: NOW - made_ago * SECOND, ..CtValue::default() })
    }

    #[test]
    fn an_expired_binding_goes_with_its_permits() {
        let stateful = stateful("");
        let [live_pool, live_client] = binding(1, "203.0.113.1", 20000, 10);
        let [dead_pool, dead_client] = binding(2, "203.0.113.2", 20001, 400);
        let permits = [permit("203.0.113.1", 20000, "192.0.2.1", 10), permit("203.0.113.2", 20001, "192.0.2.1", 400)];
        let entries = vec![live_pool, live_client, dead_pool, dead_client, permits[0], permits[1]];
        let plan = plan_sweep(entries, &stateful, NOW);
        assert_eq!(plan.expired, [dead_pool], "UDP lives 300 s");
        assert_eq!(plan.gone_permits, [permits[1].0]);
        assert_eq!(plan.kept_permits, 1);
        assert_eq!(plan.gone_clients, [dead_client]);
        assert_eq!(plan.bindings, 1);
        assert_eq!(plan.in_use, HashMap::from([(("203.0.113.1".parse().unwrap(), UDP), 1)]));
    }

    #[test]
    fn a_binding_outside_the_pool_now_expires_like_any_other() {
        let stateful = stateful("");
        let [gone_address, _] = binding(1, "203.0.113.9", 20000, 400);
        let [out_of_range, _] = binding(2, "203.0.113.1", 30000, 400);
        let plan = plan_sweep(vec![gone_address, out_of_range], &stateful, NOW);
        assert_eq!(plan.expired.len(), 2);
        assert_eq!((plan.bindings, plan.in_use.len()), (0, 0));
    }

    #[test]
    fn a_permit_made_for_the_ports_previous_client_goes() {
        let stateful = stateful("");
        let [(pool_key, mut pool_side), client_side] = binding(2, "203.0.113.1", 20000, 1);
        pool_side.backend_id = 7;
        let (mine, mut mine_value) = permit("203.0.113.1", 20000, "192.0.2.1", 1);
        mine_value.backend_id = 7;
        let (previous, mut previous_value) = permit("203.0.113.1", 20000, "192.0.2.2", 400);
        previous_value.backend_id = 3;
        let entries = vec![(pool_key, pool_side), client_side, (mine, mine_value), (previous, previous_value)];
        let plan = plan_sweep(entries, &stateful, NOW);
        assert_eq!((plan.gone_permits.as_slice(), plan.kept_permits), (&[previous][..], 1));
    }

    #[test]
    fn what_lacks_a_binding_goes_once_older_than_the_read() {
        let stateful = stateful("");
        let [_, orphan_client] = binding(1, "203.0.113.1", 20000, 10);
        let [_, young_client] = binding(2, "203.0.113.1", 20001, 0);
        let old_permit = permit("203.0.113.1", 20002, "192.0.2.1", 10);
        let young_permit = permit("203.0.113.1", 20003, "192.0.2.1", 0);
        let plan = plan_sweep(vec![orphan_client, young_client, old_permit, young_permit], &stateful, NOW);
        assert_eq!(plan.gone_clients, [orphan_client]);
        assert_eq!((plan.gone_permits.as_slice(), plan.kept_permits), (&[old_permit.0][..], 1));
        assert!(plan.expired.is_empty());
    }

    #[test]
    fn a_client_side_whose_port_went_to_another_client_goes() {
        let stateful = stateful("");
        // Client ::1's binding expired and its port went to ::2 since.
        let [pool_side, client_side] = binding(2, "203.0.113.1", 20000, 1);
        let [_, stale_client] = binding(1, "203.0.113.1", 20000, 400);
        let plan = plan_sweep(vec![pool_side, client_side, stale_client], &stateful, NOW);
        assert_eq!(plan.gone_clients, [stale_client]);
        assert_eq!((plan.bindings, plan.expired.len()), (1, 0));
    }
}
