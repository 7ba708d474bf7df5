// SPDX-License-Identifier: Apache-2.0
//! `v6node-cni`: v6node's CNI plugin (CNI spec 1.1). One netkit pair per pod
//! in L3 mode (veth where the kernel has no netkit), IPv6 only, an address
//! from the node's pod prefix; the dataplane agent attaches the BPF programs,
//! routes the pod in BPF and sets BIG TCP on both ends.
//!
//! Called by the container runtime: the command and the attachment in
//! CNI_* environment variables, the network configuration on stdin, the
//! result (or a CNI error object) on stdout.

mod ipam;
mod net;

use std::{
    collections::BTreeSet,
    io::Read,
    net::Ipv6Addr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use ipnet::Ipv6Net;
use serde::Deserialize;
use serde_json::{json, Value};
use v6node_api::{CallError, Endpoint, PortMapping, Protocol, Request, DEFAULT_SOCKET};

use crate::ipam::Ipam;

const SUPPORTED_VERSIONS: &[&str] = &["0.4.0", "1.0.0", "1.1.0"];
const DEFAULT_DATA_DIR: &str = "/var/lib/v6node/cni";
const AGENT_TIMEOUT: Duration = Duration::from_secs(30);

/// CNI error codes (SPEC.md, "Error").
mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENVIRONMENT: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const NOT_AVAILABLE: u32 = 50;
    /// Plugin-specific (100+): CHECK found the attachment not as ADD left it.
    pub const NOT_AS_ADDED: u32 = 100;
}

#[derive(Debug)]
struct CniError {
    code: u32,
    msg: String,
    details: String,
}

fn fail(code: u32, msg: impl Into<String>, details: impl std::fmt::Display) -> CniError {
    CniError { code, msg: msg.into(), details: details.to_string() }
}

type CniResult<T> = Result<T, CniError>;

/// The plugin's part of the network configuration; the rest is ignored,
/// as runtimes add keys of their own.
#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
struct NetConf {
    cni_version: String,
    name: String,
    #[serde(rename = "podCIDR")]
    pod_cidr: Option<String>,
    /// auto, netkit or veth.
    #[serde(default = "auto")]
    device: String,
    agent_socket: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    prev_result: Option<Value>,
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<Attachment>>,
    /// What the runtime passes for the capabilities the conflist names.
    #[serde(default)]
    runtime_config: RuntimeConfig,
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase")]
struct RuntimeConfig {
    #[serde(default)]
    port_mappings: Vec<RawPortMapping>,
}

/// A hostPort as runtimes write it: the portmap capability's camelCase, or
/// containerd's Go field names (go-cni's PortMapping has no JSON tags, and
/// Go plugins read either because Go's JSON matches names without case).
#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
struct RawPortMapping {
    #[serde(alias = "HostPort")]
    host_port: i64,
    #[serde(alias = "ContainerPort")]
    container_port: i64,
    #[serde(default, alias = "Protocol")]
    protocol: String,
    #[serde(rename = "hostIP", default, alias = "HostIP")]
    host_ip: String,
}

impl RawPortMapping {
    /// The mapping the agent serves, or why this node cannot serve it.
    fn check(&self) -> Result<PortMapping, String> {
        let port = |value: i64, what: &str| {
            u16::try_from(value).ok().filter(|p| *p != 0).ok_or_else(|| format!("{what} {value} is no port (1-65535)"))
        };
        let host_port = port(self.host_port, "hostPort")?;
        let container_port = port(self.container_port, "containerPort")?;
        let protocol = match self.protocol.to_ascii_lowercase().as_str() {
            "" | "tcp" => Protocol::Tcp,
            "udp" => Protocol::Udp,
            "sctp" => Protocol::Sctp,
            other => return Err(format!("hostPort {host_port}: protocol {other} is not served (TCP, UDP and SCTP are)")),
        };
        let host_ip = match self.host_ip.as_str() {
            "" | "::" | "0.0.0.0" => None,
            ip => match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(v6)) => Some(v6),
                Ok(std::net::IpAddr::V4(_)) => {
                    return Err(format!("hostPort {host_port}: hostIP {ip} is IPv4; this node is IPv6-only"))
                }
                Err(_) => return Err(format!("hostPort {host_port}: hostIP {ip:?} is no address")),
            },
        };
        Ok(PortMapping { host_port, container_port, protocol, host_ip })
    }
}

