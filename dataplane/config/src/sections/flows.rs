// SPDX-License-Identifier: Apache-2.0
//! `[flows]`: flow events from the datapath, the flows the agent keeps of
//! them, and where it serves them (Hubble's observer API).

use std::{net::SocketAddr, path::PathBuf};

use serde::Serialize;
use toml::Table;

use crate::serialize::serialize_optional_displayed;
use crate::validator::{Result, Validator};
use crate::MetricsListen;

pub const FLOW_EVENTS_PER_SECOND_DEFAULT: u32 = 5000;
pub const FLOW_EVENTS_BURST_DEFAULT: u32 = 1000;
pub const FLOWS_KEPT_DEFAULT: u32 = 16384;
pub const FLOWS_KEPT_MAX: u32 = 1 << 20;
pub const FLOW_LOG_MAX_BYTES_DEFAULT: u64 = 16 << 20;
pub const FLOW_LOG_ROTATED_FILES_DEFAULT: u32 = 4;

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
    /// The TCP address where Hubble Relay reaches this node (its Observer
    /// and the Peer service naming every node); `None`: not served.
    pub relay_listen: Option<SocketAddr>,
    /// Whether that listener takes only mutual TLS (the certificate, key
    /// and client CA are the unit's credentials).
    pub relay_tls: bool,
    /// The flow log: every flow a JSON line in this file; `None`: none.
    pub log_path: Option<PathBuf>,
    /// The size at which the log is rotated.
    pub log_max_bytes: u64,
    /// How many rotated logs are kept beside the one written.
    pub log_rotated_files: u32,
}

impl Default for Flows {
    fn default() -> Self {
        Flows {
            enabled: true,
            events_per_second: FLOW_EVENTS_PER_SECOND_DEFAULT,
            burst: FLOW_EVENTS_BURST_DEFAULT,
            keep: FLOWS_KEPT_DEFAULT,
            hubble: None,
            relay_listen: None,
            relay_tls: true,
            log_path: None,
            log_max_bytes: FLOW_LOG_MAX_BYTES_DEFAULT,
            log_rotated_files: FLOW_LOG_ROTATED_FILES_DEFAULT,
        }
    }
}

pub(crate) fn read(v: &Validator, root: &Table, flows: &mut Flows) -> Result<()> {
    let Some(t) = v.section(
        root,
        "flows",
        &[
            "enabled",
            "events_per_second",
            "burst",
            "keep",
            "hubble",
            "relay_listen",
            "relay_tls",
            "log_path",
            "log_max_bytes",
            "log_rotated_files",
        ],
    )?
    else {
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
    if let Some(s) = v.string(t, "flows.relay_listen")? {
        flows.relay_listen = match s {
            "" => None,
            s => Some(
                s.parse()
                    .map_err(|_| v.err("flows.relay_listen", format!("`{s}` is no address and port, like \"[::]:4244\"")))?,
            ),
        };
    }
    if let Some(tls) = v.boolean(t, "flows.relay_tls")? {
        flows.relay_tls = tls;
    }
    if let Some(s) = v.string(t, "flows.log_path")? {
        flows.log_path = match s {
            "" => None,
            s if s.starts_with('/') && !s.ends_with('/') => Some(PathBuf::from(s)),
            s => return Err(v.err("flows.log_path", format!("`{s}` is no absolute path of a file"))),
        };
    }
    if let Some(n) = v.integer(t, "flows.log_max_bytes")? {
        flows.log_max_bytes = u64::try_from(n)
            .ok()
            .filter(|n| (65_536..=1 << 30).contains(n))
            .ok_or_else(|| v.err("flows.log_max_bytes", format!("{n} is out of range; expected 65536..=1073741824")))?;
    }
    if let Some(n) = v.integer(t, "flows.log_rotated_files")? {
        flows.log_rotated_files = within("flows.log_rotated_files", n, 1..=100)?;
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
        assert_eq!((flows.relay_listen, flows.relay_tls), (None, true));
        assert_eq!((flows.log_path, flows.log_max_bytes, flows.log_rotated_files), (None, 16 << 20, 4));
    }

    #[test]
    fn every_key_read() {
        let flows =
            ok("[flows]\nenabled = false\nevents_per_second = 20\nburst = 5\nkeep = 64\nhubble = \"unix:/run/h.sock\"\nrelay_listen = \"[::]:4244\"\nrelay_tls = false\n\
             log_path = \"/var/log/v6node/flows.jsonl\"\nlog_max_bytes = 65536\nlog_rotated_files = 2").flows;
        assert!(!flows.enabled);
        assert_eq!((flows.events_per_second, flows.burst, flows.keep), (20, 5, 64));
        assert_eq!(flows.hubble, Some(MetricsListen::Unix("/run/h.sock".into())));
        assert_eq!((flows.relay_listen, flows.relay_tls), (Some("[::]:4244".parse().unwrap()), false));
        assert_eq!(
            (flows.log_path.unwrap().to_str(), flows.log_max_bytes, flows.log_rotated_files),
            (Some("/var/log/v6node/flows.jsonl"), 65536, 2)
        );
    }

    #[test]
    fn bad_flows() {
        bad("flows.enabled = \"yes\"", "flows.enabled", "expected a boolean");
        bad("flows.events_per_second = 0", "flows.events_per_second", "0 is out of range; expected 1..=10000000");
        bad("flows.keep = 2", "flows.keep", "2 is out of range; expected 16..=1048576");
        bad("flows.hubble = \"sock\"", "flows.hubble", "cannot parse `sock`");
        bad("flows.ring = 1", "flows.ring", "unknown key `ring`");
        bad("flows.relay_listen = \"4244\"", "flows.relay_listen", "`4244` is no address and port");
        bad("flows.log_path = \"flows.jsonl\"", "flows.log_path", "`flows.jsonl` is no absolute path of a file");
        bad("flows.log_max_bytes = 1000", "flows.log_max_bytes", "1000 is out of range; expected 65536..=1073741824");
        bad("flows.log_rotated_files = 0", "flows.log_rotated_files", "0 is out of range; expected 1..=100");
    }
}
