// SPDX-License-Identifier: Apache-2.0
//! What the running agent knows and `status` shows: written atomically to
//! `<state_dir>/dataplane.json` after every change, so `status` works
//! without talking to the agent (and after it died).

use std::{
    fs,
    io::ErrorKind,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::{attach::Attachment, attach::TcMode, bigtcp, files, nat::translator::Nat64Stats, paths::Paths, sync::SyncStats};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct State {
    pub version: String,
    pub pid: u32,
    /// Seconds since the epoch.
    pub started_at: u64,
    /// From process start to READY=1.
    pub ready_after_ms: Option<f64>,
    /// Configurations applied, counting the first one.
    pub generation: u64,
    /// Reload requests handled, successful or not.
    pub reloads: u64,
    /// Periodic repairs (every 60 s) done.
    #[serde(default)]
    pub resyncs: u64,
    pub config_files: Vec<PathBuf>,
    pub last_reload: Option<Reload>,
    pub mode: Option<TcMode>,
    pub attachments: Vec<Attachment>,
    pub bigtcp: Vec<bigtcp::Report>,
    pub deny_sources: Option<SyncStats>,
    /// The translator's tables; None while nat64.devices is empty.
    pub nat64: Option<Nat64Stats>,
    /// The pods routed, as v6node-cni added them.
    #[serde(default)]
    pub endpoints: Vec<v6node_api::EndpointState>,
    /// The CNI network configuration written for pods.prefix, if any.
    #[serde(default)]
    pub cni_config: Option<PathBuf>,
    /// The Kubernetes side; None unless kubernetes.kubeconfig is set.
    #[serde(default)]
    pub cluster: Option<crate::cluster::ClusterState>,
    /// The Service socket hooks on services.cgroup.
    #[serde(default)]
    pub socket_hooks: Vec<crate::services::sockets::SocketHook>,
    /// The service tables; None unless the API is followed and
    /// services.cgroup is set.
    #[serde(default)]
    pub services: Option<crate::services::ServicesState>,
    /// Connections ended because their backend left its Service; None
    /// until a backend left.
    #[serde(default)]
    pub ended_connections: Option<crate::services::connections::Ended>,
    /// The network policy tables; None until the API's policies were
    /// listed and written once.
    #[serde(default)]
    pub policy: Option<crate::policy::PolicyState>,
    /// Flow visibility as configured; None until the configuration was applied.
    #[serde(default)]
    pub flows: Option<crate::flows::FlowsState>,
    /// The bandwidth manager; null until its first sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<crate::bandwidth::BandwidthState>,
    /// What bird was configured with; None while routing.asn is unset.
    #[serde(default)]
    pub bgp: Option<crate::cluster::bgp::BgpState>,
    pub metrics: Metrics,
    /// The self-test of each host program attached, from the last change
    /// of what is attached.
    #[serde(default)]
    pub selftest: Vec<crate::selftest::SelfTest>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reload {
    pub at: u64,
    pub ok: bool,
    /// Why the configuration was refused; the running one stayed in force.
    pub error: Option<String>,
    pub duration_ms: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Metrics {
    /// "" when off.
    pub listen: String,
    pub error: Option<String>,
}

/// The agent's paths and its state, as every feature gets them: a feature
/// reads what others recorded (the Node's address, its pod prefix) and
/// records its own part, and each change reaches the state file at once.
#[derive(Clone)]
pub struct Shared {
    pub paths: Arc<Paths>,
    state: Arc<Mutex<State>>,
}

impl Shared {
    pub fn new(paths: Paths, state: State) -> Self {
        Shared { paths: Arc::new(paths), state: Arc::new(Mutex::new(state)) }
    }

    /// The state as it is now, for the metrics endpoint's own task.
    pub fn state(&self) -> Arc<Mutex<State>> {
        self.state.clone()
    }

    pub fn read<T>(&self, look: impl FnOnce(&State) -> T) -> T {
        look(&self.state.lock().expect("state lock"))
    }

    /// Changes the state and writes the file.
    pub fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.state.lock().expect("state lock");
        change(&mut state);
        if let Err(e) = write(&self.paths, &state) {
            log::warn!("{e:#}");
        }
    }

    /// Changes the state and writes the file when `next` differs from what
    /// `part` holds: link events and resyncs mostly find nothing new.
    pub fn update_if_changed<T: PartialEq>(&self, part: impl Fn(&mut State) -> &mut T, next: T) {
        let mut state = self.state.lock().expect("state lock");
        if *part(&mut state) != next {
            *part(&mut state) = next;
            if let Err(e) = write(&self.paths, &state) {
                log::warn!("{e:#}");
            }
        }
    }

    /// This node's pod prefix from its Node, as the last reconcile recorded it.
    pub fn node_pod_prefix(&self) -> Option<ipnet::Ipv6Net> {
        self.read(|s| s.cluster.as_ref().and_then(|c| c.pod_prefixes.first().copied()))
    }
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub fn write(paths: &Paths, state: &State) -> Result<()> {
    // Compact: with thousands of Services the file is rewritten on every
    // sync, and indentation would be half of it (jq reads it either way).
    let mut bytes = serde_json::to_vec(state)?;
    bytes.push(b'\n');
    files::write_atomic(&paths.state_file(), &bytes, None)
}

pub fn read(paths: &Paths) -> Result<Option<State>> {
    let file = paths.state_file();
    match fs::read(&file) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", file.display()))?)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", file.display())),
    }
}

/// The pid of a live agent that wrote the state file, if any.
pub fn running_agent(paths: &Paths) -> Option<u32> {
    let state = read(paths).ok()??;
    let exe = fs::read_link(format!("/proc/{}/exe", state.pid)).ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    name.starts_with("v6node-dataplane").then_some(state.pid)
}