fn auto() -> String {
    "auto".into()
}

#[derive(Deserialize, Debug)]
struct Attachment {
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
}

impl NetConf {
    fn socket(&self) -> PathBuf {
        self.agent_socket.clone().unwrap_or_else(|| DEFAULT_SOCKET.into())
    }

    fn prefix(&self) -> CniResult<Ipv6Net> {
        let text = self.pod_cidr.as_deref().ok_or_else(|| {
            fail(code::INVALID_CONFIG, "podCIDR is missing", "the network configuration must name the node's IPv6 pod prefix")
        })?;
        let net: Ipv6Net = text.parse().map_err(|_| fail(code::INVALID_CONFIG, "podCIDR is not an IPv6 prefix", text))?;
        if net.prefix_len() > 120 {
            return Err(fail(code::INVALID_CONFIG, "podCIDR is too small", format!("{net}: use /120 or shorter")));
        }
        Ok(net.trunc())
    }

    fn ipam(&self) -> CniResult<Ipam> {
        let data_dir = self.data_dir.clone().unwrap_or_else(|| DEFAULT_DATA_DIR.into());
        // Allocation state of other networks must stay out of reach of a name.
        if self.name.is_empty() || self.name.contains('/') || self.name.starts_with('.') {
            return Err(fail(code::INVALID_CONFIG, "network name is not usable as a directory name", &self.name));
        }
        Ok(Ipam::new(&data_dir, &self.name, self.prefix()?))
    }
}

/// What the runtime put in the environment.
struct Env {
    command: String,
    container_id: String,
    netns: String,
    ifname: String,
    args: String,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

impl Env {
    fn read() -> Env {
        Env {
            command: env("CNI_COMMAND"),
            container_id: env("CNI_CONTAINERID"),
            netns: env("CNI_NETNS"),
            ifname: env("CNI_IFNAME"),
            args: env("CNI_ARGS"),
        }
    }

    /// The variables `command` needs, present and sane.
    fn require(&self, netns: bool) -> CniResult<()> {
        let mut missing = Vec::new();
        if self.container_id.is_empty() {
            missing.push("CNI_CONTAINERID");
        }
        if self.ifname.is_empty() {
            missing.push("CNI_IFNAME");
        }
        if netns && self.netns.is_empty() {
            missing.push("CNI_NETNS");
        }
        if !missing.is_empty() {
            return Err(fail(code::INVALID_ENVIRONMENT, "required environment variables missing", missing.join(", ")));
        }
        if self.ifname.len() > 15 || self.ifname.contains('/') || self.ifname.contains(char::is_whitespace) {
            return Err(fail(code::INVALID_ENVIRONMENT, "CNI_IFNAME is not a valid interface name", &self.ifname));
        }
        if !self.container_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(fail(
                code::INVALID_ENVIRONMENT,
                "CNI_CONTAINERID has characters other than letters, digits, - _ .",
                &self.container_id,
            ));
        }
        Ok(())
    }

    /// "namespace/name" from K8S_POD_NAMESPACE and K8S_POD_NAME.
    fn pod(&self) -> Option<String> {
        let arg = |key: &str| {
            self.args.split(';').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v.to_owned()))
        };
        Some(format!("{}/{}", arg("K8S_POD_NAMESPACE")?, arg("K8S_POD_NAME")?))
    }
}

/// Device names from the attachment, stable across calls: host side
/// `v6n<12 hex>`, pod side `v6p<12 hex>` until renamed in the pod.
fn device_names(container_id: &str, ifname: &str) -> (String, String) {
    // FNV-1a: short, stable, and collisions would need 2^24 pods per node.
    let mut hash: u64 = 0xcbf29ce484222325;
    for byte in container_id.bytes().chain([b'/']).chain(ifname.bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x100000001b3);
    }
    let tag = format!("{:012x}", hash & 0xffff_ffff_ffff);
    (format!("v6n{tag}"), format!("v6p{tag}"))
}

fn agent_error(e: CallError) -> CniError {
    match e {
        CallError::Unavailable(_) => fail(code::TRY_AGAIN_LATER, "the v6node dataplane agent is not running", e),
        _ => fail(code::IO_FAILURE, "the v6node dataplane agent could not route the pod", e),
    }
}

