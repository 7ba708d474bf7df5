// SPDX-License-Identifier: Apache-2.0
//! The bandwidth manager: pods' `kubernetes.io/egress-bandwidth` and
//! `ingress-bandwidth` become pacers in `v6n_bandwidth` (bpf/lib/bandwidth.h
//! gives each packet its departure time), and fq qdiscs release the packets
//! at those times: on the uplinks (mq with an fq per transmit queue, so no
//! qdisc lock is shared by the CPUs) for what limited pods send, on a pod's
//! own host-side device for what it is sent.

use std::collections::BTreeMap;

use anyhow::{anyhow, Context, Result};
use aya::maps::{HashMap, Map, MapData};
use futures::{StreamExt, TryStreamExt};
use rtnetlink::{
    packet_core::{DefaultNla, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST},
    packet_route::{
        link::LinkAttribute,
        tc::{TcAttribute, TcHandle, TcMessage, TcOption},
        RouteNetlinkMessage,
    },
    Handle,
};
use serde::{Deserialize, Serialize};
use v6node_abi::{maps, BandwidthValue, Pacer};
use v6node_api::EndpointState;
use v6node_config::{Bandwidth as BandwidthConfig, BandwidthMode};
use v6node_k8s::bandwidth::PodLimits;

/// The uplinks' mq; its fq children are 0x7600:1..N.
const MQ_MAJOR: u16 = 0x7600;
/// fq's attributes (linux/pkt_sched.h, TCA_FQ_*).
const FQ_PLIMIT: u16 = 1;
const FQ_FLOW_PLIMIT: u16 = 2;
const FQ_HORIZON: u16 = 14;
const FQ_HORIZON_DROP: u16 = 15;
/// Packets fq holds per device queue, and per flow: a limited pod's TCP
/// keeps up to about a millisecond of its socket's own rate in flight
/// (TSQ), all of it waiting in fq.
const FQ_PACKETS: u32 = 40_000;
const FQ_FLOW_PACKETS: u32 = 2_000;

/// What status shows: whether pacing is on, the queues, the limited pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BandwidthState {
    pub enabled: bool,
    /// Why it is off, in auto mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_because: Option<String>,
    pub horizon_ms: u32,
    pub pod_congestion_control: Option<String>,
    pub pod_slow_start_after_idle: bool,
    #[serde(default)]
    pub pod_tso_rtt_log: u8,
    pub uplinks: Vec<UplinkQueues>,
    pub pods: Vec<LimitedPod>,
    /// Refused annotations, queues that could not be set up.
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UplinkQueues {
    pub device: String,
    /// "mq, fq on 4 queues", "fq".
    pub qdisc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitedPod {
    pub pod: String,
    pub device: String,
    pub ifindex: u32,
    /// Bits per second, each way.
    #[serde(flatten)]
    pub limits: PodLimits,
}

/// A pacer's counters, read from the map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacerCounts {
    pub packets: u64,
    pub bytes: u64,
    pub drops: u64,
}

/// The pods' TCP settings, for the plugin to set in each new pod's
/// namespace (the kernel keeps them per namespace).
pub fn pod_sysctls(config: &BandwidthConfig) -> Vec<(String, String)> {
    let mut sysctls = Vec::new();
    if let Some(congestion_control) = &config.pod_congestion_control {
        sysctls.push(("net/ipv4/tcp_congestion_control".to_string(), congestion_control.clone()));
    }
    sysctls.push(("net/ipv4/tcp_slow_start_after_idle".to_string(), u8::from(config.pod_slow_start_after_idle).to_string()));
    sysctls.push(("net/ipv4/tcp_tso_rtt_log".to_string(), config.pod_tso_rtt_log.to_string()));
    sysctls
}

/// How long a device that refused fq is left before the next attempt.
const QUEUE_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// A device's queues as last set up: the error if they were refused, and
/// when; `due` says whether to try (again) now.
struct Attempt<T> {
    outcome: T,
    error: Option<String>,
    at: std::time::Instant,
}

