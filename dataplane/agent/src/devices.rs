// SPDX-License-Identifier: Apache-2.0
//! The node's devices as the daemon sees them: which program each device
//! runs (host programs on attach.devices, the translator on nat64.devices,
//! pod programs on the host side of every pod's pair), BIG TCP on them, and
//! the self-test of what is attached. Runs after link events, at resync and
//! after every applied configuration.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use anyhow::Result;
use aya::maps::{DevMapHash, HashMap as BpfHashMap, MapData};
use rtnetlink::Handle;
use v6node_abi::maps;
use v6node_config::{Config, DevicePattern, XdpChoice};

use crate::{
    attach::{AttachPoint, Attacher, Attachment, Target, TcMode, Wanted},
    bigtcp, bpf,
    endpoints::Endpoints,
    nat::fragmenter,
    netdev,
    paths::Paths,
    selftest,
    state::Shared,
    xdp_features,
};

pub struct Devices {
    attacher: Attacher,
}

impl Devices {
    /// Loads nothing yet; refuses BPF objects the kernel will not verify.
    pub fn new(paths: Paths) -> Result<Self> {
        let mut attacher = Attacher::new(paths);
        attacher.verify()?;
        Ok(Devices { attacher })
    }

    /// The translator's program, loaded before its tables are written.
    pub fn prepare_nat64(&mut self) -> Result<()> {
        self.attacher.prepare_nat64()
    }

