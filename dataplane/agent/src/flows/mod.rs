// SPDX-License-Identifier: Apache-2.0
//! Flow visibility: the datapath's flow events (bpf/lib/events.h) read from
//! their ring, made flows with the names of pods, policies and Services,
//! kept in a bounded ring and served through Hubble's Observer API, so the
//! stock `hubble` CLI works against a v6node node, and Hubble Relay
//! (through the Peer service, on `relay_listen`) against every node of a
//! cluster. `[flows]` in the configuration turns it off, sets the
//! datapath's rates and the flows kept, and where the API is served.

mod convert;
pub mod counts;
mod filter;
mod flow_log;
mod hub;
mod kernel_drops;
pub mod names;
mod observer;
mod peer;
mod server;

use std::{
    collections::HashMap,
    net::{Ipv6Addr, SocketAddr},
    path::Path,
    sync::{atomic::Ordering, Arc},
};

use anyhow::{Context, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use serde::Serialize;
use tokio::{
    io::{unix::AsyncFd, Interest},
    net::UnixListener,
    sync::watch,
    task::JoinHandle,
};
use tonic::service::Routes;
use v6node_abi::{maps, EventConfig, EventStats, FlowEvent, Reason, EVENTS_READ_MS};
use v6node_config::{Flows, MetricsListen};
use v6node_hubble::{observer::observer_server::ObserverServer, peer::peer_server::PeerServer};

pub use hub::Hub;
pub use names::{Names, PodName};

use crate::bpf::open_pinned_map;

/// What `status` and the metrics show of flow visibility.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct FlowsState {
    pub enabled: bool,
    /// Where Hubble's API is served ("" nowhere), and why not if it should be.
    pub hubble: String,
    pub error: Option<String>,
    /// Where Hubble Relay reaches this node ("" nowhere) and how, and why
    /// not if it should.
    #[serde(default)]
    pub relay: String,
    #[serde(default)]
    pub relay_error: Option<String>,
    /// The flow log's file ("" none), and why it is not written if not.
    #[serde(default)]
    pub log: String,
    #[serde(default)]
    pub log_error: Option<String>,
    /// Whether the kernel's drops of pods' packets are flows, or why not.
    #[serde(default)]
    pub kernel_drops: String,
}

/// The datapath's event counters, summed over CPUs, by reason.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct EventCounts {
    pub reason: String,
    pub sent: u64,
    pub rate_limited: u64,
    pub ring_full: u64,
}

pub fn event_counts(pin_dir: &Path) -> Result<Vec<EventCounts>> {
    let stats: PerCpuArray<MapData, EventStats> = open_pinned_map(pin_dir, maps::EVENT_STATS)?;
    let mut rows = Vec::new();
    for reason in Reason::ALL {
        let per_cpu = stats.get(&(reason as u32), 0).with_context(|| format!("reading {}", maps::EVENT_STATS))?;
        let sum = per_cpu.iter().fold(EventStats::default(), |a, s| EventStats {
            sent: a.sent + s.sent,
            rate_limited: a.rate_limited + s.rate_limited,
            ring_full: a.ring_full + s.ring_full,
        });
        if sum != EventStats::default() {
            rows.push(EventCounts {
                reason: reason.name().to_string(),
                sent: sum.sent,
                rate_limited: sum.rate_limited,
                ring_full: sum.ring_full,
            });
        }
    }
    Ok(rows)
}

/// Tells the datapath whether and how fast to send events.
fn write_config(pin_dir: &Path, flows: &Flows) -> Result<()> {
    let mut config: Array<MapData, EventConfig> = open_pinned_map(pin_dir, maps::EVENT_CONFIG)?;
    let value = EventConfig { enabled: flows.enabled.into(), per_second: flows.events_per_second, burst: flows.burst };
    config.set(0, value, 0).with_context(|| format!("writing {}", maps::EVENT_CONFIG))
}

