// SPDX-License-Identifier: Apache-2.0
//! `[services]`: Kubernetes Services, translated at the socket.

use std::path::PathBuf;

use serde::Serialize;
use toml::Table;

use crate::keywords::keywords;
use crate::serialize::serialize_optional_displayed_path;
use crate::validator::{Result, Validator};

/// Kubernetes Services, translated by the socket hooks on `cgroup`: every
/// process in it and below (the root cgroup: all pods and the node itself)
/// reaches a Service's backends directly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Services {
    /// A cgroup v2 directory; `None`: no socket hooks.
    #[serde(serialize_with = "serialize_optional_displayed_path")]
    pub cgroup: Option<PathBuf>,
    /// How a connection from outside reaches a backend on another node.
    pub remote_backends: RemoteBackends,
}

impl Default for Services {
    fn default() -> Self {
        Services { cgroup: Some(PathBuf::from("/sys/fs/cgroup")), remote_backends: RemoteBackends::default() }
    }
}

/// A connection from outside the cluster (NodePort, external or
/// load-balancer IP) whose backend is on another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RemoteBackends {
    /// From this node's masquerade address: replies come back through this
    /// node. Works on any network, but a flow that lands on another node
    /// (an ECMP change) reaches its backend from another address and resets.
    #[default]
    Masquerade,
    /// Direct server return: with the client's own address and a header
    /// naming the frontend, and the backend's node answers the client
    /// itself. A moved flow keeps its connection. Needs every such backend
    /// on a v6node node, and a node network that carries packets with the
    /// clients' source addresses between nodes.
    Dsr,
    /// Direct server return with every packet to the backend inside an
    /// outer IPv6 header from this node (RFC 2473): the node network sees
    /// node and pod addresses only, no client address and no extension
    /// header; it must carry 40 bytes more per packet.
    #[serde(rename = "dsr-ip6ip6")]
    DsrIp6ip6,
}

impl RemoteBackends {
    /// Backends on other nodes answer the client themselves.
    pub fn is_dsr(self) -> bool {
        self != RemoteBackends::Masquerade
    }
}

keywords!(RemoteBackends, "remote backends mode", { Masquerade => "masquerade", Dsr => "dsr", DsrIp6ip6 => "dsr-ip6ip6" });

pub(crate) fn read(v: &Validator, root: &Table, services: &mut Services) -> Result<()> {
    let Some(t) = v.section(root, "services", &["cgroup", "remote_backends"])? else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "services.cgroup")? {
        services.cgroup = v.absolute_path_or_off("services.cgroup", s)?;
    }
    if let Some(s) = v.string(t, "services.remote_backends")? {
        services.remote_backends = s.parse().map_err(|r| v.err("services.remote_backends", r))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::RemoteBackends;
    use crate::testutil::{bad, ok};
    use crate::Config;

    #[test]
    fn services_cgroup_is_the_root_cgroup_unless_moved_or_turned_off() {
        assert_eq!(Config::default().services.cgroup, Some("/sys/fs/cgroup".into()), "every pod and the node itself");
        assert_eq!(
            ok("[services]\ncgroup = \"/sys/fs/cgroup/kubepods.slice\"\n").services.cgroup,
            Some("/sys/fs/cgroup/kubepods.slice".into())
        );
        assert_eq!(ok("[services]\ncgroup = \"\"\n").services.cgroup, None);
        bad("[services]\ncgroup = \"kubepods\"\n", "services.cgroup", "is not an absolute path");
        bad("[services]\nkube_proxy = true\n", "services.kube_proxy", "unknown key");
        let c = ok("[services]\ncgroup = \"\"\n");
        assert_eq!(ok(&toml::to_string(&c).unwrap()), c, "round trip through its own serialization");
    }

    #[test]
    fn services_remote_backends_are_masqueraded_unless_dsr_is_chosen() {
        assert_eq!(Config::default().services.remote_backends, RemoteBackends::Masquerade, "works on any network");
        let c = ok("[services]\nremote_backends = \"dsr\"\n");
        assert_eq!(c.services.remote_backends, RemoteBackends::Dsr);
        assert_eq!(ok(&toml::to_string(&c).unwrap()), c, "round trip through its own serialization");
        let c = ok("[services]\nremote_backends = \"dsr-ip6ip6\"\n");
        assert_eq!(c.services.remote_backends, RemoteBackends::DsrIp6ip6);
        assert!(c.services.remote_backends.is_dsr());
        assert_eq!(ok(&toml::to_string(&c).unwrap()), c, "round trip through its own serialization");
        bad("[services]\nremote_backends = \"snat\"\n", "services.remote_backends", "snat");
        bad("[services]\nremote_backends = \"ip6ip6\"\n", "services.remote_backends", "ip6ip6");
    }
}
