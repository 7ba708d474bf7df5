// SPDX-License-Identifier: Apache-2.0
//! `[nat64.stateful]`: IPv6 clients without a mapping of their own share
//! IPv4 addresses.

use std::net::Ipv4Addr;

use ipnet::Ipv6Net;
use serde::Serialize;
use toml::Value;

use super::Nat64;
use crate::keywords::keywords;
use crate::ports::{port_range, PortRange};
use crate::sections::filter::deny_prefix;
use crate::serialize::{serialize_displayed, serialize_one_displayed};
use crate::validator::{Result, Validator};

/// Stateful NAT64 (RFC 6146): IPv6 clients in `sources` without a mapping
/// of their own share the IPv4 addresses of `pool`, one transport address
/// per client transport address (endpoint-independent mapping).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat64Stateful {
    #[serde(serialize_with = "serialize_displayed")]
    pub pool: Vec<Ipv4Addr>,
    #[serde(serialize_with = "serialize_displayed")]
    pub sources: Vec<Ipv6Net>,
    #[serde(serialize_with = "serialize_one_displayed")]
    pub tcp_ports: PortRange,
    #[serde(serialize_with = "serialize_one_displayed")]
    pub udp_ports: PortRange,
    /// ICMP echo identifiers, which stand in for ports.
    #[serde(serialize_with = "serialize_one_displayed")]
    pub icmp_ids: PortRange,
    pub filtering: Nat64Filtering,
    pub udp_seconds: u32,
    pub tcp_established_seconds: u32,
    /// Before the server answers, and after a FIN or RST.
    pub tcp_transitory_seconds: u32,
    pub icmp_seconds: u32,
}

/// RFC 6146 4's default lifetimes.
pub const NAT64_UDP_SECONDS: u32 = 300;
pub const NAT64_TCP_ESTABLISHED_SECONDS: u32 = 7440;
pub const NAT64_TCP_TRANSITORY_SECONDS: u32 = 240;
pub const NAT64_ICMP_SECONDS: u32 = 60;
/// Ports below stay the node's own, as RFC 6056 leaves them to services.
pub const NAT64_PORTS_DEFAULT: PortRange = PortRange { first: 1024, last: 65535 };

/// RFC 4787 filtering: which IPv4 hosts may reach a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Nat64Filtering {
    /// Any host, once the client has a binding (what RFC 6146 recommends
    /// for applications to work).
    #[default]
    EndpointIndependent,
    /// Only hosts the client has sent to.
    AddressDependent,
}

keywords!(Nat64Filtering, "filtering", {
    EndpointIndependent => "endpoint-independent",
    AddressDependent => "address-dependent",
});

/// `[nat64.stateful]`, checked against the stateless mappings in `nat64`
/// so that no pool address is also a destination of theirs, and against
/// its prefix: a client reaches another through its pool address under
/// the prefix (hairpinning), so the well-known prefix takes global
/// addresses only.
pub(crate) fn read(v: &Validator, value: &Value, nat64: &Nat64) -> Result<Nat64Stateful> {
    const PATH: &str = "nat64.stateful";
    let Value::Table(t) = value else {
        return Err(v.type_err(PATH, "a table", value));
    };
    v.known_keys(
        t,
        PATH,
        &[
            "pool",
            "sources",
            "tcp_ports",
            "udp_ports",
            "icmp_ids",
            "filtering",
            "udp_seconds",
            "tcp_established_seconds",
            "tcp_transitory_seconds",
            "icmp_seconds",
        ],
    )?;
    let pool_items = v.strings(t, "nat64.stateful.pool")?.unwrap_or_default();
    if pool_items.is_empty() {
        return Err(v.err("nat64.stateful.pool", "missing or empty; list the IPv4 addresses clients share"));
    }
    v.at_most("nat64.stateful.pool", pool_items.len(), v6node_abi::NAT64_POOL_MAX as usize, "addresses")?;
    let mut pool: Vec<Ipv4Addr> = Vec::with_capacity(pool_items.len());
    for (i, s) in pool_items.iter().enumerate() {
        let key = format!("nat64.stateful.pool[{i}]");
        let addr: Ipv4Addr =
            s.parse().map_err(|_| v.err(&key, format!("`{s}` is not an IPv4 address; list addresses, e.g. 203.0.113.1")))?;
        if let Some(j) = pool.iter().position(|a| *a == addr) {
            return Err(v.err(&key, format!("duplicate address {addr} (also item {j})")));
        }
        if let Some(reason) = nat64.maps_statelessly(addr).or_else(|| nat64.cannot_represent_address(addr)) {
            return Err(v.err(&key, reason));
        }
        pool.push(addr);
    }
    let source_items = v.strings(t, "nat64.stateful.sources")?.unwrap_or_default();
    if source_items.is_empty() {
        return Err(v.err("nat64.stateful.sources", "missing or empty; list the IPv6 prefixes that may use the pool"));
    }
    v.at_most("nat64.stateful.sources", source_items.len(), v6node_abi::NAT64_SOURCES_MAX as usize, "prefixes")?;
    let mut sources: Vec<Ipv6Net> = Vec::with_capacity(source_items.len());
    for (i, s) in source_items.iter().enumerate() {
        let key = format!("nat64.stateful.sources[{i}]");
        if s.ends_with("/0") {
            return Err(v.err(&key, format!("`{s}` would lend the pool to every IPv6 source; list your clients' prefixes")));
        }
        let net = deny_prefix(s).map_err(|r| v.err(&key, r))?;
        if let Some(j) = sources.iter().position(|n| *n == net) {
            return Err(v.err(&key, format!("duplicate prefix {net} (also item {j})")));
        }
        sources.push(net);
    }
    let ports = |key: &str, lowest: u16| -> Result<PortRange> {
        let path = format!("nat64.stateful.{key}");
        let range = match v.string(t, &path)? {
            Some(s) => port_range(s, lowest).map_err(|r| v.err(&path, r))?,
            None => NAT64_PORTS_DEFAULT,
        };
        Ok(range)
    };
    let tcp_ports = ports("tcp_ports", 1)?;
    let udp_ports = ports("udp_ports", 1)?;
    let icmp_ids = ports("icmp_ids", 0)?;
    let filtering = match v.string(t, "nat64.stateful.filtering")? {
        Some(s) => s.parse().map_err(|r| v.err("nat64.stateful.filtering", r))?,
        None => Nat64Filtering::default(),
    };
    let seconds = |key: &str, default: u32| v.lifetime(t, &format!("nat64.stateful.{key}"), default);
    Ok(Nat64Stateful {
        pool,
        sources,
        tcp_ports,
        udp_ports,
        icmp_ids,
        filtering,
        udp_seconds: seconds("udp_seconds", NAT64_UDP_SECONDS)?,
        tcp_established_seconds: seconds("tcp_established_seconds", NAT64_TCP_ESTABLISHED_SECONDS)?,
        tcp_transitory_seconds: seconds("tcp_transitory_seconds", NAT64_TCP_TRANSITORY_SECONDS)?,
        icmp_seconds: seconds("icmp_seconds", NAT64_ICMP_SECONDS)?,
    })
}