/// Reads the ring until the agent stops, each event a flow in `hub`.
async fn read_events(pin_dir: std::path::PathBuf, hub: Arc<Hub>) -> Result<()> {
    let ring: RingBuf<MapData> = open_pinned_map(&pin_dir, maps::EVENTS)?;
    // SAFETY: the RingBuf owns its map's descriptor and keeps it open,
    // unchanged, for as long as it lives, which is as long as the AsyncFd.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("polling the flow event ring: {}", e.into_parts().1))?;
    let mut devices: HashMap<u32, Option<String>> = HashMap::new();
    let node = hub.node.clone();
    // The datapath wakes the agent for a batch; what is fewer than a batch
    // is read on a timer.
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(EVENTS_READ_MS.into()));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Readiness is cleared before the ring is drained: what comes
            // after the drain wakes the agent again.
            guard = ring.readable_mut() => guard.context("polling the flow event ring")?.clear_ready(),
            _ = tick.tick() => {}
        }
        let clock = convert::Clock::now();
        let names = hub.names();
        let ring = ring.get_mut();
        while let Some(item) = ring.next() {
            if item.len() != std::mem::size_of::<FlowEvent>() {
                counts::UNREADABLE.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // SAFETY: the ring holds a FlowEvent of exactly this size (checked),
            // a plain C struct of integers; read unaligned from the ring's bytes.
            let event: FlowEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            let device = |ifindex: u32| devices.entry(ifindex).or_insert_with(|| device_name(ifindex)).clone();
            let flow = convert::flow(&event, &clock, &names, &node, device);
            counts::record(&event, &flow);
            hub.push(flow);
        }
    }
}

fn device_name(ifindex: u32) -> Option<String> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes, NUL-terminated.
    let found = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    (!found.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
}

/// gRPC's health service, which Hubble's clients ask first, saying the
/// Observer serves.
async fn health() -> tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<ObserverServer<observer::ObserverService>>().await;
    // The name Hubble's clients ask for (Cilium's api/v1 ObserverServiceName).
    health_reporter.set_service_status("hubble.server.Observer", tonic_health::ServingStatus::Serving).await;
    health
}

