// SPDX-License-Identifier: Apache-2.0
//! `[filter]`: sources dropped at ingress.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::Ipv6Net;
use serde::Serialize;
use toml::Table;

use crate::serialize::serialize_displayed;
use crate::validator::Network;
use crate::validator::{Result, Validator};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Filter {
    /// Source prefixes dropped at ingress, in config order, normalised and
    /// free of duplicates.
    #[serde(serialize_with = "serialize_displayed")]
    pub deny_sources: Vec<Ipv6Net>,
}

pub(crate) fn read(v: &Validator, root: &Table, filter: &mut Filter) -> Result<()> {
    let Some(t) = v.section(root, "filter", &["deny_sources"])? else {
        return Ok(());
    };
    if let Some(items) = v.strings(t, "filter.deny_sources")? {
        filter.deny_sources = deny_sources(v, "filter.deny_sources", &items)?;
    }
    Ok(())
}

fn deny_sources(v: &Validator, path: &str, items: &[&str]) -> Result<Vec<Ipv6Net>> {
    // The deny map's size (abi.h), fixed when the agent loads it.
    v.at_most(path, items.len(), v6node_abi::DENY_SRC_MAX as usize, "prefixes")?;
    let mut seen = HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, s) in items.iter().enumerate() {
        let key = format!("{path}[{i}]");
        let net = deny_prefix(s).map_err(|r| v.err(&key, r))?;
        if let Some(j) = seen.insert(net, i) {
            return Err(v.err(&key, format!("duplicate prefix {net} (also item {j})")));
        }
        out.push(net);
    }
    Ok(out)
}

/// An IPv6 source prefix, with a reason for each way of getting one wrong
/// on an IPv6-only node. `nat64.stateful.sources` are written the same way
/// and read by this too, after refusing `/0` with a reason of their own.
pub(crate) fn deny_prefix(s: &str) -> std::result::Result<Ipv6Net, String> {
    let Some((addr, len)) = s.split_once('/') else {
        return Err(if let Ok(a) = s.parse::<Ipv6Addr>() {
            format!("missing prefix length; write {a}/128 for one address")
        } else if s.parse::<Ipv4Addr>().is_ok() {
            "IPv4 address on an IPv6-only dataplane".into()
        } else {
            format!("`{s}` is not an IPv6 prefix; expected e.g. 2001:db8::/32")
        });
    };
    let addr: Ipv6Addr = addr.parse().map_err(|_| {
        if addr.parse::<Ipv4Addr>().is_ok() {
            "IPv4 prefix on an IPv6-only dataplane".to_owned()
        } else {
            format!("`{addr}` is not an IPv6 address; expected e.g. 2001:db8::/32")
        }
    })?;
    let len = Some(len)
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|l| l.parse::<u8>().ok())
        .filter(|&l| l <= 128)
        .ok_or_else(|| format!("prefix length `{len}` is not a number in 0..=128"))?;
    if len == 0 {
        return Err(format!("`{s}` would drop every packet"));
    }
    let net = Ipv6Net::new(addr, len).expect("length checked above");
    net.exact()
}

#[cfg(test)]
mod tests {
    use crate::testutil::bad;

    #[test]
    fn bad_deny_sources() {
        let bad_net = |item: &str, part: &str| {
            bad(&format!("filter.deny_sources = [\"2001:db8:1::/48\", {item:?}]"), "filter.deny_sources[1]", part);
        };
        bad_net("2001:db8::1", "missing prefix length; write 2001:db8::1/128 for one address");
        bad_net("10.0.0.0/8", "IPv4 prefix on an IPv6-only dataplane");
        bad_net("10.0.0.1", "IPv4 address on an IPv6-only dataplane");
        bad_net("2001:db8::1/32", "host bits set; did you mean 2001:db8::/32?");
        bad_net("2001:db8::/129", "prefix length `129` is not a number in 0..=128");
        bad_net("2001:db8::/+32", "prefix length `+32`");
        bad_net("2001:db8::/", "prefix length ``");
        bad_net("2001:db8::/32/1", "prefix length `32/1`");
        bad_net("2001:zz8::/32", "`2001:zz8::` is not an IPv6 address");
        bad_net("bad", "`bad` is not an IPv6 prefix");
        bad_net("::/0", "would drop every packet");
        bad_net("8000::/0", "would drop every packet");
        bad_net("2001:DB8:1::/48", "duplicate prefix 2001:db8:1::/48 (also item 0)");
    }

    #[test]
    fn too_many_deny_sources() {
        let items = vec!["\"\""; v6node_abi::DENY_SRC_MAX as usize + 1].join(",");
        bad(&format!("filter.deny_sources = [{items}]"), "filter.deny_sources", "262145 prefixes; at most 262144");
    }
}
