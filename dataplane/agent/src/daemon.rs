// SPDX-License-Identifier: Apache-2.0
//! `run`: the long-lived agent. Applies the configuration, tells systemd it
//! is ready, then follows reloads (SIGHUP), device changes (netlink) and the
//! watchdog until SIGTERM. Stopping never detaches: the pins keep the
//! dataplane running until `detach`. v6node-cni's requests arrive through
//! the same loop (`endpoint_api`).

use std::{
    future::pending,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use rtnetlink::{
    constants::{RTMGRP_IPV6_ROUTE, RTMGRP_LINK},
    packet_core::NetlinkPayload,
    packet_route::RouteNetlinkMessage,
    sys::AsyncSocket,
    sys::SocketAddr,
    Handle,
};
use sd_notify::NotifyState;
use tokio::{
    signal::unix::{signal, SignalKind},
    time::{interval, sleep_until, Instant as TokioInstant, MissedTickBehavior},
};
use v6node_config::{Config, LoadedConfig};
use v6node_k8s::Changes;

mod endpoint_api;

use crate::{
    attach::AttachPoint,
    cluster::{self, bgp, Cluster},
    conntrack,
    devices::{self, Devices},
    endpoints::Endpoints,
    files, filter,
    flows::{self, FlowService},
    logging, metrics,
    nat::Nat,
    paths::Paths,
    policy::PolicyTables,
    services::{proxy, sockets, ServiceProxy},
    state::{self, Reload, Shared, State},
};

/// Device events arrive in bursts (a veth pair is two links, then flags
/// change); one reconcile after the burst settles does it all.
const SETTLE: Duration = Duration::from_millis(200);
/// A full reconcile now and then repairs what someone else removed.
const RESYNC: Duration = Duration::from_secs(60);
/// API changes arrive in bursts too (a rollout changes an EndpointSlice many
/// times a second): the tables follow the last state of a burst. A
/// reconcile that took long (tens of thousands of endpoints) waits twice its
/// own time before the next, so a long burst costs the agent at most a third
/// of a CPU.
const CLUSTER_SETTLE: Duration = Duration::from_millis(50);
/// A burst of policy changes alone settles sooner: a NetworkPolicy is in
/// force within tens of milliseconds of its write (the view's rebuild, a
/// few milliseconds at a thousand policies, plus the tables' writes).
const POLICY_SETTLE: Duration = Duration::from_millis(5);

fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        log::debug!("sd_notify: {e}");
    }
}

fn config_error(e: v6node_config::ConfigError) -> anyhow::Error {
    anyhow!("invalid configuration: {e}")
}

/// The features, each with the same small surface (sync from the
/// configuration or the cluster view, and for some a sweep), and what
/// they share. The daemon decides when each runs, nothing else.
struct Daemon {
    shared: Shared,
    loaded: LoadedConfig,
    netlink: Handle,
    devices: Devices,
    endpoints: Endpoints,
    metrics: metrics::Server,
    /// Following the Kubernetes API, while kubernetes.kubeconfig is set.
    cluster: Option<Cluster>,
    services: ServiceProxy,
    policies: PolicyTables,
    nat: Nat,
    flows: FlowService,
    bandwidth: crate::bandwidth::BandwidthManager,
}

/// What a burst of API changes asks to run again: the whole cluster side
/// (service proxy and policies included) when Nodes (or a watch's
/// connection) changed, else the service proxy, the policies, or both.
#[derive(Debug, Default, PartialEq)]
struct Rerun {
    cluster: bool,
    services: bool,
    policies: bool,
}

/// The watch's counts as last seen, and what changed since the last rerun.
#[derive(Default)]
struct PendingChanges {
    seen: Changes,
    pending: Rerun,
}

impl PendingChanges {
    fn new(seen: Changes) -> Self {
        PendingChanges { seen, pending: Rerun::default() }
    }

    fn observe(&mut self, now: Changes) {
        self.pending.cluster |= now.nodes != self.seen.nodes;
        self.pending.services |= now.services != self.seen.services;
        self.pending.policies |= now.policies != self.seen.policies;
        self.seen = now;
    }

    /// Whether only policies changed since the last rerun.
    fn policies_only(&self) -> bool {
        self.pending.policies && !self.pending.cluster && !self.pending.services
    }

    fn take(&mut self) -> Rerun {
        std::mem::take(&mut self.pending)
    }
}

pub fn run(paths: &Paths) -> Result<()> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(run_async(paths.clone(), started))
}

