// SPDX-License-Identifier: Apache-2.0
//! `[bigtcp]`: the GSO/GRO sizes the agent raises on the node's devices.

use serde::Serialize;
use toml::Table;

use crate::device::{default_devices, DevicePattern};
use crate::validator::{Result, Validator};

/// Smallest BIG TCP GSO/GRO size: anything lower is plain TCP, not BIG TCP.
pub const BIGTCP_MIN: u32 = 65536;
/// Largest size the kernel accepts for `gso_max_size`/`gro_max_size` (512 KiB - 8).
pub const BIGTCP_MAX: u32 = 524280;
pub const BIGTCP_DEFAULT: u32 = 196608;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BigTcp {
    /// Interfaces whose GSO/GRO max sizes the agent raises.
    pub devices: Vec<DevicePattern>,
    /// Bytes, within `BIGTCP_MIN..=BIGTCP_MAX`.
    pub size: u32,
}

impl Default for BigTcp {
    fn default() -> Self {
        BigTcp { devices: default_devices(), size: BIGTCP_DEFAULT }
    }
}

pub(crate) fn read(v: &Validator, root: &Table, bigtcp: &mut BigTcp) -> Result<()> {
    let Some(t) = v.section(root, "bigtcp", &["devices", "size"])? else {
        return Ok(());
    };
    if let Some(items) = v.strings(t, "bigtcp.devices")? {
        bigtcp.devices = v.devices("bigtcp.devices", &items)?;
    }
    if let Some(n) = v.integer(t, "bigtcp.size")? {
        bigtcp.size = u32::try_from(n)
            .ok()
            .filter(|n| (BIGTCP_MIN..=BIGTCP_MAX).contains(n))
            .ok_or_else(|| v.err("bigtcp.size", format!("{n} is out of range; expected {BIGTCP_MIN}..={BIGTCP_MAX} bytes")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::bad;

    #[test]
    fn bad_bigtcp_size() {
        bad("bigtcp.size = 65535", "bigtcp.size", "65535 is out of range; expected 65536..=524280");
        bad("bigtcp.size = 524281", "bigtcp.size", "524281 is out of range");
        bad("bigtcp.size = -1", "bigtcp.size", "-1 is out of range");
        bad("bigtcp.size = 0", "bigtcp.size", "0 is out of range");
        bad("bigtcp.size = 99999999999", "bigtcp.size", "99999999999 is out of range");
        bad("bigtcp.size = 65536.0", "bigtcp.size", "found a float");
    }
}
