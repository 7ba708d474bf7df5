// SPDX-License-Identifier: Apache-2.0
//! `run`: the long-lived agent. Applies the configuration, tells systemd it
//! is ready, then follows reloads (SIGHUP), device changes (netlink) and the
//! watchdog until SIGTERM. Stopping never detaches: the pins keep the
//! dataplane running until `detach`. v6node-cni's requests arrive through
//! the same loop (`endpoint_api`).

use std::{
    collections::BTreeMap,
    future::pending,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use rtnetlink::{constants::RTMGRP_LINK, sys::AsyncSocket, sys::SocketAddr, Handle};
use sd_notify::NotifyState;
use tokio::{
    signal::unix::{signal, SignalKind},
    task::JoinHandle,
    time::{interval, sleep_until, Instant as TokioInstant, MissedTickBehavior},
};
use v6node_config::{Config, LoadedConfig};

mod endpoint_api;

use crate::{
    attach::{AttachPoint, Attacher, Target, TcMode, Wanted},
    bigtcp,
    cluster::{self, bgp, Cluster},
    conntrack,
    endpoints::Endpoints,
    files, filter, logging, metrics,
    nat::{fragmenter, Nat},
    netdev,
    paths::Paths,
    selftest,
    services::{
        connections::{self, LeftBackend},
        health_checks, sockets, Outside, ServiceTables,
    },
    state::{self, Reload, State},
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

fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        log::debug!("sd_notify: {e}");
    }
}

fn config_error(e: v6node_config::ConfigError) -> anyhow::Error {
    anyhow!("invalid configuration: {e}")
}

struct Daemon {
    paths: Arc<Paths>,
    loaded: LoadedConfig,
    state: Arc<Mutex<State>>,
    netlink: Handle,
    attacher: Attacher,
    endpoints: Endpoints,
    metrics: Option<(String, JoinHandle<()>)>,
    /// Following the Kubernetes API, while kubernetes.kubeconfig is set.
    cluster: Option<Cluster>,
    services: ServiceTables,
    /// One request to end connections at a time, in order: a flapping
    /// EndpointSlice queues them here rather than at the helper's socket,
    /// which takes a few at once (MaxConnections=).
    ending: Arc<tokio::sync::Mutex<()>>,
    nat: Nat,
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
    connection.socket_mut().socket_mut().bind(&SocketAddr::new(0, RTMGRP_LINK)).context("subscribing to device events")?;
    tokio::spawn(connection);

