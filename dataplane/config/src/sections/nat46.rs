// SPDX-License-Identifier: Apache-2.0
//! `[nat46]` and its `[[nat46.gateway]]`s: the stateful NAT46 gateway, which
//! runs in the translator and so is checked against `[nat64]`.

use std::net::{SocketAddrV4, SocketAddrV6};

use ipnet::Ipv6Net;
use serde::Serialize;
use toml::{Table, Value};

use crate::keywords::keywords;
use crate::sections::nat64::stateful::{NAT64_TCP_ESTABLISHED_SECONDS, NAT64_TCP_TRANSITORY_SECONDS, NAT64_UDP_SECONDS};
use crate::sections::nat64::Nat64;
use crate::serialize::serialize_one_displayed;
use crate::validator::{Result, Validator};

/// The stateful NAT46 gateway: IPv4 clients reach IPv6 backends through
/// the frontends (VIP, port, protocol) of `gateways`, on the translator's
/// devices. Each flow is given a backend by the frontend's weighted Maglev
/// table and keeps it while the backend stays configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat46 {
    /// The /96 IPv4 clients are embedded in (RFC 6052) as the backends see
    /// them; routed to this gateway alone, so replies come back through it.
    #[serde(serialize_with = "serialize_one_displayed")]
    pub source_prefix: Ipv6Net,
    #[serde(rename = "gateway")]
    pub gateways: Vec<Nat46Gateway>,
    pub udp_seconds: u32,
    pub tcp_established_seconds: u32,
    /// Before the backend answers, and after a FIN or RST.
    pub tcp_transitory_seconds: u32,
}

/// One `[[nat46.gateway]]`: a frontend and its backends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat46Gateway {
    #[serde(serialize_with = "serialize_one_displayed")]
    pub frontend: SocketAddrV4,
    pub protocol: Nat46Protocol,
    pub backends: Vec<Nat46Backend>,
    /// Each backend probed; one that fails gets no new flows until it
    /// passes again. None: every backend is taken as healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<Nat46HealthCheck>,
}

/// `nat46.gateway[].health_check`: a TCP connection to each backend every
/// `interval_seconds` (to `port`, else the backend's own), given
/// `timeout_ms` to be accepted. After `fall` failures in a row the backend
/// is quarantined: it leaves the Maglev table (no new flows) and keeps its
/// flows; after `rise` successes in a row it is back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Nat46HealthCheck {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub interval_seconds: u32,
    pub timeout_ms: u32,
    pub fall: u32,
    pub rise: u32,
}

impl Default for Nat46HealthCheck {
    fn default() -> Self {
        Nat46HealthCheck { port: None, interval_seconds: 5, timeout_ms: 1000, fall: 3, rise: 2 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Nat46Backend {
    #[serde(serialize_with = "serialize_one_displayed")]
    pub address: SocketAddrV6,
    /// Its share of new flows, relative to the others'; 0 drains it: no new
    /// flows, its flows kept.
    pub weight: u32,
}

/// A backend's weight when the config gives none, and the most it may be.
pub const NAT46_WEIGHT_DEFAULT: u32 = 1;
pub const NAT46_WEIGHT_MAX: u32 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Nat46Protocol {
    Tcp,
    Udp,
}

keywords!(Nat46Protocol, "protocol", {
    Tcp => "tcp",
    Udp => "udp",
});

impl Nat46Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Nat46Protocol::Tcp => 6,
            Nat46Protocol::Udp => 17,
        }
    }
}

