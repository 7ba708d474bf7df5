// SPDX-License-Identifier: Apache-2.0
//! The endpoint API server: v6node-cni's requests on the agent's Unix
//! socket, one JSON request and answer per connection (see `v6node_api`).
//! Part of the daemon: an added pod is attached by the same reconcile as
//! every other device, and is taken out again if that fails.

use std::time::Duration;

use anyhow::{Context, Result};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
};

use super::Daemon;
use crate::{files, paths::Paths};

/// A CNI call waits on the agent; one that stalls must not stall the agent.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The endpoint API socket, root's only.
pub(super) fn listen(paths: &Paths) -> Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let socket = paths.endpoints_socket();
    std::fs::create_dir_all(&paths.state_dir).with_context(|| format!("creating {}", paths.state_dir.display()))?;
    files::remove(&socket).with_context(|| format!("removing stale {}", socket.display()))?;
    let listener = UnixListener::bind(&socket).with_context(|| format!("listening on {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

impl Daemon {
    /// Answers one endpoint API request from v6node-cni.
    pub(super) async fn serve(&mut self, mut stream: UnixStream) {
        let mut body = Vec::new();
        let read =
            tokio::time::timeout(REQUEST_TIMEOUT, (&mut stream).take(v6node_api::MAX_MESSAGE).read_to_end(&mut body)).await;
        let response = match read {
            Err(_) => v6node_api::Response::error("timed out reading the request"),
            Ok(Err(e)) => v6node_api::Response::error(format!("reading the request: {e}")),
            Ok(Ok(_)) => match serde_json::from_slice::<v6node_api::Request>(&body) {
                Err(e) => v6node_api::Response::error(format!("malformed request: {e}")),
                Ok(request) => self.handle(request).await,
            },
        };
        let mut answer = serde_json::to_vec(&response).unwrap_or_default();
        answer.push(b'\n');
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, stream.write_all(&answer)).await;
        // A pod's programs may have pinned the event ring just now.
        if !self.flows.reading() {
            self.sync_flows().await;
        }
    }

    async fn handle(&mut self, request: v6node_api::Request) -> v6node_api::Response {
        use v6node_api::{Request, Response};
        match request {
            Request::List => Response::ok(self.endpoints.list()),
            Request::Add(endpoint) => {
                if !endpoint.port_mappings.is_empty() && (self.cluster.is_none() || self.loaded.config.services.cgroup.is_none())
                {
                    return Response::error(
                        "the pod has hostPorts, which this node serves through its Service socket hooks: \
                         they need [services] cgroup and [kubernetes] configured",
                    );
                }
                let (container_id, ifname) = (endpoint.container_id.clone(), endpoint.ifname.clone());
                let host_device = endpoint.host_device.clone();
                let size = self.loaded.config.bigtcp.size;
                let mut added = match self.endpoints.add(&self.shared.paths, &self.netlink, endpoint, size).await {
                    Ok(added) => added,
                    Err(e) => return Response::error(format!("{e:#}")),
                };
                self.endpoints_changed().await;
                let failed: Vec<String> = self.shared.read(|s| {
                    s.attachments
                        .iter()
                        .filter(|a| a.device == host_device)
                        .filter_map(|a| a.error.as_ref().map(|e| format!("{} {}: {e}", a.device, a.direction.name())))
                        .collect()
                });
                if !failed.is_empty() {
                    // Half a pod is worse than none: take it out again.
                    let _ = self.endpoints.del(&self.shared.paths, &container_id, &ifname);
                    self.endpoints_changed().await;
                    return Response::error(failed.join("; "));
                }
                log::info!(
                    "pod {} added: {} on {} ({}), BIG TCP {}",
                    added.endpoint.pod.as_deref().unwrap_or(&added.endpoint.container_id),
                    added.endpoint.address,
                    added.endpoint.host_device,
                    added.endpoint.device.as_str(),
                    added.bigtcp.map_or("off".into(), |b| b.to_string()),
                );
                added.pod_sysctls = crate::bandwidth::pod_sysctls(&self.loaded.config.bandwidth);
                Response::ok(vec![added])
            }
            Request::Del { container_id, ifname } => match self.endpoints.del(&self.shared.paths, &container_id, &ifname) {
                Ok(removed) => {
                    if let Some(old) = &removed {
                        log::info!(
                            "pod {} deleted: {} on {}",
                            old.endpoint.pod.as_deref().unwrap_or(&container_id),
                            old.endpoint.address,
                            old.endpoint.host_device
                        );
                        self.endpoints_changed().await;
                    }
                    Response::ok(removed.into_iter().collect())
                }
                Err(e) => Response::error(format!("{e:#}")),
            },
        }
    }

    async fn endpoints_changed(&mut self) {
        let list = self.endpoints.list();
        self.update(|s| s.endpoints = list);
        self.sync_devices().await;
        // The pods' hostPorts are frontends of the service tables.
        self.sync_services();
        // A new pod's policy is in force before the plugin answers, so
        // before its containers start; so is its rate limit.
        self.sync_policies();
        self.sync_bandwidth().await;
    }
}
