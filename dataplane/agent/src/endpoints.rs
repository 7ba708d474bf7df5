// SPDX-License-Identifier: Apache-2.0
//! The node's pods, as v6node-cni hands them over: BIG TCP on both ends of
//! each pod's device pair, the address in the pinned endpoint map (BPF host
//! routing), and a record in `<state_dir>/endpoints.json`, from which a
//! restarted agent knows which pinned links are pods'.

use std::{collections::BTreeMap, fs, io::ErrorKind, net::Ipv6Addr, path::Path};

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use futures::TryStreamExt;
use rtnetlink::{packet_route::link::LinkAttribute, Handle};
use v6node_abi::{maps, EndpointKey, EndpointValue, ENDPOINT_NETKIT};
use v6node_api::{format_mac, Endpoint, EndpointState, PodDevice};
use v6node_k8s::services::{Address, Backend, HostPort};

use crate::{
    attach::{AttachPoint, Target, Wanted},
    bigtcp, bpf, files, netdev,
    paths::Paths,
    state,
};

/// Whether the endpoint's host-side device is still the one it was added
/// with (`devices` as `netdev::devices` lists them); ifindexes are not reused
/// while a device lives, so a new device of the same name does not pass.
pub fn device_present(devices: &BTreeMap<String, u32>, state: &EndpointState) -> bool {
    devices.get(&state.endpoint.host_device) == Some(&state.host_ifindex)
}

/// Endpoints by (container id, interface name), as CNI names an attachment.
#[derive(Default)]
pub struct Endpoints {
    records: BTreeMap<(String, String), EndpointState>,
}

fn open_map(pin_dir: &Path) -> Result<BpfHashMap<MapData, EndpointKey, EndpointValue>> {
    bpf::open_pinned_map(pin_dir, maps::ENDPOINTS)
}

fn parse_mac(mac: &str) -> [u8; 6] {
    let mut out = [0u8; 6];
    for (byte, part) in out.iter_mut().zip(mac.split(':')) {
        *byte = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    out
}

fn map_value(state: &EndpointState) -> EndpointValue {
    EndpointValue {
        ifindex: state.host_ifindex,
        pod_mac: parse_mac(&state.pod_mac),
        host_mac: parse_mac(&state.host_mac),
        flags: if state.endpoint.device == PodDevice::Netkit { ENDPOINT_NETKIT as u8 } else { 0 },
        pad: [0; 3],
    }
}

/// A device's index and MAC, by name, in the agent's namespace.
async fn link(handle: &Handle, name: &str) -> Result<(u32, String)> {
    let message = handle
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await
        .with_context(|| format!("no device {name}"))?
        .ok_or_else(|| anyhow!("no device {name}"))?;
    let mac = message
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(mac) => Some(format_mac(mac)),
            _ => None,
        })
        .unwrap_or_else(|| format_mac(&[0; 6]));
    Ok((message.header.index, mac))
}

