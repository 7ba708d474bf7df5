// SPDX-License-Identifier: Apache-2.0
//! `status`: what the kernel has attached and pinned (read live) next to what
//! the agent last recorded (its state file).

use std::{fmt::Write as _, path::PathBuf, process::ExitCode};

use anyhow::Result;
use serde::Serialize;

use crate::{
    attach::{self, Attachment, LiveLink, TcMode},
    bigtcp,
    counters::{self, CounterRow},
    nat::translator::Nat64Stats,
    netdev,
    paths::Paths,
    state::{self, Reload},
    sync::SyncStats,
};

#[derive(Serialize)]
struct Status {
    healthy: bool,
    problems: Vec<String>,
    agent: Agent,
    pin_dir: PathBuf,
    mode: Option<TcMode>,
    /// tcx links found pinned, checked against the kernel.
    links: Vec<LiveLink>,
    /// What the agent last did per device and direction (clsact included).
    attachments: Vec<Attachment>,
    bigtcp: Vec<bigtcp::Report>,
    deny_sources: Option<SyncStats>,
    /// The translator's prefix and mappings; null while it is off.
    nat64: Option<Nat64Stats>,
    pods: Pods,
    /// The Kubernetes side; null unless kubernetes.kubeconfig is set.
    cluster: Option<crate::cluster::ClusterState>,
    /// BGP; null unless routing.asn is set.
    bgp: Option<Bgp>,
    /// The socket hooks on services.cgroup.
    socket_hooks: Vec<crate::services::sockets::SocketHook>,
    /// Each host program's self-test (crate::selftest).
    selftest: Vec<crate::selftest::SelfTest>,
    /// Services; null until the API is followed with services.cgroup set.
    services: Option<Services>,
    /// Network policy; null until the API's policies were written once.
    policy: Option<Policy>,
    /// Flow visibility; null until the configuration was applied.
    flows: Option<Flows>,
    /// The bandwidth manager; null until the configuration was applied.
    bandwidth: Option<Bandwidth>,
    counters: Vec<CounterRow>,
    metrics_listen: String,
}

#[derive(Serialize)]
struct Bgp {
    #[serde(flatten)]
    configured: crate::cluster::bgp::BgpState,
    /// Each session as bird reports it now (empty when bird does not answer).
    sessions: Vec<crate::cluster::bgp::Session>,
}

#[derive(Serialize)]
struct Services {
    #[serde(flatten)]
    recorded: crate::services::ServicesState,
    /// Per frontend id, from the kernel now: (sockets translated, refused).
    stats: std::collections::BTreeMap<u32, (u64, u64)>,
    /// Connections ended because their backend left (crate::services::connections).
    ended_connections: Option<crate::services::connections::Ended>,
}

#[derive(Serialize)]
struct Bandwidth {
    #[serde(flatten)]
    recorded: crate::bandwidth::BandwidthState,
    /// Per limited pod's ifindex, from the kernel now: (egress, ingress).
    counts: std::collections::BTreeMap<u32, (crate::bandwidth::PacerCounts, crate::bandwidth::PacerCounts)>,
}

#[derive(Serialize)]
struct Policy {
    #[serde(flatten)]
    recorded: crate::policy::PolicyState,
    /// Packets denied (or, audited, that would have been) per rules id, from the kernel now.
    denied: std::collections::BTreeMap<u32, u64>,
}

#[derive(Serialize)]
struct Flows {
    #[serde(flatten)]
    recorded: crate::flows::FlowsState,
    /// The datapath's flow events by reason, from the kernel now: sent,
    /// held back by the rate limit, lost to a full ring.
    events: Vec<crate::flows::EventCounts>,
}

#[derive(Serialize)]
struct Pods {
    /// The CNI network configuration written for pods.prefix; null until
    /// the prefix is known.
    cni_config: Option<PathBuf>,
    endpoints: Vec<v6node_api::EndpointState>,
}

#[derive(Serialize)]
struct Agent {
    running: bool,
    pid: Option<u32>,
    version: Option<String>,
    uptime_seconds: Option<u64>,
    ready_after_ms: Option<f64>,
    generation: Option<u64>,
    config_files: Vec<PathBuf>,
    last_reload: Option<Reload>,
    /// Periodic repairs done (every 60 s).
    resyncs: u64,
}