fn add(env: &Env, conf: &NetConf) -> CniResult<Value> {
    env.require(true)?;
    if !["auto", "netkit", "veth"].contains(&conf.device.as_str()) {
        return Err(fail(code::INVALID_CONFIG, "device must be auto, netkit or veth", &conf.device));
    }
    let ipam = conf.ipam()?;
    let port_mappings = conf
        .runtime_config
        .port_mappings
        .iter()
        .map(RawPortMapping::check)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(code::INVALID_CONFIG, "a hostPort this node cannot serve", e))?;
    let netns = Path::new(&env.netns);
    if !netns.exists() {
        return Err(fail(code::INVALID_ENVIRONMENT, "CNI_NETNS does not exist", &env.netns));
    }
    let io = |msg: &str| {
        let msg = msg.to_owned();
        move |e: anyhow::Error| fail(code::IO_FAILURE, msg, format!("{e:#}"))
    };
    let address = ipam.allocate(&env.container_id, &env.ifname).map_err(io("allocating an address"))?;
    let (host, peer) = device_names(&env.container_id, &env.ifname);
    // Undo everything on any failure below: a half-made pod is worse than none.
    let undo = |agent: bool| {
        if agent {
            let _ = v6node_api::call(
                &conf.socket(),
                &Request::Del { container_id: env.container_id.clone(), ifname: env.ifname.clone() },
                AGENT_TIMEOUT,
            );
        }
        let _ = net::delete_pair(&host);
        let _ = ipam.release(&env.container_id, &env.ifname);
    };
    let device = net::create_pair(&host, &peer, &conf.device)
        .map_err(io("creating the pod's device pair"))
        .inspect_err(|_| undo(false))?;
    let endpoint = Endpoint {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        pod: env.pod(),
        address,
        device,
        host_device: host.clone(),
        peer_device: peer.clone(),
        port_mappings,
    };
    let routed = v6node_api::call(&conf.socket(), &Request::Add(endpoint), AGENT_TIMEOUT)
        .map_err(agent_error)
        .inspect_err(|_| undo(true))?;
    let state = routed
        .endpoints
        .into_iter()
        .next()
        .ok_or_else(|| fail(code::IO_FAILURE, "the agent's answer lacks the endpoint", ""))
        .inspect_err(|_| undo(true))?;
    let pod_mac = net::configure(&host, &peer, netns, &env.ifname, address, device)
        .map_err(io("configuring the pod's device"))
        .inspect_err(|_| undo(true))?;
    // A congestion control this kernel lacks leaves the pod on the default:
    // worth a line in the runtime's log, not a pod that does not start.
    if let Err(e) = net::set_sysctls(netns, &state.pod_sysctls) {
        eprintln!("v6node-cni: the pod's TCP settings: {e:#}");
    }
    Ok(result(conf, env, &state.host_mac, &pod_mac, address))
}

fn result(conf: &NetConf, env: &Env, host_mac: &str, pod_mac: &str, address: Ipv6Addr) -> Value {
    let (host, _) = device_names(&env.container_id, &env.ifname);
    let mut ip = json!({ "address": format!("{address}/128"), "interface": 1 });
    if conf.cni_version.starts_with("0.") {
        ip["version"] = json!("6");
    }
    json!({
        "cniVersion": conf.cni_version,
        "interfaces": [
            { "name": host, "mac": host_mac },
            { "name": env.ifname, "mac": pod_mac, "sandbox": env.netns },
        ],
        "ips": [ip],
        "routes": [{ "dst": "::/0" }],
    })
}

