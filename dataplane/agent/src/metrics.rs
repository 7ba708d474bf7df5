// SPDX-License-Identifier: Apache-2.0
//! Prometheus text exposition of the counters and the agent's state, on
//! the address `metrics.listen` chooses (off by default).

use std::{
    convert::Infallible,
    fmt::Write as _,
    sync::{Arc, Mutex},
};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, UnixListener},
    task::JoinHandle,
};
use v6node_config::{Config, MetricsListen};

use crate::{
    counters,
    paths::Paths,
    state::{self, Shared, State},
};

/// The endpoint as the daemon sees it: started, moved or stopped as
/// `metrics.listen` says.
#[derive(Default)]
pub struct Server {
    /// What it listens on and the task serving it.
    running: Option<(String, JoinHandle<()>)>,
}

impl Server {
    pub async fn sync(&mut self, shared: &Shared, config: &Config) {
        let listen = config.metrics.listen.as_ref().map(|l| l.to_string()).unwrap_or_default();
        if self.running.as_ref().map(|(l, _)| l.as_str()).unwrap_or("") == listen {
            return;
        }
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
        let mut error = None;
        if let Some(target) = &config.metrics.listen {
            match start(target, shared.paths.clone(), shared.state()).await {
                Ok(task) => {
                    log::info!("metrics on {listen}");
                    self.running = Some((listen.clone(), task));
                }
                Err(e) => {
                    log::error!("{e:#}");
                    error = Some(format!("{e:#}"));
                }
            }
        }
        shared.update(|s| s.metrics = state::Metrics { listen, error });
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

pub fn render(paths: &Paths, state: &State) -> String {
    let mut out = String::new();
    let rows = counters::read(&paths.pin_dir).unwrap_or_default();
    for (name, help, pick) in [
        (
            "v6node_dataplane_packets_total",
            "Packets seen by v6node's programs, by device, direction and reason (pass or a drop reason).",
            0,
        ),
        ("v6node_dataplane_bytes_total", "Bytes seen by v6node's programs, by device, direction and reason.", 1),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for row in &rows {
            let value = if pick == 0 { row.packets } else { row.bytes };
            let _ = writeln!(
                out,
                "{name}{{device=\"{}\",direction=\"{}\",reason=\"{}\"}} {value}",
                escape(&row.device),
                row.direction,
                row.reason
            );
        }
    }
    flow_families(&mut out, paths);
    bandwidth_families(&mut out, paths, state);
    let attached = state.attachments.iter().filter(|a| a.error.is_none()).count();
    let reload_ok = state.last_reload.as_ref().is_none_or(|r| r.ok);
    let gauges = [
        ("v6node_dataplane_config_generation", "Configurations applied since the agent started.", state.generation as f64),
        (
            "v6node_dataplane_last_reload_success",
            "1 if the last reload was applied, 0 if it was refused.",
            f64::from(u8::from(reload_ok)),
        ),
        ("v6node_dataplane_attachments", "Device and direction pairs with a v6node program attached.", attached as f64),
        (
            "v6node_dataplane_deny_sources",
            "Prefixes in the source deny table.",
            state.deny_sources.as_ref().map_or(0.0, |d| d.entries as f64),
        ),
        (
            "v6node_dataplane_nat64_eam_entries",
            "Explicit address mappings in the translator's tables.",
            state.nat64.as_ref().map_or(0.0, |n| n.eam.entries as f64),
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    }
    let name = "v6node_dataplane_uplink_xdp";
    let _ = writeln!(
        out,
        "# HELP {name} 1 if the uplink runs native XDP before tc, 0 if tc alone (status says why).\n# TYPE {name} gauge"
    );
    for uplink in crate::attach::uplink_paths(&state.attachments) {
        let _ = writeln!(out, "{name}{{device=\"{}\"}} {}", escape(&uplink.device), u8::from(uplink.xdp));
    }
    if let Some(pool) = state.nat64.as_ref().and_then(|n| n.stateful.as_ref()) {
        for (name, help, value) in [
            (
                "v6node_nat64_pool_ports_in_use",
                "Ports (ICMP: echo identifiers) of a stateful NAT64 pool address held by bindings.",
                (|u: &crate::nat::stateful::PoolUse| u.in_use) as fn(&crate::nat::stateful::PoolUse) -> usize,
            ),
            ("v6node_nat64_pool_ports", "Ports of a stateful NAT64 pool address, in use or free.", |u| u.ports),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for u in &pool.pool {
                let _ = writeln!(out, "{name}{{address=\"{}\",protocol=\"{}\"}} {}", u.address, u.protocol, value(u));
            }
        }
        let name = "v6node_nat64_bindings_expired_total";
        let _ = writeln!(
            out,
            "# HELP {name} Stateful NAT64 bindings ended by the sweep.\n# TYPE {name} counter\n{name} {}",
            pool.expired
        );
    }
    if let Some(gateway) = state.nat64.as_ref().and_then(|n| n.nat46.as_ref()) {
        let name = "v6node_nat46_flows";
        let _ = writeln!(out, "# HELP {name} Flows of a NAT46 gateway backend, as of the last sweep.\n# TYPE {name} gauge");
        for frontend in &gateway.frontends {
            for backend in &frontend.backends {
                let _ = writeln!(
                    out,
                    "{name}{{frontend=\"{}\",protocol=\"{}\",backend=\"{}\"}} {}",
                    frontend.frontend, frontend.protocol, backend.address, backend.flows
                );
            }
        }
        let name = "v6node_nat46_flows_expired_total";
        let _ = writeln!(
            out,
            "# HELP {name} NAT46 gateway flows ended by the sweep.\n# TYPE {name} counter\n{name} {}",
            gateway.expired
        );
    }
    if let Some(services) = &state.services {
        let stats = crate::services::stats(&paths.pin_dir).unwrap_or_default();
        // (name, help, type, the value from (translated, refused) and the backend count)
        type Family = (&'static str, &'static str, &'static str, fn((u64, u64), usize) -> u64);
        let families: [Family; 3] = [
            (
                "v6node_service_translated_total",
                "Sockets given a backend of a Service frontend, by service, port and frontend.",
                "counter",
                |(translated, _), _| translated,
            ),
            (
                "v6node_service_refused_total",
                "Connections to a Service frontend refused for want of a backend.",
                "counter",
                |(_, refused), _| refused,
            ),
            ("v6node_service_backends", "Backends a Service frontend chooses from.", "gauge", |_, backends| backends as u64),
        ];
        for (name, help, kind, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for state in &services.frontends {
                let f = &state.frontend;
                let _ = writeln!(
                    out,
                    "{name}{{service=\"{}\",port=\"{}\",frontend=\"{}\"}} {}",
                    escape(&f.service),
                    escape(&f.port_name),
                    escape(&f.address.to_string()),
                    value(stats.get(&state.id).copied().unwrap_or_default(), f.backends.len())
                );
            }
        }
    }
    if let Some(ended) = &state.ended_connections {
        let name = "v6node_service_connections_ended_total";
        let _ = writeln!(
            out,
            "# HELP {name} Connections ended because the backend a Service gave them left it.\n# TYPE {name} counter\n{name} {}",
            ended.connections
        );
        let name = "v6node_service_connections_end_failures_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests to end such connections that failed or ended them only in part.\n# TYPE {name} counter\n{name} {}",
            ended.failures
        );
    }
    if let Some(policy) = &state.policy {
        let denied = crate::policy::denied_by_id(&paths.pin_dir);
        let name = "v6node_policy_denied_packets_total";
        let _ = writeln!(
            out,
            "# HELP {name} Packets no rule of a pod's policies allowed (in audit mode: passed, and would have been denied), by pod, direction and the policies that select it.\n# TYPE {name} counter"
        );
        for pod in &policy.pods {
            for (direction, rules) in [("ingress", &pod.ingress), ("egress", &pod.egress)] {
                let Some(rules) = rules else { continue };
                let _ = writeln!(
                    out,
                    "{name}{{pod=\"{}\",direction=\"{direction}\",policies=\"{}\",mode=\"{}\"}} {}",
                    escape(&pod.pod),
                    escape(&rules.policies.join(",")),
                    policy.mode,
                    rules.denied(&denied)
                );
            }
        }
        let name = "v6node_policy_errors";
        let errors = policy.pods.iter().flat_map(|p| [&p.ingress, &p.egress]).flatten().filter(|r| r.error.is_some()).count();
        let _ = writeln!(
            out,
            "# HELP {name} Pod directions whose wanted rules are not in force (their last good ones are): see status.\n# TYPE {name} gauge\n{name} {errors}"
        );
    }
    let name = "v6node_dataplane_bigtcp_gso_max_size_bytes";
    let _ = writeln!(out, "# HELP {name} GSO maximum size the agent set, by device.\n# TYPE {name} gauge");
    for report in &state.bigtcp {
        if let Some(size) = report.sizes.gso_max_size {
            let _ = writeln!(out, "{name}{{device=\"{}\"}} {size}", escape(&report.device));
        }
    }
    out
}

async fn serve_connection<S>(io: S, paths: Arc<Paths>, state: Arc<Mutex<State>>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let paths = paths.clone();
        let state = state.clone();
        async move {
            let response = if request.uri().path() == "/metrics" {
                let snapshot = state.lock().expect("state lock").clone();
                Response::builder()
                    .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                    .body(Full::new(Bytes::from(render(&paths, &snapshot))))
            } else {
                Response::builder().status(StatusCode::NOT_FOUND).body(Full::new(Bytes::from("try /metrics\n")))
            };
            Ok::<_, Infallible>(response.expect("static response parts"))
        }
    });
    if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(io), service).await {
        log::debug!("metrics connection: {e}");
    }
}

