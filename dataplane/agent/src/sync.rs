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

/// Makes an LPM table (`what`, for errors) hold exactly `wanted`: writes
/// first; the stale keys are returned for the caller to remove last.
pub fn sync_trie<const N: usize, V: aya::Pod + PartialEq>(
    trie: &mut LpmTrie<MapData, [u8; N], V>,
    wanted: &[((u32, [u8; N]), V)],
    stats: &mut SyncStats,
    what: &str,
) -> Result<Vec<(u32, [u8; N])>> {
    let mut current: HashMap<(u32, [u8; N]), V> = HashMap::new();
    for entry in trie.iter() {
        let (key, value) = entry.with_context(|| format!("reading the {what} table"))?;
        current.insert((key.prefix_len(), key.data()), value);
    }
    for (slot, value) in wanted {
        match current.remove(slot) {
            Some(old) if old == *value => continue,
            Some(_) => stats.updated += 1,
            None => stats.inserted += 1,
        }
        trie.insert(&Key::new(slot.0, slot.1), *value, 0).with_context(|| format!("writing a {what} entry"))?;
    }
    Ok(current.into_keys().collect())
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
    use std::collections::BTreeSet;

    use super::Ids;

    #[test]
    fn ids_fill_the_gaps_lowest_first_from_the_floor() {
        let mut used = BTreeSet::from([1, 2, 4, 4100]);
        let mut ids = Ids::from(&mut used, 1);
        assert_eq!([ids.take(), ids.take(), ids.take()], [3, 5, 6]);
        let mut ids = Ids::from(&mut used, 4096);
        assert_eq!([ids.take(), ids.take(), ids.take(), ids.take(), ids.take()], [4096, 4097, 4098, 4099, 4101]);
    }
}