    let mut attacher = Attacher::new(paths.clone());
    attacher.verify()?;
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
    let mut daemon = Daemon {
        paths: Arc::new(paths),
        loaded: loaded.clone(),
        state: Arc::new(Mutex::new(state)),
        netlink,
        attacher,
        endpoints,
        metrics: None,
        cluster: None,
        services: ServiceTables::default(),
        ending: Arc::default(),
        nat: Nat::default(),
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
    let mut nat64_sweep = interval(conntrack::SWEEP_EVERY);
    nat64_sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut watchdog_usec = 0;
    let mut watchdog =
        sd_notify::watchdog_enabled(false, &mut watchdog_usec).then(|| interval(Duration::from_micros(watchdog_usec / 2)));
    let mut settle_at: Option<TokioInstant> = None;
    let mut cluster_settle_at: Option<TokioInstant> = None;
    let mut cluster_cost = Duration::ZERO;
    let mut cluster_changes = daemon.cluster.as_ref().map(Cluster::subscribe);
    // What the watch had changed when last looked at, and whether Nodes (or a
    // connection) changed since the last reconcile: when they did not, the
    // change was Services or EndpointSlices, and the service tables alone are
    // applied again.
    let mut cluster_seen = cluster_changes.as_mut().map(|rx| *rx.borrow_and_update()).unwrap_or_default();
    let mut nodes_changed = false;

    loop {
        tokio::select! {
            _ = hangup.recv() => {
                daemon.reload().await;
                cluster_changes = daemon.cluster.as_ref().map(Cluster::subscribe);
                cluster_seen = cluster_changes.as_mut().map(|rx| *rx.borrow_and_update()).unwrap_or_default();
            }
            Some(changes) = async { match cluster_changes.as_mut() { Some(rx) => rx.changed().await.ok().map(|()| *rx.borrow_and_update()), None => pending().await } } => {
                nodes_changed |= changes.nodes != cluster_seen.nodes;
                cluster_seen = changes;
                cluster_settle_at.get_or_insert_with(|| TokioInstant::now() + CLUSTER_SETTLE.max(cluster_cost * 2));
            }
            _ = async { match cluster_settle_at { Some(at) => sleep_until(at).await, None => pending().await } } => {
                cluster_settle_at = None;
                let started = Instant::now();
                if std::mem::take(&mut nodes_changed) {
                    daemon.reconcile_cluster().await;
                } else {
                    daemon.apply_services();
                }
                cluster_cost = started.elapsed();
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            Some(_) = events.next() => {
                settle_at.get_or_insert_with(|| TokioInstant::now() + SETTLE);
            }
            _ = async { match settle_at { Some(at) => sleep_until(at).await, None => pending().await } } => {
                settle_at = None;
                daemon.reconcile_devices().await;
            }
            _ = resync.tick() => daemon.resync().await,
            _ = nat64_sweep.tick() => {
                daemon.sweep_nat();
            }
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
        let mut state = self.state.lock().expect("state lock");
        change(&mut state);
        if let Err(e) = state::write(&self.paths, &state) {
            log::warn!("{e:#}");
        }
    }

    fn summary(&self) -> String {
        let state = self.state.lock().expect("state lock");
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
    }

    async fn reload(&mut self) {
        // systemd 253+ wants the monotonic time with RELOADING=1.
        match NotifyState::monotonic_usec_now() {
            Ok(now) => notify(&[NotifyState::Reloading, now]),
            Err(_) => notify(&[NotifyState::Reloading]),
        }
        let started = Instant::now();
        let result = match v6node_config::load(&self.paths.config_root) {
            Ok(loaded) => self.apply(&loaded).await,
            Err(e) => Err(config_error(e)),
        };
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        let reload = match result {
            Ok(()) => Reload { at: state::now(), ok: true, error: None, duration_ms },
            Err(e) => {
                let generation = self.state.lock().expect("state lock").generation;
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

    /// The devices present now whose names match one of `patterns`; never
    /// the fragmentation link, which is the agent's own.
    fn wanted(patterns: &[v6node_config::DevicePattern]) -> Result<BTreeMap<String, u32>> {
        Ok(netdev::devices()?
            .into_iter()
            .filter(|(name, _)| name != fragmenter::LINK && name != fragmenter::PEER)
            .filter(|(name, _)| patterns.iter().any(|p| p.matches(name)))
            .collect())
    }

    /// Host programs on attach.devices, the translator on nat64.devices,
    /// pod programs on the host side of every pod's pair.
    fn wanted_attachments(&self, config: &Config) -> Result<Wanted> {
        let mut wanted = Wanted::new();
        for (device, ifindex) in Self::wanted(&config.attach.devices)? {
            for direction in AttachPoint::HOST {
                wanted.insert((device.clone(), direction), Target { ifindex, netkit: false });
            }
        }
        for (device, ifindex) in Self::wanted(&config.nat64.devices)? {
            wanted.insert((device, AttachPoint::Nat64), Target { ifindex, netkit: false });
        }
        // Where the fragments of DF-clear packets come back in, to be translated.
        if !config.nat64.devices.is_empty() {
            if let Some(ifindex) = netdev::devices()?.get(fragmenter::PEER) {
                wanted.insert((fragmenter::PEER.to_string(), AttachPoint::Nat64), Target { ifindex: *ifindex, netkit: false });
            }
        }
        self.endpoints.wanted(&mut wanted);
        Ok(wanted)
    }

    /// The NAT sweeps' timer; what they find shows in `status`.
    fn sweep_nat(&mut self) {
        let Some(mut stats) = self.state.lock().expect("state lock").nat64.clone() else {
            return;
        };
        if self.nat.sweep(&self.paths.pin_dir, &self.loaded.config, &mut stats) {
            self.update(|s| s.nat64 = Some(stats));
        }
    }

    /// The periodic repair: pods whose devices vanished lose their
    /// endpoints, then attachments are brought in line.
    async fn resync(&mut self) {
        match self.endpoints.prune(&self.paths) {
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
        self.reconcile_devices().await;
        self.services.forget();
        self.reconcile_cluster().await;
    }

    /// Routes to the other nodes' pods and this node's pod prefix, from the
    /// cluster view, then the service tables and what BGP announces. Called
    /// when Nodes or a watch's connection changed, at resync and after every
    /// applied configuration (a change of Services alone applies the service
    /// tables alone).
    async fn reconcile_cluster(&mut self) {
        if let Some(cluster) = &self.cluster {
            let previous = self.state.lock().expect("state lock").cluster.clone().unwrap_or_default();
            let next = cluster.reconcile(&self.netlink, &previous, self.loaded.config.routing.bgp.is_some()).await;
            let effective = effective(&self.loaded.config, next.pod_prefixes.first().copied());
            let cni_config = match files::write_cni_conflist(&self.paths, &effective) {
                Ok(written) => written,
                Err(e) => {
                    log::error!("{e:#}");
                    self.state.lock().expect("state lock").cni_config.clone()
                }
            };
            let same = {
                let state = self.state.lock().expect("state lock");
                state.cluster.as_ref() == Some(&next) && state.cni_config == cni_config
            };
            if !same {
                self.update(|s| {
                    s.cluster = Some(next);
                    s.cni_config = cni_config;
                });
            }
            self.apply_services();
        }
        // BGP announces the Node's prefixes, or pods.prefix without a cluster.
        let config = self.loaded.config.clone();
        self.apply_bgp(&config);
    }

    /// The service tables from the Services view, while socket hooks are
    /// configured. Until Services and EndpointSlices were listed once, the
    /// tables stay as they are (a previous agent's, across a restart).
    fn apply_services(&mut self) {
        let Some(cluster) = &self.cluster else { return };
        if self.loaded.config.services.cgroup.is_none() {
            return;
        }
        let Some(mut view) = cluster.services() else { return };
        cluster.report(&view);
        if let Err(e) = health_checks::write(&self.paths, &view.health_checks) {
            log::error!("{e:#}");
        }
        let node_address = self.state.lock().expect("state lock").cluster.as_ref().and_then(|c| c.address);
        view.add_host_ports(self.endpoints.host_ports(node_address.as_slice()));
        let previous = self.state.lock().expect("state lock").services.clone();
        let dsr = self.loaded.config.services.remote_backends == v6node_config::RemoteBackends::Dsr;
        let outside = self
            .node_pod_prefix()
            .and_then(|p| v6node_api::masquerade_address(p.network(), p.prefix_len()))
            .map(|masquerade| Outside { masquerade, dsr });
        let (next, left) = self.services.apply(&self.paths.pin_dir, &view, outside, previous.as_ref());
        if previous.as_ref() != Some(&next) {
            self.update(|s| s.services = Some(next));
        }
        if !left.is_empty() {
            self.end_connections(left);
        }
    }

    /// Has `end-connections` end what the service tables gave backends that
    /// have now left them, off the agent's loop: the tables are already
    /// written, so no new connection reaches those backends meanwhile.
    fn end_connections(&self, left: Vec<LeftBackend>) {
        let request = connections::Request { left, namespaces: self.endpoints.namespaces() };
        let (paths, state, ending) = (self.paths.clone(), self.state.clone(), self.ending.clone());
        tokio::spawn(async move {
            let _turn = ending.lock().await;
            let outcome = connections::request(&paths.end_connections_socket(), &request).await;
            match &outcome {
                Ok(reply) if reply.errors.is_empty() => log::info!(
                    "{} backend(s) left their Service: {} connection(s) to them ended",
                    request.left.len(),
                    reply.ended
                ),
                Ok(reply) => log::warn!("ending connections to backends that left: {}", reply.errors.join("; ")),
                Err(e) => log::warn!("ending connections to {} backend(s) that left: {e:#}", request.left.len()),
            }
            let mut state = state.lock().expect("state lock");
            state.ended_connections.get_or_insert_default().record(&outcome);
            if let Err(e) = state::write(&paths, &state) {
                log::warn!("{e:#}");
            }
        });
    }

    /// bird's configuration from routing.* and the node's prefixes: its
    /// Node's pod CIDRs and address once known, else pods.prefix.
    fn apply_bgp(&mut self, config: &Config) {
        let file = self.paths.bird_config();
        let (address, mut prefixes) = {
            let state = self.state.lock().expect("state lock");
            state.cluster.as_ref().map(|c| (c.address, c.pod_prefixes.clone())).unwrap_or_default()
        };
        if prefixes.is_empty() {
            prefixes.extend(config.pods.prefix);
        }
        let (text, mut next) = match &config.routing.bgp {
            // Nothing was ever configured: bird never started.
            None if !file.exists() => (None, None),
            None => (Some(bgp::render_off()), None),
            Some(wanted) => {
                let next = bgp::desired(wanted, address, &prefixes);
                (next.router_id.map(|id| bgp::render(&next, id)), Some(next))
            }
        };
        if let Some(text) = text {
            match bgp::write(&file, &text) {
                Ok(true) => match &next {
                    Some(n) => log::info!(
                        "BGP: AS {} announces {} to {} peer(s); {} written",
                        n.asn,
                        if n.announced.is_empty() {
                            "nothing yet".into()
                        } else {
                            n.announced.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                        },
                        n.peers.len(),
                        file.display()
                    ),
                    None => log::info!("BGP off: {} written without sessions", file.display()),
                },
                Ok(false) => {}
                Err(e) => {
                    if let Some(n) = next.as_mut() {
                        n.error = Some(format!("{e:#}"));
                    }
                }
            }
        }
        let previous = self.state.lock().expect("state lock").bgp.clone();
        if previous != next {
            if let Some(error) = next.as_ref().and_then(|n| n.error.as_ref()) {
                log::warn!("BGP: {error}");
            }
            self.update(|s| s.bgp = next);
        }
    }

    /// This node's pod prefix from its Node, as the last reconcile recorded it.
    fn node_pod_prefix(&self) -> Option<ipnet::Ipv6Net> {
        self.state.lock().expect("state lock").cluster.as_ref().and_then(|c| c.pod_prefixes.first().copied())
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
        let deny = filter::sync_deny(&self.paths.pin_dir, &config.filter.deny_sources)?;
        log::info!(
            "deny table: {} entries ({} added, {} changed, {} removed in {} µs)",
            deny.entries,
            deny.inserted,
            deny.updated,
            deny.removed,
            deny.write_micros
        );
        if !config.nat64.devices.is_empty() {
            self.attacher.prepare_nat64()?;
        }
        let nat64 = self.nat.sync(&self.paths.pin_dir, &self.netlink, config).await?;
        // Every node resolves with DNS64 under the cluster's prefix, whether
        // or not it translates itself.
        if files::write_dns64(&self.paths.dns64_file(), &config.nat64.prefix)? {
            log::info!("DNS64 prefix {} written to {}", config.nat64.prefix, self.paths.dns64_file().display());
        }
        self.apply_kubernetes(config);
        let hooks = sockets::reconcile(&self.paths, config.services.cgroup.as_deref());
        if config.services.cgroup.is_none() {
            self.update(|s| s.services = None);
        }
        let cni_config = files::write_cni_conflist(&self.paths, &effective(config, self.node_pod_prefix()))?;
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
        if !self.reconcile_devices().await {
            self.selftest();
        }
        self.apply_metrics(config).await;
        // routing.* decides how an unreachable peer is reported, and what bird announces.
        self.reconcile_cluster().await;
        Ok(())
    }

    async fn apply_metrics(&mut self, config: &Config) {
        let listen = config.metrics.listen.as_ref().map(|l| l.to_string()).unwrap_or_default();
        if self.metrics.as_ref().map(|(l, _)| l.as_str()).unwrap_or("") == listen {
            return;
        }
        if let Some((_, task)) = self.metrics.take() {
            task.abort();
        }
        let mut error = None;
        if let Some(target) = &config.metrics.listen {
            match metrics::start(target, self.paths.clone(), self.state.clone()).await {
                Ok(task) => {
                    log::info!("metrics on {listen}");
                    self.metrics = Some((listen.clone(), task));
                }
                Err(e) => {
                    log::error!("{e:#}");
                    error = Some(format!("{e:#}"));
                }
            }
        }
        self.update(|s| s.metrics = state::Metrics { listen, error });
    }

    /// Brings attachments and BIG TCP in line with the devices present now.
    /// Returns whether the attachments (or BIG TCP) changed; then the
    /// self-test ran.
    async fn reconcile_devices(&mut self) -> bool {
        let config = self.loaded.config.clone();
        let mode = TcMode::resolve(config.attach.mode);
        let previous = self.state.lock().expect("state lock").attachments.clone();
        let attachments = match self.wanted_attachments(&config) {
            Ok(wanted) => self.attacher.reconcile(mode, &wanted, &previous),
            Err(e) => {
                log::error!("{e:#}");
                previous
            }
        };
        let mut reports = Vec::new();
        if let Ok(mut wanted) = Self::wanted(&config.bigtcp.devices) {
            wanted.extend(self.endpoints.host_devices());
            for (device, ifindex) in wanted {
                let report = bigtcp::apply(&self.netlink, &device, ifindex, config.bigtcp.size).await;
                match &report.error {
                    Some(e) => log::error!("{device}: BIG TCP: {e}"),
                    None if report.changed => log::info!(
                        "{device}: BIG TCP gso/gro max size {} (asked {}, tso_max_size {})",
                        report.target,
                        report.requested,
                        report.tso_max_size.map_or("unknown".into(), |v| v.to_string())
                    ),
                    None => {}
                }
                reports.push(report);
            }
        }
        // Link events and the periodic resync mostly find nothing new; the
        // state file is rewritten only when something did change.
        let same = {
            let state = self.state.lock().expect("state lock");
            state.mode == Some(mode) && state.attachments == attachments && state.bigtcp == reports
        };
        if !same {
            self.update(|s| {
                s.mode = Some(mode);
                s.attachments = attachments;
                s.bigtcp = reports;
            });
            // What the devices run changed: test it before anyone relies on it.
            self.selftest();
        }
        !same
    }

    /// Runs the self-test on what is attached now and records it.
    fn selftest(&mut self) {
        let attachments = self.state.lock().expect("state lock").attachments.clone();
        let results = selftest::run(&self.paths, &attachments);
        for failed in results.iter().filter(|t| t.error.is_some()) {
            log::error!("self-test of {} {}: {}", failed.device, failed.direction, failed.error.as_deref().unwrap_or(""));
        }
        let same = self.state.lock().expect("state lock").selftest == results;
        if !same {
            self.update(|s| s.selftest = results);
        }
    }
}

/// The configuration with the cluster's word in place: once the API has told
/// this node's pod prefix, it is the one pods get, whatever pods.prefix says.
fn effective(config: &Config, node_pod_prefix: Option<ipnet::Ipv6Net>) -> Config {
    let mut config = config.clone();
    if let Some(prefix) = node_pod_prefix {
        config.pods.prefix = Some(prefix);
    }
    config
}
