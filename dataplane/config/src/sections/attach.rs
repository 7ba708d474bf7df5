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
    /// Whether the uplinks also run the native XDP program.
    pub xdp: XdpChoice,
    /// Per-device exceptions to `xdp`, in order: the first pattern that
    /// matches a device decides.
    pub xdp_per_device: Vec<(DevicePattern, XdpChoice)>,
}

impl Default for Attach {
    fn default() -> Self {
        Attach { devices: default_devices(), mode: AttachMode::Auto, xdp: XdpChoice::Auto, xdp_per_device: Vec::new() }
    }
}

impl Attach {
    /// The XDP choice for the uplink `device`.
    pub fn xdp_for(&self, device: &str) -> XdpChoice {
        self.xdp_per_device.iter().find(|(pattern, _)| pattern.matches(device)).map_or(self.xdp, |&(_, choice)| choice)
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

/// Whether an uplink runs native XDP before tc. Never generic XDP: that
/// makes a socket buffer of every frame first, and is slower than tc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum XdpChoice {
    /// Native XDP where the driver has it; tc alone, with the reason in
    /// `status`, where it has not.
    #[default]
    Auto,
    /// Native XDP; a driver that refuses it is a problem `status` reports
    /// (tc keeps the device working).
    Xdp,
    /// tc alone.
    Tc,
}

keywords!(XdpChoice, "XDP choice", { Auto => "auto", Xdp => "xdp", Tc => "tc" });

pub(crate) fn read(v: &Validator, root: &Table, attach: &mut Attach) -> Result<()> {
    let Some(t) = v.section(root, "attach", &["devices", "mode", "xdp", "xdp_per_device"])? else {
        return Ok(());
    };
    if let Some(items) = v.strings(t, "attach.devices")? {
        attach.devices = v.devices("attach.devices", &items)?;
    }
    if let Some(s) = v.string(t, "attach.mode")? {
        attach.mode = s.parse().map_err(|r| v.err("attach.mode", r))?;
    }
    if let Some(s) = v.string(t, "attach.xdp")? {
        attach.xdp = s.parse().map_err(|r| v.err("attach.xdp", r))?;
    }
    if let Some(items) = v.strings(t, "attach.xdp_per_device")? {
        attach.xdp_per_device = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let key = format!("attach.xdp_per_device[{i}]");
                let (pattern, choice) = item
                    .split_once('=')
                    .ok_or_else(|| v.err(&key, format!("`{item}` is not PATTERN=CHOICE (say \"eth1=tc\")")))?;
                let pattern = DevicePattern::new(pattern).map_err(|r| v.err(&key, r))?;
                let choice = choice.parse().map_err(|r| v.err(&key, r))?;
                Ok((pattern, choice))
            })
            .collect::<Result<_>>()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::{bad, ok};

    use super::XdpChoice;

    #[test]
    fn bad_attach_mode() {
        bad("attach.mode = \"xdp\"", "attach.mode", "unknown attach mode `xdp`; expected one of auto, tcx, clsact");
        bad("attach.mode = \"TCX\"", "attach.mode", "expected one of auto, tcx, clsact");
    }

    #[test]
    fn xdp_per_device_first_match_decides_and_the_rest_take_the_default() {
        let c = ok("[attach]\nxdp = \"xdp\"\nxdp_per_device = [\"eth1=tc\", \"eth*=auto\"]\n");
        assert_eq!(c.attach.xdp_for("eth1"), XdpChoice::Tc);
        assert_eq!(c.attach.xdp_for("eth0"), XdpChoice::Auto);
        assert_eq!(c.attach.xdp_for("enp1s0"), XdpChoice::Xdp);
        assert_eq!(ok("").attach.xdp_for("eth0"), XdpChoice::Auto);
    }

    #[test]
    fn bad_xdp_choices() {
        bad("attach.xdp = \"generic\"", "attach.xdp", "unknown XDP choice `generic`; expected one of auto, xdp, tc");
        bad("attach.xdp_per_device = [\"eth1\"]", "attach.xdp_per_device[0]", "`eth1` is not PATTERN=CHOICE");
        bad("attach.xdp_per_device = [\"eth1=tc\", \"eth:2=tc\"]", "attach.xdp_per_device[1]", "contains `:`");
        bad("attach.xdp_per_device = [\"eth1=skb\"]", "attach.xdp_per_device[0]", "expected one of auto, xdp, tc");
    }
}