async fn run_async(paths: Paths, started: Instant) -> Result<()> {
    let loaded = v6node_config::load(&paths.config_root).map_err(config_error)?;
    logging::set_level(loaded.config.log.level.as_str());
    check_bpffs(&paths)?;

    let (mut connection, netlink, mut events) = rtnetlink::new_connection().context("opening rtnetlink")?;
    // Devices to attach to; IPv6 routes, which say which EAMs the network
    // routes natively.
    connection
        .socket_mut()
        .socket_mut()
        .bind(&SocketAddr::new(0, RTMGRP_LINK | RTMGRP_IPV6_ROUTE))
        .context("subscribing to device and route events")?;
    tokio::spawn(connection);

    let devices = Devices::new(paths.clone())?;
    let mut endpoints = Endpoints::load(&paths)?;
    for gone in endpoints.prune(&paths)? {
        log::info!("pod {} ({}) is gone: endpoint removed", gone.endpoint.address, gone.endpoint.host_device);
    }
    let listener = endpoint_api::listen(&paths)?;
    // What the previous agent learnt from the API server: until this one has
    // a complete list of Nodes, its pod prefix keeps the CNI configuration
    // (and so the runtime's network readiness) as it was.
    let learnt = state::read(&paths).ok().flatten().and_then(|s| s.cluster);
    let state = State {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        started_at: state::now(),
        cluster: learnt,
        ..State::default()
    };
    let shared = Shared::new(paths, state);
    let mut daemon = Daemon {
        shared: shared.clone(),
        loaded: loaded.clone(),
        netlink,
        devices,
        endpoints,
        metrics: metrics::Server::default(),
        cluster: None,
        services: ServiceProxy::new(&shared.paths, {
            let shared = shared.clone();
            Arc::new(move |outcome| shared.update(|s| s.ended_connections.get_or_insert_default().record(outcome)))
        }),
        policies: PolicyTables::default(),
        nat: Nat::default(),
        flows: FlowService::default(),
        bandwidth: crate::bandwidth::BandwidthManager::default(),
    };
    daemon.apply(&loaded).await?;
    daemon.update(|s| s.ready_after_ms = Some(started.elapsed().as_secs_f64() * 1000.0));
    let summary = daemon.summary();
    log::info!("ready: {summary}");
    notify(&[NotifyState::Ready, NotifyState::Status(&summary)]);

    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut resync = interval(RESYNC);
    resync.set_missed_tick_behavior(MissedTickBehavior::Delay);
    resync.tick().await;
    let mut nat_sweep = interval(conntrack::SWEEP_EVERY);
    nat_sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut watchdog_usec = 0;
    let mut watchdog =
        sd_notify::watchdog_enabled(false, &mut watchdog_usec).then(|| interval(Duration::from_micros(watchdog_usec / 2)));
    let mut settle_at: Option<TokioInstant> = None;
    let mut routes_settle_at: Option<TokioInstant> = None;
    let mut cluster_settle_at: Option<TokioInstant> = None;
    let mut cluster_cost = Duration::ZERO;
    let mut burst_started: Option<TokioInstant> = None;
    let mut cluster_changes = daemon.cluster.as_ref().map(Cluster::subscribe);
    let mut pending_changes = PendingChanges::new(cluster_changes.as_mut().map(|rx| *rx.borrow_and_update()).unwrap_or_default());

    loop {
        tokio::select! {
            _ = hangup.recv() => {
                daemon.reload().await;
                cluster_changes = daemon.cluster.as_ref().map(Cluster::subscribe);
                pending_changes = PendingChanges::new(cluster_changes.as_mut().map(|rx| *rx.borrow_and_update()).unwrap_or_default());
            }
            Some(changes) = async { match cluster_changes.as_mut() { Some(rx) => rx.changed().await.ok().map(|()| *rx.borrow_and_update()), None => pending().await } } => {
                pending_changes.observe(changes);
                // From the burst's first change; a change of another kind
                // in a burst of policy changes makes it wait as its kind does.
                let started = *burst_started.get_or_insert_with(TokioInstant::now);
                let settle = if pending_changes.policies_only() { POLICY_SETTLE } else { CLUSTER_SETTLE };
                cluster_settle_at = Some(started + settle.max(cluster_cost * 2));
            }
            _ = async { match cluster_settle_at { Some(at) => sleep_until(at).await, None => pending().await } } => {
                cluster_settle_at = None;
                burst_started = None;
                let started = Instant::now();
                let rerun = pending_changes.take();
                if rerun.cluster {
                    daemon.reconcile_cluster().await;
                } else {
                    if rerun.services {
                        daemon.sync_services();
                    }
                    if rerun.policies {
                        daemon.sync_policies();
                        daemon.sync_bandwidth().await;
                    }
                }
                cluster_cost = started.elapsed();
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            Some((message, _)) = events.next() => {
                let settle = match message.payload {
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(_) | RouteNetlinkMessage::DelRoute(_)) => &mut routes_settle_at,
                    _ => &mut settle_at,
                };
                settle.get_or_insert_with(|| TokioInstant::now() + SETTLE);
            }
            _ = async { match settle_at { Some(at) => sleep_until(at).await, None => pending().await } } => {
                settle_at = None;
                daemon.sync_devices().await;
            }
            _ = async { match routes_settle_at { Some(at) => sleep_until(at).await, None => pending().await } } => {
                routes_settle_at = None;
                daemon.sync_nat_routes().await;
            }
            _ = resync.tick() => daemon.resync().await,
            _ = nat_sweep.tick() => daemon.sweep_nat(),
            Ok((stream, _)) = listener.accept() => daemon.serve(stream).await,
            _ = async { match watchdog.as_mut() { Some(w) => { w.tick().await; } None => pending().await } } => {
                notify(&[NotifyState::Watchdog]);
            }
        }
    }
    notify(&[NotifyState::Stopping, NotifyState::Status("stopped; the dataplane stays attached")]);
    log::info!("stopping; programs stay attached through their pins");
    Ok(())
}

