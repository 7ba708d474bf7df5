// SPDX-License-Identifier: Apache-2.0
//! `[kubernetes]`: whether and as which Node the agent follows the API.

use std::path::PathBuf;

use serde::Serialize;
use toml::Table;

use crate::serialize::serialize_optional_displayed_path;
use crate::validator::{Result, Validator};

/// Following the Kubernetes API (Nodes: pod prefixes and routes to peers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Kubernetes {
    /// The agent's own kubeconfig; `None`: the agent does not follow the API
    /// and `pods.prefix` comes from configuration alone.
    #[serde(serialize_with = "serialize_optional_displayed_path")]
    pub kubeconfig: Option<PathBuf>,
    /// This node's Node name; empty: the host name, as kubelet takes it.
    pub node_name: String,
}

pub(crate) fn read(v: &Validator, root: &Table, kubernetes: &mut Kubernetes) -> Result<()> {
    let Some(t) = v.section(root, "kubernetes", &["kubeconfig", "node_name"])? else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "kubernetes.kubeconfig")? {
        kubernetes.kubeconfig = v.absolute_path_or_off("kubernetes.kubeconfig", s)?;
    }
    if let Some(s) = v.string(t, "kubernetes.node_name")? {
        // A Node's name is a DNS subdomain (RFC 1123): what kubelet registers.
        let valid = s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !s.is_empty() && !valid {
            return Err(v.err("kubernetes.node_name", format!("{s:?} is not a Node name (lower-case RFC 1123 subdomain)")));
        }
        kubernetes.node_name = s.to_string();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::{bad, ok};
    use crate::Config;

    #[test]
    fn kubernetes_kubeconfig_and_node_name() {
        assert_eq!(Config::default().kubernetes.kubeconfig, None, "off unless configured");
        let c = ok("[kubernetes]\nkubeconfig = \"/etc/kubernetes/v6node-dataplane.conf\"\nnode_name = \"node-1.rack-2\"\n");
        assert_eq!(c.kubernetes.kubeconfig, Some("/etc/kubernetes/v6node-dataplane.conf".into()));
        assert_eq!(c.kubernetes.node_name, "node-1.rack-2");
        assert_eq!(ok("[kubernetes]\nkubeconfig = \"\"\n").kubernetes.kubeconfig, None);
        bad("[kubernetes]\nkubeconfig = \"kubelet.conf\"\n", "kubernetes.kubeconfig", "is not an absolute path");
        bad("[kubernetes]\nnode_name = \"Node_1\"\n", "kubernetes.node_name", "is not a Node name");
        bad("[kubernetes]\nnode_name = \"-a\"\n", "kubernetes.node_name", "is not a Node name");
        bad("[kubernetes]\nserver = \"https://[::1]:6443\"\n", "kubernetes.server", "unknown key");
    }
}
