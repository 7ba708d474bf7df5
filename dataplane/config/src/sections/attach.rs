// SPDX-License-Identifier: Apache-2.0
//! `[attach]`: where the base programs run.

use serde::Serialize;
use toml::Table;

use crate::device::{default_devices, DevicePattern};
use crate::keywords::keywords;
use crate::validator::{Result, Validator};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attach {
    /// Interfaces the base programs attach to, ingress and egress.
    pub devices: Vec<DevicePattern>,
    pub mode: AttachMode,
}

impl Default for Attach {
    fn default() -> Self {
        Attach { devices: default_devices(), mode: AttachMode::Auto }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// tcx where the kernel has it, clsact otherwise.
    #[default]
    Auto,
    Tcx,
    Clsact,
}

keywords!(AttachMode, "attach mode", { Auto => "auto", Tcx => "tcx", Clsact => "clsact" });

pub(crate) fn read(v: &Validator, root: &Table, attach: &mut Attach) -> Result<()> {
    let Some(t) = v.section(root, "attach", &["devices", "mode"])? else {
        return Ok(());
    };
    if let Some(items) = v.strings(t, "attach.devices")? {
        attach.devices = v.devices("attach.devices", &items)?;
    }
    if let Some(s) = v.string(t, "attach.mode")? {
        attach.mode = s.parse().map_err(|r| v.err("attach.mode", r))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::bad;

    #[test]
    fn bad_attach_mode() {
        bad("attach.mode = \"xdp\"", "attach.mode", "unknown attach mode `xdp`; expected one of auto, tcx, clsact");
        bad("attach.mode = \"TCX\"", "attach.mode", "expected one of auto, tcx, clsact");
    }
}
