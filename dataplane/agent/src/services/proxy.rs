// SPDX-License-Identifier: Apache-2.0
//! The service proxy as the daemon sees it: the Services view in, the
//! service tables, the health-check answers and the ending of connections
//! to backends that left out. Runs when Services, EndpointSlices, Nodes or
//! this node's pods changed.

use std::{net::Ipv6Addr, path::PathBuf, sync::Arc};

use anyhow::Result;
use ipnet::Ipv6Net;
use v6node_config::{Config, RemoteBackends};

use super::{
    connections::{self, LeftBackend, Reply},
    health_checks, Outside, ServiceTables, ServicesState,
};
use crate::{cluster::Cluster, endpoints::Endpoints, paths::Paths};

/// What ending connections to backends that left came to, reported from
/// the task that asked: the daemon records it for `status`.
pub type OnEnded = Arc<dyn Fn(&Result<Reply>) + Send + Sync>;

/// This node as the cluster view knows it, for the service tables.
pub struct Node {
    pub address: Option<Ipv6Addr>,
    pub pod_prefix: Option<Ipv6Net>,
}

pub struct ServiceProxy {
    tables: ServiceTables,
    end_connections_socket: PathBuf,
    on_ended: OnEnded,
    /// One request to end connections at a time, in order: a flapping
    /// EndpointSlice queues them here rather than at the helper's socket,
    /// which takes a few at once (MaxConnections=).
    ending: Arc<tokio::sync::Mutex<()>>,
}

impl ServiceProxy {
    pub fn new(paths: &Paths, on_ended: OnEnded) -> Self {
        ServiceProxy {
            tables: ServiceTables::default(),
            end_connections_socket: paths.end_connections_socket(),
            on_ended,
            ending: Arc::default(),
        }
    }

    /// Reads the kernel's tables before the next sync, which so repairs
    /// what someone else changed.
    pub fn forget(&mut self) {
        self.tables.forget();
    }

    /// The service tables from the Services view, while socket hooks are
    /// configured. Until Services and EndpointSlices were listed once, the
    /// tables stay as they are (a previous agent's, across a restart).
    /// Returns the tables' state for `status`; None: nothing was synced.
    pub fn sync(
        &mut self,
        paths: &Paths,
        config: &Config,
        cluster: &Cluster,
        endpoints: &Endpoints,
        node: Node,
        previous: Option<&ServicesState>,
    ) -> Option<ServicesState> {
        // Without socket hooks there is no service proxy.
        config.services.cgroup.as_ref()?;
        let mut view = cluster.services()?;
        cluster.report(&view);
        if let Err(e) = health_checks::write(paths, &view.health_checks) {
            log::error!("{e:#}");
        }
        view.add_host_ports(endpoints.host_ports(node.address.as_slice()));
        let mode = config.services.remote_backends;
        let (dsr, ip6ip6) = (mode.is_dsr(), mode == RemoteBackends::DsrIp6ip6);
        let outside = node
            .pod_prefix
            .and_then(|p| v6node_api::masquerade_address(p.network(), p.prefix_len()))
            .map(|masquerade| Outside { masquerade, dsr, ip6ip6 });
        let (next, left) = self.tables.apply(&paths.pin_dir, &view, outside, previous);
        if !left.is_empty() {
            self.end_connections(endpoints, left);
        }
        Some(next)
    }

    /// Has `end-connections` end what the service tables gave backends that
    /// have now left them, off the agent's loop: the tables are already
    /// written, so no new connection reaches those backends meanwhile.
    fn end_connections(&self, endpoints: &Endpoints, left: Vec<LeftBackend>) {
        let request = connections::Request { left, namespaces: endpoints.namespaces() };
        let (socket, ending, on_ended) = (self.end_connections_socket.clone(), self.ending.clone(), self.on_ended.clone());
        tokio::spawn(async move {
            let _turn = ending.lock().await;
            let outcome = connections::request(&socket, &request).await;
            match &outcome {
                Ok(reply) if reply.errors.is_empty() => log::info!(
                    "{} backend(s) left their Service: {} connection(s) to them ended",
                    request.left.len(),
                    reply.ended
                ),
                Ok(reply) => log::warn!("ending connections to backends that left: {}", reply.errors.join("; ")),
                Err(e) => log::warn!("ending connections to {} backend(s) that left: {e:#}", request.left.len()),
            }
            on_ended(&outcome);
        });
    }
}
