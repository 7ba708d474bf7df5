// SPDX-License-Identifier: Apache-2.0
//! Configuration of `v6node-dataplane`.
//!
//! TOML files are merged the systemd way, later files winning:
//!
//! 1. `<root>/usr/lib/v6node/dataplane.toml` (vendor defaults)
//! 2. `<root>/run/v6node/dataplane.d/*.toml` (this boot only: the node's role
//!    and the `v6node.dataplane` credential, put there by v6node-role.service)
//! 3. `<root>/etc/v6node/dataplane.toml` (admin)
//! 4. `<root>/etc/v6node/dataplane.d/*.toml`
//!
//! Drop-in directories are read by file name in byte order, hidden files
//! skipped.
//!
//! Missing files and a missing drop-in directory are skipped. Tables merge key
//! by key; any other value (arrays included) from a later file replaces the
//! earlier one whole. Keys no file sets keep the built-in defaults of
//! [`Config::default`]. Errors name the file that set the offending key, so
//! the message says which file to edit.
//!
//! Each `[section]` has a module of its own under `sections`, holding its
//! types, how it is read and checked, and its tests; the pieces several
//! sections share (device patterns, port ranges, the error type, reading
//! typed values) have modules of their own at the top.

mod config;
mod device;
mod error;
mod keywords;
mod merge;
mod ports;
mod sections;
mod serialize;
mod validator;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use config::Config;
pub use device::DevicePattern;
pub use error::ConfigError;
pub use ports::PortRange;
pub use sections::attach::{Attach, AttachMode, XdpChoice};
pub use sections::bandwidth::{Bandwidth, BandwidthMode, BANDWIDTH_HORIZON_MS_DEFAULT, BANDWIDTH_POD_TSO_RTT_LOG_DEFAULT};
pub use sections::bigtcp::{BigTcp, BIGTCP_DEFAULT, BIGTCP_MAX, BIGTCP_MIN};
pub use sections::filter::Filter;
pub use sections::flows::{Flows, FLOWS_KEPT_DEFAULT, FLOWS_KEPT_MAX, FLOW_EVENTS_BURST_DEFAULT, FLOW_EVENTS_PER_SECOND_DEFAULT};
pub use sections::kubernetes::Kubernetes;
pub use sections::log::{Log, LogLevel};
pub use sections::metrics::{Metrics, MetricsListen};
pub use sections::nat46::{
    Nat46, Nat46Backend, Nat46Gateway, Nat46HealthCheck, Nat46Protocol, NAT46_WEIGHT_DEFAULT, NAT46_WEIGHT_MAX,
};
pub use sections::nat64::stateful::{
    Nat64Filtering, Nat64Stateful, NAT64_ICMP_SECONDS, NAT64_PORTS_DEFAULT, NAT64_TCP_ESTABLISHED_SECONDS,
    NAT64_TCP_TRANSITORY_SECONDS, NAT64_UDP_SECONDS,
};
pub use sections::nat64::{well_known_prefix, Eam, Nat64, NAT64_PREFIX_LENGTHS};
pub use sections::pods::{PodDeviceChoice, Pods, POD_PREFIX_MAX_LEN};
pub use sections::policy::{Policy, PolicyMode};
pub use sections::routing::{Announce, Bgp, BgpPeer, Routing, ANNOUNCE_POD_PREFIXES};
pub use sections::services::{RemoteBackends, Services};

use merge::Merged;

/// The effective configuration and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedConfig {
    pub config: Config,
    /// Files actually read, in merge order.
    pub files: Vec<PathBuf>,
    /// Dotted key path (`bigtcp.size`) of each scalar or array a file set ->
    /// the file that set it last.
    pub origins: BTreeMap<String, PathBuf>,
}

/// Loads the file stack under `root` (normally `/`).
pub fn load(root: &Path) -> Result<LoadedConfig, ConfigError> {
    load_with_extra(root, &[])
}

/// Loads the file stack under `root`, then `extra` files as if they were the
/// last drop-ins. Unlike stack files, a missing extra file is an error: it is
/// how `check-config FILE` checks a candidate before installing it.
pub fn load_with_extra(root: &Path, extra: &[PathBuf]) -> Result<LoadedConfig, ConfigError> {
    let mut m = Merged::default();
    for file in merge::stack(root)? {
        m.add_file(&file, false)?;
    }
    for file in extra {
        m.add_file(file, true)?;
    }
    finish(m)
}

/// One file's text on top of the built-in defaults; `name` is used in errors.
pub fn parse_str(name: &Path, text: &str) -> Result<LoadedConfig, ConfigError> {
    let mut m = Merged::default();
    m.add_text(name, text)?;
    finish(m)
}

fn finish(m: Merged) -> Result<LoadedConfig, ConfigError> {
    let config = config::build(&m)?;
    Ok(LoadedConfig { config, files: m.files, origins: m.origins.leaves })
}
