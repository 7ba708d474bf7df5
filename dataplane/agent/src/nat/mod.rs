// SPDX-License-Identifier: Apache-2.0
//! NAT46/64: the stateless translator's tables, stateful NAT64's pool and
//! bindings, the NAT46 gateway's frontends and flows, and the link the
//! kernel fragments on for the translator.

pub mod fragmenter;
pub mod gateway;
pub mod health;
pub mod stateful;
pub mod translator;

use std::{path::Path, time::Instant};

use anyhow::{Context, Result};
use rtnetlink::Handle;
use v6node_config::Config;

use crate::main_table;
use translator::Nat64Stats;

/// The feature as the daemon sees it: sync from the configuration, sweep on
/// a timer, and the figures `status` shows ([`Nat64Stats`]).
#[derive(Default)]
pub struct Nat {
    /// A sweep over a large state table waits ten times its own length
    /// before the next: at most a tenth of a CPU.
    stateful_sweep_after: Option<Instant>,
    gateway_sweep_after: Option<Instant>,
    /// The gateway's health checks.
    health: health::Prober,
}

impl Nat {
    /// Makes the translator's tables, stateful NAT64's and the gateway's
    /// hold `config` (and the fragmentation link exist), or, with no device
    /// translating, removes the fragmentation link. Returns what `status`
    /// shows, None when nothing translates.
    pub async fn sync(&mut self, pin_dir: &Path, netlink: &Handle, config: &Config) -> Result<Option<Nat64Stats>> {
        if config.nat64.devices.is_empty() {
            if let Err(e) = fragmenter::remove(netlink).await {
                log::warn!("removing the fragmentation link: {e:#}");
            }
            self.health.follow(None);
            return Ok(None);
        }
        let fragment_mtu = fragmentation_link(netlink).await;
        let fragment_addr = fragment_mtu.map(|_| fragmenter::ADDRESS);
        // The pool in place before the translator's config says its size.
        let stateful = stateful::sync(pin_dir, config.nat64.stateful.as_ref())?;
        let routes = main_table::routes(netlink).await.context("reading the main table's IPv6 routes")?;
        let mut stats = translator::sync_nat64(pin_dir, &config.nat64, config.nat46.as_ref(), fragment_addr, &routes)?;
        stats.fragment_mtu = fragment_mtu;
        stats.stateful = stateful;
        self.health.follow(config.nat46.as_ref());
        stats.nat46 = gateway::sync(pin_dir, config.nat46.as_ref(), &self.health.quarantined())?;
        if let Some(gateway) = &stats.nat46 {
            log::info!("NAT46 gateway: {} frontend(s), clients from {}", gateway.frontends.len(), gateway.source_prefix);
        }
        if let Some(pool) = &stats.stateful {
            log::info!("NAT64 stateful: pool {}, {} binding(s) kept", pool.layout, pool.bindings);
        }
        log::info!(
            "NAT64 prefix {}, {} EAM(s) ({} routed natively; {} added, {} changed, {} removed in {} µs)",
            stats.prefix,
            stats.eam.entries,
            stats.eam_routed_natively,
            stats.eam.inserted,
            stats.eam.updated,
            stats.eam.removed,
            stats.eam.write_micros
        );
        Ok(Some(stats))
    }

    /// The main table changed: the mappings' routed-natively flags follow
    /// it. Returns the new count when it changed.
    pub async fn sync_routes(
        &mut self,
        pin_dir: &Path,
        netlink: &Handle,
        config: &Config,
        stats: &Nat64Stats,
    ) -> Result<Option<usize>> {
        if config.nat64.devices.is_empty() || config.nat64.eam.is_empty() {
            return Ok(None);
        }
        let routes = main_table::routes(netlink).await.context("reading the main table's IPv6 routes")?;
        let routed_natively = translator::sync_eam_routes(pin_dir, &config.nat64, &routes)?;
        if routed_natively != stats.eam_routed_natively {
            log::info!("main table changed: {routed_natively} of {} EAM(s) routed natively", config.nat64.eam.len());
        }
        Ok((routed_natively != stats.eam_routed_natively).then_some(routed_natively))
    }

    /// The sweeps' timer: stateful NAT64 removes expired bindings (their
    /// ports were free again at once), the gateway ends idle flows; `stats` then shows
    /// the pool's use and each backend's flows. Errors are logged: the next
    /// tick tries again. Returns whether `stats` changed.
    pub fn sweep(&mut self, pin_dir: &Path, config: &Config, stats: &mut Nat64Stats) -> bool {
        let mut swept_any = false;
        if config.nat64.devices.is_empty() {
            return swept_any;
        }
        if let Some(pool) = config.nat64.stateful.as_ref() {
            if let Some(swept) = timed(&mut self.stateful_sweep_after, || stateful::sweep(pin_dir, pool), "the NAT64 bindings") {
                let before = stats.stateful.as_ref().map_or(0, |p| p.expired);
                stats.stateful = Some(stateful::StatefulStats { expired: before + swept.expired, ..swept });
                swept_any = true;
            }
        }
        // A backend quarantined or back: the Maglev tables follow at once.
        if let (Some(nat46), Some(quarantined)) = (config.nat46.as_ref(), self.health.changed()) {
            match gateway::sync(pin_dir, Some(nat46), &quarantined) {
                Ok(Some(mut now)) => {
                    if let Some(before) = &stats.nat46 {
                        (now.flows, now.expired, now.last_sweep_micros) =
                            (before.flows, before.expired, before.last_sweep_micros);
                    }
                    stats.nat46 = Some(now);
                    self.gateway_sweep_after = None; // each backend's flows, counted again
                    swept_any = true;
                }
                Ok(None) => {}
                Err(e) => log::error!("applying the NAT46 gateway's health checks: {e:#}"),
            }
        }
        if let (Some(nat46), Some(flows)) = (config.nat46.as_ref(), stats.nat46.clone()) {
            if let Some(swept) =
                timed(&mut self.gateway_sweep_after, || gateway::sweep(pin_dir, nat46, flows), "the NAT46 gateway's flows")
            {
                stats.nat46 = Some(swept);
                swept_any = true;
            }
        }
        swept_any
    }
}

/// Runs `sweep` unless `after` is still ahead, then sets it ten times the
/// sweep's length ahead. An error is logged as sweeping `what`.
fn timed<T>(after: &mut Option<Instant>, sweep: impl FnOnce() -> Result<T>, what: &str) -> Option<T> {
    if after.is_some_and(|after| Instant::now() < after) {
        return None;
    }
    let started = Instant::now();
    let result = sweep();
    *after = Some(started + started.elapsed() * 10);
    result.map_err(|e| log::error!("sweeping {what}: {e:#}")).ok()
}

/// The link the kernel fragments DF-clear IPv4 packets on before they are
/// translated (RFC 7915 4.1): its MTU, or None (logged) when it cannot be
/// made, and such packets get a Fragmentation Needed instead.
async fn fragmentation_link(netlink: &Handle) -> Option<u32> {
    match fragmenter::ensure(netlink).await {
        Ok(()) => Some(fragmenter::MTU),
        Err(e) => {
            log::warn!("{e:#}: DF-clear IPv4 packets too big for IPv6 get Fragmentation Needed");
            None
        }
    }
}