fn due<T>(attempt: Option<&Attempt<T>>) -> bool {
    attempt.is_none_or(|a| a.error.is_some() && a.at.elapsed() >= QUEUE_RETRY)
}

#[derive(Default)]
pub struct BandwidthManager {
    /// Uplinks' queues, by ifindex.
    uplinks: BTreeMap<u32, Attempt<UplinkQueues>>,
    /// Ingress-limited pods' host-side devices given an fq, by ifindex.
    pod_queues: BTreeMap<u32, Attempt<()>>,
}

impl BandwidthManager {
    /// Brings pacers and queues in line with the pods' limits.
    /// `limits` are the limits of the pods the API knows, with what is
    /// wrong with their annotations.
    pub async fn sync(
        &mut self,
        pin_dir: &std::path::Path,
        netlink: &Handle,
        config: &BandwidthConfig,
        uplinks: &[(String, u32)],
        endpoints: &[EndpointState],
        limits: &BTreeMap<String, (PodLimits, Vec<String>)>,
    ) -> BandwidthState {
        let mut state = BandwidthState {
            horizon_ms: config.horizon_ms,
            pod_congestion_control: config.pod_congestion_control.clone(),
            pod_slow_start_after_idle: config.pod_slow_start_after_idle,
            pod_tso_rtt_log: config.pod_tso_rtt_log,
            ..BandwidthState::default()
        };
        if config.mode != BandwidthMode::Off {
            self.uplinks.retain(|ifindex, _| uplinks.iter().any(|(_, i)| i == ifindex));
            for (device, ifindex) in uplinks {
                if due(self.uplinks.get(ifindex)) {
                    let queues = uplink_queues(netlink, device, *ifindex, config.horizon_ms).await;
                    match &queues.error {
                        Some(e) => log::warn!("{device}: no fq for the bandwidth manager: {e}"),
                        None => log::info!("{device}: {} for the bandwidth manager", queues.qdisc),
                    }
                    let error = queues.error.clone();
                    self.uplinks.insert(*ifindex, Attempt { outcome: queues, error, at: std::time::Instant::now() });
                }
            }
            state.uplinks = self.uplinks.values().map(|a| a.outcome.clone()).collect();
        }
        let failed: Vec<String> =
            state.uplinks.iter().filter_map(|q| q.error.as_ref().map(|e| format!("uplink {}: {e}", q.device))).collect();
        state.enabled = match config.mode {
            BandwidthMode::Off => false,
            BandwidthMode::On => {
                state.problems.extend(failed);
                true
            }
            BandwidthMode::Auto if !failed.is_empty() => {
                state.off_because = Some(failed.join("; "));
                false
            }
            BandwidthMode::Auto => true,
        };

        let mut wanted: BTreeMap<u32, LimitedPod> = BTreeMap::new();
        if state.enabled {
            for endpoint in endpoints {
                let Some(pod) = &endpoint.endpoint.pod else { continue };
                let Some((pod_limits, problems)) = limits.get(pod) else { continue };
                state.problems.extend(problems.iter().map(|p| format!("pod {pod}: {p}")));
                if !pod_limits.is_limited() {
                    continue;
                }
                let limited = LimitedPod {
                    pod: pod.clone(),
                    device: endpoint.endpoint.host_device.clone(),
                    ifindex: endpoint.host_ifindex,
                    limits: *pod_limits,
                };
                wanted.insert(endpoint.host_ifindex, limited);
            }
        }
        if let Err(e) = write_pacers(pin_dir, &wanted, config.horizon_ms) {
            state.problems.push(format!("the pacers were not written: {e:#}"));
        }
        // An fq on the pod's own device for what it is sent.
        for (ifindex, pod) in wanted.iter().filter(|(_, p)| p.limits.ingress.is_some()) {
            if due(self.pod_queues.get(ifindex)) {
                let error = replace_fq(netlink, *ifindex, None, config.horizon_ms).await.err().map(|e| format!("{e:#}"));
                self.pod_queues.insert(*ifindex, Attempt { outcome: (), error, at: std::time::Instant::now() });
            }
            if let Some(e) = self.pod_queues.get(ifindex).and_then(|a| a.error.as_ref()) {
                state.problems.push(format!("pod {}: no fq on {}: {e}", pod.pod, pod.device));
            }
        }
        let unqueued: Vec<u32> =
            self.pod_queues.keys().filter(|i| wanted.get(i).is_none_or(|p| p.limits.ingress.is_none())).copied().collect();
        for ifindex in unqueued {
            // A pod gone takes its device and queue with it.
            if self.pod_queues.remove(&ifindex).is_some_and(|a| a.error.is_none()) {
                let _ = delete_root(netlink, ifindex).await;
            }
        }
        state.pods = wanted.into_values().collect();
        state
    }
}

