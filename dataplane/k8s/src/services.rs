// SPDX-License-Identifier: Apache-2.0
//! The desired Services of this node, from Services and EndpointSlices: each
//! frontend (ClusterIP, NodePort on every node's addresses, external and
//! load-balancer IPs; port; protocol) and the backends it may pick. Pure, so
//! it is tested without a cluster; what it refuses or clamps it names in
//! `problems` with the Service and the reason.
//!
//! The choices are kube-proxy's: ready endpoints, or while none is ready the
//! serving and terminating ones; `internalTrafficPolicy: Local` keeps to this
//! node's endpoints; Services with `service.kubernetes.io/service-proxy-name`
//! belong to another proxy, and Services labelled
//! `service.kubernetes.io/headless` (any value) are left alone as kube-proxy
//! leaves them, and so are EndpointSlices with either label; headless and ExternalName Services have nothing to translate.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv6Addr},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use serde::{Deserialize, Serialize};

/// Backends one frontend may have; more are clamped. abi.h's limit.
pub const BACKENDS_PER_FRONTEND_MAX: usize = v6node_abi::BACKENDS_PER_SERVICE_MAX as usize;
/// kube-proxy's default for `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10800;

// Labels whose presence, whatever the value, leaves a Service alone:
// kube-proxy watches only Services that have neither.
const SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
const HEADLESS: &str = "service.kubernetes.io/headless";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

pub use v6node_api::Protocol;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrontendKind {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
    /// A pod's hostPort on this node (from its CNI port mappings).
    HostPort,
}

/// Where a Service is reached: the key of the service table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Address {
    pub ip: Ipv6Addr,
    pub port: u16,
    pub protocol: Protocol,
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}]:{}/{}", self.ip, self.port, self.protocol.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frontend {
    pub address: Address,
    /// `namespace/name`, and the port's name (may be empty).
    pub service: String,
    pub port_name: String,
    pub kind: FrontendKind,
    /// The chosen backends, by address; empty: connections are refused.
    pub backends: Vec<Backend>,
    /// sessionAffinity ClientIP, with its timeout.
    pub affinity_seconds: Option<u32>,
    /// For a frontend reached from outside the cluster (a NodePort on this
    /// node's addresses, an external or load-balancer IP, a hostPort): the
    /// backends such connections may go to. With `externalTrafficPolicy:
    /// Local` only this node's, so the client's address is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_outside: Option<Vec<Backend>>,
    /// Every endpoint the slices list for this port, whatever its
    /// conditions. A backend that leaves `backends` but is still listed (not
    /// ready, or terminating) keeps the connections it has, as under
    /// kube-proxy: a terminating pod finishes what it serves. Only one that
    /// is gone from the slices has its connections ended.
    #[serde(skip)]
    pub listed: BTreeSet<(Ipv6Addr, u16)>,
}

/// A `healthCheckNodePort` this node answers on, as kube-proxy does: 200
/// while the Service has ready endpoints on this node, 503 when it has none, so
/// a load balancer sends `externalTrafficPolicy: Local` traffic only to
/// nodes that keep it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    pub port: u16,
    pub namespace: String,
    pub name: String,
    pub local_endpoints: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Backend {
    pub ip: Ipv6Addr,
    pub port: u16,
    /// Serving while terminating (used only because none is ready).
    pub terminating: bool,
}

/// A Service (or a part of it) that was refused or clamped, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceProblem {
    pub service: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServicesView {
    /// Sorted by address; each address once.
    pub frontends: Vec<Frontend>,
    pub problems: Vec<ServiceProblem>,
    /// Sorted by port; each port once.
    pub health_checks: Vec<HealthCheck>,
}

/// One endpoint of a slice, as far as the choice of backends cares.
struct Endpoint {
    ip: Ipv6Addr,
    node: Option<String>,
    ready: bool,
    serving: bool,
    terminating: bool,
}

/// A Service's endpoints with the port each named port maps to.
#[derive(Default)]
struct Slices {
    /// (port name, protocol) -> (target port, endpoints).
    ports: BTreeMap<(String, Protocol), Vec<(u16, usize)>>,
    endpoints: Vec<Endpoint>,
}