fn del(env: &Env, conf: &NetConf) -> CniResult<()> {
    // DEL must clean up whatever exists, even with a netns already gone.
    env.require(false)?;
    let (host, _) = device_names(&env.container_id, &env.ifname);
    match v6node_api::call(
        &conf.socket(),
        &Request::Del { container_id: env.container_id.clone(), ifname: env.ifname.clone() },
        AGENT_TIMEOUT,
    ) {
        // A stopped agent forgets the endpoint itself once the device is gone.
        Ok(_) | Err(CallError::Unavailable(_)) => {}
        Err(e) => return Err(agent_error(e)),
    }
    net::delete_pair(&host).map_err(|e| fail(code::IO_FAILURE, "deleting the pod's device pair", format!("{e:#}")))?;
    // Without podCIDR (a config already removed) the directory still names the network.
    let data_dir = conf.data_dir.clone().unwrap_or_else(|| DEFAULT_DATA_DIR.into());
    let ipam = Ipam::new(&data_dir, &conf.name, conf.prefix().unwrap_or_else(|_| "::/128".parse().unwrap()));
    ipam.release(&env.container_id, &env.ifname)
        .map_err(|e| fail(code::IO_FAILURE, "releasing the pod's address", format!("{e:#}")))?;
    Ok(())
}

fn check(env: &Env, conf: &NetConf) -> CniResult<()> {
    env.require(true)?;
    let ipam = conf.ipam()?;
    let io = |e: anyhow::Error| fail(code::IO_FAILURE, "reading address allocations", format!("{e:#}"));
    let allocation = ipam.find(&env.container_id, &env.ifname).map_err(io)?.ok_or_else(|| {
        fail(
            code::UNKNOWN_CONTAINER,
            "no address allocated to this container and interface",
            format!("{} {}", env.container_id, env.ifname),
        )
    })?;
    if let Some(prev) = &conf.prev_result {
        let expected = format!("{}/128", allocation.address);
        let listed = prev["ips"].as_array().is_some_and(|ips| ips.iter().any(|ip| ip["address"] == expected.as_str()));
        if !listed {
            return Err(fail(code::NOT_AS_ADDED, "prevResult does not list the allocated address", expected));
        }
    }
    let (host, _) = device_names(&env.container_id, &env.ifname);
    net::check(&host, Path::new(&env.netns), &env.ifname, allocation.address)
        .map_err(|e| fail(code::NOT_AS_ADDED, "the pod's network is not as ADD left it", format!("{e:#}")))?;
    let listed = v6node_api::call(&conf.socket(), &Request::List, AGENT_TIMEOUT).map_err(agent_error)?;
    if !listed.endpoints.iter().any(|s| {
        s.endpoint.container_id == env.container_id && s.endpoint.ifname == env.ifname && s.endpoint.address == allocation.address
    }) {
        return Err(fail(code::NOT_AS_ADDED, "the dataplane agent does not route this pod", allocation.address));
    }
    Ok(())
}

/// Ready when the agent answers and the prefix has room.
fn status(conf: &NetConf) -> CniResult<()> {
    conf.prefix()?;
    v6node_api::call(&conf.socket(), &Request::List, AGENT_TIMEOUT)
        .map_err(|e| fail(code::NOT_AVAILABLE, "the v6node dataplane agent is not available", e))?;
    Ok(())
}

/// Releases everything of this network not in cni.dev/valid-attachments.
fn gc(conf: &NetConf) -> CniResult<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        fail(code::INVALID_CONFIG, "cni.dev/valid-attachments is missing", "GC needs the list of attachments to keep")
    })?;
    let keep: BTreeSet<(&str, &str)> = valid.iter().map(|a| (a.container_id.as_str(), a.ifname.as_str())).collect();
    let ipam = conf.ipam()?;
    let io = |e: anyhow::Error| fail(code::IO_FAILURE, "garbage collection", format!("{e:#}"));
    let mut stale: BTreeSet<(String, String)> = ipam
        .allocations()
        .map_err(io)?
        .into_iter()
        .filter(|a| !keep.contains(&(a.container_id.as_str(), a.ifname.as_str())))
        .map(|a| (a.container_id, a.ifname))
        .collect();
    // The agent may know endpoints whose allocation is gone already.
    if let Ok(listed) = v6node_api::call(&conf.socket(), &Request::List, AGENT_TIMEOUT) {
        stale.extend(
            listed
                .endpoints
                .into_iter()
                .filter(|s| !keep.contains(&(s.endpoint.container_id.as_str(), s.endpoint.ifname.as_str())))
                .map(|s| (s.endpoint.container_id, s.endpoint.ifname)),
        );
    }
    for (container_id, ifname) in stale {
        let env = Env { command: "DEL".into(), container_id, netns: String::new(), ifname, args: String::new() };
        del(&env, conf)?;
    }
    Ok(())
}

