// SPDX-License-Identifier: Apache-2.0
//! Reads the per-CPU packet counters the BPF programs keep.

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context, Result};
use aya::maps::{MapData, PerCpuHashMap};
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, CounterKey, CounterValue, Direction, Reason};

use crate::bpf;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct CounterRow {
    pub device: String,
    pub ifindex: u32,
    pub direction: String,
    pub reason: String,
    pub drop: bool,
    pub packets: u64,
    pub bytes: u64,
}

fn device_name(ifindex: u32, names: &BTreeMap<u32, String>) -> String {
    names.get(&ifindex).cloned().unwrap_or_else(|| format!("#{ifindex}"))
}

/// Sums every CPU's slot; rows are sorted by device, direction, reason.
pub fn read(pin_dir: &Path) -> Result<Vec<CounterRow>> {
    let map: PerCpuHashMap<MapData, CounterKey, CounterValue> = bpf::open_pinned_map(pin_dir, maps::COUNTERS)?;
    let names: BTreeMap<u32, String> = crate::netdev::devices()?.into_iter().map(|(n, i)| (i, n)).collect();
    let mut rows = Vec::new();
    for entry in map.iter() {
        let (key, per_cpu) = entry.context("reading counters")?;
        let Some(reason) = Reason::from_u8(key.reason) else { continue };
        let Some(direction) = Direction::from_u8(key.direction) else { continue };
        let direction = direction.name();
        rows.push(CounterRow {
            device: device_name(key.ifindex, &names),
            ifindex: key.ifindex,
            direction: direction.into(),
            reason: reason.name().into(),
            drop: reason.is_drop(),
            packets: per_cpu.iter().map(|v| v.packets).sum(),
            bytes: per_cpu.iter().map(|v| v.bytes).sum(),
        });
    }
    rows.sort();
    Ok(rows)
}

/// Removes a deleted pod device's counter slots: ifindexes are reused, and
/// a new pod must not inherit the old one's counts (nor fill the map).
pub fn forget_device(pin_dir: &Path, ifindex: u32) {
    let Ok(mut map) = bpf::open_pinned_map::<PerCpuHashMap<MapData, CounterKey, CounterValue>>(pin_dir, maps::COUNTERS) else {
        return;
    };
    let keys: Vec<CounterKey> = map.keys().flatten().filter(|k| k.ifindex == ifindex).collect();
    for key in keys {
        let _ = map.remove(&key);
    }
}
