// SPDX-License-Identifier: Apache-2.0
//! The agent's room for the Kubernetes side: the Node watch (`v6node-k8s`)
//! gives the desired cluster view, this turns it into routes (`routes.rs`)
//! and this node's pod prefix, and reports both for `status`. Nothing here is
//! torn down when the API goes away: the view is the last complete one.

pub mod bgp;
pub mod routes;

use std::{net::Ipv6Addr, path::PathBuf};

use ipnet::Ipv6Net;
use rtnetlink::Handle;
use serde::{Deserialize, Serialize};
use v6node_config::Config;
use v6node_k8s::{ApiState, ClusterWatch, NodeProblem, ServicesView, Settings};

use crate::{files, paths::Paths};
use routes::{PeerRoute, RouteState, RouteStats};

/// The cluster as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterState {
    pub node: String,
    /// The Node's first IPv6 InternalIP, once the API server has it.
    #[serde(default)]
    pub address: Option<Ipv6Addr>,
    pub api: ApiState,
    /// This node's pod prefixes from its Node's `spec.podCIDRs`.
    pub pod_prefixes: Vec<Ipv6Net>,
    pub peers: Vec<PeerState>,
    /// Nodes or fields that were refused, with the reason.
    pub problems: Vec<NodeProblem>,
    /// What the last route sync did.
    pub routes: RouteStats,
    /// Route syncs since the agent started: they follow Nodes and the API
    /// connection, never a change of Services alone.
    #[serde(default)]
    pub route_syncs: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerState {
    pub name: String,
    pub address: Ipv6Addr,
    pub routes: Vec<PeerRoute>,
}

/// What `[kubernetes]` asks for; `None` while no kubeconfig is named.
pub fn settings(config: &v6node_config::Kubernetes) -> Option<Settings> {
    let kubeconfig = config.kubeconfig.clone()?;
    let node_name = match config.node_name.as_str() {
        // kubelet's default Node name: the host name, lower case.
        "" => host_name().to_lowercase(),
        name => name.to_string(),
    };
    Some(Settings { kubeconfig, node_name })
}

/// From uname(2): the unit's ProcSubset=pid hides /proc/sys/kernel/hostname.
pub fn host_name() -> String {
    // SAFETY: uname fills the zeroed struct; nodename is NUL-terminated.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut name) } != 0 {
        return String::new();
    }
    unsafe { std::ffi::CStr::from_ptr(name.nodename.as_ptr()) }.to_string_lossy().into_owned()
}

pub struct Cluster {
    watch: ClusterWatch,
}

impl Cluster {
    pub fn start(settings: Settings) -> Self {
        log::info!("following the Kubernetes API as node {} (kubeconfig {})", settings.node_name, settings.kubeconfig.display());
        Cluster { watch: ClusterWatch::start(settings) }
    }

    pub fn settings(&self) -> &Settings {
        self.watch.settings()
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<v6node_k8s::Changes> {
        self.watch.subscribe()
    }

    /// The Services this node serves (NodePorts on every Node's address);
    /// `None` until Nodes, Services and EndpointSlices were listed once.
    pub fn services(&self) -> Option<ServicesView> {
        self.watch.services()
    }

    /// What the network policies ask of this node's pods; `None` until
    /// Nodes, Pods, Namespaces and NetworkPolicies were listed once.
    pub fn policies(
        &self,
        nat64_prefix: Option<ipnet::Ipv6Net>,
        masquerade: Option<std::net::Ipv6Addr>,
        cni_addresses: &std::collections::BTreeMap<String, Vec<std::net::Ipv6Addr>>,
    ) -> Option<v6node_k8s::PolicyView> {
        self.watch.policies(nat64_prefix, masquerade, cni_addresses)
    }

    /// Every pod with an address, for naming flows; `None` until Pods
    /// were listed once.
    pub fn pod_addresses(
        &self,
        cni_addresses: &std::collections::BTreeMap<String, Vec<std::net::Ipv6Addr>>,
    ) -> Option<Vec<v6node_k8s::PodAddresses>> {
        self.watch.pod_addresses(cni_addresses)
    }

    /// Warning Events on the NetworkPolicies and ClusterNetworkPolicies
    /// with these problems (what the view refused or clamped, and rules the
    /// tables could not take).
    pub fn pod_bandwidth<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a String>,
    ) -> std::collections::BTreeMap<String, (v6node_k8s::bandwidth::PodLimits, Vec<String>)> {
        self.watch.pod_bandwidth(pods)
    }