fn version_info(requested: Option<&str>) -> Value {
    json!({
        "cniVersion": requested.filter(|v| SUPPORTED_VERSIONS.contains(v)).unwrap_or("1.1.0"),
        "supportedVersions": SUPPORTED_VERSIONS,
    })
}

fn parse_conf(stdin: &[u8]) -> CniResult<NetConf> {
    let conf: NetConf =
        serde_json::from_slice(stdin).map_err(|e| fail(code::DECODE_FAILURE, "cannot decode the network configuration", e))?;
    if !SUPPORTED_VERSIONS.contains(&conf.cni_version.as_str()) {
        return Err(fail(
            code::INCOMPATIBLE_VERSION,
            format!("cniVersion {} is not supported", conf.cni_version),
            SUPPORTED_VERSIONS.join(", "),
        ));
    }
    Ok(conf)
}

fn run(env: &Env, stdin: &[u8]) -> CniResult<Option<Value>> {
    if env.command == "VERSION" {
        let requested = serde_json::from_slice::<Value>(stdin).ok().and_then(|v| v["cniVersion"].as_str().map(str::to_owned));
        return Ok(Some(version_info(requested.as_deref())));
    }
    let conf = parse_conf(stdin)?;
    match env.command.as_str() {
        "ADD" => add(env, &conf).map(Some),
        "DEL" => del(env, &conf).map(|()| None),
        "CHECK" => check(env, &conf).map(|()| None),
        "STATUS" => status(&conf).map(|()| None),
        "GC" => gc(&conf).map(|()| None),
        "" => Err(fail(
            code::INVALID_ENVIRONMENT,
            "CNI_COMMAND is not set",
            "v6node-cni is a CNI plugin, run by a container runtime",
        )),
        other => Err(fail(
            code::INVALID_ENVIRONMENT,
            format!("unknown CNI_COMMAND {other}"),
            "expected ADD, DEL, CHECK, STATUS, GC or VERSION",
        )),
    }
}