impl Endpoints {
    pub fn load(paths: &Paths) -> Result<Endpoints> {
        let file = paths.endpoints_file();
        let list: Vec<EndpointState> = match fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", file.display()))?,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
        };
        let records = list.into_iter().map(|s| ((s.endpoint.container_id.clone(), s.endpoint.ifname.clone()), s)).collect();
        Ok(Endpoints { records })
    }

    fn save(&self, paths: &Paths) -> Result<()> {
        let file = paths.endpoints_file();
        let mut bytes = serde_json::to_vec_pretty(&self.list())?;
        bytes.push(b'\n');
        files::write_atomic(&file, &bytes, None)
    }

    pub fn list(&self) -> Vec<EndpointState> {
        self.records.values().cloned().collect()
    }

    /// Each pod's addresses by "namespace/name", as v6node-cni gave them.
    pub fn pod_addresses(&self) -> std::collections::BTreeMap<String, Vec<Ipv6Addr>> {
        let mut addresses: std::collections::BTreeMap<String, Vec<Ipv6Addr>> = Default::default();
        for state in self.records.values() {
            if let Some(pod) = &state.endpoint.pod {
                addresses.entry(pod.clone()).or_default().push(state.endpoint.address);
            }
        }
        addresses
    }

    /// The pods' network namespaces, each once.
    pub fn namespaces(&self) -> Vec<std::path::PathBuf> {
        let paths: std::collections::BTreeSet<&str> =
            self.records.values().map(|s| s.endpoint.netns.as_str()).filter(|n| !n.is_empty()).collect();
        paths.into_iter().map(Into::into).collect()
    }

    /// The pod programs on the host side of every endpoint's pair.
    pub fn wanted(&self, wanted: &mut Wanted) {
        for state in self.records.values() {
            let target = Target::required(state.host_ifindex, state.endpoint.device == PodDevice::Netkit);
            for direction in AttachPoint::POD {
                wanted.insert((state.endpoint.host_device.clone(), direction), target);
            }
        }
    }

    /// The hostPorts of this node's pods. A mapping without an address is
    /// served on each of `node_addresses` and on ::1, as the portmap plugin
    /// serves it on every local address.
    pub fn host_ports(&self, node_addresses: &[Ipv6Addr]) -> Vec<HostPort> {
        let mut all = node_addresses.to_vec();
        all.push(Ipv6Addr::LOCALHOST);
        let mut ports = Vec::new();
        for state in self.records.values() {
            let endpoint = &state.endpoint;
            let pod = endpoint.pod.clone().unwrap_or_else(|| endpoint.container_id.clone());
            for mapping in &endpoint.port_mappings {
                let addresses = mapping.host_ip.map_or_else(|| all.clone(), |ip| vec![ip]);
                for ip in addresses {
                    ports.push(HostPort {
                        pod: pod.clone(),
                        address: Address { ip, port: mapping.host_port, protocol: mapping.protocol },
                        backend: Backend { ip: endpoint.address, port: mapping.container_port, terminating: false },
                    });
                }
            }
        }
        ports
    }

    /// Host-side devices with their indexes, for BIG TCP.
    pub fn host_devices(&self) -> Vec<(String, u32)> {
        self.records.values().map(|s| (s.endpoint.host_device.clone(), s.host_ifindex)).collect()
    }

    /// Takes an endpoint in: BIG TCP on both ends while both are still in
    /// the host's namespace, then its address into the endpoint map. The
    /// caller attaches the programs (a reconcile) and reports back.
    pub async fn add(&mut self, paths: &Paths, handle: &Handle, endpoint: Endpoint, bigtcp_size: u32) -> Result<EndpointState> {
        if endpoint.address.is_unspecified() || endpoint.address.is_multicast() {
            bail!("{} is not a unicast address", endpoint.address);
        }
        if let Some(other) = self
            .records
            .values()
            .find(|s| s.endpoint.address == endpoint.address && s.endpoint.container_id != endpoint.container_id)
        {
            bail!("{} belongs to container {} already", endpoint.address, other.endpoint.container_id);
        }
        let (host_ifindex, host_mac) = link(handle, &endpoint.host_device).await?;
        let (peer_ifindex, pod_mac) = link(handle, &endpoint.peer_device).await?;
        let mut bigtcp = None;
        for (device, ifindex) in [(&endpoint.host_device, host_ifindex), (&endpoint.peer_device, peer_ifindex)] {
            let report = bigtcp::apply(handle, device, ifindex, bigtcp_size).await;
            if let Some(e) = report.error {
                bail!("{device}: BIG TCP: {e}");
            }
            bigtcp = Some(bigtcp.map_or(report.target, |b: u32| b.min(report.target)));
        }
        let state =
            EndpointState { endpoint, host_ifindex, host_mac, pod_mac, bigtcp, added_at: state::now(), pod_sysctls: Vec::new() };
        let key = EndpointKey { addr: state.endpoint.address.octets() };
        open_map(&paths.pin_dir)?.insert(key, map_value(&state), 0).context("writing the endpoint map")?;
        let id = (state.endpoint.container_id.clone(), state.endpoint.ifname.clone());
        if let Some(old) = self.records.insert(id, state.clone()) {
            if old.endpoint.address != state.endpoint.address {
                remove_address(&paths.pin_dir, old.endpoint.address);
            }
        }
        self.save(paths)?;
        Ok(state)
    }

    /// Forgets an endpoint; its links go with the next reconcile.
    pub fn del(&mut self, paths: &Paths, container_id: &str, ifname: &str) -> Result<Option<EndpointState>> {
        let Some(old) = self.records.remove(&(container_id.to_owned(), ifname.to_owned())) else {
            return Ok(None);
        };
        remove_address(&paths.pin_dir, old.endpoint.address);
        crate::counters::forget_device(&paths.pin_dir, old.host_ifindex);
        self.save(paths)?;
        Ok(Some(old))
    }

    /// Drops endpoints whose host device is gone (a pod deleted while the
    /// agent was down, or a device removed by hand) and, as a restarted
    /// agent needs, makes the map agree with the records.
    pub fn prune(&mut self, paths: &Paths) -> Result<Vec<EndpointState>> {
        let devices = netdev::devices()?;
        let gone: Vec<_> = self.records.iter().filter(|(_, s)| !device_present(&devices, s)).map(|(id, _)| id.clone()).collect();
        let mut removed = Vec::new();
        for (container_id, ifname) in gone {
            if let Some(old) = self.del(paths, &container_id, &ifname)? {
                removed.push(old);
            }
        }
        let mut map = open_map(&paths.pin_dir)?;
        let keep: BTreeMap<[u8; 16], EndpointValue> =
            self.records.values().map(|s| (s.endpoint.address.octets(), map_value(s))).collect();
        // The periodic resync mostly finds the map right: write only what differs.
        let mut current: BTreeMap<[u8; 16], EndpointValue> = BTreeMap::new();
        for entry in map.iter() {
            let (key, value) = entry.context("reading the endpoint map")?;
            current.insert(key.addr, value);
        }
        for addr in current.keys().filter(|a| !keep.contains_key(*a)) {
            let _ = map.remove(&EndpointKey { addr: *addr });
        }
        for (addr, value) in keep {
            if current.get(&addr) != Some(&value) {
                map.insert(EndpointKey { addr }, value, 0).context("writing the endpoint map")?;
            }
        }
        Ok(removed)
    }
}

fn remove_address(pin_dir: &Path, address: Ipv6Addr) {
    if let Ok(mut map) = open_map(pin_dir) {
        let _ = map.remove(&EndpointKey { addr: address.octets() });
    }
}