fn protocol(name: Option<&str>) -> Result<Protocol, String> {
    match name.unwrap_or("TCP") {
        "TCP" => Ok(Protocol::Tcp),
        "UDP" => Ok(Protocol::Udp),
        "SCTP" => Ok(Protocol::Sctp),
        other => Err(format!("protocol {other} is not supported by v6node (TCP, UDP and SCTP are)")),
    }
}

fn ipv6(s: &str) -> Option<Ipv6Addr> {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) if ip.to_ipv4_mapped().is_none() => Some(ip),
        _ => None,
    }
}

impl ServicesView {
    /// `node` is this node's name, `own_addresses` its IPv6 addresses and
    /// `node_addresses` those NodePorts are served on (every Node's); only
    /// its own are reached from outside through this node.
    pub fn build<'a>(
        node: &str,
        own_addresses: &[Ipv6Addr],
        node_addresses: &[Ipv6Addr],
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ) -> Self {
        let mut by_service: BTreeMap<(String, String), Slices> = BTreeMap::new();
        let mut problems = BTreeSet::new();
        for slice in slices {
            // kube-proxy lists EndpointSlices with the same label selector
            // as Services: a slice with either label serves nothing.
            if slice.metadata.labels.as_ref().is_some_and(|l| l.contains_key(SERVICE_PROXY_NAME) || l.contains_key(HEADLESS)) {
                continue;
            }
            let Some(namespace) = slice.metadata.namespace.clone() else { continue };
            let Some(service) = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)).cloned() else {
                continue;
            };
            if slice.address_type != "IPv6" {
                if slice.address_type == "IPv4" && slice.endpoints.as_ref().is_some_and(|e| !e.is_empty()) {
                    problems.insert(ServiceProblem {
                        service: format!("{namespace}/{service}"),
                        reason: format!(
                            "EndpointSlice {}: IPv4 endpoints on an IPv6-only node are ignored",
                            slice.metadata.name.as_deref().unwrap_or("?")
                        ),
                    });
                }
                continue;
            }
            let entry = by_service.entry((namespace, service)).or_default();
            let first = entry.endpoints.len();
            for endpoint in slice.endpoints.iter().flatten() {
                let conditions = endpoint.conditions.as_ref();
                let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
                let serving = conditions.and_then(|c| c.serving).unwrap_or(ready);
                let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
                for address in &endpoint.addresses {
                    if let Some(ip) = ipv6(address) {
                        entry.endpoints.push(Endpoint { ip, node: endpoint.node_name.clone(), ready, serving, terminating });
                    }
                }
            }
            let range: Vec<usize> = (first..entry.endpoints.len()).collect();
            for port in slice.ports.iter().flatten() {
                let (Some(number), Ok(proto)) = (port.port, protocol(port.protocol.as_deref())) else { continue };
                let Ok(number) = u16::try_from(number) else { continue };
                let list = entry.ports.entry((port.name.clone().unwrap_or_default(), proto)).or_default();
                list.extend(range.iter().map(|&i| (number, i)));
            }
        }

        let mut frontends: BTreeMap<Address, Frontend> = BTreeMap::new();
        let mut health_checks: BTreeMap<u16, HealthCheck> = BTreeMap::new();
        for service in services {
            let Some(name) = service.metadata.name.clone() else { continue };
            let namespace = service.metadata.namespace.clone().unwrap_or_default();
            let id = format!("{namespace}/{name}");
            if service.metadata.labels.as_ref().is_some_and(|l| l.contains_key(SERVICE_PROXY_NAME) || l.contains_key(HEADLESS)) {
                continue;
            }
            let Some(spec) = &service.spec else { continue };
            if spec.type_.as_deref() == Some("ExternalName") {
                continue;
            }
            let mut cluster_ips: Vec<&str> = spec.cluster_ips.iter().flatten().map(String::as_str).collect();
            if cluster_ips.is_empty() {
                cluster_ips.extend(spec.cluster_ip.as_deref());
            }
            if cluster_ips.contains(&"None") {
                continue; // headless: DNS answers with the endpoints themselves
            }
            let mut vips = Vec::new();
            for ip in cluster_ips {
                match ipv6(ip) {
                    Some(v6) => vips.push(v6),
                    None => {
                        problems.insert(problem(&id, format!("ClusterIP {ip} is not IPv6: ignored on this IPv6-only node")));
                    }
                }
            }
            let externals: Vec<Ipv6Addr> = spec
                .external_ips
                .iter()
                .flatten()
                .filter_map(|ip| {
                    let v6 = ipv6(ip);
                    if v6.is_none() {
                        problems.insert(problem(&id, format!("externalIP {ip} is not IPv6: ignored")));
                    }
                    v6
                })
                .collect();
            let balancers: Vec<Ipv6Addr> = service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|ingress| ingress.ip.as_deref().and_then(ipv6))
                .collect();
            let node_local = spec.internal_traffic_policy.as_deref() == Some("Local");
            let affinity_seconds = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
                spec.session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .and_then(|c| c.timeout_seconds)
                    .and_then(|t| u32::try_from(t).ok())
                    .unwrap_or(DEFAULT_AFFINITY_SECONDS)
            });
            let slices = by_service.get(&(namespace.clone(), name.clone()));
            let external_local = spec.external_traffic_policy.as_deref() == Some("Local");
            if let Some(port) = spec.health_check_node_port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0) {
                let local_endpoints = local_endpoint_count(slices, node);
                match health_checks.get(&port) {
                    Some(taken) => {
                        problems.insert(problem(
                            &id,
                            format!("healthCheckNodePort {port} is {}/{}'s already: ignored", taken.namespace, taken.name),
                        ));
                    }
                    None => {
                        health_checks.insert(
                            port,
                            HealthCheck { port, namespace: namespace.clone(), name: name.clone(), local_endpoints },
                        );
                    }
                }
            }
            for port in spec.ports.iter().flatten() {
                let port_name = port.name.clone().unwrap_or_default();
                let proto = match protocol(port.protocol.as_deref()) {
                    Ok(p) => p,
                    Err(reason) => {
                        problems.insert(problem(&id, format!("port {}: {reason}", port.port)));
                        continue;
                    }
                };
                let Ok(number) = u16::try_from(port.port) else { continue };
                let (cluster_backends, clamped) = choose_backends(slices, &port_name, proto, node, node_local);
                let listed = listed_endpoints(slices, &port_name, proto);
                let all_backends =
                    if node_local { choose_backends(slices, &port_name, proto, node, false).0 } else { cluster_backends.clone() };
                let outside_backends =
                    if external_local { choose_backends(slices, &port_name, proto, node, true).0 } else { all_backends.clone() };
                if clamped {
                    problems.insert(problem(
                        &id,
                        format!(
                            "port {}: more than {BACKENDS_PER_FRONTEND_MAX} endpoints; the first {BACKENDS_PER_FRONTEND_MAX} by address are used",
                            port.port
                        ),
                    ));
                }
                let mut add = |ip: Ipv6Addr, port: u16, kind: FrontendKind, backends: &Vec<Backend>, outside: bool| {
                    let address = Address { ip, port, protocol: proto };
                    match frontends.get(&address) {
                        Some(taken) if taken.service != id => {
                            problems.insert(problem(&id, format!("{address} is {}'s already: ignored", taken.service)));
                        }
                        Some(_) => {}
                        None => {
                            let frontend = Frontend {
                                address,
                                service: id.clone(),
                                port_name: port_name.clone(),
                                kind,
                                backends: backends.clone(),
                                affinity_seconds,
                                from_outside: outside.then(|| outside_backends.clone()),
                                listed: listed.clone(),
                            };
                            frontends.insert(address, frontend);
                        }
                    }
                };
                for &vip in &vips {
                    add(vip, number, FrontendKind::ClusterIp, &cluster_backends, false);
                }
                // Pods and the node reach external frontends as kube-proxy
                // sends its own nodes' traffic: to any endpoint of the Service.
                for &ip in &externals {
                    add(ip, number, FrontendKind::ExternalIp, &all_backends, true);
                }
                for &ip in &balancers {
                    add(ip, number, FrontendKind::LoadBalancer, &all_backends, true);
                }
                if let Some(node_port) = port.node_port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0) {
                    // With policy Local another node's NodePort is that node's
                    // to judge, as for a client outside the cluster: its own
                    // endpoints or a refusal, never one of this node's.
                    let served = node_addresses.iter().filter(|ip| !external_local || own_addresses.contains(ip));
                    for &ip in served {
                        add(ip, node_port, FrontendKind::NodePort, &all_backends, own_addresses.contains(&ip));
                    }
                }
            }
        }
        ServicesView {
            frontends: frontends.into_values().collect(),
            problems: problems.into_iter().collect(),
            health_checks: health_checks.into_values().collect(),
        }
    }
}