#[cfg(test)]
mod tests {
    use super::Nat64Filtering;
    use crate::testutil::{bad, ok};

    #[test]
    fn nat64_stateful_pool_sources_ranges_and_lifetimes() {
        // Documentation addresses are not global: a network-specific prefix
        // (RFC 8215's local-use 64:ff9b:1::/48) may carry them, the
        // well-known one may not.
        assert!(ok("").nat64.stateful.is_none());
        let c = ok("[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.1\", \"203.0.113.2\"]\nsources = [\"fd00:10::/48\"]\n");
        let s = c.nat64.stateful.expect("stateful");
        assert_eq!(s.pool.len(), 2);
        assert_eq!(s.sources[0].to_string(), "fd00:10::/48");
        assert_eq!((s.tcp_ports.to_string(), s.udp_ports.count()), ("1024-65535".into(), 64512));
        assert_eq!(s.filtering, Nat64Filtering::EndpointIndependent);
        assert_eq!(
            (s.udp_seconds, s.tcp_established_seconds, s.tcp_transitory_seconds, s.icmp_seconds),
            (300, 7440, 240, 60),
            "RFC 6146's defaults"
        );
        let c = ok("[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00:10::/48\"]\nudp_ports = \"20000-20099\"\n\
                    icmp_ids = \"0-99\"\nfiltering = \"address-dependent\"\nudp_seconds = 120\n");
        let s = c.nat64.stateful.unwrap();
        assert_eq!((s.udp_ports.first, s.udp_ports.last, s.icmp_ids.count()), (20000, 20099, 100));
        assert_eq!((s.filtering, s.udp_seconds), (Nat64Filtering::AddressDependent, 120));

        let with = |extra: &str| {
            format!("[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00:10::/48\"]\n{extra}")
        };
        bad(
            "[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\nsources = [\"fd00:10::/48\"]\n",
            "nat64.stateful.pool",
            "missing or empty",
        );
        bad(
            "[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.1\"]\n",
            "nat64.stateful.sources",
            "missing or empty",
        );
        bad(
            "[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.0/30\"]\nsources = [\"fd00:10::/48\"]\n",
            "nat64.stateful.pool[0]",
            "list addresses",
        );
        bad(
            "[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.1\", \"203.0.113.1\"]\nsources = [\"fd00::/8\"]\n",
            "nat64.stateful.pool[1]",
            "duplicate",
        );
        bad(
            "[nat64]\nprefix = \"64:ff9b:1::/48\"\neam = [{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"203.0.113.0/24\" }]\n[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00::/8\"]\n",
            "nat64.stateful.pool[0]",
            "explicit address mapping of 203.0.113.0/24",
        );
        bad(&with("tcp_ports = \"0-100\"\n"), "nat64.stateful.tcp_ports", "expected 1 <= first");
        bad(&with("tcp_ports = \"2000-1000\"\n"), "nat64.stateful.tcp_ports", "first <= last");
        bad(&with("udp_ports = \"any\"\n"), "nat64.stateful.udp_ports", "not a range");
        bad(&with("filtering = \"symmetric\"\n"), "nat64.stateful.filtering", "endpoint-independent, address-dependent");
        bad(&with("udp_seconds = 0\n"), "nat64.stateful.udp_seconds", "out of range");
        bad(&with("window = 1\n"), "nat64.stateful.window", "unknown key");
        bad(
            "[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"::/0\"]\n",
            "nat64.stateful.sources[0]",
            "every IPv6 source",
        );
    }

    #[test]
    fn a_carrier_pool_of_a_slash_22_with_every_port_is_taken_and_more_refused() {
        let pool = |n: u32| {
            let items: Vec<String> = (0..n).map(|i| format!("\"{}\"", std::net::Ipv4Addr::from(0xcb00_7000 + i))).collect();
            format!(
                "[nat64]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [{}]\nsources = [\"fd00::/8\"]\n",
                items.join(", ")
            )
        };
        let c = ok(&pool(1024));
        let s = c.nat64.stateful.expect("stateful");
        assert_eq!((s.pool.len(), s.tcp_ports.count()), (1024, 64512), "1024 addresses x 64512 ports");
        bad(&pool(1025), "nat64.stateful.pool", "at most 1024");
    }
}
