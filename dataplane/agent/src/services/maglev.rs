// SPDX-License-Identifier: Apache-2.0
//! Maglev's lookup table (Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, section 3.4): which backend
//! each hash bucket of a frontend reached from outside goes to.
//!
//! Every node computes the table from the same backends and gets the same
//! table, so a connection that an ECMP change moves to another node finds
//! its backend there too; a backend that leaves moves little more than its
//! own buckets. That holds across agent versions only while this file's
//! hash and fill order stay as they are: the golden test pins them.

/// FNV-1a (64 bit) of `seed` followed by `bytes`: a fixed, documented hash,
/// unlike std's hashers, whose output may change between Rust releases.
fn fnv1a(seed: u8, bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in std::iter::once(&seed).chain(bytes) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The table of `size` buckets (a prime) over `backends`, each named by
/// bytes that are the same on every node (its address and port): the index
/// into `backends` of each bucket. Empty without backends. (The kernel's
/// tables come from `kernel_table`; this is the golden test's view.)
#[cfg(test)]
pub fn table<B: AsRef<[u8]>>(backends: &[B], size: usize) -> Vec<u32> {
    let weighted: Vec<(&[u8], u32)> = backends.iter().map(|b| (b.as_ref(), 1)).collect();
    weighted_table(&weighted, size)
}

/// As `table`, each backend holding buckets in proportion to its weight
/// (0: none). Backends take their turns in Maglev's round-robin as their
/// credit allows: each round adds a backend's weight to its credit, and a
/// turn costs the largest weight. Equal weights give `table`'s fill exactly.
/// Empty when no backend has weight.
pub fn weighted_table<B: AsRef<[u8]>>(backends: &[(B, u32)], size: usize) -> Vec<u32> {
    let Some(heaviest) = backends.iter().map(|(_, w)| u64::from(*w)).max().filter(|w| *w > 0) else {
        return Vec::new();
    };
    let m = size as u64;
    let permutations: Vec<(u64, u64)> =
        backends.iter().map(|(b, _)| (fnv1a(0, b.as_ref()) % m, fnv1a(1, b.as_ref()) % (m - 1) + 1)).collect();
    let mut next = vec![0u64; backends.len()];
    let mut credit = vec![0u64; backends.len()];
    let mut buckets = vec![u32::MAX; size];
    let mut filled = 0;
    loop {
        for (i, (offset, skip)) in permutations.iter().enumerate() {
            credit[i] += u64::from(backends[i].1);
            if credit[i] < heaviest {
                continue;
            }
            credit[i] -= heaviest;
            let mut bucket = ((offset + next[i] * skip) % m) as usize;
            while buckets[bucket] != u32::MAX {
                next[i] += 1;
                bucket = ((offset + next[i] * skip) % m) as usize;
            }
            buckets[bucket] = i as u32;
            next[i] += 1;
            filled += 1;
            if filled == size {
                return buckets;
            }
        }
    }
}

/// What the hash names a backend by: its address and port, the same bytes
/// on every node.
pub fn name(ip: &std::net::Ipv6Addr, port: u16) -> [u8; 18] {
    let mut name = [0u8; 18];
    name[..16].copy_from_slice(&ip.octets());
    name[16..].copy_from_slice(&port.to_be_bytes());
    name
}

/// A frontend's table as the kernel keeps it (v6n_maglev, v6n_nat46_maglev)
/// over `backends`, each (name, weight, id): every bucket holds its
/// backend's id. Also each backend's share of the buckets. None when no
/// backend has weight.
pub fn kernel_table(backends: &[([u8; 18], u32, u32)]) -> Option<(v6node_abi::MaglevTable, Vec<usize>)> {
    let weighted: Vec<(&[u8], u32)> = backends.iter().map(|(name, weight, _)| (&name[..], *weight)).collect();
    let buckets = weighted_table(&weighted, v6node_abi::MAGLEV_SIZE as usize);
    if buckets.is_empty() {
        return None;
    }
    let mut table = v6node_abi::MaglevTable { backend_ids: [0; v6node_abi::MAGLEV_SIZE as usize] };
    let mut shares = vec![0usize; backends.len()];
    for (slot, index) in table.backend_ids.iter_mut().zip(&buckets) {
        *slot = backends[*index as usize].2;
        shares[*index as usize] += 1;
    }
    Some((table, shares))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("[fd00:10:244::{i:x}]:8080").into_bytes()).collect()
    }

    #[test]
    fn every_bucket_is_filled_and_backends_share_them_evenly() {
        let size = v6node_abi::MAGLEV_SIZE as usize;
        for n in [1, 2, 3, 10, 100] {
            let table = table(&names(n), size);
            assert_eq!(table.len(), size);
            let mut counts = vec![0usize; n];
            for &i in &table {
                counts[i as usize] += 1;
            }
            let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
            // Maglev's round-robin fill keeps every share within one bucket.
            assert!(max - min <= 1, "{n} backends: shares from {min} to {max}");
        }
        assert!(table(&Vec::<Vec<u8>>::new(), size).is_empty());
    }

    #[test]
    fn a_leaving_backend_moves_little_more_than_its_own_buckets() {
        let size = v6node_abi::MAGLEV_SIZE as usize;
        let before = names(10);
        let after: Vec<Vec<u8>> = before.iter().filter(|b| **b != before[3]).cloned().collect();
        let (old, new) = (table(&before, size), table(&after, size));
        let moved = old.iter().zip(&new).filter(|(o, n)| **o != 3 && before[**o as usize] != after[**n as usize]).count();
        // Its own tenth moves by definition; the paper measured a few percent more.
        assert!(moved * 100 / size < 10, "{moved} of {size} buckets of staying backends moved");
    }

    fn shares(table: &[u32], n: usize) -> Vec<usize> {
        let mut counts = vec![0usize; n];
        for &i in table {
            counts[i as usize] += 1;
        }
        counts
    }

    #[test]
    fn weights_share_the_buckets_in_proportion() {
        let size = v6node_abi::MAGLEV_SIZE as usize;
        let backends: Vec<(Vec<u8>, u32)> = names(4).into_iter().zip([1, 2, 3, 0]).collect();
        let counts = shares(&weighted_table(&backends, size), 4);
        assert_eq!(counts[3], 0, "weight 0 holds no bucket");
        for (i, weight) in [1usize, 2, 3].into_iter().enumerate() {
            let ideal = size * weight / 6;
            assert!(counts[i].abs_diff(ideal) <= 2, "weight {weight}: {} buckets, ideal {ideal}", counts[i]);
        }
        let equal: Vec<(Vec<u8>, u32)> = names(10).into_iter().map(|n| (n, 7)).collect();
        assert_eq!(weighted_table(&equal, size), table(&names(10), size), "equal weights are the unweighted table");
        assert!(weighted_table(&[(b"a".to_vec(), 0)], size).is_empty());
    }

    #[test]
    fn a_reweighted_backend_moves_little_more_than_its_change() {
        let size = v6node_abi::MAGLEV_SIZE as usize;
        let before: Vec<(Vec<u8>, u32)> = names(5).into_iter().map(|n| (n, 2)).collect();
        let mut after = before.clone();
        after[0].1 = 1;
        let (old, new) = (weighted_table(&before, size), weighted_table(&after, size));
        let moved = old.iter().zip(&new).filter(|(o, n)| o != n).count();
        // Backend 0 gives up a ninth of the table (from 1/5 to 1/9).
        assert!(moved * 100 / size < 15, "{moved} of {size} buckets moved");
    }

    #[test]
    fn the_table_is_the_same_on_every_node_and_in_every_version() {
        // Pinned: a change here breaks connections across a rolling upgrade.
        let table = table(&names(3), 7);
        assert_eq!(table, [2, 2, 1, 0, 1, 0, 0]);
        let weighted: Vec<(Vec<u8>, u32)> = names(3).into_iter().zip([1, 2, 4]).collect();
        assert_eq!(weighted_table(&weighted, 7), [2, 2, 2, 0, 1, 1, 2], "shares 1, 2 and 4");
        // FNV-1a's published test vectors ("a", "foobar").
        assert_eq!(fnv1a(b'a', b""), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b'f', b"oobar"), 0x8594_4171_f739_67e8);
    }
}
