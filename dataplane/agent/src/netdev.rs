// SPDX-License-Identifier: Apache-2.0
//! The network devices of the agent's namespace. Below `attach`, so that
//! attaching, counters, endpoints and `status` all name devices one way.

use std::{collections::BTreeMap, ffi::CStr};

use anyhow::{Context, Result};

/// The network devices of this namespace, by name.
pub fn devices() -> Result<BTreeMap<String, u32>> {
    // SAFETY: if_nameindex returns a libc-owned array terminated by a zero
    // entry, freed below with if_freenameindex.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return Err(std::io::Error::last_os_error()).context("listing network devices");
        }
        let mut devices = BTreeMap::new();
        let mut entry = list;
        while (*entry).if_index != 0 {
            let name = CStr::from_ptr((*entry).if_name).to_string_lossy().into_owned();
            devices.insert(name, (*entry).if_index);
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
        Ok(devices)
    }
}