/// Pins must live on a bpffs; anywhere else BPF_OBJ_PIN fails with a
/// confusing EPERM.
fn check_bpffs(paths: &Paths) -> Result<()> {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let mut dir = paths.pin_dir.as_path();
    while !dir.exists() {
        dir = dir.parent().unwrap_or(std::path::Path::new("/"));
    }
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid NUL-terminated path and out pointer.
    if unsafe { libc::statfs(c_dir.as_ptr(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("statfs {}", dir.display()));
    }
    if fs.f_type as i64 != BPF_FS_MAGIC {
        bail!("{} is not on a bpffs (mount one: mount -t bpf bpf /sys/fs/bpf)", paths.pin_dir.display());
    }
    Ok(())
}

impl Daemon {
    fn update(&self, change: impl FnOnce(&mut State)) {
        self.shared.update(change);
    }

    fn summary(&self) -> String {
        self.shared.read(|state| {
            let attached = state.attachments.iter().filter(|a| a.error.is_none()).count();
            let failed = state.attachments.len() - attached;
            let mut summary = format!(
                "generation {}: {attached} attachment(s){}, {} deny prefix(es), BIG TCP on {} device(s)",
                state.generation,
                state.mode.map(|m| format!(" ({m:?})").to_lowercase()).unwrap_or_default(),
                state.deny_sources.as_ref().map_or(0, |d| d.entries),
                state.bigtcp.iter().filter(|r| r.error.is_none()).count(),
            );
            if !state.endpoints.is_empty() {
                summary.push_str(&format!(", {} pod(s)", state.endpoints.len()));
            }
            if let Some(nat64) = &state.nat64 {
                let devices = state.attachments.iter().filter(|a| a.direction == AttachPoint::Nat64 && a.error.is_none()).count();
                summary.push_str(&format!(", NAT64 {} with {} EAM(s) on {devices} device(s)", nat64.prefix, nat64.eam.entries));
            }
            if failed > 0 {
                summary.push_str(&format!(", {failed} failed"));
            }
            summary
        })
    }

    async fn reload(&mut self) {
        // systemd 253+ wants the monotonic time with RELOADING=1.
        match NotifyState::monotonic_usec_now() {
            Ok(now) => notify(&[NotifyState::Reloading, now]),
            Err(_) => notify(&[NotifyState::Reloading]),
        }
        let started = Instant::now();
        let result = match v6node_config::load(&self.shared.paths.config_root) {
            Ok(loaded) => self.apply(&loaded).await,
            Err(e) => Err(config_error(e)),
        };
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        let reload = match result {
            Ok(()) => Reload { at: state::now(), ok: true, error: None, duration_ms },
            Err(e) => {
                let generation = self.shared.read(|s| s.generation);
                log::error!("reload refused, generation {generation} stays in force: {e:#}");
                Reload { at: state::now(), ok: false, error: Some(format!("{e:#}")), duration_ms }
            }
        };
        let status = match &reload.error {
            None => self.summary(),
            Some(error) => format!("reload refused: {error}"),
        };
        if reload.ok {
            log::info!("reloaded in {duration_ms:.1} ms: {status}");
        }
        self.update(|s| {
            s.reloads += 1;
            s.last_reload = Some(reload);
        });
        notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    }

    /// The NAT sweeps' timer; what they find shows in `status`.
    async fn sync_nat_routes(&mut self) {
        let Some(stats) = self.shared.read(|s| s.nat64.clone()) else {
            return;
        };
        match self.nat.sync_routes(&self.shared.paths.pin_dir, &self.netlink, &self.loaded.config, &stats).await {
            Ok(Some(routed_natively)) => self.update(|s| {
                if let Some(nat64) = s.nat64.as_mut() {
                    nat64.eam_routed_natively = routed_natively;
                }
            }),
            Ok(None) => {}
            Err(e) => log::error!("EAMs after a route change: {e:#}"),
        }
    }

    fn sweep_nat(&mut self) {
        let Some(mut stats) = self.shared.read(|s| s.nat64.clone()) else {
            return;
        };
        if self.nat.sweep(&self.shared.paths.pin_dir, &self.loaded.config, &mut stats) {
            self.update(|s| s.nat64 = Some(stats));
        }
    }

    /// The periodic repair: pods whose devices vanished lose their
    /// endpoints, then attachments, the cluster side and the service
    /// tables (read afresh) are brought in line.
    async fn resync(&mut self) {
        match self.endpoints.prune(&self.shared.paths) {
            Ok(gone) => {
                for gone in &gone {
                    log::info!("pod {} ({}) is gone: endpoint removed", gone.endpoint.address, gone.endpoint.host_device);
                }
                if !gone.is_empty() {
                    let list = self.endpoints.list();
                    self.update(|s| s.endpoints = list);
                }
            }
            Err(e) => log::error!("checking endpoints: {e:#}"),
        }
        self.sync_devices().await;
        self.services.forget();
        self.reconcile_cluster().await;
        self.sync_flows().await;
        self.update(|s| s.resyncs += 1);
    }

    /// Routes and the CNI configuration from the cluster view, then the
    /// service tables and what BGP announces. Called when Nodes or a watch's
    /// connection changed, at resync and after every applied configuration
    /// (a change of Services alone syncs the service proxy alone).
    async fn reconcile_cluster(&mut self) {
        if let Some(cluster) = &self.cluster {
            let previous = self.shared.read(|s| s.cluster.clone()).unwrap_or_default();
            let (next, cni_config) = cluster.sync(&self.shared.paths, &previous, &self.netlink, &self.loaded.config).await;
            // Relay is told of every node with a pod prefix, this one included.
            let local = next.address.map(|a| (next.node.clone(), a));
            self.flows.set_nodes(local.into_iter().chain(next.peers.iter().map(|p| (p.name.clone(), p.address))).collect());
            self.shared.update_if_changed(|s| &mut s.cluster, Some(next));
            if let Some(cni_config) = cni_config {
                self.shared.update_if_changed(|s| &mut s.cni_config, cni_config);
            }
            self.sync_services();
            self.sync_policies();
            self.sync_bandwidth().await;
        }
        // BGP announces the Node's prefixes, or pods.prefix without a cluster.
        let (cluster, previous) = self.shared.read(|s| (s.cluster.clone(), s.bgp.clone()));
        let next = bgp::sync(&self.shared.paths, cluster.as_ref(), previous.as_ref(), &self.loaded.config);
        self.shared.update_if_changed(|s| &mut s.bgp, next);
    }

    fn sync_services(&mut self) {
        let Some(cluster) = &self.cluster else { return };
        let (address, previous) = self.shared.read(|s| (s.cluster.as_ref().and_then(|c| c.address), s.services.clone()));
        let node = proxy::Node { address, pod_prefix: self.shared.node_pod_prefix() };
        let next = self.services.sync(&self.shared.paths, &self.loaded.config, cluster, &self.endpoints, node, previous.as_ref());
        if next.is_some() {
            self.shared.update_if_changed(|s| &mut s.services, next);
        }
        self.name_flows();
    }

    /// The policy tables from the policies view. Until Pods, Namespaces
    /// and NetworkPolicies were listed once, and while no pod device has
    /// pinned the tables, they stay as they are.
    fn sync_policies(&mut self) {
        let Some(cluster) = &self.cluster else { return };
        let config = &self.loaded.config;
        // IPv4 ipBlocks mean the pods' traffic through the NAT64 prefix
        // (the view names a prefix that cannot embed a whole block).
        let nat64_prefix = Some(config.nat64.prefix);
        let masquerade = self.shared.node_pod_prefix().and_then(|p| v6node_api::masquerade_address(p.network(), p.prefix_len()));
        let Some(view) = cluster.policies(nat64_prefix, masquerade, &self.endpoints.pod_addresses()) else { return };
        match self.policies.sync(&self.shared.paths.pin_dir, &view, config.policy.mode) {
            Ok(next) => {
                let mut problems = view.problems.clone();
                problems.extend(next.table_problems());
                cluster.report_policies(&problems);
                if next.rewritten > 0 {
                    log::info!("policy: {} pod(s) given new rules in {:.1} ms", next.rewritten, next.sync_ms);
                }
                self.shared.update_if_changed(|s| &mut s.policy, Some(next));
            }
            Err(e) => {
                cluster.report_policies(&view.problems);
                log::debug!("policy tables not written: {e:#}");
            }
        }
        self.name_flows();
    }

    /// Pacers and queues from this node's pods' bandwidth annotations; the
    /// refused ones become Events on their pods.
    async fn sync_bandwidth(&mut self) {
        let endpoints = self.endpoints.list();
        let limits = match &self.cluster {
            Some(cluster) => cluster.pod_bandwidth(endpoints.iter().filter_map(|e| e.endpoint.pod.as_ref())),
            None => Default::default(),
        };
        let uplinks = devices::uplinks(&self.loaded.config);
        let next = self
            .bandwidth
            .sync(&self.shared.paths.pin_dir, &self.netlink, &self.loaded.config.bandwidth, &uplinks, &endpoints, &limits)
            .await;
        if let Some(cluster) = &self.cluster {
            // One Event per pod, naming each refused annotation: Events of
            // one object and reason are one series, which would need patch.
            let problems: Vec<v6node_k8s::events::Problem> = limits
                .iter()
                .filter(|(_, (_, problems))| !problems.is_empty())
                .map(|(pod, (_, problems))| v6node_k8s::events::Problem { object: pod.clone(), message: problems.join("; ") })
                .collect();
            cluster.report_bandwidth(&problems);
        }
        self.shared.update_if_changed(|s| &mut s.bandwidth, Some(next));
    }

    /// What flows name from now on: pods, the policies behind each rules
    /// id, the Services behind each frontend id.
    fn name_flows(&self) {
        let Some(cluster) = &self.cluster else { return };
        let mut names = flows::Names::default();
        for pod in cluster.pod_addresses(&self.endpoints.pod_addresses()).unwrap_or_default() {
            let name = flows::PodName {
                namespace: pod.namespace,
                name: pod.name,
                labels: pod.labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                node: pod.node,
            };
            for address in pod.addresses {
                names.pods.insert(address, name.clone());
            }
        }
        self.shared.read(|s| {
            for pod in s.policy.iter().flat_map(|p| &p.pods) {
                for direction in [&pod.ingress, &pod.egress].into_iter().flatten() {
                    names.policies.insert(direction.id, direction.policies.clone());
                }
            }
            for frontend in s.services.iter().flat_map(|s| &s.frontends) {
                names.services.insert(frontend.id, frontend.frontend.service.clone());
            }
        });
        self.flows.set_names(names);
    }

    /// Flow visibility as `[flows]` says; the event ring is read once a
    /// device's programs have pinned it.
    async fn sync_flows(&mut self) {
        let node = self.cluster.as_ref().map(|c| c.settings().node_name.clone()).unwrap_or_else(cluster::host_name);
        let state = self.flows.sync(&self.shared.paths.pin_dir, &node, &self.loaded.config.flows).await;
        self.shared.update_if_changed(|s| &mut s.flows, Some(state));
    }

    async fn sync_devices(&mut self) -> bool {
        self.devices.sync(&self.shared, &self.netlink, &self.loaded.config, &self.endpoints).await
    }

    /// Starts, restarts or stops following the API as kubernetes.* says.
    fn apply_kubernetes(&mut self, config: &Config) {
        let settings = cluster::settings(&config.kubernetes);
        if self.cluster.as_ref().map(Cluster::settings) == settings.as_ref() {
            return;
        }
        if settings.is_none() && self.cluster.is_some() {
            log::info!("kubernetes.kubeconfig unset: no longer following the API; routes to peers stay as they are");
        }
        // Kept for the same node until the new watch has its view.
        let node = settings.as_ref().map(|s| s.node_name.clone());
        self.cluster = settings.map(Cluster::start);
        self.update(|s| {
            s.cluster = s
                .cluster
                .take()
                .filter(|c| Some(&c.node) == node.as_ref())
                .map(|c| cluster::ClusterState { api: Default::default(), ..c })
        });
    }

    /// Applies a validated configuration. Tables first, then attachments,
    /// then device tuning, so a newly attached device filters from its first
    /// packet.
    async fn apply(&mut self, loaded: &LoadedConfig) -> Result<()> {
        let config = &loaded.config;
        let paths = self.shared.paths.clone();
        let deny = filter::sync_deny(&paths.pin_dir, &config.filter.deny_sources)?;
        log::info!(
            "deny table: {} entries ({} added, {} changed, {} removed in {} µs)",
            deny.entries,
            deny.inserted,
            deny.updated,
            deny.removed,
            deny.write_micros
        );
        if !config.nat64.devices.is_empty() {
            self.devices.prepare_nat64()?;
        }
        let nat64 = self.nat.sync(&paths.pin_dir, &self.netlink, config).await?;
        // Every node resolves with DNS64 under the cluster's prefix, whether
        // or not it translates itself.
        if files::write_dns64(&paths.dns64_file(), &config.nat64.prefix)? {
            log::info!("DNS64 prefix {} written to {}", config.nat64.prefix, paths.dns64_file().display());
        }
        self.apply_kubernetes(config);
        let hooks = sockets::reconcile(&paths, config.services.cgroup.as_deref());
        if config.services.cgroup.is_none() {
            self.update(|s| s.services = None);
        }
        let cni_config = files::write_cni_conflist(&paths, &cluster::effective(config, self.shared.node_pod_prefix()))?;
        let endpoints = self.endpoints.list();
        self.update(|s| {
            s.cni_config = cni_config;
            s.endpoints = endpoints;
            s.generation += 1;
            s.config_files = loaded.files.clone();
            s.deny_sources = Some(deny);
            s.nat64 = nat64;
            s.socket_hooks = hooks;
        });
        logging::set_level(config.log.level.as_str());
        self.loaded = loaded.clone();
        // When nothing attached changed, the tables still may have changed
        // what the programs do with the self-test's packet (a deny prefix
        // covering link-local sources).
        if !self.sync_devices().await {
            devices::selftest(&self.shared);
        }
        self.metrics.sync(&self.shared, config).await;
        self.sync_flows().await;
        // routing.* decides how an unreachable peer is reported, and what bird announces.
        self.reconcile_cluster().await;
        if self.cluster.is_none() {
            self.sync_bandwidth().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Changes, PendingChanges, Rerun};

    #[test]
    fn a_change_of_services_alone_reruns_the_service_proxy_alone() {
        let mut pending = PendingChanges::new(Changes { nodes: 3, services: 7, policies: 1 });
        pending.observe(Changes { nodes: 3, services: 8, policies: 1 });
        pending.observe(Changes { nodes: 3, services: 12, policies: 1 });
        assert_eq!(pending.take(), Rerun { services: true, ..Rerun::default() });
    }

    #[test]
    fn a_change_of_policies_alone_reruns_the_policies_alone() {
        let mut pending = PendingChanges::new(Changes { nodes: 3, services: 7, policies: 1 });
        pending.observe(Changes { nodes: 3, services: 7, policies: 5 });
        assert_eq!(pending.take(), Rerun { policies: true, ..Rerun::default() });
        assert_eq!(pending.take(), Rerun::default(), "nothing twice");
    }

    #[test]
    fn a_change_of_nodes_anywhere_in_a_burst_reruns_the_cluster_side_once() {
        let mut pending = PendingChanges::new(Changes { nodes: 3, services: 7, policies: 1 });
        pending.observe(Changes { nodes: 4, services: 7, policies: 1 });
        pending.observe(Changes { nodes: 4, services: 9, policies: 1 });
        assert!(pending.take().cluster);
        pending.observe(Changes { nodes: 4, services: 10, policies: 1 });
        assert_eq!(pending.take(), Rerun { services: true, ..Rerun::default() });
    }
}
