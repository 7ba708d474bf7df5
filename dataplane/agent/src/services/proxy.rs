// SPDX-License-Identifier: Apache-2.0
//! The service proxy as the daemon sees it: the Services view in, the
//! service tables, the health-check answers and the ending of connections
//! to backends that left out. Runs when Services, EndpointSlices, Nodes or
//! this node's pods changed.

use std::{
    collections::BTreeSet,
    net::Ipv6Addr,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use ipnet::Ipv6Net;
use v6node_abi::maps;
use v6node_config::{Config, RemoteBackends};
use v6node_k8s::services::{FrontendKind, ServicesView};

use super::{
    connections::{self, LeftBackend, Reply},
    health_checks, Outside, ServiceTables, ServicesState,
};
use crate::{bpf, cluster::Cluster, endpoints::Endpoints, paths::Paths};

/// What ending connections to backends that left came to, reported from
/// the task that asked: the daemon records it for `status`.
pub type OnEnded = Arc<dyn Fn(&Result<Reply>) + Send + Sync>;

/// The external and load-balancer IPs of `view`'s frontends, but `own`
/// (an externalIP may be an address of the node's, whose other ports are
/// its own).
fn vips(view: &ServicesView, own: &BTreeSet<Ipv6Addr>) -> BTreeSet<Ipv6Addr> {
    view.frontends
        .iter()
        .filter(|f| matches!(f.kind, FrontendKind::ExternalIp | FrontendKind::LoadBalancer))
        .map(|f| f.address.ip)
        .filter(|ip| !own.contains(ip))
        .collect()
}

/// The IPv6 addresses of the agent's network namespace: the node's.
/// (ProcSubset=pid leaves /proc/<pid>/net visible.)
fn own_addresses() -> BTreeSet<Ipv6Addr> {
    let table = std::fs::read_to_string("/proc/thread-self/net/if_inet6").unwrap_or_default();
    table
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(Ipv6Addr::from)
        .collect()
}

/// Makes `v6n_lb_vips` hold `vips`: a packet from outside to one of them on
/// a port no frontend has is dropped at the uplink, not routed back where it
/// came from.
fn sync_vips(pin_dir: &Path, vips: &BTreeSet<Ipv6Addr>) -> Result<()> {
    let mut table: BpfHashMap<MapData, [u8; 16], u8> = bpf::open_pinned_map(pin_dir, maps::LB_VIPS)?;
    let stale: Vec<[u8; 16]> = table.keys().filter_map(Result::ok).filter(|k| !vips.contains(&Ipv6Addr::from(*k))).collect();
    for addr in stale {
        table.remove(&addr).with_context(|| format!("removing {}", Ipv6Addr::from(addr)))?;
    }
    for vip in vips {
        table.insert(vip.octets(), 1, 0).with_context(|| format!("writing {vip}"))?;
    }
    Ok(())
}

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
        if let Err(e) = sync_vips(&paths.pin_dir, &vips(&view, &own_addresses())) {
            log::error!("the Services' external and load-balancer IPs: {e:#}");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_own_addresses_are_read_and_loopback_is_one() {
        assert!(own_addresses().contains(&Ipv6Addr::LOCALHOST), "{:?}", own_addresses());
    }
}
