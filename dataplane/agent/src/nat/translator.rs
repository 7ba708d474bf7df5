// SPDX-License-Identifier: Apache-2.0
//! The stateless translator's tables (`bpf/lib/nat64.h`): the prefix,
//! explicit address mappings and translatable ranges, kept equal to
//! `[nat64]`, and its one configuration element.

use std::{path::Path, time::Instant};

use anyhow::{Context, Result};
use aya::maps::{
    lpm_trie::{Key, LpmTrie},
    HashMap as BpfHashMap, MapData,
};
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, EamValue, Lpm4Key, Nat64Config, NAT64_FILTER_ADDRESS_DEPENDENT, NAT64_FILTER_ENDPOINT_INDEPENDENT};
use v6node_config::{Nat46, Nat64, Nat64Filtering};

use crate::{
    bpf, conntrack,
    sync::{sync_trie, SyncStats},
};

/// aya's LPM key is `{ u32 prefix_len; K data }`; with K = [u8; 4] it must
/// be byte for byte the C side's `struct v6n_lpm4_key`.
const _: () = assert!(std::mem::size_of::<Key<[u8; 4]>>() == std::mem::size_of::<Lpm4Key>());

/// What syncing the translator's tables did, for `status`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Nat64Stats {
    pub prefix: String,
    /// Explicit address mappings; each is one entry in both EAM tables.
    pub eam: SyncStats,
    /// nat64.translatable: IPv4 ranges translated into the prefix.
    #[serde(default)]
    pub translatable: SyncStats,
    /// `[nat64.stateful]`, refreshed by each sweep.
    #[serde(default)]
    pub stateful: Option<super::stateful::StatefulStats>,
    /// `[nat46]`, its flows refreshed by each sweep.
    #[serde(default)]
    pub nat46: Option<super::gateway::Nat46Stats>,
    /// The fragmentation link's MTU: DF-clear IPv4 packets too big for
    /// IPv6 are cut to it; None: they get a Fragmentation Needed.
    #[serde(default)]
    pub fragment_mtu: Option<u32>,
}

/// Fills the translator's tables from `[nat64]`. New and changed mappings go
/// in first, then the prefix (one atomic element swap), then stale mappings
/// come out: a mapping present before and after never disappears, so a
/// reload does not interrupt the traffic it translates.
pub fn sync_nat64(pin_dir: &Path, nat64: &Nat64, nat46: Option<&Nat46>, fragment_mark: u32) -> Result<Nat64Stats> {
    let mut eam6: LpmTrie<MapData, [u8; 16], EamValue> = bpf::open_pinned_map(pin_dir, maps::EAM6)?;
    let mut eam4: LpmTrie<MapData, [u8; 4], EamValue> = bpf::open_pinned_map(pin_dir, maps::EAM4)?;
    let values: Vec<EamValue> = nat64
        .eam
        .iter()
        .enumerate()
        .map(|(rule, e)| EamValue {
            ipv6: e.ipv6.network().octets(),
            ipv4: e.ipv4.network().octets(),
            ipv6_len: e.ipv6.prefix_len(),
            ipv4_len: e.ipv4.prefix_len(),
            pad: 0,
            rule: rule as u32,
        })
        .collect();
    let by6: Vec<_> = values.iter().map(|v| ((u32::from(v.ipv6_len), v.ipv6), *v)).collect();
    let by4: Vec<_> = values.iter().map(|v| ((u32::from(v.ipv4_len), v.ipv4), *v)).collect();
    let mut stats = SyncStats { entries: values.len(), ..SyncStats::default() };
    let read_and_write = Instant::now();
    let stale6 = sync_trie(&mut eam6, &by6, &mut stats, "EAM")?;
    // Each mapping counts once, though it lives in both tables.
    let mut stats4 = SyncStats::default();
    let stale4 = sync_trie(&mut eam4, &by4, &mut stats4, "EAM")?;

    let mut config: BpfHashMap<MapData, u32, Nat64Config> = bpf::open_pinned_map(pin_dir, maps::NAT64_CONFIG)?;
    let mut value = nat64_config(nat64, nat46);
    value.fragment_mark = fragment_mark;
    // Not this sync's to change: stateful::sync writes it once the queues hold that pool.
    value.pool_layout = config.get(&0, 0).map_or(0, |old| old.pool_layout);
    config.insert(0, value, 0).context("writing the NAT64 prefix")?;

    for (len, addr) in &stale6 {
        eam6.remove(&Key::new(*len, *addr)).context("removing a stale EAM entry")?;
    }
    for (len, addr) in &stale4 {
        eam4.remove(&Key::new(*len, *addr)).context("removing a stale EAM entry")?;
    }
    stats.removed = stale6.len().max(stale4.len());
    stats.write_micros = read_and_write.elapsed().as_micros() as u64;
    let translatable = sync_translatable(pin_dir, &nat64.translatable)?;
    Ok(Nat64Stats { prefix: nat64.prefix.to_string(), eam: stats, translatable, stateful: None, nat46: None, fragment_mtu: None })
}

/// The translator's single configuration element.
fn nat64_config(nat64: &Nat64, nat46: Option<&Nat46>) -> Nat64Config {
    let mut value =
        Nat64Config { prefix: nat64.prefix.network().octets(), prefix_len: nat64.prefix.prefix_len(), ..Nat64Config::default() };
    if let Some(stateful) = &nat64.stateful {
        value.filtering = match stateful.filtering {
            Nat64Filtering::EndpointIndependent => NAT64_FILTER_ENDPOINT_INDEPENDENT,
            Nat64Filtering::AddressDependent => NAT64_FILTER_ADDRESS_DEPENDENT,
        } as u8;
        value.lifetimes = conntrack::nat64_lifetimes(stateful);
    }
    if let Some(nat46) = nat46 {
        value.nat46_prefix.copy_from_slice(&nat46.source_prefix.network().octets()[..12]);
        value.nat46_on = 1;
    }
    value
}

/// Makes the translatable table hold exactly `ranges`: new ones in first,
/// stale ones out last. Runs after the prefix is written, so a new range
/// never translates into an old prefix.
fn sync_translatable(pin_dir: &Path, ranges: &[Ipv4Net]) -> Result<SyncStats> {
    let mut table: LpmTrie<MapData, [u8; 4], u8> = bpf::open_pinned_map(pin_dir, maps::XLAT4)?;
    let started = Instant::now();
    let wanted: Vec<_> = ranges.iter().map(|r| ((u32::from(r.prefix_len()), r.network().octets()), 1u8)).collect();
    let mut stats = SyncStats { entries: ranges.len(), ..SyncStats::default() };
    let stale = sync_trie(&mut table, &wanted, &mut stats, "translatable")?;
    for (len, addr) in &stale {
        table.remove(&Key::new(*len, *addr)).context("removing a stale translatable range")?;
    }
    stats.removed = stale.len();
    stats.write_micros = started.elapsed().as_micros() as u64;
    Ok(stats)
}
