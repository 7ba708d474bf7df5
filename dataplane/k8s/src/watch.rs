// SPDX-License-Identifier: Apache-2.0
//! Follows the cluster's Nodes into a reflector store, and says when the
//! store changed. The API connection is rebuilt from the kubeconfig after
//! every failure, so a rotated credential (a new token or client certificate
//! in the files the kubeconfig names) and a restarted API server are taken up
//! without a restart of the agent. The store keeps its last complete list
//! while the API is away: a re-list replaces it only once it is complete.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{
        reflector::{self, store::Writer, Store},
        watcher,
    },
    Api, Client, Config,
};
use serde::{Deserialize, Serialize};
use tokio::{sync::watch as signal, task::JoinHandle};

use crate::cluster::ClusterView;

/// Where the agent's credential is, and who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub kubeconfig: PathBuf,
    pub node_name: String,
}

/// The API connection as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiState {
    pub kubeconfig: PathBuf,
    /// The API server the kubeconfig names, once read.
    pub server: Option<String>,
    /// A watch is open and has delivered a complete list.
    pub connected: bool,
    /// The store holds a complete list (now or from before a disconnect).
    pub synced: bool,
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// Connections made, the first included.
    pub connects: u64,
}

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const KUBECONFIG_POLL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig { path: PathBuf, source: kube::config::KubeconfigError },
    #[error("kubeconfig {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("kubeconfig {path}: reading its token file {file}: {source}")]
    TokenFile { path: PathBuf, file: String, source: std::io::Error },
}

/// Builds a client from the kubeconfig as it is on disk now. A token file
/// is read here, white space trimmed (`echo TOKEN > file` ends in a newline,
/// which would make an invalid header): every new client, and so every
/// reconnection, takes the file as it is then.
pub async fn client(path: &std::path::Path) -> Result<(Client, String), Error> {
    let mut kubeconfig = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig { path: path.into(), source })?;
    for auth in kubeconfig.auth_infos.iter_mut().filter_map(|a| a.auth_info.as_mut()) {
        if let (None, Some(file)) = (&auth.token, auth.token_file.take()) {
            let token = std::fs::read_to_string(&file).map_err(|source| Error::TokenFile {
                path: path.into(),
                file: file.clone(),
                source,
            })?;
            auth.token = Some(secrecy::SecretString::from(token.trim().to_string()));
        }
    }
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| Error::Kubeconfig { path: path.into(), source })?;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|source| Error::Client { path: path.into(), source })?;
    Ok((client, server))
}

pub struct NodeWatch {
    settings: Settings,
    store: Store<Node>,
    state: Arc<Mutex<ApiState>>,
    changes: signal::Receiver<()>,
    task: JoinHandle<()>,
}

impl NodeWatch {
    /// Starts following Nodes in the background (on the current runtime).
    pub fn start(settings: Settings) -> Self {
        let (store, writer) = reflector::store();
        let state = Arc::new(Mutex::new(ApiState { kubeconfig: settings.kubeconfig.clone(), ..ApiState::default() }));
        let (notify, changes) = signal::channel(());
        let task = tokio::spawn(follow(settings.clone(), writer, state.clone(), notify));
        NodeWatch { settings, store, state, changes, task }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A receiver that is told when the store or the connection changed.
    pub fn subscribe(&self) -> signal::Receiver<()> {
        self.changes.clone()
    }

    pub fn api_state(&self) -> ApiState {
        self.state.lock().expect("api state lock").clone()
    }

    /// The desired view from the store; `None` until a complete list of the
    /// cluster's Nodes has arrived once (before that, an empty store would
    /// look like a cluster without peers).
    pub fn view(&self) -> Option<ClusterView> {
        if !self.api_state().synced {
            return None;
        }
        let nodes = self.store.state();
        Some(ClusterView::from_nodes(&self.settings.node_name, nodes.iter().map(|n| n.as_ref())))
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow(settings: Settings, mut writer: Writer<Node>, state: Arc<Mutex<ApiState>>, notify: signal::Sender<()>) {
    let update = |change: &dyn Fn(&mut ApiState)| {
        let mut s = state.lock().expect("api state lock");
        let before = s.clone();
        change(&mut s);
        if *s != before {
            notify.send_replace(());
        }
    };
    let mut backoff = BACKOFF_MIN;
    let mut last_reason = String::new();
    loop {
        // Before the node has joined there is no kubeconfig yet: wait for it
        // quietly, and take it up within seconds of the join.
        if !settings.kubeconfig.exists() {
            let reason = format!("waiting for {} (written when the node joins its cluster)", settings.kubeconfig.display());
            if reason != last_reason {
                log::info!("Kubernetes API: {reason}");
                update(&|s| s.error = Some(reason.clone()));
                last_reason = reason;
            }
            tokio::time::sleep(KUBECONFIG_POLL).await;
            continue;
        }
        let reason = match client(&settings.kubeconfig).await {
            Err(e) => e.to_string(),
            Ok((client, server)) => {
                update(&|s| {
                    s.server = Some(server.clone());
                    s.connects += 1;
                });
                let mut events = watcher(Api::<Node>::all(client), watcher::Config::default()).boxed();
                loop {
                    match events.next().await {
                        Some(Ok(event)) => {
                            writer.apply_watcher_event(&event);
                            if matches!(event, watcher::Event::InitDone) {
                                backoff = BACKOFF_MIN;
                                last_reason.clear();
                                update(&|s| {
                                    s.connected = true;
                                    s.synced = true;
                                    s.error = None;
                                });
                            }
                            notify.send_replace(());
                        }
                        Some(Err(e)) => break format!("watching nodes at {server}: {e}"),
                        None => break format!("the watch on {server} ended"),
                    }
                }
            }
        };
        // The same failure again and again is said once.
        if reason != last_reason {
            log::warn!("Kubernetes API: {reason}; retrying with backoff (up to {} s)", BACKOFF_MAX.as_secs());
        }
        last_reason = reason.clone();
        update(&|s| {
            s.connected = false;
            s.error = Some(reason.clone());
        });
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
