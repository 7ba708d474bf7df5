// SPDX-License-Identifier: Apache-2.0
//! `[filter]`: the deny table of source prefixes the uplinks drop
//! (`bpf/host.bpf.c`), kept equal to the configuration.

use std::{collections::HashMap, path::Path, time::Instant};

use anyhow::{Context, Result};
use aya::maps::{
    lpm_trie::{Key, LpmTrie},
    MapData,
};
use ipnet::Ipv6Net;
use v6node_abi::{maps, DenyValue, Lpm6Key};

use crate::{bpf, sync::SyncStats};

/// aya's LPM key is `{ u32 prefix_len; K data }`; with K = [u8; 16] it must
/// be byte for byte the C side's `struct v6n_lpm6_key`.
type DenyKey = Key<[u8; 16]>;
const _: () = assert!(std::mem::size_of::<DenyKey>() == std::mem::size_of::<Lpm6Key>());

/// Makes the deny table hold exactly `wanted`. New and changed entries are
/// written before stale ones are removed, and each write is one atomic map
/// update, so a prefix in both the old and the new config is never absent.
pub fn sync_deny(pin_dir: &Path, wanted: &[Ipv6Net]) -> Result<SyncStats> {
    let mut trie: LpmTrie<MapData, [u8; 16], DenyValue> = bpf::open_pinned_map(pin_dir, maps::DENY_SRC)?;
    let started = Instant::now();
    let mut current: HashMap<(u32, [u8; 16]), u32> = HashMap::new();
    for entry in trie.iter() {
        let (key, value) = entry.context("reading the deny table")?;
        current.insert((key.prefix_len(), key.data()), value.rule);
    }
    let read_micros = started.elapsed().as_micros() as u64;

    let started = Instant::now();
    let mut stats = SyncStats { entries: wanted.len(), read_micros, ..SyncStats::default() };
    for (rule, net) in wanted.iter().enumerate() {
        let rule = rule as u32;
        let slot = (u32::from(net.prefix_len()), net.network().octets());
        match current.remove(&slot) {
            Some(old) if old == rule => continue,
            Some(_) => stats.updated += 1,
            None => stats.inserted += 1,
        }
        trie.insert(&Key::new(slot.0, slot.1), DenyValue { rule }, 0)
            .with_context(|| format!("adding {net} to the deny table"))?;
    }
    for (prefix_len, addr) in current.into_keys() {
        trie.remove(&Key::new(prefix_len, addr)).context("removing a stale deny entry")?;
        stats.removed += 1;
    }
    stats.write_micros = started.elapsed().as_micros() as u64;
    Ok(stats)
}