/// `[nat46]`, checked against `nat64` so that no VIP is also an IPv4
/// address the translator maps, and replies to the source prefix are
/// never taken for the translator's. `None` without the section: no gateway.
pub(crate) fn read(v: &Validator, root: &Table, nat64: &Nat64) -> Result<Option<Nat46>> {
    let Some(t) = v.section(
        root,
        "nat46",
        &["source_prefix", "gateway", "udp_seconds", "tcp_established_seconds", "tcp_transitory_seconds"],
    )?
    else {
        return Ok(None);
    };
    if nat64.devices.is_empty() {
        return Err(v.err("nat46", "the gateway runs in the translator: list its devices in nat64.devices"));
    }
    let prefix = v
        .string(t, "nat46.source_prefix")?
        .ok_or_else(|| v.err("nat46.source_prefix", "missing; give a /96 routed to this gateway, e.g. 2001:db8:46::/96"))?;
    let source_prefix = nat46_prefix(prefix).map_err(|r| v.err("nat46.source_prefix", r))?;
    if source_prefix.contains(&nat64.prefix) || nat64.prefix.contains(&source_prefix) {
        return Err(v.err(
            "nat46.source_prefix",
            format!("{source_prefix} overlaps nat64.prefix ({}); the gateway's clients need a prefix of their own", nat64.prefix),
        ));
    }
    if let Some(eam) = nat64.eam.iter().find(|e| e.ipv6.contains(&source_prefix) || source_prefix.contains(&e.ipv6)) {
        return Err(
            v.err("nat46.source_prefix", format!("{source_prefix} overlaps the explicit address mapping of {}", eam.ipv6))
        );
    }
    let items = match t.get("gateway") {
        None => Vec::new(),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(value) => return Err(v.type_err("nat46.gateway", "an array of tables ([[nat46.gateway]])", value)),
    };
    v.at_most("nat46.gateway", items.len(), v6node_abi::NAT46_FRONTENDS_MAX as usize, "frontends")?;
    let mut gateways: Vec<Nat46Gateway> = Vec::with_capacity(items.len());
    let mut backends_total = 0;
    for (i, item) in items.into_iter().enumerate() {
        let gateway = read_gateway(v, &format!("nat46.gateway[{i}]"), item, nat64, &source_prefix)?;
        if let Some(j) = gateways.iter().position(|g| g.frontend == gateway.frontend && g.protocol == gateway.protocol) {
            return Err(v.err(
                &format!("nat46.gateway[{i}].frontend"),
                format!("{} {} is gateway[{j}]'s already", gateway.protocol, gateway.frontend),
            ));
        }
        backends_total += gateway.backends.len();
        gateways.push(gateway);
    }
    v.at_most("nat46.gateway", backends_total, v6node_abi::NAT46_BACKENDS_MAX as usize, "backends in all")?;
    let seconds = |key: &str, default: u32| v.lifetime(t, &format!("nat46.{key}"), default);
    Ok(Some(Nat46 {
        source_prefix,
        gateways,
        udp_seconds: seconds("udp_seconds", NAT64_UDP_SECONDS)?,
        tcp_established_seconds: seconds("tcp_established_seconds", NAT64_TCP_ESTABLISHED_SECONDS)?,
        tcp_transitory_seconds: seconds("tcp_transitory_seconds", NAT64_TCP_TRANSITORY_SECONDS)?,
    }))
}

