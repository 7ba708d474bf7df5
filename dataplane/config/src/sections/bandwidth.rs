// SPDX-License-Identifier: Apache-2.0
//! `[bandwidth]`: the bandwidth manager (pods' `kubernetes.io/ingress-bandwidth`
//! and `egress-bandwidth` as paced departure times, fq releasing them) and
//! the TCP settings of pods.

use serde::Serialize;
use toml::Table;

use crate::keywords::keywords;
use crate::validator::{Result, Validator};

pub const BANDWIDTH_HORIZON_MS_DEFAULT: u32 = 2000;
/// The kernel's own default for net.ipv4.tcp_tso_rtt_log.
pub const BANDWIDTH_POD_TSO_RTT_LOG_DEFAULT: u8 = 9;

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
    /// net.ipv4.tcp_tso_rtt_log in the pods' namespaces. The kernel's 9
    /// gives a flow with a round trip under 512 µs (a pod to its node's
    /// neighbours) whole 64 KiB TSO packets whatever its pacing rate, and TCP
    /// small queues let two of them wait per socket: at 10 Mbit/s, 100 ms
    /// of a limited pod's backlog per stream. 0 sizes them by the rate, at
    /// a cost in CPU and, where transmit completions are slow (emulated
    /// NICs), in the rate a single stream reaches: so 9 stays the default.
    pub pod_tso_rtt_log: u8,
}

impl Default for Bandwidth {
    fn default() -> Self {
        Bandwidth {
            mode: BandwidthMode::Auto,
            horizon_ms: BANDWIDTH_HORIZON_MS_DEFAULT,
            pod_congestion_control: Some("bbr".into()),
            pod_slow_start_after_idle: false,
            pod_tso_rtt_log: BANDWIDTH_POD_TSO_RTT_LOG_DEFAULT,
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
    let Some(t) = v.section(
        root,
        "bandwidth",
        &["mode", "horizon_ms", "pod_congestion_control", "pod_slow_start_after_idle", "pod_tso_rtt_log"],
    )?
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
    if let Some(n) = v.integer(t, "bandwidth.pod_tso_rtt_log")? {
        // The kernel shifts gso_max_size by min_rtt >> this, in a 32-bit word.
        bandwidth.pod_tso_rtt_log = u8::try_from(n).ok().filter(|n| *n <= 31).ok_or_else(|| {
            v.err("bandwidth.pod_tso_rtt_log", format!("{n} is out of range; expected 0..=31 (the kernel's default is 9)"))
        })?;
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
        assert_eq!(b.pod_tso_rtt_log, 9);
        let b = ok("[bandwidth]\nmode = \"off\"\nhorizon_ms = 500\npod_congestion_control = \"\"\npod_slow_start_after_idle = true\npod_tso_rtt_log = 0")
            .bandwidth;
        assert_eq!(
            (b.mode, b.horizon_ms, b.pod_congestion_control, b.pod_slow_start_after_idle, b.pod_tso_rtt_log),
            (BandwidthMode::Off, 500, None, true, 0)
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
        bad("bandwidth.pod_tso_rtt_log = 32", "bandwidth.pod_tso_rtt_log", "32 is out of range; expected 0..=31");
        bad("bandwidth.pod_tso_rtt_log = -1", "bandwidth.pod_tso_rtt_log", "-1 is out of range");
    }
}
