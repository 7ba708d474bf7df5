// SPDX-License-Identifier: Apache-2.0
//! Follows the cluster's Nodes, Services and EndpointSlices, and Pods,
//! Namespaces, NetworkPolicies and ClusterNetworkPolicies for network
//! policy, into reflector stores (one watch each), and says when a store
//! changed. A cluster without the ClusterNetworkPolicy CRD is one without
//! such policies: that watch counts as synced and empty, and looks again. The API connection is rebuilt from the kubeconfig after
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
use k8s_openapi::api::{
    core::v1::{Namespace, Node, Pod, Service},
    discovery::v1::EndpointSlice,
    networking::v1::NetworkPolicy,
};
use kube::{
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{
        reflector::{self, store::Writer, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, Config, Resource, ResourceExt,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::{sync::watch as signal, task::JoinHandle};

use crate::{
    cluster::ClusterView,
    events::{Problem, ProblemEvents},
    policy::{ClusterNetworkPolicy, PolicyView},
    services::{ServiceProblem, ServicesView},
    Settings,
};

/// What the watches changed, each kind counting its own changes, so that a
/// subscriber re-runs only what depends on the kind that changed: a Service
/// change need not touch routes, the CNI config or BGP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The Node store, and any watch's connection (status shows them together).
    pub nodes: u64,
    /// The Service and EndpointSlice stores.
    pub services: u64,
    /// The Pod, Namespace, NetworkPolicy and ClusterNetworkPolicy stores.
    pub policies: u64,
}

/// Which count a watch's events go to.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Nodes,
    Services,
    Policies,
}

impl Changes {
    fn bump(&mut self, kind: Kind) {
        match kind {
            Kind::Nodes => self.nodes += 1,
            Kind::Services => self.services += 1,
            Kind::Policies => self.policies += 1,
        }
    }
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

/// The watches of one credential and Node name, and their stores.
pub struct ClusterWatch {
    settings: Settings,
    nodes: Store<Node>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    pods: Store<Pod>,
    namespaces: Store<Namespace>,
    policies: Store<NetworkPolicy>,
    cluster_policies: Store<ClusterNetworkPolicy>,
    /// Each watch reports its own, in the order of `WATCHES`.
    states: [Arc<Mutex<ApiState>>; WATCHES.len()],
    changes: signal::Receiver<Changes>,
    tasks: Vec<JoinHandle<()>>,
    service_events: ProblemEvents,
    policy_events: ProblemEvents,
    cluster_policy_events: ProblemEvents,
    bandwidth_events: ProblemEvents,
}

impl ClusterWatch {
    /// Starts following the API in the background (on the current runtime).
    pub fn start(settings: Settings) -> Self {
        let (nodes, node_writer) = reflector::store();
        let (services, service_writer) = reflector::store();
        let (slices, slice_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        let (namespaces, namespace_writer) = reflector::store();
        let (policies, policy_writer) = reflector::store();
        let (cluster_policies, cluster_policy_writer) = reflector::store();
        let state = || Arc::new(Mutex::new(ApiState { kubeconfig: settings.kubeconfig.clone(), ..ApiState::default() }));
        let states = WATCHES.map(|_| state());
        let (notify, changes) = signal::channel(Changes::default());
        let args = |watch: usize, kind| (settings.clone(), WATCHES[watch], kind, states[watch].clone(), notify.clone());
        let tasks = vec![
            tokio::spawn(follow_into(args(NODES, Kind::Nodes), node_writer)),
            tokio::spawn(follow_into(args(SERVICES, Kind::Services), service_writer)),
            tokio::spawn(follow_into(args(ENDPOINT_SLICES, Kind::Services), slice_writer)),
            tokio::spawn(follow_into(args(PODS, Kind::Policies), pod_writer)),
            tokio::spawn(follow_into(args(NAMESPACES, Kind::Policies), namespace_writer)),
            tokio::spawn(follow_into(args(NETWORK_POLICIES, Kind::Policies), policy_writer)),
            tokio::spawn(follow_into(args(CLUSTER_NETWORK_POLICIES, Kind::Policies), cluster_policy_writer)),
        ];
        ClusterWatch {
            settings,
            nodes,
            services,
            slices,
            pods,
            namespaces,
            policies,
            cluster_policies,
            states,
            changes,
            tasks,
            service_events: ProblemEvents::new("NotServed", "Translate"),
            policy_events: ProblemEvents::new("NotEnforced", "Enforce"),
            cluster_policy_events: ProblemEvents::new("NotEnforced", "Enforce"),
            bandwidth_events: ProblemEvents::new("BandwidthNotLimited", "Limit"),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A receiver that is told when a store or a connection changed, and
    /// which kind did.
    pub fn subscribe(&self) -> signal::Receiver<Changes> {
        self.changes.clone()
    }

    /// The connection as a whole: connected and synced when every watch is,
    /// the first error of any, the Node watch's connections.
    pub fn api_state(&self) -> ApiState {
        let states: Vec<ApiState> = self.states.iter().map(|s| s.lock().expect("api state lock").clone()).collect();
        ApiState {
            connected: states.iter().all(|s| s.connected),
            synced: states.iter().all(|s| s.synced),
            error: states.iter().find_map(|s| s.error.clone()),
            ..states[0].clone()
        }
    }

    fn synced(&self, watch: usize) -> bool {
        self.states[watch].lock().expect("api state lock").synced
    }

    /// The desired view from the Node store; `None` until a complete list of
    /// the cluster's Nodes has arrived once (before that, an empty store
    /// would look like a cluster without peers).
    pub fn view(&self) -> Option<ClusterView> {
        if !self.synced(NODES) {
            return None;
        }
        let nodes = self.nodes.state();
        Some(ClusterView::from_nodes(&self.settings.node_name, nodes.iter().map(|n| n.as_ref())))
    }

    /// The Services this node serves, once Nodes, Services and
    /// EndpointSlices were listed completely (before that, every Service
    /// would look empty and refuse). NodePorts are served on every Node's
    /// IPv6 InternalIPs: a pod or the node reaching another node's NodePort
    /// gets its backend here, at connect, as it does for its own node's.
    pub fn services(&self) -> Option<ServicesView> {
        if ![NODES, SERVICES, ENDPOINT_SLICES].iter().all(|&w| self.synced(w)) {
            return None;
        }
        let nodes = self.nodes.state();
        let mut node_addresses: Vec<std::net::Ipv6Addr> =
            nodes.iter().flat_map(|n| crate::cluster::internal_ipv6(n).collect::<Vec<_>>()).collect();
        node_addresses.sort();
        node_addresses.dedup();
        let own_addresses = self.own_addresses();
        let services = self.services.state();
        let slices = self.slices.state();
        Some(ServicesView::build(
            &self.settings.node_name,
            &own_addresses,
            &node_addresses,
            services.iter().map(|s| s.as_ref()),
            slices.iter().map(|s| s.as_ref()),
        ))
    }
}

impl ClusterWatch {
    /// This node's IPv6 InternalIPs, from its Node.
    fn own_addresses(&self) -> Vec<std::net::Ipv6Addr> {
        let nodes = self.nodes.state();
        nodes
            .iter()
            .filter(|n| n.metadata.name.as_deref() == Some(self.settings.node_name.as_str()))
            .flat_map(|n| crate::cluster::internal_ipv6(n).collect::<Vec<_>>())
            .collect()
    }

    /// What the network policies ask of this node's pods, once Nodes, Pods,
    /// Namespaces and NetworkPolicies were listed completely (before that,
    /// a pod would look selected by nothing: the tables stay as they are).
    /// `masquerade` is this node's masquerade address: a pod reaching itself
    /// through a Service comes from it, and that is always allowed.
    /// `cni_addresses` are this node's pods' addresses by "namespace/name",
    /// for pods whose status does not show them yet.
    pub fn policies(
        &self,
        nat64_prefix: Option<ipnet::Ipv6Net>,
        masquerade: Option<std::net::Ipv6Addr>,
        cni_addresses: &std::collections::BTreeMap<String, Vec<std::net::Ipv6Addr>>,
    ) -> Option<PolicyView> {
        if ![NODES, PODS, NAMESPACES, NETWORK_POLICIES, CLUSTER_NETWORK_POLICIES].iter().all(|&w| self.synced(w)) {
            return None;
        }
        let (pods, namespaces, nodes) = (self.pods.state(), self.namespaces.state(), self.nodes.state());
        let (policies, cluster_policies) = (self.policies.state(), self.cluster_policies.state());
        let mut node_addresses = self.own_addresses();
        node_addresses.extend(masquerade);
        let (pods, namespaces, nodes): (Vec<&Pod>, Vec<&Namespace>, Vec<&Node>) = (
            pods.iter().map(|p| p.as_ref()).collect(),
            namespaces.iter().map(|n| n.as_ref()).collect(),
            nodes.iter().map(|n| n.as_ref()).collect(),
        );
        let policies: Vec<&NetworkPolicy> = policies.iter().map(|p| p.as_ref()).collect();
        let cluster_policies: Vec<&ClusterNetworkPolicy> = cluster_policies.iter().map(|p| p.as_ref()).collect();
        let objects = crate::policy::Objects {
            pods: &pods,
            namespaces: &namespaces,
            nodes: &nodes,
            policies: &policies,
            cluster_policies: &cluster_policies,
        };
        Some(crate::policy::build(&self.settings.node_name, &node_addresses, nat64_prefix, objects, cni_addresses))
    }

    /// Every pod with an address, for naming flows; `None` until Pods were
    /// listed once. `cni_addresses` as for `policies`.
    pub fn pod_addresses(
        &self,
        cni_addresses: &std::collections::BTreeMap<String, Vec<std::net::Ipv6Addr>>,
    ) -> Option<Vec<crate::PodAddresses>> {
        if !self.synced(PODS) {
            return None;
        }
        let pods = self.pods.state();
        let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        Some(crate::policy::pod_addresses(&pods, &self.settings.node_name, cni_addresses))
    }

    /// Warning Events on the Services with these problems (see `events`).
    ///
    /// Every agent sees the same Services, so one node publishes them for the
    /// cluster (`cluster::reporter`). Should it go NotReady or be deleted,
    /// the next one does, publishing what lasts again under its own name.
    pub fn report(&self, problems: &[ServiceProblem]) {
        let problems: Vec<Problem> = match self.reports_for_the_cluster() {
            true => problems.iter().map(|p| Problem { object: p.service.clone(), message: p.reason.clone() }).collect(),
            false => Vec::new(),
        };
        self.service_events.report(&self.settings, &self.services, &problems);
    }

    /// The rate limits of this node's pods ("namespace/name") as their
    /// annotations ask, with what is wrong with those that ask for the
    /// impossible; a pod not in the store (yet) is not in the answer.
    pub fn pod_bandwidth<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a String>,
    ) -> std::collections::BTreeMap<String, (crate::bandwidth::PodLimits, Vec<String>)> {
        pods.into_iter()
            .filter_map(|name| {
                let (namespace, pod) = name.split_once('/')?;
                let object = self.pods.get(&reflector::ObjectRef::new(pod).within(namespace))?;
                Some((name.clone(), crate::bandwidth::pod_limits(object.metadata.annotations.as_ref())))
            })
            .collect()
    }

    /// Warning Events on this node's pods whose bandwidth annotations are
    /// refused: each node reports its own pods.
    pub fn report_bandwidth(&self, problems: &[Problem]) {
        self.bandwidth_events.report(&self.settings, &self.pods, problems);
    }

    /// Warning Events on the NetworkPolicies and ClusterNetworkPolicies
    /// (those without a namespace) with these problems, published for the
    /// cluster by one node as for Services.
    pub fn report_policies(&self, problems: &[crate::PolicyProblem]) {
        let problems = match self.reports_for_the_cluster() {
            true => problems,
            false => &[],
        };
        let (cluster_wide, namespaced): (Vec<_>, Vec<_>) = problems.iter().partition(|p| p.namespace.is_empty());
        let events = |problems: Vec<&crate::PolicyProblem>| -> Vec<Problem> {
            problems
                .into_iter()
                .map(|p| Problem {
                    object: if p.namespace.is_empty() { p.name.clone() } else { format!("{}/{}", p.namespace, p.name) },
                    message: p.message.clone(),
                })
                .collect()
        };
        self.policy_events.report(&self.settings, &self.policies, &events(namespaced));
        self.cluster_policy_events.report(&self.settings, &self.cluster_policies, &events(cluster_wide));
    }

    fn reports_for_the_cluster(&self) -> bool {
        let nodes = self.nodes.state();
        crate::cluster::reporter(nodes.iter().map(|n| n.as_ref())).is_none_or(|r| r == self.settings.node_name)
    }
}

impl Drop for ClusterWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The watches, by their index in `ClusterWatch::states`.
const WATCHES: [&str; 7] =
    ["nodes", "services", "endpointslices", "pods", "namespaces", "networkpolicies", "clusternetworkpolicies"];
const NODES: usize = 0;
const SERVICES: usize = 1;
const ENDPOINT_SLICES: usize = 2;
const PODS: usize = 3;
const NAMESPACES: usize = 4;
const NETWORK_POLICIES: usize = 5;
const CLUSTER_NETWORK_POLICIES: usize = 6;
/// How often a watch whose resource the API server does not serve (a CRD
/// not installed) looks again.
const ABSENT_POLL: Duration = Duration::from_secs(10);

type Follow = (Settings, &'static str, Kind, Arc<Mutex<ApiState>>, signal::Sender<Changes>);

async fn follow_into<K>((settings, what, kind, state, notify): Follow, writer: Writer<K>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    follow(settings, what, kind, writer, state, notify).await
}

async fn follow<K>(
    settings: Settings,
    what: &'static str,
    kind: Kind,
    mut writer: Writer<K>,
    state: Arc<Mutex<ApiState>>,
    notify: signal::Sender<Changes>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let update = |change: &dyn Fn(&mut ApiState)| {
        let mut s = state.lock().expect("api state lock");
        let before = s.clone();
        change(&mut s);
        if *s != before {
            notify.send_modify(|c| c.bump(Kind::Nodes));
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
                // A resource the API server does not serve (a CRD not
                // installed) is looked for again on this connection, quietly:
                // a change is told once, when it goes, not at every look.
                let mut absent = false;
                loop {
                    // managedFields are most of an object's size and none of its meaning here.
                    let mut events = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
                        .modify(|object| object.managed_fields_mut().clear())
                        .boxed();
                    let failure = loop {
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
                                notify.send_modify(|c| c.bump(kind));
                            }
                            // A path the API server does not serve answers 404 with a plain-text body.
                            Some(Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))) if status.code == 404 => {
                                break None;
                            }
                            Some(Err(e)) => break Some(format!("watching {what} at {server}: {e}")),
                            None => break Some(format!("the watch on {server} ended")),
                        }
                    };
                    if let Some(failure) = failure {
                        break failure;
                    }
                    if !absent {
                        // None of these objects exist.
                        log::info!("Kubernetes API: {what} are not served (their CRD is not installed); none apply until it is");
                        absent = true;
                        last_reason.clear();
                        writer.apply_watcher_event(&watcher::Event::Init);
                        writer.apply_watcher_event(&watcher::Event::InitDone);
                        update(&|s| {
                            s.connected = true;
                            s.synced = true;
                            s.error = None;
                        });
                        notify.send_modify(|c| c.bump(kind));
                    }
                    tokio::time::sleep(ABSENT_POLL).await;
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
