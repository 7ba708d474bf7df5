// SPDX-License-Identifier: Apache-2.0
//! `[flows]`: flow events from the datapath, the flows the agent keeps of
//! them, and where it serves them (Hubble's observer API).

use serde::Serialize;
use toml::Table;

use crate::serialize::serialize_optional_displayed;
use crate::validator::{Result, Validator};
use crate::MetricsListen;

pub const FLOW_EVENTS_PER_SECOND_DEFAULT: u32 = 5000;
pub const FLOW_EVENTS_BURST_DEFAULT: u32 = 1000;
pub const FLOWS_KEPT_DEFAULT: u32 = 16384;
pub const FLOWS_KEPT_MAX: u32 = 1 << 20;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Flows {
    /// Whether the datapath sends flow events at all.
    pub enabled: bool,
    /// Each reason's events a second on each CPU, beyond which they are
    /// counted as rate-limited and not sent.
    pub events_per_second: u32,
    /// Each reason's bucket: how many may come at once.
    pub burst: u32,
    /// Flows the agent keeps for clients asking for recent ones.
    pub keep: u32,
    /// Where Hubble's observer API is served; `None`: nowhere.
    #[serde(serialize_with = "serialize_optional_displayed")]
    pub hubble: Option<MetricsListen>,
}

impl Default for Flows {
    fn default() -> Self {
        Flows {
            enabled: true,
            events_per_second: FLOW_EVENTS_PER_SECOND_DEFAULT,
            burst: FLOW_EVENTS_BURST_DEFAULT,
            keep: FLOWS_KEPT_DEFAULT,
            hubble: None,
        }
    }
}

pub(crate) fn read(v: &Validator, root: &Table, flows: &mut Flows) -> Result<()> {
    let Some(t) = v.section(root, "flows", &["enabled", "events_per_second", "burst", "keep", "hubble"])? else {
        return Ok(());
    };
    if let Some(enabled) = v.boolean(t, "flows.enabled")? {
        flows.enabled = enabled;
    }
    let within = |path: &str, n: i64, range: std::ops::RangeInclusive<u32>| {
        u32::try_from(n)
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| v.err(path, format!("{n} is out of range; expected {}..={}", range.start(), range.end())))
    };
    if let Some(n) = v.integer(t, "flows.events_per_second")? {
        flows.events_per_second = within("flows.events_per_second", n, 1..=10_000_000)?;
    }
    if let Some(n) = v.integer(t, "flows.burst")? {
        flows.burst = within("flows.burst", n, 1..=1_000_000)?;
    }
    if let Some(n) = v.integer(t, "flows.keep")? {
        flows.keep = within("flows.keep", n, 16..=FLOWS_KEPT_MAX)?;
    }
    if let Some(s) = v.string(t, "flows.hubble")? {
        flows.hubble = match s {
            "" => None,
            s => Some(s.parse().map_err(|r| v.err("flows.hubble", r))?),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::{bad, ok};
    use crate::MetricsListen;

    #[test]
    fn on_by_default_without_a_socket() {
        let flows = ok("").flows;
        assert!(flows.enabled);
        assert_eq!((flows.events_per_second, flows.burst, flows.keep), (5000, 1000, 16384));
        assert_eq!(flows.hubble, None);
    }

    #[test]
    fn every_key_read() {
        let flows =
            ok("[flows]\nenabled = false\nevents_per_second = 20\nburst = 5\nkeep = 64\nhubble = \"unix:/run/h.sock\"").flows;
        assert!(!flows.enabled);
        assert_eq!((flows.events_per_second, flows.burst, flows.keep), (20, 5, 64));
        assert_eq!(flows.hubble, Some(MetricsListen::Unix("/run/h.sock".into())));
    }

    #[test]
    fn bad_flows() {
        bad("flows.enabled = \"yes\"", "flows.enabled", "expected a boolean");
        bad("flows.events_per_second = 0", "flows.events_per_second", "0 is out of range; expected 1..=10000000");
        bad("flows.keep = 2", "flows.keep", "2 is out of range; expected 16..=1048576");
        bad("flows.hubble = \"sock\"", "flows.hubble", "cannot parse `sock`");
        bad("flows.ring = 1", "flows.ring", "unknown key `ring`");
    }
}