fn open_map(pin_dir: &std::path::Path) -> Result<HashMap<MapData, u32, BandwidthValue>> {
    let path = pin_dir.join(maps::BANDWIDTH);
    let data = MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))?;
    Ok(HashMap::try_from(Map::HashMap(data))?)
}

/// Writes the pacers wanted, keeping a pacer's schedule and counters while
/// its rate stays; removes the others.
fn write_pacers(pin_dir: &std::path::Path, wanted: &BTreeMap<u32, LimitedPod>, horizon_ms: u32) -> Result<()> {
    let mut map = open_map(pin_dir)?;
    let present: Vec<u32> = map.keys().filter_map(Result::ok).collect();
    for ifindex in present.iter().filter(|i| !wanted.contains_key(i)) {
        map.remove(ifindex).with_context(|| format!("removing the pacer of ifindex {ifindex}"))?;
    }
    for (ifindex, LimitedPod { limits, .. }) in wanted {
        let old = map.get(ifindex, 0).ok();
        let mut value =
            old.unwrap_or(BandwidthValue { origin_ns: crate::conntrack::monotonic_ns(), ..BandwidthValue::default() });
        let (egress, ingress) = (Pacer::limiting(limits.egress), Pacer::limiting(limits.ingress));
        let horizon_ns = u64::from(horizon_ms) * 1_000_000;
        if old.is_some()
            && value.horizon_ns == horizon_ns
            && value.egress.ps_per_byte_q16 == egress.ps_per_byte_q16
            && value.ingress.ps_per_byte_q16 == ingress.ps_per_byte_q16
        {
            continue;
        }
        value.horizon_ns = horizon_ns;
        value.egress.ps_per_byte_q16 = egress.ps_per_byte_q16;
        value.ingress.ps_per_byte_q16 = ingress.ps_per_byte_q16;
        map.insert(ifindex, value, 0).with_context(|| format!("writing the pacer of ifindex {ifindex}"))?;
    }
    Ok(())
}

/// Each limited pod's counters by ifindex: (egress, ingress).
pub fn counts(pin_dir: &std::path::Path) -> BTreeMap<u32, (PacerCounts, PacerCounts)> {
    let Ok(map) = open_map(pin_dir) else { return BTreeMap::new() };
    let counts = |p: &Pacer| PacerCounts { packets: p.packets, bytes: p.bytes, drops: p.drops };
    map.iter().filter_map(Result::ok).map(|(ifindex, v)| (ifindex, (counts(&v.egress), counts(&v.ingress)))).collect()
}

/// mq with an fq per transmit queue (fq alone on a single-queue device), fq
/// told to hold packets up to twice the horizon BPF drops beyond.
async fn uplink_queues(netlink: &Handle, device: &str, ifindex: u32, horizon_ms: u32) -> UplinkQueues {
    let mut queues = UplinkQueues { device: device.to_owned(), ..UplinkQueues::default() };
    let result: Result<String> = async {
        let tx_queues = tx_queues(netlink, ifindex).await?;
        if tx_queues <= 1 {
            replace_fq(netlink, ifindex, None, horizon_ms).await?;
            return Ok("fq".to_string());
        }
        let mq = tc_message(ifindex, TcHandle { major: MQ_MAJOR, minor: 0 }, TcHandle::ROOT, "mq", Vec::new());
        tc_request(netlink, mq).await.context("mq")?;
        for queue in 1..=tx_queues {
            let minor = u16::try_from(queue).map_err(|_| anyhow!("{queue} transmit queues"))?;
            if let Err(e) = replace_fq(netlink, ifindex, Some(TcHandle { major: MQ_MAJOR, minor }), horizon_ms).await {
                // Back to the device's default qdiscs rather than an mq of
                // the wrong children.
                let _ = delete_root(netlink, ifindex).await;
                return Err(e);
            }
        }
        Ok(format!("mq, fq on {tx_queues} queues"))
    }
    .await;
    match result {
        Ok(qdisc) => queues.qdisc = qdisc,
        Err(e) => queues.error = Some(format!("{e:#}")),
    }
    queues
}