fn main() -> ExitCode {
    let env = Env::read();
    let mut stdin = Vec::new();
    let outcome = std::io::stdin()
        .take(v6node_api::MAX_MESSAGE)
        .read_to_end(&mut stdin)
        .map_err(|e| fail(code::IO_FAILURE, "reading stdin", e))
        .and_then(|_| run(&env, &stdin));
    match outcome {
        Ok(Some(result)) => {
            println!("{result}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            let version = serde_json::from_slice::<Value>(&stdin)
                .ok()
                .and_then(|v| v["cniVersion"].as_str().map(str::to_owned))
                .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
                .unwrap_or_else(|| "1.1.0".into());
            println!("{}", json!({ "cniVersion": version, "code": e.code, "msg": e.msg, "details": e.details }));
            eprintln!("v6node-cni {}: {} ({})", env.command, e.msg, e.details);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_fit_ifnamsiz_and_are_stable() {
        let (host, peer) = device_names("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0");
        assert_eq!((host.len(), peer.len()), (15, 15));
        assert_eq!(&host[3..], &peer[3..]);
        assert_eq!(device_names("c1", "eth0"), device_names("c1", "eth0"));
        assert_ne!(device_names("c1", "eth0"), device_names("c1", "eth1"));
    }

    /// An ADD for container c1 whose network namespace does not exist.
    fn add_env() -> Env {
        Env {
            command: "ADD".into(),
            container_id: "c1".into(),
            netns: "/nonexistent".into(),
            ifname: "eth0".into(),
            args: String::new(),
        }
    }

    #[test]
    fn malformed_input_gets_the_cni_error_code() {
        let env = add_env();
        let code = |stdin: &str| run(&env, stdin.as_bytes()).unwrap_err().code;
        assert_eq!(code("{not json"), code::DECODE_FAILURE);
        assert_eq!(code(r#"{"cniVersion":"0.2.0","name":"v6node","type":"v6node-cni"}"#), code::INCOMPATIBLE_VERSION);
        assert_eq!(code(r#"{"cniVersion":"1.1.0","name":"v6node","type":"v6node-cni"}"#), code::INVALID_CONFIG);
        assert_eq!(code(r#"{"cniVersion":"1.1.0","name":"v6node","podCIDR":"10.0.0.0/24"}"#), code::INVALID_CONFIG);
        assert_eq!(code(r#"{"cniVersion":"1.1.0","name":"../x","podCIDR":"fd00::/64"}"#), code::INVALID_CONFIG);
        assert_eq!(code(r#"{"cniVersion":"1.1.0","name":"v6node","podCIDR":"fd00::/64"}"#), code::INVALID_ENVIRONMENT);
        let unknown = Env {
            command: "REPAIR".into(),
            container_id: "c1".into(),
            netns: String::new(),
            ifname: "eth0".into(),
            args: String::new(),
        };
        let e = run(&unknown, br#"{"cniVersion":"1.1.0","name":"v6node","podCIDR":"fd00::/64"}"#).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (code::INVALID_ENVIRONMENT, "unknown CNI_COMMAND REPAIR"));
        let no_id = Env { container_id: String::new(), ..env };
        let e = run(&no_id, br#"{"cniVersion":"1.1.0","name":"v6node","podCIDR":"fd00::/64"}"#).unwrap_err();
        assert_eq!((e.code, e.details.as_str()), (code::INVALID_ENVIRONMENT, "CNI_CONTAINERID"));
    }

    #[test]
    fn host_ports_are_checked_before_anything_is_made() {
        let mapping = |json: &str| serde_json::from_str::<RawPortMapping>(json).unwrap().check();
        assert_eq!(
            mapping(r#"{"hostPort":54323,"containerPort":8080,"protocol":"udp","hostIP":"fd00:9::2"}"#),
            Ok(PortMapping {
                host_port: 54323,
                container_port: 8080,
                protocol: Protocol::Udp,
                host_ip: Some("fd00:9::2".parse().unwrap())
            })
        );
        assert_eq!(mapping(r#"{"hostPort":80,"containerPort":80,"protocol":"TCP"}"#).unwrap().host_ip, None);
        // containerd 1.7, as it hands a pod's hostPort to its plugins.
        assert_eq!(
            mapping(r#"{"HostPort":54323,"ContainerPort":8080,"Protocol":"tcp","HostIP":"::1"}"#),
            Ok(PortMapping {
                host_port: 54323,
                container_port: 8080,
                protocol: Protocol::Tcp,
                host_ip: Some(Ipv6Addr::LOCALHOST)
            })
        );
        assert_eq!(mapping(r#"{"hostPort":80,"containerPort":80,"hostIP":"::1"}"#).unwrap().host_ip, Some(Ipv6Addr::LOCALHOST));
        assert_eq!(mapping(r#"{"hostPort":5060,"containerPort":5060,"protocol":"SCTP"}"#).unwrap().protocol, Protocol::Sctp);
        assert!(mapping(r#"{"hostPort":80,"containerPort":80,"protocol":"dccp"}"#).unwrap_err().contains("dccp is not served"));
        assert!(mapping(r#"{"hostPort":80,"containerPort":80,"hostIP":"127.0.0.1"}"#).unwrap_err().contains("IPv6-only"));
        assert!(mapping(r#"{"hostPort":70000,"containerPort":80}"#).unwrap_err().contains("hostPort 70000 is no port"));
        assert!(mapping(r#"{"hostPort":80,"containerPort":0}"#).unwrap_err().contains("containerPort 0"));

        // Refused in ADD before an address is taken or a device made.
        let env = add_env();
        let dir = std::env::temp_dir().join(format!("v6node-cni-hostport-{}", std::process::id()));
        let conf = format!(
            r#"{{"cniVersion":"1.1.0","name":"v6node","podCIDR":"fd00::/64","dataDir":"{}",
               "runtimeConfig":{{"portMappings":[{{"hostPort":80,"containerPort":80,"protocol":"dccp"}}]}}}}"#,
            dir.display()
        );
        let e = run(&env, conf.as_bytes()).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (code::INVALID_CONFIG, "a hostPort this node cannot serve"));
        assert!(!dir.join("v6node").exists() || std::fs::read_dir(dir.join("v6node")).unwrap().next().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn version_answers_with_what_it_supports() {
        let env = Env {
            command: "VERSION".into(),
            container_id: String::new(),
            netns: String::new(),
            ifname: String::new(),
            args: String::new(),
        };
        let v = run(&env, br#"{"cniVersion":"1.0.0"}"#).unwrap().unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
    }
}
