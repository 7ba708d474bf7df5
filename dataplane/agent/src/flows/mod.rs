// SPDX-License-Identifier: Apache-2.0
//! Flow visibility: the datapath's flow events (bpf/lib/events.h) read from
//! their ring, made flows with the names of pods, policies and Services,
//! kept in a bounded ring and served through Hubble's Observer API, so the
//! stock `hubble` CLI (and Hubble Relay) work against a v6node node.
//! `[flows]` in the configuration turns it off, sets the datapath's rates
//! and the flows kept, and where the API is served.

mod convert;
pub mod counts;
mod filter;
mod hub;
pub mod names;
mod observer;

use std::{
    collections::HashMap,
    path::Path,
    sync::{atomic::Ordering, Arc},
};

use anyhow::{Context, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use serde::Serialize;
use tokio::{
    io::{unix::AsyncFd, Interest},
    net::UnixListener,
    task::JoinHandle,
};
use v6node_abi::{maps, EventConfig, EventStats, FlowEvent, Reason, EVENTS_READ_MS};
use v6node_config::{Flows, MetricsListen};
use v6node_hubble::observer::observer_server::ObserverServer;

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

/// Serves Hubble's Observer API, and gRPC's health service that Hubble's
/// clients ask first, on `listen` until aborted.
async fn serve(listen: &MetricsListen, hub: Arc<Hub>) -> Result<JoinHandle<()>> {
    let service = ObserverServer::new(observer::ObserverService { hub });
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<ObserverServer<observer::ObserverService>>().await;
    // The name Hubble's clients ask for (Cilium's api/v1 ObserverServiceName).
    health_reporter.set_service_status("hubble.server.Observer", tonic_health::ServingStatus::Serving).await;
    let router = tonic::transport::Server::builder().add_service(health).add_service(service);
    Ok(match listen {
        MetricsListen::Unix(path) => {
            let _ = std::fs::remove_file(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            let listener = UnixListener::bind(path).with_context(|| format!("binding Hubble's API to {}", path.display()))?;
            let incoming = futures::stream::unfold(listener, |l| async move { Some((l.accept().await.map(|(s, _)| s), l)) });
            tokio::spawn(run(router, incoming))
        }
        MetricsListen::Tcp(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding Hubble's API to {addr}"))?;
            let incoming = futures::stream::unfold(listener, |l| async move { Some((l.accept().await.map(|(s, _)| s), l)) });
            tokio::spawn(run(router, incoming))
        }
    })
}

async fn run<IO>(
    router: tonic::transport::server::Router,
    incoming: impl futures::Stream<Item = std::io::Result<IO>> + Send + 'static,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
{
    if let Err(e) = router.serve_with_incoming(incoming).await {
        log::error!("Hubble's API: {e}");
    }
}

/// Flow visibility as the configuration asks for it.
#[derive(Default)]
pub struct FlowService {
    hub: Option<Arc<Hub>>,
    reader: Option<JoinHandle<()>>,
    server: Option<(String, JoinHandle<()>)>,
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
            if let Some((_, server)) = self.server.take() {
                server.abort();
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
        let listen = flows.hubble.as_ref().map(|l| l.to_string()).unwrap_or_default();
        if self.server.as_ref().map(|(l, _)| l.as_str()).unwrap_or("") != listen {
            if let Some((_, server)) = self.server.take() {
                server.abort();
            }
            if let Some(target) = &flows.hubble {
                match serve(target, hub).await {
                    Ok(task) => {
                        log::info!("Hubble's API on {listen}");
                        self.server = Some((listen.clone(), task));
                    }
                    Err(e) => {
                        log::error!("{e:#}");
                        state.error = Some(format!("{e:#}"));
                    }
                }
            }
        }
        state.hubble = listen;
        state
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