fn collect(paths: &Paths) -> Result<Status> {
    let recorded = state::read(paths)?;
    let running = state::running_agent(paths);
    let links = attach::live_links(paths);
    let counters = counters::read(&paths.pin_dir).unwrap_or_default();
    let mut problems = Vec::new();
    if running.is_none() {
        problems.push("agent not running".to_owned());
    }
    let recorded = recorded.unwrap_or_default();
    if let Some(reload) = recorded.last_reload.as_ref().filter(|r| !r.ok) {
        problems.push(format!("last reload refused: {}", reload.error.clone().unwrap_or_default()));
    }
    for link in links.iter().filter(|l| !l.attached) {
        problems.push(format!("{}: pinned link no longer attached", link.pin.display()));
    }
    for a in recorded.attachments.iter().filter(|a| a.error.is_some()) {
        problems.push(format!("{} {}: {}", a.device, a.direction.name(), a.error.as_deref().unwrap_or("")));
    }
    for r in recorded.bigtcp.iter().filter(|r| r.error.is_some()) {
        problems.push(format!("{}: BIG TCP: {}", r.device, r.error.as_deref().unwrap_or("")));
    }
    let devices = netdev::devices().unwrap_or_default();
    for e in &recorded.endpoints {
        if !crate::endpoints::device_present(&devices, e) {
            problems.push(format!("pod {}: device {} is gone", e.endpoint.address, e.endpoint.host_device));
        }
    }
    let bgp = recorded.bgp.clone().map(|configured| {
        if let Some(e) = &configured.error {
            problems.push(format!("bgp: {e}"));
        }
        let sessions = match crate::cluster::bgp::sessions(&paths.bird_socket()) {
            Ok(sessions) => sessions,
            Err(e) => {
                problems.push(format!("bgp: {e:#} (is v6node-bgp.service running?)"));
                Vec::new()
            }
        };
        for peer in &configured.peers {
            match sessions.iter().find(|s| s.name == peer.name) {
                Some(s) if s.state == "Established" => {}
                Some(s) => problems.push(format!(
                    "bgp peer {} (AS {}): {}{}",
                    peer.address,
                    peer.asn,
                    s.state,
                    if s.last_error.is_empty() { String::new() } else { format!(", last error: {}", s.last_error) }
                )),
                None if sessions.is_empty() => {}
                None => problems.push(format!("bgp peer {}: bird has no session for it yet", peer.address)),
            }
        }
        Bgp { configured, sessions }
    });
    for test in recorded.selftest.iter().filter(|t| t.error.is_some()) {
        problems.push(format!("self-test of {} {}: {}", test.device, test.direction, test.error.as_deref().unwrap_or("")));
    }
    for hook in recorded.socket_hooks.iter().filter(|h| h.error.is_some()) {
        problems.push(format!("socket hook {}: {}", hook.program, hook.error.as_deref().unwrap_or("")));
    }
    if let Some(e) = recorded.ended_connections.as_ref().and_then(|e| e.error.as_ref()) {
        problems.push(format!("ending connections to backends that left: {e}"));
    }
    let services = recorded.services.clone().map(|services| {
        if let Some(e) = &services.error {
            problems.push(format!("services: {e}"));
        }
        Services {
            recorded: services,
            stats: crate::services::stats(&paths.pin_dir).unwrap_or_default(),
            ended_connections: recorded.ended_connections.clone(),
        }
    });
    let policy = recorded.policy.clone().map(|recorded| {
        for pod in &recorded.pods {
            for (direction, state) in [("ingress", &pod.ingress), ("egress", &pod.egress)] {
                if let Some(error) = state.as_ref().and_then(|s| s.error.as_ref()) {
                    problems.push(format!("policy of pod {} ({direction}): {error}; its last good rules stay", pod.pod));
                }
            }
        }
        Policy { recorded, denied: crate::policy::denied_by_id(&paths.pin_dir) }
    });
    let flows = recorded.flows.clone().map(|recorded| {
        for (what, error) in
            [("", &recorded.error), ("Hubble Relay's API: ", &recorded.relay_error), ("the flow log: ", &recorded.log_error)]
        {
            if let Some(e) = error {
                problems.push(format!("flows: {what}{e}"));
            }
        }
        if let Some(e) = recorded.kernel_drops.strip_prefix("not reported: ") {
            problems.push(format!("flows: the kernel's drops: {e}"));
        }
        Flows { recorded, events: crate::flows::event_counts(&paths.pin_dir).unwrap_or_default() }
    });
    let bandwidth = recorded.bandwidth.clone().map(|recorded| {
        problems.extend(recorded.problems.iter().map(|p| format!("bandwidth: {p}")));
        Bandwidth { recorded, counts: crate::bandwidth::counts(&paths.pin_dir) }
    });
    if let Some(e) = &recorded.metrics.error {
        problems.push(format!("metrics: {e}"));
    }
    let known = !recorded.version.is_empty();
    Ok(Status {
        healthy: problems.is_empty(),
        problems,
        agent: Agent {
            running: running.is_some(),
            pid: running,
            version: known.then(|| recorded.version.clone()),
            uptime_seconds: (known && running.is_some()).then(|| state::now().saturating_sub(recorded.started_at)),
            ready_after_ms: recorded.ready_after_ms,
            generation: known.then_some(recorded.generation),
            config_files: recorded.config_files.clone(),
            last_reload: recorded.last_reload.clone(),
            resyncs: recorded.resyncs,
        },
        pin_dir: paths.pin_dir.clone(),
        mode: recorded.mode,
        links,
        attachments: recorded.attachments,
        bigtcp: recorded.bigtcp,
        deny_sources: recorded.deny_sources,
        nat64: recorded.nat64,
        pods: Pods { cni_config: recorded.cni_config, endpoints: recorded.endpoints },
        cluster: recorded.cluster,
        bgp,
        socket_hooks: recorded.socket_hooks,
        selftest: recorded.selftest,
        services,
        policy,
        flows,
        bandwidth,
        counters,
        metrics_listen: recorded.metrics.listen,
    })
}

fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut line = |cells: &[String]| {
        let text: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        let _ = writeln!(out, "  {}", text.join("  ").trim_end());
    };
    line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for row in rows {
        line(row);
    }
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or("-".into(), |v| v.to_string())
}

fn human(status: &Status) -> String {
    let mut out = String::new();
    let agent = &status.agent;
    let _ = match (agent.running, agent.pid) {
        (true, Some(pid)) => writeln!(
            out,
            "agent:       running (pid {pid}, v{}, up {} s, ready after {:.0} ms), config generation {}",
            opt(agent.version.clone()),
            opt(agent.uptime_seconds),
            agent.ready_after_ms.unwrap_or(0.0),
            opt(agent.generation)
        ),
        _ => writeln!(out, "agent:       not running; the dataplane below keeps working from its pins"),
    };
    let files: Vec<_> = agent.config_files.iter().map(|f| f.display().to_string()).collect();
    let _ = writeln!(out, "config:      {}", if files.is_empty() { "built-in defaults".into() } else { files.join(", ") });
    if let Some(reload) = &agent.last_reload {
        let _ = match &reload.error {
            None => writeln!(out, "last reload: applied ({:.1} ms)", reload.duration_ms),
            Some(e) => writeln!(out, "last reload: REFUSED, running config unchanged: {e}"),
        };
    }
    let _ = writeln!(
        out,
        "pins:        {} (mode {})",
        status.pin_dir.display(),
        opt(status.mode.map(|m| format!("{m:?}").to_lowercase()))
    );

    let failed = status.selftest.iter().filter(|t| t.error.is_some()).count();
    let _ = match (status.selftest.len(), failed) {
        (0, _) => writeln!(out, "self-test:   none (no host program attached by tcx)"),
        (n, 0) => writeln!(out, "self-test:   passed by {n} host program(s)"),
        (n, failed) => writeln!(out, "self-test:   FAILED by {failed} of {n} host program(s)"),
    };
    let _ = writeln!(out, "\nattached programs:");
    let rows: Vec<Vec<String>> = status
        .attachments
        .iter()
        .map(|a| {
            let live = status.links.iter().find(|l| l.device == a.device && l.direction == a.direction);
            vec![
                a.device.clone(),
                a.direction.name().into(),
                format!("{:?}", a.mode).to_lowercase(),
                a.direction.program().into(),
                opt(live.and_then(|l| l.program_id).or(a.program_id)),
                opt(live.and_then(|l| l.link_id).or(a.link_id)),
                match (&a.error, &a.note) {
                    (Some(e), _) => format!("FAILED: {e}"),
                    (None, Some(note)) => format!("{}: {note}", a.action),
                    (None, None) => a.action.to_string(),
                },
            ]
        })
        .collect();
    table(&mut out, &["DEVICE", "DIRECTION", "MODE", "PROGRAM", "PROG_ID", "LINK_ID", "STATE"], &rows);

    let _ = writeln!(out, "\nuplinks (where arriving frames are handled first):");
    let rows: Vec<Vec<String>> = attach::uplink_paths(&status.attachments)
        .into_iter()
        .map(|u| vec![u.device, if u.xdp { "xdp, then tc".into() } else { "tc".into() }, u.why])
        .collect();
    table(&mut out, &["DEVICE", "PATH", "WHY"], &rows);

    let _ = writeln!(out, "\nBIG TCP (gso/gro max size, IPv6 and IPv4):");
    let rows: Vec<Vec<String>> = status
        .bigtcp
        .iter()
        .map(|r| {
            vec![
                r.device.clone(),
                r.requested.to_string(),
                opt(r.tso_max_size),
                opt(r.sizes.gso_max_size),
                opt(r.sizes.gro_max_size),
                opt(r.sizes.gso_ipv4_max_size),
                opt(r.sizes.gro_ipv4_max_size),
                r.error.clone().unwrap_or_else(|| if r.target < r.requested { "clamped".into() } else { "ok".into() }),
            ]
        })
        .collect();
    table(&mut out, &["DEVICE", "ASKED", "TSO_MAX", "GSO", "GRO", "GSO_V4", "GRO_V4", "NOTE"], &rows);

    if let Some(deny) = &status.deny_sources {
        let _ = writeln!(out, "\ndeny table:  {} source prefixes", deny.entries);
    }
    match &status.nat64 {
        Some(nat64) => {
            let _ = writeln!(
                out,
                "nat64:       prefix {}, {} explicit address mapping(s), {} translatable IPv4 range(s)",
                nat64.prefix, nat64.eam.entries, nat64.translatable.entries
            );
            match nat64.fragment_mtu {
                Some(mtu) => {
                    let _ = writeln!(out, "nat64 frag:  DF-clear IPv4 too big for IPv6 is cut to {mtu} bytes (RFC 7915 4.1)");
                }
                None => {
                    let _ = writeln!(out, "nat64 frag:  none: DF-clear IPv4 too big for IPv6 gets Fragmentation Needed");
                }
            }
            if let Some(pool) = &nat64.stateful {
                let _ = writeln!(
                    out,
                    "nat64 pool:  {} binding(s), {} expired, {} source prefix(es), {} filtering",
                    pool.bindings, pool.expired, pool.sources, pool.filtering
                );
                let rows: Vec<Vec<String>> = pool
                    .pool
                    .iter()
                    .map(|u| vec![u.address.clone(), u.protocol.clone(), u.in_use.to_string(), u.ports.to_string()])
                    .collect();
                table(&mut out, &["POOL ADDRESS", "PROTOCOL", "IN USE", "PORTS"], &rows);
            }
            if let Some(gateway) = &nat64.nat46 {
                let _ = writeln!(
                    out,
                    "nat46:       {} frontend(s), {} flow(s), {} expired, clients from {}",
                    gateway.frontends.len(),
                    gateway.flows,
                    gateway.expired,
                    gateway.source_prefix
                );
                let rows: Vec<Vec<String>> = gateway
                    .frontends
                    .iter()
                    .flat_map(|f| {
                        let none = [crate::nat::gateway::BackendUse { address: "(none)".into(), ..Default::default() }];
                        let backends = if f.backends.is_empty() { none.to_vec() } else { f.backends.clone() };
                        backends.into_iter().map(move |b| {
                            vec![
                                f.frontend.clone(),
                                f.protocol.clone(),
                                b.address,
                                b.weight.to_string(),
                                b.buckets.to_string(),
                                b.flows.to_string(),
                                match b.health {
                                    crate::nat::health::Health::Healthy => "healthy".into(),
                                    crate::nat::health::Health::Quarantined => "quarantined".into(),
                                },
                            ]
                        })
                    })
                    .collect();
                table(&mut out, &["FRONTEND", "PROTOCOL", "BACKEND", "WEIGHT", "BUCKETS", "FLOWS", "HEALTH"], &rows);
            }
        }
        None => {
            let _ = writeln!(out, "nat64:       off");
        }
    }
    let _ = writeln!(
        out,
        "\npods:        {} endpoint(s); CNI config {}",
        status.pods.endpoints.len(),
        status.pods.cni_config.as_ref().map_or("not written (pods.prefix unset)".into(), |p| p.display().to_string())
    );
    let rows: Vec<Vec<String>> = status
        .pods
        .endpoints
        .iter()
        .map(|e| {
            vec![
                e.endpoint.pod.clone().unwrap_or_else(|| e.endpoint.container_id.chars().take(12).collect()),
                e.endpoint.host_device.clone(),
                e.endpoint.address.to_string(),
                e.endpoint.device.as_str().into(),
                opt(e.bigtcp),
            ]
        })
        .collect();
    if !rows.is_empty() {
        table(&mut out, &["POD", "DEVICE", "ADDRESS", "MODE", "BIG_TCP"], &rows);
    }
    if let Some(cluster) = &status.cluster {
        cluster_section(&mut out, cluster);
    }
    if let Some(bgp) = &status.bgp {
        bgp_section(&mut out, bgp);
    }
    services_section(&mut out, status);
    policy_section(&mut out, status);
    flows_section(&mut out, status);
    bandwidth_section(&mut out, status);
    let _ = writeln!(out, "\ncounters:");
    let rows: Vec<Vec<String>> = status
        .counters
        .iter()
        .map(|c| vec![c.device.clone(), c.direction.clone(), c.reason.clone(), c.packets.to_string(), c.bytes.to_string()])
        .collect();
    table(&mut out, &["DEVICE", "DIRECTION", "REASON", "PACKETS", "BYTES"], &rows);
    let _ = writeln!(out, "\nmetrics:     {}", if status.metrics_listen.is_empty() { "off" } else { &status.metrics_listen });
    if !status.problems.is_empty() {
        let _ = writeln!(out, "\nproblems:");
        for p in &status.problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
    out
}

fn cluster_section(out: &mut String, cluster: &crate::cluster::ClusterState) {
    let api = &cluster.api;
    let connection = match (api.connected, &api.error) {
        (true, _) => "connected".to_string(),
        (false, Some(e)) => format!("not connected: {e}"),
        (false, None) => "connecting".to_string(),
    };
    let _ = writeln!(
        out,
        "\ncluster:     node {} via {} ({connection}; {} connection(s))",
        cluster.node,
        api.server.as_deref().unwrap_or("?"),
        api.connects
    );
    let prefixes: Vec<String> = cluster.pod_prefixes.iter().map(ToString::to_string).collect();
    let _ = writeln!(out, "pod prefix:  {}", if prefixes.is_empty() { "not known yet".into() } else { prefixes.join(", ") });
    let rows: Vec<Vec<String>> = cluster
        .peers
        .iter()
        .flat_map(|p| {
            p.routes.iter().map(|r| {
                vec![
                    p.name.clone(),
                    p.address.to_string(),
                    r.prefix.to_string(),
                    format!("{:?}", r.state).to_lowercase(),
                    r.error.clone().unwrap_or_default(),
                ]
            })
        })
        .collect();
    if !rows.is_empty() {
        table(out, &["PEER", "ADDRESS", "POD_PREFIX", "ROUTE", "WHY"], &rows);
    }
    for problem in &cluster.problems {
        let _ = writeln!(out, "  node {}: {}", problem.node, problem.reason);
    }
}

fn services_section(out: &mut String, status: &Status) {
    let hooks: Vec<String> = status
        .socket_hooks
        .iter()
        .map(|h| format!("{}{}", h.program.trim_start_matches("v6n_sock_"), if h.error.is_some() { " (FAILED)" } else { "" }))
        .collect();
    let cgroup = status.socket_hooks.first().map(|h| h.cgroup.display().to_string());
    let _ = match (&cgroup, &status.services) {
        (None, _) => writeln!(out, "\nservices:    off (services.cgroup unset)"),
        (Some(cgroup), None) => writeln!(out, "\nservices:    socket hooks on {cgroup} ({}); no Services yet", hooks.join(", ")),
        (Some(cgroup), Some(s)) => writeln!(
            out,
            "\nservices:    {} frontend(s), {} backend(s); socket hooks on {cgroup} ({}); from outside to other nodes: {}",
            s.recorded.frontends.len(),
            s.recorded.backends,
            hooks.join(", "),
            s.recorded.remote_backends
        ),
    };
    let Some(services) = &status.services else { return };
    let rows: Vec<Vec<String>> = services
        .recorded
        .frontends
        .iter()
        .map(|state| {
            let (translated, refused) = services.stats.get(&state.id).copied().unwrap_or_default();
            let f = &state.frontend;
            let name = if f.port_name.is_empty() { f.service.clone() } else { format!("{}:{}", f.service, f.port_name) };
            let backends: Vec<String> = f
                .backends
                .iter()
                .map(|b| format!("[{}]:{}{}", b.ip, b.port, if b.terminating { " (terminating)" } else { "" }))
                .collect();
            vec![
                name,
                format!("{:?}", f.kind).to_lowercase(),
                f.address.to_string(),
                if backends.is_empty() { "none (refused)".into() } else { backends.join(" ") },
                f.affinity_seconds.map_or("-".into(), |s| format!("{s}s")),
                match &f.from_outside {
                    None => "-".into(),
                    Some(outside) if outside.is_empty() => "none (refused)".into(),
                    Some(outside) if *outside == f.backends => "all".into(),
                    Some(outside) => format!("{} of {}", outside.len(), f.backends.len()),
                },
                translated.to_string(),
                refused.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        table(out, &["SERVICE", "KIND", "FRONTEND", "BACKENDS", "AFFINITY", "FROM OUTSIDE", "TRANSLATED", "REFUSED"], &rows);
    }
    for problem in &services.recorded.problems {
        let _ = writeln!(out, "  service {}: {}", problem.service, problem.reason);
    }
    if let Some(ended) = &services.ended_connections {
        let _ = writeln!(
            out,
            "  connections ended because their backend left: {} ({} request(s){})",
            ended.connections,
            ended.requests,
            ended.error.as_ref().map(|e| format!("; last failed: {e}")).unwrap_or_default()
        );
    }
}

fn policy_section(out: &mut String, status: &Status) {
    let Some(policy) = &status.policy else {
        return;
    };
    let p = &policy.recorded;
    let _ = writeln!(
        out,
        "\npolicy:      {}; {} pod(s) isolated, {} table entries; last change applied in {:.1} ms",
        p.mode,
        p.pods.len(),
        p.entries,
        p.sync_ms
    );
    let mut rows = Vec::new();
    for pod in &p.pods {
        for (direction, state) in [("ingress", &pod.ingress), ("egress", &pod.egress)] {
            let Some(state) = state else { continue };
            let denied = state.denied(&policy.denied);
            rows.push(vec![
                pod.pod.clone(),
                pod.address.to_string(),
                direction.to_owned(),
                if state.policies.is_empty() { "-".into() } else { state.policies.join(",") },
                state.entries.to_string(),
                denied.to_string(),
                state.error.clone().map_or("-".into(), |e| format!("last good rules stay: {e}")),
            ]);
        }
    }
    if !rows.is_empty() {
        table(out, &["POD", "ADDRESS", "DIRECTION", "POLICIES", "ENTRIES", "DENIED", "ERROR"], &rows);
    }
    for problem in &p.problems {
        let _ = writeln!(out, "  policy {}/{}: {}", problem.namespace, problem.name, problem.message);
    }
}

/// "10 Mbit/s", "1.5 Gbit/s".
fn rate(bits: u64) -> String {
    let (value, unit) = match bits {
        b if b >= 1_000_000_000_000 => (b as f64 / 1e12, "Tbit/s"),
        b if b >= 1_000_000_000 => (b as f64 / 1e9, "Gbit/s"),
        b if b >= 1_000_000 => (b as f64 / 1e6, "Mbit/s"),
        b => (b as f64 / 1e3, "kbit/s"),
    };
    format!("{} {unit}", format!("{value:.3}").trim_end_matches('0').trim_end_matches('.'))
}

fn bandwidth_section(out: &mut String, status: &Status) {
    let Some(bandwidth) = &status.bandwidth else {
        return;
    };
    let b = &bandwidth.recorded;
    let queues: Vec<String> =
        b.uplinks.iter().filter(|q| q.error.is_none()).map(|q| format!("{} {}", q.device, q.qdisc)).collect();
    let on = match (&b.off_because, b.enabled) {
        (_, true) => format!(
            "on (horizon {} ms; {})",
            b.horizon_ms,
            if queues.is_empty() { "no uplink".into() } else { queues.join(", ") }
        ),
        (Some(why), false) => format!("off: {why}"),
        (None, false) => "off".into(),
    };
    let _ = writeln!(
        out,
        "\nbandwidth:   {on}; {} pod(s) limited; pods' TCP: {}, slow start after idle {}, TSO sized {}",
        b.pods.len(),
        b.pod_congestion_control.as_deref().unwrap_or("the kernel's default"),
        if b.pod_slow_start_after_idle { "on" } else { "off" },
        match b.pod_tso_rtt_log {
            0 => "by rate".to_string(),
            v6node_config::BANDWIDTH_POD_TSO_RTT_LOG_DEFAULT => "by rate and round trip (the kernel's default)".to_string(),
            log => format!("by rate and round trip (tcp_tso_rtt_log {log})"),
        }
    );
    for pod in &b.pods {
        let (egress, ingress) = bandwidth.counts.get(&pod.ifindex).copied().unwrap_or_default();
        let way = |limit: Option<u64>, counts: crate::bandwidth::PacerCounts| {
            limit.map(|l| format!("{} ({} packets, {} beyond the horizon)", rate(l), counts.packets, counts.drops))
        };
        let ways: Vec<String> = [("egress", way(pod.limits.egress, egress)), ("ingress", way(pod.limits.ingress, ingress))]
            .into_iter()
            .filter_map(|(name, text)| text.map(|t| format!("{name} {t}")))
            .collect();
        let _ = writeln!(out, "  {} on {}: {}", pod.pod, pod.device, ways.join("; "));
    }
}

fn flows_section(out: &mut String, status: &Status) {
    let Some(flows) = &status.flows else {
        return;
    };
    let total = |pick: fn(&crate::flows::EventCounts) -> u64| flows.events.iter().map(pick).sum::<u64>();
    let _ = writeln!(
        out,
        "\nflows:       {}; Hubble's API {}; events sent {}, rate-limited {}, lost to a full ring {}",
        if flows.recorded.enabled { "on" } else { "off" },
        if flows.recorded.hubble.is_empty() { "off" } else { &flows.recorded.hubble },
        total(|e| e.sent),
        total(|e| e.rate_limited),
        total(|e| e.ring_full)
    );
    if let Some(error) = &flows.recorded.error {
        let _ = writeln!(out, "  Hubble's API not served: {error}");
    }
    if !flows.recorded.kernel_drops.is_empty() {
        let _ = writeln!(out, "  the kernel's drops: {}", flows.recorded.kernel_drops);
    }
    if !flows.recorded.log.is_empty() {
        let _ = writeln!(
            out,
            "  flow log: {}",
            flows.recorded.log_error.as_deref().map_or_else(|| flows.recorded.log.clone(), |e| format!("not written: {e}"))
        );
    }
    if !flows.recorded.relay.is_empty() {
        let _ = writeln!(
            out,
            "  Hubble Relay's API: {}",
            flows.recorded.relay_error.as_deref().map_or_else(
                || format!("on {}", flows.recorded.relay),
                |e| format!("not served on {}: {e}", flows.recorded.relay)
            )
        );
    }
}

fn bgp_section(out: &mut String, bgp: &Bgp) {
    let c = &bgp.configured;
    let announced: Vec<String> = c.announced.iter().map(ToString::to_string).collect();
    let _ = writeln!(
        out,
        "\nbgp:         AS {}, router ID {}, announcing {}",
        c.asn,
        opt(c.router_id),
        if announced.is_empty() { "nothing yet".into() } else { announced.join(", ") }
    );
    let rows: Vec<Vec<String>> = c
        .peers
        .iter()
        .map(|p| {
            let session = bgp.sessions.iter().find(|s| s.name == p.name);
            vec![
                p.address.to_string(),
                p.asn.to_string(),
                session.map_or("unknown".into(), |s| s.state.clone()),
                session.map_or(String::new(), |s| s.routes.clone()),
                session.map_or(String::new(), |s| s.last_error.clone()),
            ]
        })
        .collect();
    table(out, &["PEER", "ASN", "SESSION", "ROUTES", "LAST_ERROR"], &rows);
}

pub fn show(paths: &Paths, json: bool) -> Result<ExitCode> {
    let status = collect(paths)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", human(&status));
    }
    Ok(if !status.agent.running {
        ExitCode::from(3)
    } else if status.healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