/// Each limited pod's limit and what its pacers saw, by pod and direction
/// (only the ways it is limited).
fn bandwidth_families(out: &mut String, paths: &Paths, state: &State) {
    let pods = state.bandwidth.as_ref().map(|b| b.pods.as_slice()).unwrap_or_default();
    let counts = crate::bandwidth::counts(&paths.pin_dir);
    let mut rows = Vec::new();
    for pod in pods {
        let (egress, ingress) = counts.get(&pod.ifindex).copied().unwrap_or_default();
        for (direction, limit, seen) in [("egress", pod.limits.egress, egress), ("ingress", pod.limits.ingress, ingress)] {
            if let Some(limit) = limit {
                rows.push((escape(&pod.pod), direction, [limit, seen.packets, seen.bytes, seen.drops]));
            }
        }
    }
    for (column, (name, kind, help)) in [
        ("v6node_bandwidth_limit_bits_per_second", "gauge", "A pod's rate limit, from its bandwidth annotation."),
        ("v6node_bandwidth_packets_total", "counter", "Packets of a limited pod given a departure time."),
        ("v6node_bandwidth_bytes_total", "counter", "Bytes (frames on the wire) of a limited pod given a departure time."),
        ("v6node_bandwidth_drops_total", "counter", "Packets of a limited pod dropped as due beyond the horizon."),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (pod, direction, values) in &rows {
            let _ = writeln!(out, "{name}{{pod=\"{pod}\",direction=\"{direction}\"}} {}", values[column]);
        }
    }
}