/// A pod's hostPort on one address of this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// `namespace/name` of the pod (or its container id).
    pub pod: String,
    pub address: Address,
    pub backend: Backend,
}

impl ServicesView {
    /// Adds this node's pods' hostPorts as frontends of their own, each with
    /// its pod as the one backend. An address a Service (or an earlier pod)
    /// already has stays theirs, and the pod's claim is named.
    pub fn add_host_ports(&mut self, ports: impl IntoIterator<Item = HostPort>) {
        for port in ports {
            match self.frontends.binary_search_by(|f| f.address.cmp(&port.address)) {
                Ok(taken) => {
                    let owner = &self.frontends[taken].service;
                    self.problems.push(problem(&port.pod, format!("hostPort {} is {owner}'s already: ignored", port.address)));
                }
                Err(at) => self.frontends.insert(
                    at,
                    Frontend {
                        address: port.address,
                        service: port.pod,
                        port_name: String::new(),
                        kind: FrontendKind::HostPort,
                        backends: vec![port.backend],
                        affinity_seconds: None,
                        from_outside: Some(vec![port.backend]),
                        listed: BTreeSet::from([(port.backend.ip, port.backend.port)]),
                    },
                ),
            }
        }
        self.problems.sort();
        self.problems.dedup();
    }
}

