// SPDX-License-Identifier: Apache-2.0
//! The flow log, for operators without Hubble: every flow a JSON line in a
//! file, rotated by size (`[flows] log_path`, `log_max_bytes`,
//! `log_rotated_files`). A follower of the hub formats flows on the agent's
//! runtime; a thread of its own writes and rotates, so a slow disk never
//! stalls the agent: what the thread cannot take in time is counted as lost
//! (`v6node_flows_lost_total{cause="log"}`) and said in the log itself.

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
    sync::{
        atomic::Ordering,
        mpsc::{sync_channel, Receiver, TrySendError},
    },
    time::Duration,
};

use anyhow::{Context, Result};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use v6node_hubble::flow::{Endpoint, Flow, Ip, Policy, TrafficDirection, Verdict};

use super::{counts::LOST_TO_LOG, Hub};

/// How often the formatted lines go to the writer, and how many chunks may
/// wait for it.
const CHUNK_EVERY: Duration = Duration::from_millis(200);
const CHUNKS_WAITING: usize = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub path: PathBuf,
    pub max_bytes: u64,
    pub rotated_files: u32,
}

#[derive(Serialize)]
struct Side<'a> {
    ip: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u32>,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pod: &'a str,
}

/// One line of the log: the flow as `hubble observe` would print it, in
/// fields a script reads without Hubble's protobuf.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    node: &'a str,
    verdict: &'a str,
    /// Our reason, and a translation's two sides (the flow's summary).
    reason: &'a str,
    direction: &'a str,
    protocol: &'a str,
    source: Side<'a>,
    destination: Side<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_by: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    denied_by: Vec<String>,
}

fn policy_names(policies: &[Policy]) -> Vec<String> {
    policies.iter().map(|p| if p.namespace.is_empty() { p.name.clone() } else { format!("{}/{}", p.namespace, p.name) }).collect()
}

/// The JSON line of `flow`, newline included.
pub fn line(flow: &Flow) -> Vec<u8> {
    use v6node_hubble::flow::layer4::Protocol;
    let time =
        flow.time.as_ref().and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok()).map(|t| t.to_string()).unwrap_or_default();
    let no_ip = Ip::default();
    let ip = flow.ip.as_ref().unwrap_or(&no_ip);
    let (protocol, ports) = match flow.l4.as_ref().and_then(|l| l.protocol.as_ref()) {
        Some(Protocol::Tcp(t)) => ("tcp", Some((t.source_port, t.destination_port))),
        Some(Protocol::Udp(u)) => ("udp", Some((u.source_port, u.destination_port))),
        Some(Protocol::Sctp(s)) => ("sctp", Some((s.source_port, s.destination_port))),
        Some(Protocol::IcmPv6(_)) => ("icmpv6", None),
        Some(Protocol::IcmPv4(_)) => ("icmpv4", None),
        _ => ("", None),
    };
    let endpoint = |e: &Option<Endpoint>| e.as_ref().map(|e| (e.namespace.clone(), e.pod_name.clone())).unwrap_or_default();
    let (source_ns, source_pod) = endpoint(&flow.source);
    let (destination_ns, destination_pod) = endpoint(&flow.destination);
    #[allow(deprecated)]
    let summary = flow.summary.as_str();
    let line = Line {
        time,
        node: &flow.node_name,
        verdict: Verdict::try_from(flow.verdict).map(|v| v.as_str_name()).unwrap_or("VERDICT_UNKNOWN"),
        reason: summary,
        direction: match TrafficDirection::try_from(flow.traffic_direction) {
            Ok(TrafficDirection::Ingress) => "ingress",
            Ok(TrafficDirection::Egress) => "egress",
            _ => "unknown",
        },
        protocol,
        source: Side { ip: &ip.source, port: ports.map(|p| p.0), namespace: &source_ns, pod: &source_pod },
        destination: Side { ip: &ip.destination, port: ports.map(|p| p.1), namespace: &destination_ns, pod: &destination_pod },
        service: flow.destination_service.as_ref().map(|s| format!("{}/{}", s.namespace, s.name)),
        allowed_by: policy_names(if flow.ingress_allowed_by.is_empty() {
            &flow.egress_allowed_by
        } else {
            &flow.ingress_allowed_by
        }),
        denied_by: policy_names(if flow.ingress_denied_by.is_empty() { &flow.egress_denied_by } else { &flow.ingress_denied_by }),
    };
    let mut out = serde_json::to_vec(&line).expect("a flow's line serializes");
    out.push(b'\n');
    out
}

/// The file being written, rotated once it would pass `max_bytes`: PATH
/// becomes PATH.1, PATH.1 PATH.2, and so on; the oldest beyond
/// `rotated_files` is removed.
struct RotatingFile {
    config: LogConfig,
    file: File,
    size: u64,
}

fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl RotatingFile {
    fn open(config: LogConfig) -> Result<RotatingFile> {
        if let Some(dir) = config.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&config.path)
            .with_context(|| format!("opening the flow log {}", config.path.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RotatingFile { config, file, size })
    }

    fn write(&mut self, chunk: &[u8]) -> Result<()> {
        if self.size > 0 && self.size + chunk.len() as u64 > self.config.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(chunk).with_context(|| format!("writing the flow log {}", self.config.path.display()))?;
        self.size += chunk.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> Result<()> {
        let path = &self.config.path;
        let _ = std::fs::remove_file(rotated(path, self.config.rotated_files));
        for n in (1..self.config.rotated_files).rev() {
            let _ = std::fs::rename(rotated(path, n), rotated(path, n + 1));
        }
        std::fs::rename(path, rotated(path, 1)).with_context(|| format!("rotating the flow log {}", path.display()))?;
        *self = RotatingFile::open(self.config.clone())?;
        Ok(())
    }
}

/// Writes chunks until their sender is gone.
fn write_chunks(mut file: RotatingFile, chunks: Receiver<Vec<u8>>) {
    let mut failing = false;
    for chunk in chunks {
        match file.write(&chunk) {
            Ok(()) => failing = false,
            Err(e) => {
                if !failing {
                    log::error!("{e:#}");
                }
                failing = true;
                LOST_TO_LOG.fetch_add(chunk.iter().filter(|b| **b == b'\n').count() as u64, Ordering::Relaxed);
            }
        }
    }
}

/// Opens the log and follows `hub` into it until aborted (or the hub is
/// gone); a log that cannot be opened is an error here and now.
pub fn start(hub: &Hub, config: LogConfig) -> Result<tokio::task::JoinHandle<()>> {
    let file = RotatingFile::open(config)?;
    let (tx, rx) = sync_channel::<Vec<u8>>(CHUNKS_WAITING);
    std::thread::Builder::new()
        .name("flow-log".into())
        .spawn(move || write_chunks(file, rx))
        .context("starting the flow log's writer")?;
    let mut follow = hub.follow();
    Ok(tokio::spawn(async move {
        let mut chunk = Vec::new();
        let mut lines = 0u64;
        let mut tick = tokio::time::interval(CHUNK_EVERY);
        loop {
            tokio::select! {
                flow = follow.recv() => match flow {
                    Ok(flow) => {
                        chunk.extend_from_slice(&line(&flow));
                        lines += 1;
                        continue;
                    }
                    Err(RecvError::Lagged(missed)) => {
                        LOST_TO_LOG.fetch_add(missed, Ordering::Relaxed);
                        chunk.extend_from_slice(format!("{{\"lost\":{missed}}}\n").as_bytes());
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick() => {}
            }
            if chunk.is_empty() {
                continue;
            }
            match tx.try_send(std::mem::take(&mut chunk)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    LOST_TO_LOG.fetch_add(lines, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return log::error!("the flow log's writer stopped"),
            }
            lines = 0;
        }
    }))
}

#[cfg(test)]
mod tests {
    use prost_types::Timestamp;
    use v6node_hubble::flow::{layer4::Protocol, Ip, Layer4, Tcp};

    use super::*;

    fn flow() -> Flow {
        #[allow(deprecated)]
        Flow {
            time: Some(Timestamp { seconds: 1_795_000_000, nanos: 5 }),
            node_name: "node-a".into(),
            verdict: Verdict::Dropped as i32,
            summary: "policy_denied_ingress".into(),
            traffic_direction: TrafficDirection::Ingress as i32,
            ip: Some(Ip { source: "fd00::1".into(), destination: "fd00::2".into(), ..Default::default() }),
            l4: Some(Layer4 {
                protocol: Some(Protocol::Tcp(Tcp { source_port: 40000, destination_port: 8080, ..Default::default() })),
            }),
            source: Some(Endpoint { namespace: "team-a".into(), pod_name: "client".into(), ..Default::default() }),
            ingress_denied_by: vec![Policy { name: "deny-all".into(), namespace: "team-a".into(), ..Default::default() }],
            ..Default::default()
        }
    }

    #[test]
    fn a_flow_is_one_json_line() {
        let line = String::from_utf8(line(&flow())).unwrap();
        assert_eq!(
            line,
            concat!(
                r#"{"time":"2026-11-18T11:06:40.000000005Z","node":"node-a","verdict":"DROPPED","reason":"policy_denied_ingress","#,
                r#""direction":"ingress","protocol":"tcp","source":{"ip":"fd00::1","port":40000,"namespace":"team-a","pod":"client"},"#,
                r#""destination":{"ip":"fd00::2","port":8080},"denied_by":["team-a/deny-all"]}"#,
                "\n"
            )
        );
    }

    #[test]
    fn the_file_rotates_by_size_and_keeps_so_many() {
        let dir = std::env::temp_dir().join(format!("v6node-flow-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config = LogConfig { path: dir.join("flows.jsonl"), max_bytes: 100, rotated_files: 2 };
        let mut file = RotatingFile::open(config.clone()).unwrap();
        for n in 0..5 {
            file.write(format!("{{\"n\":{n},\"pad\":\"{}\"}}\n", "x".repeat(40)).as_bytes()).unwrap();
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        // 55 bytes a line: one and a half fit, so each file holds one line.
        assert!(read(&config.path).contains("\"n\":4"));
        assert!(read(&rotated(&config.path, 1)).contains("\"n\":3"));
        assert!(read(&rotated(&config.path, 2)).contains("\"n\":2"));
        assert!(!rotated(&config.path, 3).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
