// SPDX-License-Identifier: Apache-2.0
//! `[pods]`: what the agent writes into the CNI network configuration.

use ipnet::Ipv6Net;
use serde::Serialize;
use toml::Table;

use crate::keywords::keywords;
use crate::serialize::serialize_optional_displayed;
use crate::validator::{Result, Validator};

/// Pod networking: what the agent writes into the CNI network configuration
/// that `v6node-cni` reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Pods {
    /// The node's pod prefix; `None` until known, and no CNI configuration
    /// is written until then (the runtime reports the network not ready).
    #[serde(serialize_with = "serialize_optional_displayed")]
    pub prefix: Option<Ipv6Net>,
    pub device: PodDeviceChoice,
}

/// Which device pair the CNI plugin should connect pods by (`pods.device`).
/// What it did create, per pod, is `v6node_api::PodDevice`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PodDeviceChoice {
    /// netkit where the kernel has it, veth elsewhere.
    #[default]
    Auto,
    Netkit,
    Veth,
}

keywords!(PodDeviceChoice, "pod device", {
    Auto => "auto",
    Netkit => "netkit",
    Veth => "veth",
});

/// Pod prefixes must leave room for a node's pods and be plain unicast.
pub const POD_PREFIX_MAX_LEN: u8 = 120;

pub(crate) fn read(v: &Validator, root: &Table, pods: &mut Pods) -> Result<()> {
    let Some(t) = v.section(root, "pods", &["prefix", "device"])? else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "pods.prefix")? {
        pods.prefix = match s {
            "" => None,
            s => Some(pod_prefix(s).map_err(|r| v.err("pods.prefix", r))?),
        };
    }
    if let Some(s) = v.string(t, "pods.device")? {
        pods.device = s.parse().map_err(|r| v.err("pods.device", r))?;
    }
    Ok(())
}

fn pod_prefix(s: &str) -> std::result::Result<Ipv6Net, String> {
    let net: Ipv6Net = s.parse().map_err(|_| format!("`{s}` is not an IPv6 prefix such as \"fd00:10:244:1::/64\""))?;
    if net.trunc() != net {
        return Err(format!("`{s}` has host bits set; the prefix is {}", net.trunc()));
    }
    if net.prefix_len() > POD_PREFIX_MAX_LEN {
        return Err(format!("/{} leaves too few addresses for pods; use /{POD_PREFIX_MAX_LEN} or shorter", net.prefix_len()));
    }
    let first = net.addr().segments()[0];
    if first & 0xff00 == 0xff00 || first & 0xffc0 == 0xfe80 || net.addr().is_unspecified() || net.addr().is_loopback() {
        return Err(format!("`{s}` is not a unicast prefix (multicast, link-local, loopback or ::)"));
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::PodDeviceChoice;
    use crate::testutil::{bad, ok};
    use crate::Config;

    #[test]
    fn pods_prefix_and_device() {
        let c = ok("[pods]\nprefix = \"fd00:10:244:1::/64\"\ndevice = \"veth\"\n");
        assert_eq!(c.pods.prefix, Some("fd00:10:244:1::/64".parse().unwrap()));
        assert_eq!(c.pods.device, PodDeviceChoice::Veth);
        assert_eq!(Config::default().pods.prefix, None);
        assert_eq!(Config::default().pods.device, PodDeviceChoice::Auto);
        assert_eq!(ok("[pods]\nprefix = \"\"\n").pods.prefix, None);
    }

    #[test]
    fn pods_prefix_rejects_what_cannot_number_pods() {
        bad("[pods]\nprefix = \"10.244.0.0/24\"\n", "pods.prefix", "is not an IPv6 prefix");
        bad("[pods]\nprefix = \"fd00:10:244:1::5/64\"\n", "pods.prefix", "host bits set; the prefix is fd00:10:244:1::/64");
        bad("[pods]\nprefix = \"fd00:10:244:1::/124\"\n", "pods.prefix", "too few addresses");
        bad("[pods]\nprefix = \"fe80::/64\"\n", "pods.prefix", "not a unicast prefix");
        bad("[pods]\ndevice = \"macvlan\"\n", "pods.device", "unknown pod device `macvlan`; expected one of auto, netkit, veth");
        bad("[pods]\ncidr = \"fd00::/64\"\n", "pods.cidr", "unknown key");
    }
}