fn problem(service: &str, reason: String) -> ServiceProblem {
    ServiceProblem { service: service.to_string(), reason }
}

/// How many ready endpoints of a Service are on `node`: kube-proxy's count
/// for its health check (KEP-1669). Terminating ones still serve what
/// reaches them, but do not count: once a node's endpoints all terminate,
/// its health check fails and the load balancer drains it.
fn local_endpoint_count(slices: Option<&Slices>, node: &str) -> usize {
    let Some(slices) = slices else { return 0 };
    slices.endpoints.iter().filter(|e| e.node.as_deref() == Some(node) && e.ready).map(|e| e.ip).collect::<BTreeSet<_>>().len()
}

/// Every endpoint of one Service port, by address and target port.
fn listed_endpoints(slices: Option<&Slices>, port_name: &str, proto: Protocol) -> BTreeSet<(Ipv6Addr, u16)> {
    let Some(slices) = slices else { return BTreeSet::new() };
    let Some(targets) = slices.ports.get(&(port_name.to_string(), proto)) else { return BTreeSet::new() };
    targets.iter().map(|&(port, i)| (slices.endpoints[i].ip, port)).collect()
}

/// The backends of one Service port: ready endpoints, or the serving and
/// terminating ones while none is ready; sorted, each once, at most
/// BACKENDS_PER_FRONTEND_MAX (the second value says whether more were cut).
fn choose_backends(
    slices: Option<&Slices>,
    port_name: &str,
    proto: Protocol,
    node: &str,
    local_only: bool,
) -> (Vec<Backend>, bool) {
    let Some(slices) = slices else { return (Vec::new(), false) };
    let Some(targets) = slices.ports.get(&(port_name.to_string(), proto)) else { return (Vec::new(), false) };
    let candidates: Vec<(u16, &Endpoint)> = targets
        .iter()
        .map(|&(port, i)| (port, &slices.endpoints[i]))
        .filter(|(_, e)| !local_only || e.node.as_deref() == Some(node))
        .collect();
    let ready: BTreeSet<Backend> =
        candidates.iter().filter(|(_, e)| e.ready).map(|&(port, e)| Backend { ip: e.ip, port, terminating: false }).collect();
    let chosen = if ready.is_empty() {
        candidates
            .iter()
            .filter(|(_, e)| e.serving && e.terminating)
            .map(|&(port, e)| Backend { ip: e.ip, port, terminating: true })
            .collect()
    } else {
        ready
    };
    let clamped = chosen.len() > BACKENDS_PER_FRONTEND_MAX;
    (chosen.into_iter().take(BACKENDS_PER_FRONTEND_MAX).collect(), clamped)
}

#[cfg(test)]
mod tests;
