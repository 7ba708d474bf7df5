// SPDX-License-Identifier: Apache-2.0
//! `[bandwidth]`: the bandwidth manager (pods' `kubernetes.io/ingress-bandwidth`
//! and `egress-bandwidth` as paced departure times, fq releasing them) and
//! the TCP settings of pods.

use serde::Serialize;
use toml::Table;

use crate::keywords::keywords;
use crate::validator::{Result, Validator};

pub const BANDWIDTH_HORIZON_MS_DEFAULT: u32 = 2000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bandwidth {
    pub mode: BandwidthMode,
    /// How far ahead a limited pod's packet may be scheduled before it is
    /// dropped instead: the deepest queue a limited pod gets.
    pub horizon_ms: u32,
    /// The pods' TCP congestion control (their namespace's
    /// net.ipv4.tcp_congestion_control); `None` leaves the kernel's default.
    pub pod_congestion_control: Option<String>,
    /// net.ipv4.tcp_slow_start_after_idle in the pods' namespaces.
    pub pod_slow_start_after_idle: bool,
}

impl Default for Bandwidth {
    fn default() -> Self {
        Bandwidth {
            mode: BandwidthMode::Auto,
            horizon_ms: BANDWIDTH_HORIZON_MS_DEFAULT,
            pod_congestion_control: Some("bbr".into()),
            pod_slow_start_after_idle: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BandwidthMode {
    /// On when the uplinks take the fq qdisc; off (and said so) otherwise.
    #[default]
    Auto,
    /// On; an uplink that refuses fq is a problem in status.
    On,
    /// Annotations ignored, the uplinks' qdiscs left as they are.
    Off,
}

keywords!(BandwidthMode, "bandwidth mode", {
    Auto => "auto",
    On => "on",
    Off => "off",
});

pub(crate) fn read(v: &Validator, root: &Table, bandwidth: &mut Bandwidth) -> Result<()> {
    let Some(t) = v.section(root, "bandwidth", &["mode", "horizon_ms", "pod_congestion_control", "pod_slow_start_after_idle"])?
    else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "bandwidth.mode")? {
        bandwidth.mode = s.parse().map_err(|r| v.err("bandwidth.mode", r))?;
    }
    if let Some(n) = v.integer(t, "bandwidth.horizon_ms")? {
        bandwidth.horizon_ms = u32::try_from(n)
            .ok()
            .filter(|n| (10..=60_000).contains(n))
            .ok_or_else(|| v.err("bandwidth.horizon_ms", format!("{n} is out of range; expected 10..=60000")))?;
    }
    if let Some(s) = v.string(t, "bandwidth.pod_congestion_control")? {
        bandwidth.pod_congestion_control = match s {
            "" => None,
            s if s.len() <= 15 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') => {
                Some(s.to_owned())
            }
            s => {
                return Err(v.err(
                    "bandwidth.pod_congestion_control",
                    format!("`{s}` is no congestion control's name (like \"bbr\" or \"cubic\"; \"\" keeps the kernel's default)"),
                ))
            }
        };
    }
    if let Some(b) = v.boolean(t, "bandwidth.pod_slow_start_after_idle")? {
        bandwidth.pod_slow_start_after_idle = b;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::{bad, ok};
    use crate::BandwidthMode;

    #[test]
    fn on_where_fq_works_bbr_no_slow_start_after_idle_by_default() {
        let b = ok("").bandwidth;
        assert_eq!(b.mode, BandwidthMode::Auto);
        assert_eq!(b.horizon_ms, 2000);
        assert_eq!(b.pod_congestion_control.as_deref(), Some("bbr"));
        assert!(!b.pod_slow_start_after_idle);
        let b =
            ok("[bandwidth]\nmode = \"off\"\nhorizon_ms = 500\npod_congestion_control = \"\"\npod_slow_start_after_idle = true")
                .bandwidth;
        assert_eq!(
            (b.mode, b.horizon_ms, b.pod_congestion_control, b.pod_slow_start_after_idle),
            (BandwidthMode::Off, 500, None, true)
        );
    }

    #[test]
    fn bad_bandwidth_settings() {
        bad("bandwidth.mode = \"yes\"", "bandwidth.mode", "expected one of auto, on, off");
        bad("bandwidth.horizon_ms = 0", "bandwidth.horizon_ms", "0 is out of range; expected 10..=60000");
        bad(
            "bandwidth.pod_congestion_control = \"bbr; reboot\"",
            "bandwidth.pod_congestion_control",
            "is no congestion control's name",
        );
        bad("bandwidth.pod_slow_start_after_idle = 1", "bandwidth.pod_slow_start_after_idle", "");
    }
}