    pub fn report_bandwidth(&self, problems: &[v6node_k8s::events::Problem]) {
        self.watch.report_bandwidth(problems);
    }

    pub fn report_policies(&self, problems: &[v6node_k8s::PolicyProblem]) {
        self.watch.report_policies(problems);
    }

    /// Warning Events on the Services the view could not serve as written.
    pub fn report(&self, view: &ServicesView) {
        self.watch.report(&view.problems);
    }

    /// Routes to the other nodes' pods and this node's pod prefix from the
    /// cluster view, then the CNI configuration with that prefix. Returns
    /// both for `status`; the configuration None where it could not be
    /// written (logged), so the one in place stays recorded.
    pub async fn sync(
        &self,
        paths: &Paths,
        previous: &ClusterState,
        netlink: &Handle,
        config: &Config,
    ) -> (ClusterState, Option<Option<PathBuf>>) {
        let next = self.reconcile(netlink, previous, config.routing.bgp.is_some()).await;
        let cni_config = files::write_cni_conflist(paths, &effective(config, next.pod_prefixes.first().copied()))
            .map_err(|e| log::error!("{e:#}"))
            .ok();
        (next, cni_config)
    }

    /// Brings v6node's routes in line with the view. Before the first
    /// complete list of Nodes, routes are left exactly as they are. With
    /// `bgp`, a peer no direct route reaches is left to the routers the
    /// nodes announce their prefixes to.
    pub async fn reconcile(&self, netlink: &Handle, previous: &ClusterState, bgp: bool) -> ClusterState {
        let api = self.watch.api_state();
        let node = self.settings().node_name.clone();
        let Some(view) = self.watch.view() else {
            return ClusterState { node, api, ..previous.clone() };
        };
        let route_syncs = previous.route_syncs + 1;
        let wanted: Vec<routes::Wanted> = view
            .peers
            .iter()
            .flat_map(|p| {
                p.pod_prefixes.iter().map(|prefix| routes::Wanted { prefix: *prefix, via: p.address, peer: p.name.clone() })
            })
            .collect();
        let (mut installed, stats) = match routes::sync(netlink, &wanted).await {
            Ok(done) => done,
            Err(e) => {
                log::error!("syncing routes to {} peer(s): {e:#}", view.peers.len());
                return ClusterState { node, api, problems: view.problems, route_syncs, ..previous.clone() };
            }
        };
        if stats.added + stats.changed + stats.removed > 0 {
            log::info!(
                "routes to peers: {} installed ({} added, {} changed, {} removed), {} refused",
                stats.installed,
                stats.added,
                stats.changed,
                stats.removed,
                stats.refused
            );
        }
        if bgp {
            for route in installed.iter_mut().filter(|r| r.state == RouteState::Unreachable && r.refused_by_kernel) {
                route.state = RouteState::Bgp;
                route.error = Some(format!("{} is not on-link: through the routers BGP announces to", route.via));
            }
        }
        for problem in &view.problems {
            if !previous.problems.contains(problem) {
                log::warn!("node {}: {}", problem.node, problem.reason);
            }
        }
        let peers = view
            .peers
            .iter()
            .map(|p| PeerState {
                name: p.name.clone(),
                address: p.address,
                routes: installed.iter().filter(|r| r.peer == p.name).cloned().collect(),
            })
            .collect();
        ClusterState {
            node,
            address: view.local_address,
            api,
            pod_prefixes: view.local_prefixes.unwrap_or_default(),
            peers,
            problems: view.problems,
            routes: stats,
            route_syncs,
        }
    }
}

/// The configuration with the cluster's word in place: once the API has told
/// this node's pod prefix, it is the one pods get, whatever pods.prefix says.
pub fn effective(config: &Config, node_pod_prefix: Option<Ipv6Net>) -> Config {
    let mut config = config.clone();
    if let Some(prefix) = node_pod_prefix {
        config.pods.prefix = Some(prefix);
    }
    config
}