fn read_gateway(v: &Validator, key: &str, item: &Value, nat64: &Nat64, source_prefix: &Ipv6Net) -> Result<Nat46Gateway> {
    let Value::Table(t) = item else {
        return Err(v.type_err(key, "a table { frontend = \"198.51.100.80:443\", protocol = \"tcp\", backends = [...] }", item));
    };
    v.known_keys(t, key, &["frontend", "protocol", "backends", "health_check"])?;
    let path = format!("{key}.frontend");
    let frontend: SocketAddrV4 = match t.get("frontend") {
        Some(Value::String(s)) => s
            .parse()
            .ok()
            .filter(|f: &SocketAddrV4| f.port() != 0)
            .ok_or_else(|| v.err(&path, format!("`{s}` is not an IPv4 address and port, e.g. 198.51.100.80:443")))?,
        Some(value) => return Err(v.type_err(&path, "a string", value)),
        None => return Err(v.err(&path, "missing; the VIP and port clients connect to, e.g. 198.51.100.80:443")),
    };
    let vip = *frontend.ip();
    if let Some(stateful) = &nat64.stateful {
        if stateful.pool.contains(&vip) {
            return Err(v.err(&path, format!("{vip} is in nat64.stateful.pool")));
        }
    }
    if let Some(reason) = nat64.maps_statelessly(vip) {
        return Err(v.err(&path, reason));
    }
    let path = format!("{key}.protocol");
    let protocol = match v.string(t, &path)? {
        Some(s) => s.parse().map_err(|r| v.err(&path, r))?,
        None => Nat46Protocol::Tcp,
    };
    let path = format!("{key}.backends");
    let items = match t.get("backends") {
        None => Vec::new(),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(value) => {
            return Err(v.type_err(&path, "an array of tables such as [{ address = \"[2001:db8::a]:8080\", weight = 1 }]", value))
        }
    };
    let max = v6node_abi::BACKENDS_PER_SERVICE_MAX as usize;
    if items.len() > max {
        return Err(v.err(&path, format!("{} backends; at most {max} a frontend are supported", items.len())));
    }
    let mut backends: Vec<Nat46Backend> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let key = format!("{path}[{i}]");
        let Value::Table(b) = item else {
            return Err(v.type_err(&key, "a table { address = \"[2001:db8::a]:8080\", weight = 1 }", item));
        };
        v.known_keys(b, &key, &["address", "weight"])?;
        let addr_path = format!("{key}.address");
        let address: SocketAddrV6 =
            match b.get("address") {
                Some(Value::String(s)) => s.parse().ok().filter(|a: &SocketAddrV6| a.port() != 0).ok_or_else(|| {
                    v.err(&addr_path, format!("`{s}` is not an IPv6 address and port, e.g. [2001:db8::a]:8080"))
                })?,
                Some(value) => return Err(v.type_err(&addr_path, "a string", value)),
                None => return Err(v.err(&addr_path, "missing; the backend's IPv6 address and port, e.g. [2001:db8::a]:8080")),
            };
        let ip = address.ip();
        if ip.to_ipv4_mapped().is_some() || ip.is_unspecified() || ip.is_multicast() || source_prefix.contains(ip) {
            return Err(v.err(
                &addr_path,
                format!("{ip} cannot be a backend: an IPv4-mapped, unspecified, multicast or gateway-client address"),
            ));
        }
        let weight_path = format!("{key}.weight");
        let weight = match v.integer(b, &weight_path)? {
            None => NAT46_WEIGHT_DEFAULT,
            Some(n) => u32::try_from(n).ok().filter(|n| *n <= NAT46_WEIGHT_MAX).ok_or_else(|| {
                v.err(&weight_path, format!("{n} is out of range; expected 0..={NAT46_WEIGHT_MAX} (0 drains the backend)"))
            })?,
        };
        if let Some(j) = backends.iter().position(|o| o.address == address) {
            return Err(v.err(&addr_path, format!("{address} is backend {j} already")));
        }
        backends.push(Nat46Backend { address, weight });
    }
    let health_check = read_health_check(v, &format!("{key}.health_check"), t.get("health_check"), protocol)?;
    Ok(Nat46Gateway { frontend, protocol, backends, health_check })
}

fn read_health_check(
    v: &Validator,
    key: &str,
    item: Option<&Value>,
    protocol: Nat46Protocol,
) -> Result<Option<Nat46HealthCheck>> {
    let Some(item) = item else {
        return Ok(None);
    };
    let Value::Table(t) = item else {
        return Err(v.type_err(key, "a table { interval_seconds = 5, timeout_ms = 1000, fall = 3, rise = 2 }", item));
    };
    v.known_keys(t, key, &["port", "interval_seconds", "timeout_ms", "fall", "rise"])?;
    let mut check = Nat46HealthCheck::default();
    let number = |name: &str, default: u32, range: std::ops::RangeInclusive<u32>| -> Result<u32> {
        let path = format!("{key}.{name}");
        match v.integer(t, &path)? {
            None => Ok(default),
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| v.err(&path, format!("{n} is out of range; expected {}..={}", range.start(), range.end()))),
        }
    };
    check.interval_seconds = number("interval_seconds", check.interval_seconds, 1..=3600)?;
    check.timeout_ms = number("timeout_ms", check.timeout_ms, 1..=check.interval_seconds * 1000)?;
    check.fall = number("fall", check.fall, 1..=10)?;
    check.rise = number("rise", check.rise, 1..=10)?;
    let path = format!("{key}.port");
    check.port = match v.integer(t, &path)? {
        None => None,
        Some(n) => Some(
            u16::try_from(n)
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| v.err(&path, format!("{n} is out of range; expected 1..=65535")))?,
        ),
    };
    if protocol == Nat46Protocol::Udp && check.port.is_none() {
        return Err(v.err(
            &format!("{key}.port"),
            "missing; a UDP frontend's backends are probed by TCP, on a port that answers when the backend is healthy",
        ));
    }
    Ok(Some(check))
}

