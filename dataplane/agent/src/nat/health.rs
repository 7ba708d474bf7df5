// SPDX-License-Identifier: Apache-2.0
//! The NAT46 gateway's health checks (`nat46.gateway[].health_check`): each
//! backend of a frontend that asks for them is probed by a TCP connection
//! from the agent. After `fall` failures in a row it is quarantined: it
//! leaves its frontend's Maglev table, so it gets no new flows and keeps the
//! ones it has. After `rise` successes in a row it is back. The probes run
//! in tasks of their own; the NAT timer writes what changed
//! ([`Prober::changed`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    io::ErrorKind,
    net::{SocketAddrV4, SocketAddrV6},
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{net::TcpStream, task::JoinHandle, time};
use v6node_config::{Nat46, Nat46HealthCheck, Nat46Protocol};

/// A backend of a frontend: (frontend, protocol, backend).
pub type BackendOf = (SocketAddrV4, Nat46Protocol, SocketAddrV6);

/// A backend's health as `status` shows it.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No health check, or none has failed it yet.
    #[default]
    Healthy,
    /// Failed `fall` probes in a row: no new flows.
    Quarantined,
}

#[derive(Clone, Copy, Default)]
struct Probed {
    quarantined: bool,
    failures: u32,
    successes: u32,
}

/// The probes of the configuration last followed, and what they found.
#[derive(Default)]
pub struct Prober {
    /// What the probes run for: a change restarts them all.
    checks: Vec<(BackendOf, Nat46HealthCheck)>,
    tasks: Vec<JoinHandle<()>>,
    found: Arc<Mutex<BTreeMap<BackendOf, Probed>>>,
    /// The quarantined backends the tables were last written with.
    applied: BTreeSet<BackendOf>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl Prober {
    /// Probes what `nat46` asks for from now on. Unchanged checks keep
    /// running and keep what they found; a backend no longer checked is
    /// healthy.
    pub fn follow(&mut self, nat46: Option<&Nat46>) {
        let checks: Vec<(BackendOf, Nat46HealthCheck)> = nat46
            .iter()
            .flat_map(|n| &n.gateways)
            .filter_map(|g| g.health_check.map(|check| (g, check)))
            .flat_map(|(g, check)| g.backends.iter().map(move |b| ((g.frontend, g.protocol, b.address), check)))
            .collect();
        if checks == self.checks {
            return;
        }
        self.tasks.drain(..).for_each(|task| task.abort());
        self.found.lock().unwrap_or_else(|e| e.into_inner()).retain(|backend, _| checks.iter().any(|(c, _)| c == backend));
        self.tasks = checks.iter().map(|&(backend, check)| tokio::spawn(probe(backend, check, self.found.clone()))).collect();
        self.checks = checks;
    }

    /// The backends quarantined now, which the tables are then written
    /// with.
    pub fn quarantined(&mut self) -> BTreeSet<BackendOf> {
        let now: BTreeSet<BackendOf> = self
            .found
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, probed)| probed.quarantined)
            .map(|(backend, _)| *backend)
            .collect();
        self.applied = now.clone();
        now
    }

    /// The backends quarantined now, when that differs from what the tables
    /// were last written with.
    pub fn changed(&mut self) -> Option<BTreeSet<BackendOf>> {
        let before = self.applied.clone();
        let now = self.quarantined();
        (now != before).then_some(now)
    }
}

/// Probes `backend` every interval until aborted.
async fn probe(backend: BackendOf, check: Nat46HealthCheck, found: Arc<Mutex<BTreeMap<BackendOf, Probed>>>) {
    let (frontend, protocol, address) = backend;
    let target = SocketAddrV6::new(*address.ip(), check.port.unwrap_or(address.port()), 0, 0);
    let timeout = Duration::from_millis(check.timeout_ms.into());
    let mut tick = time::interval(Duration::from_secs(check.interval_seconds.into()));
    tick.set_missed_tick_behavior(time::MissedTickBehavior::Delay);
    let mut refused_by_unit = false;
    loop {
        tick.tick().await;
        let passed = match time::timeout(timeout, TcpStream::connect(target)).await {
            Ok(Ok(_)) => true,
            // The unit's IPAddressDeny= (not the backend) refused: no verdict
            // on the backend, which must not lose its flows for it.
            Ok(Err(e)) if e.kind() == ErrorKind::PermissionDenied => {
                if !refused_by_unit {
                    log::error!(
                        "nat46 gateway {protocol} {frontend}: cannot probe backend {address} at {target}: {e} \
                         (allow its address in a drop-in for v6node-dataplane.service: IPAddressAllow=)"
                    );
                    refused_by_unit = true;
                }
                continue;
            }
            Ok(Err(_)) | Err(_) => false,
        };
        let mut all = found.lock().unwrap_or_else(|e| e.into_inner());
        let probed = all.entry(backend).or_default();
        if passed {
            probed.successes += 1;
            probed.failures = 0;
            if probed.quarantined && probed.successes >= check.rise {
                probed.quarantined = false;
                log::info!("nat46 gateway {protocol} {frontend}: backend {address} passed {} probes: back", check.rise);
            }
        } else {
            probed.failures += 1;
            probed.successes = 0;
            if !probed.quarantined && probed.failures >= check.fall {
                probed.quarantined = true;
                log::warn!(
                    "nat46 gateway {protocol} {frontend}: backend {address} failed {} probes of {target}: quarantined, \
                     no new flows",
                    check.fall
                );
            }
        }
    }
}
