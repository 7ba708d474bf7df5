// SPDX-License-Identifier: Apache-2.0
//! `[filter]`: the deny table of source prefixes the uplinks drop
//! (`bpf/host.bpf.c`), kept equal to the configuration.

use std::{path::Path, time::Instant};

use anyhow::Result;
use aya::maps::{
    lpm_trie::{Key, LpmTrie},
    MapData,
};
use ipnet::Ipv6Net;
use v6node_abi::{maps, DenyValue, Lpm6Key};

use crate::{
    bpf,
    sync::{self, Prefix, SyncStats},
};

/// aya's LPM key is `{ u32 prefix_len; K data }`; with K = [u8; 16] it must
/// be byte for byte the C side's `struct v6n_lpm6_key`.
type DenyKey = Key<[u8; 16]>;
const _: () = assert!(std::mem::size_of::<DenyKey>() == std::mem::size_of::<Lpm6Key>());

/// The deny table's entries for `sources`: each prefix under its network,
/// its rule its place in `filter.deny_sources`, which `status` counts by.
fn deny_entries(sources: &[Ipv6Net]) -> Vec<(Prefix<16>, DenyValue)> {
    sources
        .iter()
        .enumerate()
        .map(|(rule, net)| ((u32::from(net.prefix_len()), net.network().octets()), DenyValue { rule: rule as u32 }))
        .collect()
}

/// Makes the deny table hold exactly `wanted`. New and changed entries are
/// written before stale ones are removed, and each write is one atomic map
/// update, so a prefix in both the old and the new config is never absent.
pub fn sync_deny(pin_dir: &Path, wanted: &[Ipv6Net]) -> Result<SyncStats> {
    let mut trie: LpmTrie<MapData, [u8; 16], DenyValue> = bpf::open_pinned_map(pin_dir, maps::DENY_SRC)?;
    let started = Instant::now();
    let current = sync::read_trie(&trie, "deny")?;
    let read_micros = started.elapsed().as_micros() as u64;

    let started = Instant::now();
    let plan = sync::plan_trie(current, &deny_entries(wanted));
    // The rule is the prefix's place in `wanted`: the error names the prefix as configured.
    sync::write_trie(&mut trie, &plan.writes, |_, value| format!("adding {} to the deny table", wanted[value.rule as usize]))?;
    sync::remove_stale(&mut trie, &plan.stale, "removing a stale deny entry")?;
    Ok(SyncStats {
        entries: wanted.len(),
        inserted: plan.inserted,
        updated: plan.updated,
        removed: plan.stale.len(),
        read_micros,
        write_micros: started.elapsed().as_micros() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(items: &[&str]) -> Vec<Ipv6Net> {
        items.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn each_prefix_is_written_under_its_network_with_its_place_as_rule() {
        let sources = nets(&["2001:db8::/32", "fd00:10::/48"]);
        let entries = deny_entries(&sources);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], ((32, sources[0].network().octets()), DenyValue { rule: 0 }));
        assert_eq!(entries[1], ((48, sources[1].network().octets()), DenyValue { rule: 1 }));
    }

    #[test]
    fn a_reordered_list_rewrites_the_prefixes_whose_rule_moved() {
        let before = deny_entries(&nets(&["2001:db8::/32", "2001:db8:1::/48", "fd00::/8"]));
        let after = deny_entries(&nets(&["2001:db8::/32", "fd00::/8", "fd00:10::/48"]));
        let plan = sync::plan_trie(before.into_iter().collect(), &after);
        assert_eq!(plan.writes, after[1..], "fd00::/8 now rule 1, fd00:10::/48 new");
        assert_eq!((plan.inserted, plan.updated), (1, 1));
        assert_eq!(plan.stale, [(48, nets(&["2001:db8:1::/48"])[0].network().octets())]);
    }
}