/// Serves Hubble's Observer API and the health service on `listen` until
/// aborted.
async fn serve(listen: &MetricsListen, hub: Arc<Hub>) -> Result<JoinHandle<()>> {
    let routes = Routes::new(health().await).add_service(ObserverServer::new(observer::ObserverService { hub }));
    Ok(match listen {
        MetricsListen::Unix(path) => {
            let _ = std::fs::remove_file(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            let listener = UnixListener::bind(path).with_context(|| format!("binding Hubble's API to {}", path.display()))?;
            let incoming = futures::stream::unfold(listener, |l| async move { Some((l.accept().await.map(|(s, _)| s), l)) });
            tokio::spawn(server::run(routes, incoming, None))
        }
        MetricsListen::Tcp(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding Hubble's API to {addr}"))?;
            let incoming = futures::stream::unfold(listener, |l| async move { Some((l.accept().await.map(|(s, _)| s), l)) });
            tokio::spawn(server::run(routes, incoming, None))
        }
    })
}

/// The unit's credentials behind `relay_tls`.
const TLS_CREDENTIALS: [&str; 3] = ["v6node.hubble.tls-cert", "v6node.hubble.tls-key", "v6node.hubble.tls-client-ca"];

/// Mutual TLS from the unit's credentials: this node's certificate and key,
/// and the CA that signed Relay's client certificate.
fn relay_tls() -> Result<tokio_rustls::TlsAcceptor> {
    let dir = std::env::var_os("CREDENTIALS_DIRECTORY").map(std::path::PathBuf::from);
    let read = |name: &str| -> Result<Vec<u8>> {
        let dir = dir.as_ref().with_context(|| format!("no credentials, so not the credential {name}"))?;
        std::fs::read(dir.join(name)).with_context(|| format!("reading the credential {name}"))
    };
    let [cert, key, ca] = TLS_CREDENTIALS.map(read);
    server::tls_acceptor(&cert?, &key?, &ca?).context("the credentials v6node.hubble.tls-*")
}

/// Serves what Hubble Relay asks a node for, the Observer and the Peer
/// service, on `listen` until aborted; with `tls`, to clients with a
/// certificate of the credentials' CA only.
async fn serve_relay(
    listen: SocketAddr,
    tls: bool,
    hub: Arc<Hub>,
    peers: watch::Receiver<Vec<peer::HubblePeer>>,
) -> Result<JoinHandle<()>> {
    let acceptor = if tls {
        Some(relay_tls().context("mutual TLS for flows.relay_listen (flows.relay_tls = false serves plain gRPC)")?)
    } else {
        None
    };
    let routes = Routes::new(health().await)
        .add_service(ObserverServer::new(observer::ObserverService { hub }))
        .add_service(PeerServer::new(peer::PeerService { peers, tls }));
    let listener =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding Hubble Relay's API to {listen}"))?;
    let incoming = futures::stream::unfold(listener, |l| async move { Some((l.accept().await.map(|(s, _)| s), l)) });
    Ok(tokio::spawn(server::run(routes, incoming, acceptor)))
}

/// Keeps `slot` serving `key`: a task started for another key, or one that
/// ended, is replaced by `start`'s; without a key, none runs. Says why
/// `start` failed, if it did (retried at the next sync).
async fn keep_running<K: PartialEq, F: std::future::Future<Output = Result<JoinHandle<()>>>>(
    slot: &mut Option<(K, JoinHandle<()>)>,
    key: Option<K>,
    start: impl FnOnce() -> F,
) -> Option<String> {
    if slot.as_ref().is_some_and(|(running, task)| Some(running) == key.as_ref() && !task.is_finished()) {
        return None;
    }
    if let Some((_, task)) = slot.take() {
        task.abort();
    }
    let key = key?;
    match start().await {
        Ok(task) => {
            *slot = Some((key, task));
            None
        }
        Err(e) => {
            log::error!("{e:#}");
            Some(format!("{e:#}"))
        }
    }
}

/// The tracepoint behind the kernel's drops, once the event ring is pinned.
enum KernelDrops {
    Off,
    On(kernel_drops::KernelDrops),
    Failed(String),
}

/// Flow visibility as the configuration asks for it.
pub struct FlowService {
    hub: Option<Arc<Hub>>,
    reader: Option<JoinHandle<()>>,
    server: Option<(String, JoinHandle<()>)>,
    relay: Option<(String, JoinHandle<()>)>,
    log: Option<(flow_log::LogConfig, JoinHandle<()>)>,
    kernel_drops: KernelDrops,
    /// The cluster's nodes by name and address, and the port Relay reaches
    /// them on: what the Peer service names.
    nodes: Vec<(String, Ipv6Addr)>,
    relay_port: Option<u16>,
    peers: watch::Sender<Vec<peer::HubblePeer>>,
}

impl Default for FlowService {
    fn default() -> Self {
        FlowService {
            hub: None,
            reader: None,
            server: None,
            relay: None,
            log: None,
            kernel_drops: KernelDrops::Off,
            nodes: Vec::new(),
            relay_port: None,
            peers: watch::channel(Vec::new()).0,
        }
    }
}

impl FlowService {
    /// Writes the datapath's settings and (re)starts what reads and serves
    /// the flows. `node` names this node in every flow.
    pub async fn sync(&mut self, pin_dir: &Path, node: &str, flows: &Flows) -> FlowsState {
        let mut state = FlowsState { enabled: flows.enabled, ..Default::default() };
        if let Err(e) = write_config(pin_dir, flows) {
            // The maps are pinned when the first device is attached.
            log::debug!("flow events not configured yet: {e:#}");
        }
        let keep = usize::try_from(flows.keep).unwrap_or(usize::MAX);
        if self.hub.as_ref().is_none_or(|h| h.node != node || h.capacity() != keep) {
            let names = self.hub.as_ref().map(|h| (*h.names()).clone()).unwrap_or_default();
            let hub = Arc::new(Hub::new(node.to_string(), keep));
            hub.set_names(names);
            self.hub = Some(hub);
            if let Some(reader) = self.reader.take() {
                reader.abort();
            }
            for (_, server) in [self.server.take(), self.relay.take()].into_iter().flatten() {
                server.abort();
            }
            if let Some((_, log)) = self.log.take() {
                log.abort();
            }
        }
        let hub = self.hub.clone().expect("set above");
        if !flows.enabled {
            if let Some(reader) = self.reader.take() {
                reader.abort();
            }
        } else if self.reader.as_ref().is_none_or(|r| r.is_finished()) {
            let (pin_dir, hub) = (pin_dir.to_path_buf(), hub.clone());
            self.reader = Some(tokio::spawn(async move {
                if let Err(e) = read_events(pin_dir, hub).await {
                    log::debug!("flow events not read: {e:#}");
                }
            }));
        }
        let listen = flows.hubble.as_ref().map(|l| l.to_string());
        state.error = keep_running(&mut self.server, listen.clone(), || async {
            let task = serve(flows.hubble.as_ref().expect("a key only with an address"), hub.clone()).await?;
            log::info!("Hubble's API on {}", listen.as_deref().unwrap_or_default());
            Ok(task)
        })
        .await;
        state.hubble = listen.unwrap_or_default();
        self.sync_kernel_drops(pin_dir, flows.enabled, &mut state).await;
        self.sync_relay(flows, hub.clone(), &mut state).await;
        self.sync_log(flows, hub, &mut state).await;
        state
    }

    async fn sync_kernel_drops(&mut self, pin_dir: &Path, enabled: bool, state: &mut FlowsState) {
        if !enabled {
            self.kernel_drops = KernelDrops::Off;
        } else if matches!(self.kernel_drops, KernelDrops::Off) && self.reading() {
            // On a thread of its own: it reads the kernel's BTF (a second or so).
            let pin_dir = pin_dir.to_path_buf();
            self.kernel_drops = match tokio::task::spawn_blocking(move || kernel_drops::start(&pin_dir)).await {
                Ok(Ok(drops)) => {
                    log::info!("the kernel's drops of pods' packets are flows ({} drop reasons)", drops.reported);
                    KernelDrops::On(drops)
                }
                Ok(Err(e)) => {
                    log::error!("the kernel's drops are not flows: {e:#}");
                    KernelDrops::Failed(format!("{e:#}"))
                }
                Err(e) => KernelDrops::Failed(format!("loading the kernel drops' program: {e}")),
            };
        }
        state.kernel_drops = match &self.kernel_drops {
            KernelDrops::Off => "off".into(),
            KernelDrops::On(drops) => format!("on ({} drop reasons)", drops.reported),
            KernelDrops::Failed(e) => format!("not reported: {e}"),
        };
    }

    async fn sync_log(&mut self, flows: &Flows, hub: Arc<Hub>, state: &mut FlowsState) {
        let config = flows.log_path.clone().map(|path| flow_log::LogConfig {
            path,
            max_bytes: flows.log_max_bytes,
            rotated_files: flows.log_rotated_files,
        });
        state.log_error = keep_running(&mut self.log, config.clone(), || async {
            flow_log::start(&hub, config.clone().expect("a key only with a path"))
        })
        .await;
        state.log = config.map(|c| c.path.display().to_string()).unwrap_or_default();
    }

    async fn sync_relay(&mut self, flows: &Flows, hub: Arc<Hub>, state: &mut FlowsState) {
        let how = if flows.relay_tls { "mutual TLS" } else { "plain gRPC, no TLS" };
        let listen = flows.relay_listen.map(|a| format!("{a} ({how})"));
        let peers = self.peers.subscribe();
        state.relay_error = keep_running(&mut self.relay, listen.clone(), || async {
            let address = flows.relay_listen.expect("a key only with an address");
            let task = serve_relay(address, flows.relay_tls, hub, peers).await?;
            log::info!("Hubble Relay's API on {}", listen.as_deref().unwrap_or_default());
            Ok(task)
        })
        .await;
        state.relay = listen.unwrap_or_default();
        self.relay_port = flows.relay_listen.map(|a| a.port());
        self.publish_peers();
    }

    /// The cluster's nodes as the API names them (this one included), for
    /// the Peer service.
    pub fn set_nodes(&mut self, nodes: Vec<(String, Ipv6Addr)>) {
        self.nodes = nodes;
        self.publish_peers();
    }

    fn publish_peers(&self) {
        let peers = match self.relay_port {
            Some(port) => self
                .nodes
                .iter()
                .map(|(name, address)| peer::HubblePeer { name: name.clone(), address: SocketAddr::new((*address).into(), port) })
                .collect(),
            None => Vec::new(),
        };
        self.peers.send_if_modified(|current| {
            let changed = *current != peers;
            *current = peers;
            changed
        });
    }

    pub fn set_names(&self, names: Names) {
        if let Some(hub) = &self.hub {
            hub.set_names(names);
        }
    }

    /// Whether the reader is running: it starts once the ring is pinned.
    pub fn reading(&self) -> bool {
        self.reader.as_ref().is_some_and(|r| !r.is_finished())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use hyper_util::rt::TokioIo;
    use tokio::net::UnixStream;
    use v6node_hubble::{
        flow::Flow,
        observer::{get_flows_response::ResponseTypes, observer_client::ObserverClient, GetFlowsRequest},
    };

    use super::*;

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    async fn client(path: std::path::PathBuf) -> ObserverClient<tonic::transport::Channel> {
        // The URI is gRPC's; the connection is the unix socket. HTTP/2's
        // smallest windows: what the clients hold, in this same process,
        // stays small beside what the agent holds for them.
        let channel = tonic::transport::Endpoint::from_static("http://[::1]:4244")
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
            }))
            .await
            .unwrap();
        ObserverClient::new(channel)
    }

    fn a_flow(n: u64) -> Flow {
        Flow { node_name: "node-a".into(), uuid: format!("flow {n} of a test, with some length to it"), ..Default::default() }
    }

    /// 1,000 clients follow, each on its own connection, and none reads:
    /// the hub takes flows as fast as with none, the memory stops growing
    /// once their backlogs are full, and a client that reads again is told
    /// what it lost.
    #[tokio::test]
    async fn a_thousand_slow_followers_hold_nothing_up_and_cost_bounded_memory() {
        const FOLLOWERS: usize = 1000;
        let path = std::env::temp_dir().join(format!("v6node-followers-{}.sock", std::process::id()));
        let hub = Arc::new(Hub::new("node-a".into(), 1024));
        let server = serve(&MetricsListen::Unix(path.clone()), hub.clone()).await.unwrap();
        let mut sent = 0;
        let mut push = |count: u64| {
            let started = Instant::now();
            for n in sent..sent + count {
                hub.push(a_flow(n));
            }
            sent += count;
            started.elapsed()
        };
        let alone = push(50_000);
        let before = rss_kib();

        let mut followers = Vec::new();
        for _ in 0..FOLLOWERS {
            let mut client = client(path.clone()).await;
            let stream = client.get_flows(GetFlowsRequest { follow: true, ..Default::default() }).await.unwrap().into_inner();
            followers.push((client, stream));
        }
        // Flows until the backlogs (in the agent, the sockets, the clients)
        // are full: the memory stays put for three rounds.
        let (mut filled, mut steady) = (rss_kib(), 0);
        for _ in 0..80 {
            push(20_000);
            tokio::time::sleep(Duration::from_millis(400)).await;
            let now = rss_kib();
            steady = if now <= filled + filled / 200 { steady + 1 } else { 0 };
            filled = filled.max(now);
            if steady == 5 {
                break;
            }
        }
        assert_eq!(steady, 5, "the memory never stopped growing: {filled} KiB");
        let followed = push(50_000);
        for _ in 0..10 {
            push(20_000);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let after = rss_kib();
        eprintln!(
            "50,000 flows pushed in {alone:?} with no follower, in {followed:?} with {FOLLOWERS} stalled ones; \
             RSS {before} KiB before they came, {filled} KiB with their backlogs full, {after} KiB after 250,000 more flows"
        );
        assert!(followed < alone * 5 + Duration::from_millis(200), "pushing slowed from {alone:?} to {followed:?}");
        assert!(after <= filled + filled / 33, "memory grew from {filled} KiB to {after} KiB with stalled followers");

        // One reads again: what its backlog held, and how much it lost.
        let (_, stream) = &mut followers[0];
        let mut lost = 0;
        while let Ok(Ok(Some(response))) = tokio::time::timeout(Duration::from_millis(500), stream.message()).await {
            if let Some(ResponseTypes::LostEvents(l)) = response.response_types {
                lost += l.num_events_lost;
            }
        }
        assert!(lost > 100_000, "lost {lost} of {sent}");
        assert!(counts::LOST_TO_FOLLOWERS.load(Ordering::Relaxed) >= lost);
        server.abort();
        let _ = std::fs::remove_file(path);
    }
}
