// SPDX-License-Identifier: Apache-2.0
//! Load balancers' health checks for `externalTrafficPolicy: Local`: on each
//! `healthCheckNodePort` the node answers as kube-proxy does, 200 while the
//! Service has endpoints on this node and 503 while it has none, with the
//! same JSON body.
//!
//! The agent only writes what to answer (`health-checks.json` in its state
//! directory). The listeners run in `v6node-dataplane health-checks`, its
//! own unit without capabilities or BPF, so the one part of the dataplane
//! that anybody on the network may talk to holds no privilege; the agent
//! itself stays behind IPAddressDeny.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, task::JoinHandle};
use v6node_k8s::services::HealthCheck;

use crate::{files, paths::Paths};

/// Writes the health checks to answer; true when the file changed.
pub fn write(paths: &Paths, checks: &[HealthCheck]) -> Result<bool> {
    let file = paths.health_checks_file();
    let mut text = serde_json::to_string_pretty(checks).context("encoding health checks")?;
    text.push('\n');
    if std::fs::read_to_string(&file).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    // Readable by the unprivileged listener's dynamic user.
    files::write_atomic(&file, text.as_bytes(), Some(0o644))?;
    Ok(true)
}

/// What a health check answers: kube-proxy's status codes and body.
fn answer(check: &HealthCheck) -> (StatusCode, String) {
    let status = if check.local_endpoints > 0 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = serde_json::json!({
        "service": { "namespace": check.namespace, "name": check.name },
        "localEndpoints": check.local_endpoints,
        "serviceProxyHealthy": true,
    });
    (status, body.to_string())
}

async fn serve_connection(stream: tokio::net::TcpStream, check: Arc<Mutex<HealthCheck>>) {
    let service = service_fn(move |_request: Request<hyper::body::Incoming>| {
        let snapshot = check.lock().expect("health check lock").clone();
        let (status, body) = answer(&snapshot);
        let local = snapshot.local_endpoints;
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .header("x-content-type-options", "nosniff")
            .header("x-load-balancing-endpoint-weight", local.to_string())
            .body(Full::new(Bytes::from(body)));
        async move { Ok::<_, Infallible>(response.expect("static response parts")) }
    });
    if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
        log::debug!("health check connection: {e}");
    }
}

struct Listener {
    check: Arc<Mutex<HealthCheck>>,
    task: JoinHandle<()>,
}

/// Opens, updates and closes one listener per health check port to match
/// `checks`; a port that cannot be bound is logged and tried again later.
fn reconcile(listeners: &mut BTreeMap<u16, Listener>, checks: &[HealthCheck]) {
    let wanted: BTreeMap<u16, &HealthCheck> = checks.iter().map(|c| (c.port, c)).collect();
    listeners.retain(|port, listener| {
        let keep = wanted.contains_key(port);
        if !keep {
            listener.task.abort();
            log::info!("health check port {port}: closed");
        }
        keep
    });
    for (port, check) in wanted {
        if let Some(listener) = listeners.get(&port) {
            *listener.check.lock().expect("health check lock") = check.clone();
            continue;
        }
        let bound = std::net::TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(TcpListener::from_std);
        match bound {
            Ok(listener) => {
                let shared = Arc::new(Mutex::new(check.clone()));
                let for_task = shared.clone();
                let task = tokio::spawn(async move {
                    loop {
                        if let Ok((stream, _)) = listener.accept().await {
                            tokio::spawn(serve_connection(stream, for_task.clone()));
                        }
                    }
                });
                log::info!("health check port {port}: answering for {}/{}", check.namespace, check.name);
                listeners.insert(port, Listener { check: shared, task });
            }
            Err(e) => log::error!("health check port {port} ({}/{}): {e}", check.namespace, check.name),
        }
    }
}

fn read(file: &Path) -> Result<Vec<HealthCheck>> {
    match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("reading {}", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", file.display())),
    }
}

/// Serves the health checks the agent writes, following the file as it
/// changes (checked twice a second), until the process is stopped.
pub async fn run(paths: &Paths) -> Result<()> {
    let file = paths.health_checks_file();
    let mut listeners = BTreeMap::new();
    let mut seen: Option<SystemTime> = None;
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    loop {
        let modified = std::fs::metadata(&file).and_then(|m| m.modified()).ok();
        if modified != seen || seen.is_none() {
            match read(&file) {
                Ok(checks) => {
                    reconcile(&mut listeners, &checks);
                    if listeners.len() == checks.len() {
                        seen = modified;
                    }
                }
                Err(e) => log::error!("{e:#}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_as_kube_proxy_does() {
        let mut check = HealthCheck { port: 32000, namespace: "default".into(), name: "web".into(), local_endpoints: 2 };
        let (status, body) = answer(&check);
        assert_eq!(status, StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({ "service": { "namespace": "default", "name": "web" }, "localEndpoints": 2, "serviceProxyHealthy": true })
        );
        check.local_endpoints = 0;
        assert_eq!(answer(&check).0, StatusCode::SERVICE_UNAVAILABLE);
    }
}