/// Flows the agent made of the datapath's events, and what became of the
/// events themselves (sent, held back by the rate limit, lost to a full
/// ring) by reason, from the kernel now.
fn flow_families(out: &mut String, paths: &Paths) {
    let name = "v6node_flows_total";
    let _ = writeln!(
        out,
        "# HELP {name} Flows (new flows and drops) the agent read from the datapath, by verdict, reason, protocol and direction.\n# TYPE {name} counter"
    );
    for (l, count) in crate::flows::counts::snapshot() {
        let _ = writeln!(
            out,
            "{name}{{verdict=\"{}\",reason=\"{}\",protocol=\"{}\",direction=\"{}\"}} {count}",
            l.verdict, l.reason, l.protocol, l.direction
        );
    }
    let name = "v6node_flow_events_total";
    let _ = writeln!(
        out,
        "# HELP {name} The datapath's flow events by reason and what became of them: sent, rate_limited, ring_full.\n# TYPE {name} counter"
    );
    for row in crate::flows::event_counts(&paths.pin_dir).unwrap_or_default() {
        for (outcome, value) in [("sent", row.sent), ("rate_limited", row.rate_limited), ("ring_full", row.ring_full)] {
            let _ = writeln!(out, "{name}{{reason=\"{}\",outcome=\"{outcome}\"}} {value}", row.reason);
        }
    }
    let name = "v6node_flows_lost_total";
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    use crate::flows::counts::{LOST_TO_FOLLOWERS, LOST_TO_LOG, UNREADABLE};
    let (slow, unreadable, log) = (load(&LOST_TO_FOLLOWERS), load(&UNREADABLE), load(&LOST_TO_LOG));
    let _ = writeln!(
        out,
        "# HELP {name} Flows lost on the agent's side, by cause: a client too slow to follow, an event it could not read, the flow log behind.\n# TYPE {name} counter\n{name}{{cause=\"slow_client\"}} {slow}\n{name}{{cause=\"unreadable_event\"}} {unreadable}\n{name}{{cause=\"log\"}} {log}"
    );
}

/// Binds now (so a bad address is reported at once) and serves in a task.
async fn start(listen: &MetricsListen, paths: Arc<Paths>, state: Arc<Mutex<State>>) -> Result<JoinHandle<()>> {
    Ok(match listen {
        MetricsListen::Tcp(addr) => {
            let listener = TcpListener::bind(addr).await.with_context(|| format!("binding metrics to {addr}"))?;
            tokio::spawn(async move {
                loop {
                    if let Ok((stream, _)) = listener.accept().await {
                        tokio::spawn(serve_connection(stream, paths.clone(), state.clone()));
                    }
                }
            })
        }
        MetricsListen::Unix(path) => {
            // A socket file left by an agent that was killed would make bind fail.
            let _ = std::fs::remove_file(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            let listener = UnixListener::bind(path).with_context(|| format!("binding metrics to {}", path.display()))?;
            tokio::spawn(async move {
                loop {
                    if let Ok((stream, _)) = listener.accept().await {
                        tokio::spawn(serve_connection(stream, paths.clone(), state.clone()));
                    }
                }
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_for_the_text_format() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
    }

    #[test]
    fn every_family_has_help_and_type_even_with_no_counters() {
        let paths =
            Paths { pin_dir: "/nonexistent".into(), state_dir: "/s".into(), config_root: "/".into(), cni_conf_dir: "/c".into() };
        let text = render(&paths, &State::default());
        for family in [
            "v6node_dataplane_packets_total",
            "v6node_dataplane_config_generation",
            "v6node_dataplane_last_reload_success",
            "v6node_flows_total",
            "v6node_flow_events_total",
        ] {
            assert!(text.contains(&format!("# TYPE {family} ")), "{family} in\n{text}");
        }
        assert!(text.contains("v6node_dataplane_last_reload_success 1\n"));
    }
}