    /// Brings attachments and BIG TCP in line with the devices present now.
    /// Returns whether the attachments (or BIG TCP) changed; then the
    /// self-test ran.
    pub async fn sync(&mut self, shared: &Shared, netlink: &Handle, config: &Config, endpoints: &Endpoints) -> bool {
        let mode = TcMode::resolve(config.attach.mode);
        let previous = shared.read(|s| s.attachments.clone());
        let attachments = match wanted_attachments(config, endpoints) {
            Ok(wanted) => self.attacher.reconcile(mode, &wanted, &previous),
            Err(e) => {
                log::error!("{e:#}");
                previous
            }
        };
        if let Err(e) = sync_xlat_devices(&shared.paths.pin_dir, &attachments) {
            log::error!("the uplinks' XDP translator's devices: {e:#}");
        }
        if let Err(e) = sync_xdp_ports(&shared.paths.pin_dir, &attachments) {
            log::error!("the uplinks XDP sends by: {e:#}");
        }
        let mut reports = Vec::new();
        if let Ok(mut wanted) = present(&config.bigtcp.devices) {
            wanted.extend(endpoints.host_devices());
            for (device, ifindex) in wanted {
                let report = bigtcp::apply(netlink, &device, ifindex, config.bigtcp.size).await;
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
        let same = shared.read(|s| s.mode == Some(mode) && s.attachments == attachments && s.bigtcp == reports);
        if !same {
            shared.update(|s| {
                s.mode = Some(mode);
                s.attachments = attachments;
                s.bigtcp = reports;
            });
            // What the devices run changed: test it before anyone relies on it.
            selftest(shared);
        }
        !same
    }
}

/// The devices tc's translator runs on, for the uplinks' XDP program
/// (`v6n_xlat_devices`), which translates there only.
fn sync_xlat_devices(pin_dir: &Path, attachments: &[Attachment]) -> Result<()> {
    let wanted: BTreeSet<u32> = attachments
        .iter()
        .filter(|a| a.direction == AttachPoint::Nat64 && a.error.is_none() && a.device != fragmenter::PEER)
        .map(|a| a.ifindex)
        .collect();
    // Pinned by the first object that declares it (the translator's or the
    // XDP program's); with neither loaded there is nothing to tell.
    if wanted.is_empty() && !pin_dir.join(maps::XLAT_DEVICES).exists() {
        return Ok(());
    }
    let mut table: BpfHashMap<MapData, u32, u8> = bpf::open_pinned_map(pin_dir, maps::XLAT_DEVICES)?;
    let stale: Vec<u32> = table.keys().filter_map(Result::ok).filter(|k| !wanted.contains(k)).collect();
    for ifindex in stale {
        table.remove(&ifindex)?;
    }
    for ifindex in wanted {
        table.insert(ifindex, 1, 0)?;
    }
    Ok(())
}

/// The uplinks running native XDP whose drivers take redirected frames
/// (`v6n_xdp_ports`): XDP sends frames out of these, as well as back out of
/// the one they came in by. A driver that would drop them (a veth whose
/// peer runs neither XDP nor GRO) keeps its traffic at tc.
fn sync_xdp_ports(pin_dir: &Path, attachments: &[Attachment]) -> Result<()> {
    let mut wanted = BTreeSet::new();
    let native: Vec<&Attachment> = attachments.iter().filter(|a| a.runs_native_xdp()).collect();
    let netdev = if native.is_empty() { None } else { Some(xdp_features::Netdev::open()) };
    for uplink in native {
        let answer = match &netdev {
            Some(Ok(netdev)) => netdev.takes_redirected_frames(uplink.ifindex),
            Some(Err(e)) => Err(anyhow::anyhow!("{e:#}")),
            None => Ok(false),
        };
        match answer {
            Ok(true) => {
                wanted.insert(uplink.ifindex);
            }
            Ok(false) => log::debug!("{}: its driver takes no redirected frames: XDP sends nothing out of it", uplink.device),
            Err(e) => log::debug!("{}: whether its driver takes redirected frames: {e:#}", uplink.device),
        }
    }
    if wanted.is_empty() && !pin_dir.join(maps::XDP_PORTS).exists() {
        return Ok(());
    }
    let mut ports: DevMapHash<MapData> = bpf::open_pinned_map(pin_dir, maps::XDP_PORTS)?;
    let present: BTreeSet<u32> = ports.keys().filter_map(Result::ok).collect();
    if present == wanted {
        return Ok(());
    }
    for ifindex in present.difference(&wanted) {
        ports.remove(*ifindex)?;
    }
    for ifindex in &wanted {
        ports.insert(*ifindex, *ifindex, None, 0)?;
    }
    let names: Vec<&str> =
        attachments.iter().filter(|a| a.runs_native_xdp() && wanted.contains(&a.ifindex)).map(|a| a.device.as_str()).collect();
    log::info!("XDP sends frames out of the uplinks {names:?} (native XDP, and drivers that take redirected frames)");
    Ok(())
}

/// Runs the self-test on what is attached now and records it.
pub fn selftest(shared: &Shared) {
    let attachments = shared.read(|s| s.attachments.clone());
    let results = selftest::run(&shared.paths, &attachments);
    for failed in results.iter().filter(|t| t.error.is_some()) {
        log::error!("self-test of {} {}: {}", failed.device, failed.direction, failed.error.as_deref().unwrap_or(""));
    }
    shared.update_if_changed(|s| &mut s.selftest, results);
}

/// The devices present now whose names match one of `patterns`; never
/// the fragmentation link, which is the agent's own.
fn present(patterns: &[DevicePattern]) -> Result<BTreeMap<String, u32>> {
    Ok(netdev::devices()?
        .into_iter()
        .filter(|(name, _)| name != fragmenter::LINK && name != fragmenter::PEER)
        .filter(|(name, _)| patterns.iter().any(|p| p.matches(name)))
        .collect())
}

/// The uplinks present now (attach.devices).
pub fn uplinks(config: &Config) -> Vec<(String, u32)> {
    present(&config.attach.devices).map(|p| p.into_iter().collect()).unwrap_or_default()
}

/// Host programs on attach.devices (and native XDP as attach.xdp says),
/// the translator on nat64.devices, pod programs on the host side of every
/// pod's pair.
fn wanted_attachments(config: &Config, endpoints: &Endpoints) -> Result<Wanted> {
    let mut wanted = Wanted::new();
    for (device, ifindex) in present(&config.attach.devices)? {
        for direction in AttachPoint::HOST {
            wanted.insert((device.clone(), direction), Target::required(ifindex, false));
        }
        match config.attach.xdp_for(&device) {
            XdpChoice::Tc => {}
            choice => {
                let target = Target { ifindex, netkit: false, optional: choice == XdpChoice::Auto };
                wanted.insert((device, AttachPoint::Xdp), target);
            }
        }
    }
    for (device, ifindex) in present(&config.nat64.devices)? {
        wanted.insert((device, AttachPoint::Nat64), Target::required(ifindex, false));
    }
    // Where the fragments of DF-clear packets come back in, to be translated.
    if !config.nat64.devices.is_empty() {
        if let Some(ifindex) = netdev::devices()?.get(fragmenter::PEER) {
            wanted.insert((fragmenter::PEER.to_string(), AttachPoint::Nat64), Target::required(*ifindex, false));
        }
    }
    endpoints.wanted(&mut wanted);
    Ok(wanted)
}
