// SPDX-License-Identifier: Apache-2.0
//! What every writer of a pinned table shares: the figures a sync reports,
//! and making an LPM table hold exactly what is wanted.

use std::collections::HashMap;

use anyhow::{Context, Result};
use aya::maps::{
    lpm_trie::{Key, LpmTrie},
    MapData,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SyncStats {
    pub entries: usize,
    pub inserted: usize,
    pub updated: usize,
    pub removed: usize,
    /// Time to read the current table from the kernel.
    pub read_micros: u64,
    /// Time for the inserts, updates and removals.
    pub write_micros: u64,
}

/// An LPM table's key as the plans handle it: prefix length and address.
pub type Prefix<const N: usize> = (u32, [u8; N]);

/// What making an LPM table hold exactly what is wanted takes, worked out
/// from the table as read: decided apart from the writing so that it is
/// checked without BPF.
#[derive(Debug, PartialEq)]
pub struct TriePlan<const N: usize, V> {
    /// New and changed entries, in the order they are wanted.
    pub writes: Vec<(Prefix<N>, V)>,
    /// Entries nothing wants any more, lowest first: they go last, once
    /// whatever switches over to the new entries is written.
    pub stale: Vec<Prefix<N>>,
    /// Of the writes, those under a prefix the table did not have.
    pub inserted: usize,
    /// Of the writes, those changing the value under a prefix.
    pub updated: usize,
}

/// Compares the table as read with what is wanted: an entry already there
/// with the same value is not written again.
pub fn plan_trie<const N: usize, V: PartialEq + Copy>(
    mut current: HashMap<Prefix<N>, V>,
    wanted: &[(Prefix<N>, V)],
) -> TriePlan<N, V> {
    let mut plan = TriePlan { writes: Vec::new(), stale: Vec::new(), inserted: 0, updated: 0 };
    for (slot, value) in wanted {
        match current.remove(slot) {
            Some(old) if old == *value => continue,
            Some(_) => plan.updated += 1,
            None => plan.inserted += 1,
        }
        plan.writes.push((*slot, *value));
    }
    plan.stale = current.into_keys().collect();
    plan.stale.sort_unstable();
    plan
}

/// The whole of an LPM table (`what`, for errors).
pub fn read_trie<const N: usize, V: aya::Pod>(trie: &LpmTrie<MapData, [u8; N], V>, what: &str) -> Result<HashMap<Prefix<N>, V>> {
    let mut current = HashMap::new();
    for entry in trie.iter() {
        let (key, value) = entry.with_context(|| format!("reading the {what} table"))?;
        current.insert((key.prefix_len(), key.data()), value);
    }
    Ok(current)
}

/// Writes a plan's new and changed entries, each one atomic map update;
/// `failed` says what a write that fails was doing, naming its entry.
pub fn write_trie<const N: usize, V: aya::Pod>(
    trie: &mut LpmTrie<MapData, [u8; N], V>,
    writes: &[(Prefix<N>, V)],
    failed: impl Fn(&Prefix<N>, &V) -> String,
) -> Result<()> {
    for (slot, value) in writes {
        trie.insert(&Key::new(slot.0, slot.1), *value, 0).with_context(|| failed(slot, value))?;
    }
    Ok(())
}

/// Removes a plan's stale entries; `failed` is the error's context.
pub fn remove_stale<const N: usize, V: aya::Pod>(
    trie: &mut LpmTrie<MapData, [u8; N], V>,
    stale: &[Prefix<N>],
    failed: &str,
) -> Result<()> {
    for (len, addr) in stale {
        trie.remove(&Key::new(*len, *addr)).with_context(|| failed.to_owned())?;
    }
    Ok(())
}

/// Makes an LPM table (`what`, for errors) hold exactly `wanted`: writes
/// first; the stale keys are returned for the caller to remove last.
pub fn sync_trie<const N: usize, V: aya::Pod + PartialEq>(
    trie: &mut LpmTrie<MapData, [u8; N], V>,
    wanted: &[(Prefix<N>, V)],
    stats: &mut SyncStats,
    what: &str,
) -> Result<Vec<Prefix<N>>> {
    let plan = plan_trie(read_trie(trie, what)?, wanted);
    write_trie(trie, &plan.writes, |_, _| format!("writing a {what} entry"))?;
    stats.inserted += plan.inserted;
    stats.updated += plan.updated;
    Ok(plan.stale)
}

/// Hands out ids not in `used`, lowest first from a floor: one pass over
/// the ids for a whole sync, however many it allocates. Every table writer
/// that numbers its entries (Service frontends and backends, the NAT46
/// gateway's) takes its ids from here.
pub struct Ids<'a> {
    used: &'a mut std::collections::BTreeSet<u32>,
    next: u32,
}

impl<'a> Ids<'a> {
    /// Ids from `first` up (0 is no id in any table).
    pub fn from(used: &'a mut std::collections::BTreeSet<u32>, first: u32) -> Self {
        Ids { used, next: first }
    }

    pub fn take(&mut self) -> u32 {
        while !self.used.insert(self.next) {
            self.next += 1;
        }
        self.next
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::{plan_trie, Ids, TriePlan};

    #[test]
    fn ids_fill_the_gaps_lowest_first_from_the_floor() {
        let mut used = BTreeSet::from([1, 2, 4, 4100]);
        let mut ids = Ids::from(&mut used, 1);
        assert_eq!([ids.take(), ids.take(), ids.take()], [3, 5, 6]);
        let mut ids = Ids::from(&mut used, 4096);
        assert_eq!([ids.take(), ids.take(), ids.take(), ids.take(), ids.take()], [4096, 4097, 4098, 4099, 4101]);
    }

    const A: (u32, [u8; 4]) = (24, [192, 0, 2, 0]);
    const B: (u32, [u8; 4]) = (24, [198, 51, 100, 0]);
    const C: (u32, [u8; 4]) = (32, [203, 0, 113, 1]);
    const D: (u32, [u8; 4]) = (16, [10, 1, 0, 0]);

    #[test]
    fn an_unchanged_table_takes_no_write() {
        let plan = plan_trie(HashMap::from([(A, 1u32), (B, 2)]), &[(A, 1), (B, 2)]);
        assert_eq!(plan, TriePlan { writes: vec![], stale: vec![], inserted: 0, updated: 0 });
    }

    #[test]
    fn new_changed_and_stale_entries_are_told_apart() {
        let current = HashMap::from([(A, 1u32), (B, 2), (C, 3), (D, 4)]);
        let plan = plan_trie(current, &[(C, 30), (A, 1), (B, 20), ((8, [10, 0, 0, 0]), 5)]);
        assert_eq!(plan.writes, [(C, 30), (B, 20), ((8, [10, 0, 0, 0]), 5)], "in the order wanted, A as it was");
        assert_eq!((plan.inserted, plan.updated), (1, 2));
        assert_eq!(plan.stale, [D]);
    }

    #[test]
    fn an_empty_wish_makes_every_entry_stale() {
        let plan = plan_trie(HashMap::from([(C, 0u8), (A, 0), (B, 0)]), &[]);
        assert_eq!((plan.writes.len(), plan.inserted, plan.updated), (0, 0, 0));
        assert_eq!(plan.stale, [A, B, C], "lowest first");
        let plan = plan_trie(HashMap::new(), &[(A, 0u8)]);
        assert_eq!((plan.writes, plan.inserted, plan.stale), (vec![(A, 0)], 1, vec![]));
    }
}