async fn tx_queues(netlink: &Handle, ifindex: u32) -> Result<u32> {
    let link =
        netlink.link().get().match_index(ifindex).execute().try_next().await?.ok_or_else(|| anyhow!("no device {ifindex}"))?;
    Ok(link.attributes.iter().find_map(|a| if let LinkAttribute::NumTxQueues(n) = a { Some(*n) } else { None }).unwrap_or(1))
}

/// fq at `parent` (the root when `None`), replacing what is there.
async fn replace_fq(netlink: &Handle, ifindex: u32, parent: Option<TcHandle>, horizon_ms: u32) -> Result<()> {
    let options = vec![
        TcOption::Other(DefaultNla::new(FQ_PLIMIT, FQ_PACKETS.to_ne_bytes().to_vec())),
        TcOption::Other(DefaultNla::new(FQ_FLOW_PLIMIT, FQ_FLOW_PACKETS.to_ne_bytes().to_vec())),
        TcOption::Other(DefaultNla::new(FQ_HORIZON, (horizon_ms * 2 * 1000).to_ne_bytes().to_vec())),
        TcOption::Other(DefaultNla::new(FQ_HORIZON_DROP, vec![1])),
    ];
    let handle = match parent {
        Some(_) => TcHandle { major: 0, minor: 0 },
        None => TcHandle { major: MQ_MAJOR + 1, minor: 0 },
    };
    let message = tc_message(ifindex, handle, parent.unwrap_or(TcHandle::ROOT), "fq", options);
    tc_request(netlink, message).await.map_err(|e| match e.downcast_ref::<std::io::Error>().and_then(|e| e.raw_os_error()) {
        Some(libc::ENOENT) => anyhow!("this kernel has no fq qdisc (CONFIG_NET_SCH_FQ)"),
        _ => e.context("fq"),
    })
}

async fn delete_root(netlink: &Handle, ifindex: u32) -> Result<()> {
    let mut message = TcMessage::with_index(ifindex as i32);
    message.header.parent = TcHandle::ROOT;
    let mut request = NetlinkMessage::from(RouteNetlinkMessage::DelQueueDiscipline(message));
    request.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    acknowledged(netlink, request).await
}

fn tc_message(ifindex: u32, handle: TcHandle, parent: TcHandle, kind: &str, options: Vec<TcOption>) -> TcMessage {
    let mut message = TcMessage::with_index(ifindex as i32);
    message.header.handle = handle;
    message.header.parent = parent;
    message.attributes.push(TcAttribute::Kind(kind.to_owned()));
    if !options.is_empty() {
        message.attributes.push(TcAttribute::Options(options));
    }
    message
}

async fn tc_request(netlink: &Handle, message: TcMessage) -> Result<()> {
    let mut request = NetlinkMessage::from(RouteNetlinkMessage::NewQueueDiscipline(message));
    request.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
    acknowledged(netlink, request).await
}

/// Sends `request`; the kernel's error, if it answers with one.
async fn acknowledged(netlink: &Handle, request: NetlinkMessage<RouteNetlinkMessage>) -> Result<()> {
    let mut responses = netlink.clone().request(request)?;
    while let Some(message) = responses.next().await {
        if let NetlinkPayload::Error(e) = message.payload {
            if let Some(code) = e.code {
                return Err(std::io::Error::from_raw_os_error(-code.get()).into());
            }
        }
    }
    Ok(())
}
