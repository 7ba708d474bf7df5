// SPDX-License-Identifier: Apache-2.0
//! The service proxy as the daemon sees it: the Services view in, the
//! service tables, the health-check answers and the ending of connections
//! to backends that left out. Runs when Services, EndpointSlices, Nodes or
//! this node's pods changed.

use std::sync::Arc;

use v6node_config::{Config, RemoteBackends};

use super::{
    connections::{self, LeftBackend},
    health_checks, Outside, ServiceTables,
};
use crate::{cluster::Cluster, endpoints::Endpoints, state::Shared};

#[derive(Default)]
pub struct ServiceProxy {
    tables: ServiceTables,
    /// One request to end connections at a time, in order: a flapping
    /// EndpointSlice queues them here rather than at the helper's socket,
    /// which takes a few at once (MaxConnections=).
    ending: Arc<tokio::sync::Mutex<()>>,
}

impl ServiceProxy {
    /// Reads the kernel's tables before the next sync, which so repairs
    /// what someone else changed.
    pub fn forget(&mut self) {
        self.tables.forget();
    }

    /// The service tables from the Services view, while socket hooks are
    /// configured. Until Services and EndpointSlices were listed once, the
    /// tables stay as they are (a previous agent's, across a restart).
    pub fn sync(&mut self, shared: &Shared, config: &Config, cluster: &Cluster, endpoints: &Endpoints) {
        if config.services.cgroup.is_none() {
            return;
        }
        let Some(mut view) = cluster.services() else { return };
        cluster.report(&view);
        if let Err(e) = health_checks::write(&shared.paths, &view.health_checks) {
            log::error!("{e:#}");
        }
        let (node_address, previous) = shared.read(|s| (s.cluster.as_ref().and_then(|c| c.address), s.services.clone()));
        view.add_host_ports(endpoints.host_ports(node_address.as_slice()));
        let dsr = config.services.remote_backends == RemoteBackends::Dsr;
        let outside = shared
            .node_pod_prefix()
            .and_then(|p| v6node_api::masquerade_address(p.network(), p.prefix_len()))
            .map(|masquerade| Outside { masquerade, dsr });
        let (next, left) = self.tables.apply(&shared.paths.pin_dir, &view, outside, previous.as_ref());
        shared.update_if_changed(|s| &mut s.services, Some(next));
        if !left.is_empty() {
            self.end_connections(shared, endpoints, left);
        }
    }

    /// Has `end-connections` end what the service tables gave backends that
    /// have now left them, off the agent's loop: the tables are already
    /// written, so no new connection reaches those backends meanwhile.
    fn end_connections(&self, shared: &Shared, endpoints: &Endpoints, left: Vec<LeftBackend>) {
        let request = connections::Request { left, namespaces: endpoints.namespaces() };
        let (shared, ending) = (shared.clone(), self.ending.clone());
        tokio::spawn(async move {
            let _turn = ending.lock().await;
            let outcome = connections::request(&shared.paths.end_connections_socket(), &request).await;
            match &outcome {
                Ok(reply) if reply.errors.is_empty() => log::info!(
                    "{} backend(s) left their Service: {} connection(s) to them ended",
                    request.left.len(),
                    reply.ended
                ),
                Ok(reply) => log::warn!("ending connections to backends that left: {}", reply.errors.join("; ")),
                Err(e) => log::warn!("ending connections to {} backend(s) that left: {e:#}", request.left.len()),
            }
            shared.update(|s| s.ended_connections.get_or_insert_default().record(&outcome));
        });
    }
}
