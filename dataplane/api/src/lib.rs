// SPDX-License-Identifier: Apache-2.0
//! The agent's endpoint API: how `v6node-cni` hands a pod's device pair to
//! the agent, which owns BPF attachments, the endpoint map and BIG TCP.
//!
//! One JSON request per connection on a Unix stream socket
//! (`/run/v6node/endpoints.sock`), answered by one JSON [`Response`]. The
//! socket is root's only (mode 0600): whoever may add endpoints may steer
//! the node's traffic.

use std::{
    io::{Read, Write},
    net::{Ipv6Addr, Shutdown},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use serde::{Deserialize, Serialize};

pub const DEFAULT_SOCKET: &str = "/run/v6node/endpoints.sock";

/// Largest request or response read; an endpoint list of a few hundred pods
/// fits many times over.
pub const MAX_MESSAGE: u64 = 4 << 20;

/// The kind of device pair a pod is connected by, as the CNI plugin made it
/// (what the configuration asks for, `pods.device`, may also be `auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PodDevice {
    /// netkit (Linux 6.7+), L3 mode: BPF runs inside the device.
    Netkit,
    /// veth, for kernels without netkit: the same programs on tcx.
    Veth,
}

impl PodDevice {
    pub fn as_str(self) -> &'static str {
        match self {
            PodDevice::Netkit => "netkit",
            PodDevice::Veth => "veth",
        }
    }
}

/// A transport protocol the node translates ports of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The IP protocol number the service tables are keyed by.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// The address of a node's pod prefix that IPAM never gives a pod: the
/// prefix's last. Connections from outside to a Service backend on another
/// node leave this node from it (bpf/lib/nodeport.h), so the backend's
/// replies are routed back here. None for a prefix too small to spare one.
pub fn masquerade_address(network: std::net::Ipv6Addr, prefix_len: u8) -> Option<std::net::Ipv6Addr> {
    if prefix_len >= 127 {
        return None;
    }
    let host_bits = u128::MAX >> prefix_len;
    Some((u128::from(network) | host_bits).into())
}

/// A pod's hostPort, as the runtime hands it to CNI (`portMappings`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// Only this node address; `None`: every address of the node, and ::1.
    pub host_ip: Option<Ipv6Addr>,
}

/// What the CNI plugin knows about a pod when it asks for it to be routed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub container_id: String,
    /// The device's name inside the pod (CNI_IFNAME).
    pub ifname: String,
    pub netns: String,
    /// "namespace/name" from the runtime's K8S_POD_* arguments, if given.
    pub pod: Option<String>,
    pub address: Ipv6Addr,
    pub device: PodDevice,
    /// Host side of the pair.
    pub host_device: String,
    /// The pod side, still in the host's namespace while the agent sets its
    /// BIG TCP sizes; the plugin moves it into the pod afterwards.
    pub peer_device: String,
    /// The pod's hostPorts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMapping>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Route the endpoint: BIG TCP on both ends, programs attached, address
    /// in the endpoint map. Replaces an earlier endpoint of the same
    /// container and interface.
    Add(Endpoint),
    /// Forget the endpoint; a missing one is not an error (CNI DEL is
    /// idempotent).
    Del { container_id: String, ifname: String },
    /// The endpoints the agent routes now.
    List,
}

/// An endpoint as the agent routes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointState {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub host_ifindex: u32,
    pub host_mac: String,
    pub pod_mac: String,
    /// GSO/GRO maximum size set on both ends.
    pub bigtcp: Option<u32>,
    /// Seconds since the epoch.
    pub added_at: u64,
    /// Sysctls the plugin sets in the pod's namespace (its TCP settings,
    /// `[bandwidth]`), as paths under /proc/sys and values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_sysctls: Vec<(String, String)>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointState>,
}

impl Response {
    pub fn ok(endpoints: Vec<EndpointState>) -> Response {
        Response { ok: true, error: None, endpoints }
    }

    pub fn error(message: impl Into<String>) -> Response {
        Response { ok: false, error: Some(message.into()), endpoints: Vec::new() }
    }
}

/// A link-layer address as `ip link` prints it (what the API carries).
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Why a call to the agent failed.
#[derive(Debug)]
pub enum CallError {
    /// No agent listening: not running, or not started yet.
    Unavailable(std::io::Error),
    /// The agent answered with an error.
    Refused(String),
    /// The connection broke or the answer made no sense.
    Protocol(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unavailable(e) => write!(f, "the v6node dataplane agent is not reachable: {e}"),
            CallError::Refused(e) => write!(f, "the v6node dataplane agent refused: {e}"),
            CallError::Protocol(e) => write!(f, "talking to the v6node dataplane agent: {e}"),
        }
    }
}

impl std::error::Error for CallError {}

/// Sends one request and waits (at most `timeout`) for the answer.
pub fn call(socket: &Path, request: &Request, timeout: Duration) -> Result<Response, CallError> {
    let mut stream = UnixStream::connect(socket).map_err(CallError::Unavailable)?;
    let protocol = |e: std::io::Error| CallError::Protocol(e.to_string());
    stream.set_read_timeout(Some(timeout)).map_err(protocol)?;
    stream.set_write_timeout(Some(timeout)).map_err(protocol)?;
    let body = serde_json::to_vec(request).map_err(|e| CallError::Protocol(e.to_string()))?;
    stream.write_all(&body).map_err(protocol)?;
    stream.shutdown(Shutdown::Write).map_err(protocol)?;
    let mut answer = Vec::new();
    stream.take(MAX_MESSAGE).read_to_end(&mut answer).map_err(protocol)?;
    let response: Response =
        serde_json::from_slice(&answer).map_err(|e| CallError::Protocol(format!("unreadable answer: {e}")))?;
    if response.ok {
        Ok(response)
    } else {
        Err(CallError::Refused(response.error.unwrap_or_else(|| "no reason given".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masquerade_address_is_the_prefixs_last() {
        let net: std::net::Ipv6Addr = "fd00:10:244:1::".parse().unwrap();
        assert_eq!(masquerade_address(net, 64), Some("fd00:10:244:1:ffff:ffff:ffff:ffff".parse().unwrap()));
        assert_eq!(masquerade_address(net, 120), Some("fd00:10:244:1::ff".parse().unwrap()));
        assert_eq!(masquerade_address(net, 127), None);
    }

    #[test]
    fn requests_are_tagged_by_operation() {
        let del = Request::Del { container_id: "c1".into(), ifname: "eth0".into() };
        assert_eq!(serde_json::to_string(&del).unwrap(), r#"{"op":"del","container_id":"c1","ifname":"eth0"}"#);
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"list"}"#).unwrap(), Request::List);
        assert!(serde_json::from_str::<Request>(r#"{"op":"format"}"#).is_err());
    }
}