/// The gateway's source prefix: a /96, host bits zero.
fn nat46_prefix(s: &str) -> std::result::Result<Ipv6Net, String> {
    let net: Ipv6Net = s.parse().map_err(|_| format!("`{s}` is not an IPv6 prefix; expected e.g. 2001:db8:46::/96"))?;
    if net.prefix_len() != 96 {
        return Err(format!("{net} is a /{}; the gateway embeds IPv4 clients in a /96", net.prefix_len()));
    }
    if net.network() != net.addr() {
        return Err(format!("{net} has host bits set; write {}", net.trunc()));
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::{Nat46HealthCheck, Nat46Protocol};
    use crate::testutil::{bad, ok};

    #[test]
    fn nat46_gateway_frontends_backends_and_weights() {
        assert!(ok("").nat46.is_none());
        let head = "[nat64]\ndevices = [\"eth0\"]\n[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n";
        let with = |extra: &str| format!("{head}{extra}");
        let c = ok(&with(
            "[[nat46.gateway]]\nfrontend = \"198.51.100.80:443\"\nbackends = [{ address = \"[2001:db8::a]:8443\", weight = 3 }, \
             { address = \"[2001:db8::b]:8443\" }, { address = \"[2001:db8::c]:8443\", weight = 0 }]\n\
             [[nat46.gateway]]\nfrontend = \"198.51.100.80:53\"\nprotocol = \"udp\"\n",
        ));
        let n = c.nat46.clone().expect("nat46");
        assert_eq!(n.source_prefix.to_string(), "2001:db8:46::/96");
        assert_eq!((n.udp_seconds, n.tcp_established_seconds, n.tcp_transitory_seconds), (300, 7440, 240));
        let g = &n.gateways[0];
        assert_eq!((g.frontend.to_string(), g.protocol), ("198.51.100.80:443".into(), Nat46Protocol::Tcp));
        let weights: Vec<u32> = g.backends.iter().map(|b| b.weight).collect();
        assert_eq!(weights, [3, 1, 0], "default 1, 0 drains");
        assert_eq!((n.gateways[1].protocol, n.gateways[1].backends.len()), (Nat46Protocol::Udp, 0));
        assert_eq!(ok(&toml::to_string(&c).unwrap()).nat46.unwrap(), n, "round trip");

        bad("[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n", "nat46", "nat64.devices");
        bad(head.trim_end_matches("source_prefix = \"2001:db8:46::/96\"\n"), "nat46.source_prefix", "missing");
        bad(&head.replace("::/96", "::/64"), "nat46.source_prefix", "a /64");
        bad(&head.replace("2001:db8:46::/96", "64:ff9b::/96"), "nat46.source_prefix", "overlaps nat64.prefix");
        let gw = |body: &str| with(&format!("[[nat46.gateway]]\n{body}\n"));
        bad(&gw("frontend = \"198.51.100.80\""), "nat46.gateway[0].frontend", "not an IPv4 address and port");
        bad(&gw("frontend = \"198.51.100.80:0\""), "nat46.gateway[0].frontend", "not an IPv4 address and port");
        bad(&gw("backends = []"), "nat46.gateway[0].frontend", "missing");
        bad(&gw("frontend = \"198.51.100.80:80\"\nprotocol = \"sctp\""), "nat46.gateway[0].protocol", "tcp, udp");
        bad(
            &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"2001:db8::a\" }]"),
            "nat46.gateway[0].backends[0].address",
            "not an IPv6 address and port",
        );
        bad(
            &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[::ffff:192.0.2.1]:80\" }]"),
            "nat46.gateway[0].backends[0].address",
            "cannot be a backend",
        );
        bad(
            &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8:46::1]:80\" }]"),
            "nat46.gateway[0].backends[0].address",
            "cannot be a backend",
        );
        bad(
            &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::a]:80\", weight = 1001 }]"),
            "nat46.gateway[0].backends[0].weight",
            "0..=1000",
        );
        bad(
            &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::a]:80\" }, { address = \"[2001:db8::a]:80\" }]"),
            "nat46.gateway[0].backends[1].address",
            "backend 0 already",
        );
        bad(
            &with("[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n"),
            "nat46.gateway[1].frontend",
            "gateway[0]'s already",
        );
        bad(
            "[nat64]\ndevices = [\"eth0\"]\nprefix = \"64:ff9b:1::/48\"\n[nat64.stateful]\npool = [\"198.51.100.80\"]\nsources = [\"fd00::/8\"]\n\
             [nat46]\nsource_prefix = \"2001:db8:46::/96\"\n[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n",
            "nat46.gateway[0].frontend",
            "nat64.stateful.pool",
        );
        bad(&with("udp_seconds = 0\n"), "nat46.udp_seconds", "out of range");
        bad(&gw("frontend = \"198.51.100.80:80\"\nweight = 2"), "nat46.gateway[0].weight", "unknown key");
    }

    #[test]
    fn nat46_health_checks_probe_by_tcp_with_bounds() {
        let head = "[nat64]\ndevices = [\"eth0\"]\n[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n[[nat46.gateway]]\n";
        let gw = |body: &str| format!("{head}frontend = \"198.51.100.80:80\"\n{body}\n");
        assert_eq!(ok(&gw("")).nat46.unwrap().gateways[0].health_check, None, "off unless set");
        let c = ok(&gw("health_check = {}"));
        let check = c.nat46.clone().unwrap().gateways[0].health_check.unwrap();
        assert_eq!(check, Nat46HealthCheck::default());
        assert_eq!((check.interval_seconds, check.timeout_ms, check.fall, check.rise), (5, 1000, 3, 2));
        let c2 = ok(&gw("health_check = { port = 9000, interval_seconds = 1, timeout_ms = 200, fall = 2, rise = 1 }"));
        let check = c2.nat46.clone().unwrap().gateways[0].health_check.unwrap();
        assert_eq!(check, Nat46HealthCheck { port: Some(9000), interval_seconds: 1, timeout_ms: 200, fall: 2, rise: 1 });
        for c in [c, c2] {
            assert_eq!(ok(&toml::to_string(&c).unwrap()), c, "round trip");
        }
        let key = "nat46.gateway[0].health_check";
        bad(&gw("health_check = { interval_seconds = 0 }"), &format!("{key}.interval_seconds"), "1..=3600");
        bad(&gw("health_check = { interval_seconds = 1, timeout_ms = 1500 }"), &format!("{key}.timeout_ms"), "1..=1000");
        bad(&gw("health_check = { fall = 0 }"), &format!("{key}.fall"), "1..=10");
        bad(&gw("health_check = { rise = 11 }"), &format!("{key}.rise"), "1..=10");
        bad(&gw("health_check = { port = 0 }"), &format!("{key}.port"), "1..=65535");
        bad(&gw("health_check = { path = \"/\" }"), &format!("{key}.path"), "unknown key");
        bad(&gw("health_check = 5"), key, "a table");
        bad(&gw("protocol = \"udp\"\nhealth_check = {}"), &format!("{key}.port"), "probed by TCP");
    }
}
