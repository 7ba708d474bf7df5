// SPDX-License-Identifier: Apache-2.0
//! Merged TOML table -> typed `Config`. Checks run in schema order, so the
//! first error reported does not depend on the order keys appear in files.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use ipnet::{Ipv4Net, Ipv6Net};
use toml::{Table, Value};

use crate::merge::Merged;
use crate::model::*;
use crate::ConfigError;

type Result<T> = std::result::Result<T, ConfigError>;

pub(crate) fn build(m: &Merged) -> Result<Config> {
    let v = Validator { m };
    let root = &m.table;
    v.known_keys(
        root,
        "",
        &["attach", "bigtcp", "filter", "nat64", "nat46", "pods", "kubernetes", "routing", "services", "metrics", "log"],
    )?;
    let mut cfg = Config::default();

    if let Some(t) = v.section(root, "attach", &["devices", "mode"])? {
        if let Some(items) = v.strings(t, "attach.devices")? {
            cfg.attach.devices = v.devices("attach.devices", &items)?;
        }
        if let Some(s) = v.string(t, "attach.mode")? {
            cfg.attach.mode = s.parse().map_err(|r| v.err("attach.mode", r))?;
        }
    }

    if let Some(t) = v.section(root, "bigtcp", &["devices", "size"])? {
        if let Some(items) = v.strings(t, "bigtcp.devices")? {
            cfg.bigtcp.devices = v.devices("bigtcp.devices", &items)?;
        }
        if let Some(n) = v.integer(t, "bigtcp.size")? {
            cfg.bigtcp.size = u32::try_from(n).ok().filter(|n| (BIGTCP_MIN..=BIGTCP_MAX).contains(n)).ok_or_else(|| {
                v.err("bigtcp.size", format!("{n} is out of range; expected {BIGTCP_MIN}..={BIGTCP_MAX} bytes"))
            })?;
        }
    }

    if let Some(t) = v.section(root, "filter", &["deny_sources"])? {
        if let Some(items) = v.strings(t, "filter.deny_sources")? {
            cfg.filter.deny_sources = v.deny_sources("filter.deny_sources", &items)?;
        }
    }

    if let Some(t) = v.section(root, "nat64", &["devices", "prefix", "eam", "translatable", "stateful"])? {
        if let Some(items) = v.strings(t, "nat64.devices")? {
            cfg.nat64.devices = v.devices("nat64.devices", &items)?;
        }
        if let Some(s) = v.string(t, "nat64.prefix")? {
            cfg.nat64.prefix = nat64_prefix(s).map_err(|r| v.err("nat64.prefix", r))?;
        }
        if let Some(value) = t.get("eam") {
            cfg.nat64.eam = v.eams("nat64.eam", value)?;
        }
        if let Some(items) = v.strings(t, "nat64.translatable")? {
            cfg.nat64.translatable = v.translatable("nat64.translatable", &items)?;
        }
        if let Some(value) = t.get("stateful") {
            cfg.nat64.stateful = Some(v.nat64_stateful(value, &cfg.nat64)?);
        }
    }

    if let Some(t) = v.section(
        root,
        "nat46",
        &["source_prefix", "gateway", "udp_seconds", "tcp_established_seconds", "tcp_transitory_seconds"],
    )? {
        cfg.nat46 = Some(v.nat46(t, &cfg.nat64)?);
    }

    if let Some(t) = v.section(root, "pods", &["prefix", "device"])? {
        if let Some(s) = v.string(t, "pods.prefix")? {
            cfg.pods.prefix = match s {
                "" => None,
                s => Some(pod_prefix(s).map_err(|r| v.err("pods.prefix", r))?),
            };
        }
        if let Some(s) = v.string(t, "pods.device")? {
            cfg.pods.device = s.parse().map_err(|r| v.err("pods.device", r))?;
        }
    }

    if let Some(t) = v.section(root, "kubernetes", &["kubeconfig", "node_name"])? {
        if let Some(s) = v.string(t, "kubernetes.kubeconfig")? {
            cfg.kubernetes.kubeconfig = match s {
                "" => None,
                s if s.starts_with('/') => Some(s.into()),
                s => return Err(v.err("kubernetes.kubeconfig", format!("{s:?} is not an absolute path"))),
            };
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
            cfg.kubernetes.node_name = s.to_string();
        }
    }

    if let Some(t) = v.section(root, "services", &["cgroup", "remote_backends"])? {
        if let Some(s) = v.string(t, "services.cgroup")? {
            cfg.services.cgroup = match s {
                "" => None,
                s if s.starts_with('/') => Some(s.into()),
                s => return Err(v.err("services.cgroup", format!("{s:?} is not an absolute path"))),
            };
        }
        if let Some(s) = v.string(t, "services.remote_backends")? {
            cfg.services.remote_backends = s.parse().map_err(|r| v.err("services.remote_backends", r))?;
        }
    }

    if let Some(t) = v.section(root, "routing", &["asn", "router_id", "peers", "announce"])? {
        cfg.routing.bgp = v.bgp(t)?;
    }

    if let Some(t) = v.section(root, "metrics", &["listen"])? {
        if let Some(s) = v.string(t, "metrics.listen")? {
            cfg.metrics.listen = match s {
                "" => None,
                s => Some(s.parse().map_err(|r| v.err("metrics.listen", r))?),
            };
        }
    }

    if let Some(t) = v.section(root, "log", &["level"])? {
        if let Some(s) = v.string(t, "log.level")? {
            cfg.log.level = s.parse().map_err(|r| v.err("log.level", r))?;
        }
    }

    Ok(cfg)
}

struct Validator<'a> {
    m: &'a Merged,
}

impl Validator<'_> {
    fn err(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::new(&self.m.file_for(key), Some(key.to_owned()), reason.into())
    }

    fn type_err(&self, key: &str, expected: &str, found: &Value) -> ConfigError {
        let found = match found {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a datetime",
            Value::Array(_) => "an array",
            Value::Table(_) => "a table",
        };
        self.err(key, format!("expected {expected}, found {found}"))
    }

    fn known_keys(&self, t: &Table, path: &str, allowed: &[&str]) -> Result<()> {
        match t.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => {
                let key = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                Err(self.err(&key, format!("unknown key `{k}`; expected one of {}", allowed.join(", "))))
            }
        }
    }

    fn section<'t>(&self, root: &'t Table, name: &str, allowed: &[&str]) -> Result<Option<&'t Table>> {
        match root.get(name) {
            None => Ok(None),
            Some(Value::Table(t)) => {
                self.known_keys(t, name, allowed)?;
                Ok(Some(t))
            }
            Some(v) => Err(self.type_err(name, "a table", v)),
        }
    }

    /// `path` is `section.key`; the key is looked up in the section table `t`.
    fn field<'t>(t: &'t Table, path: &str) -> Option<&'t Value> {
        t.get(path.rsplit('.').next().unwrap_or(path))
    }

    fn string<'t>(&self, t: &'t Table, path: &str) -> Result<Option<&'t str>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.type_err(path, "a string", v)),
        }
    }

    fn integer(&self, t: &Table, path: &str) -> Result<Option<i64>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::Integer(n)) => Ok(Some(*n)),
            Some(Value::Float(f)) => {
                Err(self.err(path, format!("expected an integer, found a float ({f}); write a whole number of bytes")))
            }
            Some(v) => Err(self.type_err(path, "an integer", v)),
        }
    }

    fn strings<'t>(&self, t: &'t Table, path: &str) -> Result<Option<Vec<&'t str>>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.as_str()),
                    v => Err(self.type_err(&format!("{path}[{i}]"), "a string", v)),
                })
                .collect::<Result<_>>()
                .map(Some),
            Some(v) => Err(self.type_err(path, "an array of strings", v)),
        }
    }

    fn devices(&self, path: &str, items: &[&str]) -> Result<Vec<DevicePattern>> {
        let mut out = Vec::with_capacity(items.len());
        for (i, s) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            out.push(DevicePattern::new(s).map_err(|r| self.err(&key, r))?);
            if let Some(j) = items[..i].iter().position(|p| p == s) {
                return Err(self.err(&key, format!("duplicate pattern `{s}` (also item {j})")));
            }
        }
        Ok(out)
    }

    fn deny_sources(&self, path: &str, items: &[&str]) -> Result<Vec<Ipv6Net>> {
        // The deny map's size (abi.h), fixed when the agent loads it.
        let max = v6node_abi::DENY_SRC_MAX as usize;
        if items.len() > max {
            return Err(self.err(path, format!("{} prefixes; at most {max} are supported", items.len())));
        }
        let mut seen = HashMap::with_capacity(items.len());
        let mut out = Vec::with_capacity(items.len());
        for (i, s) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            let net = deny_prefix(s).map_err(|r| self.err(&key, r))?;
            if let Some(j) = seen.insert(net, i) {
                return Err(self.err(&key, format!("duplicate prefix {net} (also item {j})")));
            }
            out.push(net);
        }
        Ok(out)
    }
}

impl Validator<'_> {
    /// `translatable = ["198.51.100.0/24", ...]`: IPv4 prefixes, none inside
    /// another (the table is a longest-prefix match; nesting would mean
    /// nothing).
    fn translatable(&self, path: &str, items: &[&str]) -> Result<Vec<Ipv4Net>> {
        // The translator's table size (abi.h).
        let max = v6node_abi::XLAT4_MAX as usize;
        if items.len() > max {
            return Err(self.err(path, format!("{} prefixes; at most {max} are supported", items.len())));
        }
        let mut out: Vec<Ipv4Net> = Vec::with_capacity(items.len());
        for (i, s) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            let net = eam_ipv4(s).map_err(|r| self.err(&key, r))?;
            if let Some(j) = out.iter().position(|n| n.contains(&net) || net.contains(n)) {
                return Err(self.err(&key, format!("{net} overlaps {} (item {j})", out[j])));
            }
            out.push(net);
        }
        Ok(out)
    }

    /// `eam = [{ ipv6 = "...", ipv4 = "..." }, ...]`
    fn eams(&self, path: &str, value: &Value) -> Result<Vec<Eam>> {
        let Value::Array(items) = value else {
            return Err(self.type_err(
                path,
                "an array of tables such as [{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"198.51.100.0/24\" }]",
                value,
            ));
        };
        // What the translator's EAM tables are sized for (abi.h).
        let max = v6node_abi::EAM_MAX as usize;
        if items.len() > max {
            return Err(self.err(path, format!("{} mappings; at most {max} are supported", items.len())));
        }
        let mut seen6 = HashMap::new();
        let mut seen4 = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            let Value::Table(t) = item else {
                return Err(self.type_err(&key, "a table { ipv6 = \"...\", ipv4 = \"...\" }", item));
            };
            self.known_keys(t, &key, &["ipv6", "ipv4"])?;
            let get = |field: &str| -> Result<&str> {
                let k = format!("{key}.{field}");
                match t.get(field) {
                    Some(Value::String(s)) => Ok(s.as_str()),
                    Some(v) => Err(self.type_err(&k, "a string", v)),
                    None => Err(self.err(&k, "missing; each mapping needs both ipv6 and ipv4")),
                }
            };
            let ipv6 = eam_ipv6(get("ipv6")?).map_err(|r| self.err(&format!("{key}.ipv6"), r))?;
            let ipv4 = eam_ipv4(get("ipv4")?).map_err(|r| self.err(&format!("{key}.ipv4"), r))?;
            let (host6, host4) = (128 - ipv6.prefix_len(), 32 - ipv4.prefix_len());
            if host6 != host4 {
                return Err(self.err(
                    &key,
                    format!(
                        "{ipv6} leaves {host6} host bits but {ipv4} leaves {host4}; the two prefixes must cover the same number of addresses"
                    ),
                ));
            }
            if let Some(j) = seen6.insert(ipv6, i) {
                return Err(self.err(&format!("{key}.ipv6"), format!("{ipv6} is mapped already (item {j})")));
            }
            if let Some(j) = seen4.insert(ipv4, i) {
                return Err(self.err(&format!("{key}.ipv4"), format!("{ipv4} is mapped already (item {j})")));
            }
            out.push(Eam { ipv6, ipv4 });
        }
        Ok(out)
    }
}

impl Validator<'_> {
    /// `[nat64.stateful]`, checked against the stateless mappings in `nat64`
    /// so that no pool address is also a destination of theirs.
    fn nat64_stateful(&self, value: &Value, nat64: &Nat64) -> Result<Nat64Stateful> {
        const PATH: &str = "nat64.stateful";
        let Value::Table(t) = value else {
            return Err(self.type_err(PATH, "a table", value));
        };
        self.known_keys(
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
        let pool_items = self.strings(t, "nat64.stateful.pool")?.unwrap_or_default();
        if pool_items.is_empty() {
            return Err(self.err("nat64.stateful.pool", "missing or empty; list the IPv4 addresses clients share"));
        }
        let max = v6node_abi::NAT64_POOL_MAX as usize;
        if pool_items.len() > max {
            return Err(self.err("nat64.stateful.pool", format!("{} addresses; at most {max} are supported", pool_items.len())));
        }
        let mut pool: Vec<Ipv4Addr> = Vec::with_capacity(pool_items.len());
        for (i, s) in pool_items.iter().enumerate() {
            let key = format!("nat64.stateful.pool[{i}]");
            let addr: Ipv4Addr = s
                .parse()
                .map_err(|_| self.err(&key, format!("`{s}` is not an IPv4 address; list addresses, e.g. 203.0.113.1")))?;
            if let Some(j) = pool.iter().position(|a| *a == addr) {
                return Err(self.err(&key, format!("duplicate address {addr} (also item {j})")));
            }
            if let Some(eam) = nat64.eam.iter().find(|e| e.ipv4.contains(&addr)) {
                return Err(self.err(&key, format!("{addr} is in the explicit address mapping of {}", eam.ipv4)));
            }
            if let Some(net) = nat64.translatable.iter().find(|n| n.contains(&addr)) {
                return Err(self.err(&key, format!("{addr} is in nat64.translatable ({net})")));
            }
            pool.push(addr);
        }
        let source_items = self.strings(t, "nat64.stateful.sources")?.unwrap_or_default();
        if source_items.is_empty() {
            return Err(self.err("nat64.stateful.sources", "missing or empty; list the IPv6 prefixes that may use the pool"));
        }
        let max = v6node_abi::NAT64_SOURCES_MAX as usize;
        if source_items.len() > max {
            return Err(
                self.err("nat64.stateful.sources", format!("{} prefixes; at most {max} are supported", source_items.len()))
            );
        }
        let mut sources: Vec<Ipv6Net> = Vec::with_capacity(source_items.len());
        for (i, s) in source_items.iter().enumerate() {
            let key = format!("nat64.stateful.sources[{i}]");
            if s.ends_with("/0") {
                return Err(
                    self.err(&key, format!("`{s}` would lend the pool to every IPv6 source; list your clients' prefixes"))
                );
            }
            let net = deny_prefix(s).map_err(|r| self.err(&key, r))?;
            if let Some(j) = sources.iter().position(|n| *n == net) {
                return Err(self.err(&key, format!("duplicate prefix {net} (also item {j})")));
            }
            sources.push(net);
        }
        let ports = |key: &str, lowest: u16| -> Result<PortRange> {
            let path = format!("nat64.stateful.{key}");
            let range = match self.string(t, &path)? {
                Some(s) => port_range(s, lowest).map_err(|r| self.err(&path, r))?,
                None => NAT64_PORTS_DEFAULT,
            };
            // Each protocol's free-port queue holds every address's range (abi.h).
            let total = range.count() * pool.len();
            let max = v6node_abi::NAT64_PORTS_MAX as usize;
            if total > max {
                return Err(self.err(
                    &path,
                    format!(
                        "{} addresses x {} ports = {total}; at most {max} per protocol are supported",
                        pool.len(),
                        range.count()
                    ),
                ));
            }
            Ok(range)
        };
        let tcp_ports = ports("tcp_ports", 1)?;
        let udp_ports = ports("udp_ports", 1)?;
        let icmp_ids = ports("icmp_ids", 0)?;
        let filtering = match self.string(t, "nat64.stateful.filtering")? {
            Some(s) => s.parse().map_err(|r| self.err("nat64.stateful.filtering", r))?,
            None => Nat64Filtering::default(),
        };
        let seconds = |key: &str, default: u32| self.lifetime(t, &format!("nat64.stateful.{key}"), default);
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
}

impl Validator<'_> {
    /// A state's lifetime in seconds at `path`: 1 s to a week, `default`
    /// when absent.
    fn lifetime(&self, t: &Table, path: &str, default: u32) -> Result<u32> {
        const WEEK: u32 = 86400 * 7;
        match self.integer(t, path)? {
            None => Ok(default),
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| (1..=WEEK).contains(n))
                .ok_or_else(|| self.err(path, format!("{n} is out of range; expected 1..={WEEK} seconds"))),
        }
    }

    /// `[nat46]`, checked against `nat64` so that no VIP is also an IPv4
    /// address the translator maps, and replies to the source prefix are
    /// never taken for the translator's.
    fn nat46(&self, t: &Table, nat64: &Nat64) -> Result<Nat46> {
        if nat64.devices.is_empty() {
            return Err(self.err("nat46", "the gateway runs in the translator: list its devices in nat64.devices"));
        }
        let prefix = self.string(t, "nat46.source_prefix")?.ok_or_else(|| {
            self.err("nat46.source_prefix", "missing; give a /96 routed to this gateway, e.g. 2001:db8:46::/96")
        })?;
        let source_prefix = nat46_prefix(prefix).map_err(|r| self.err("nat46.source_prefix", r))?;
        if source_prefix.contains(&nat64.prefix) || nat64.prefix.contains(&source_prefix) {
            return Err(self.err(
                "nat46.source_prefix",
                format!(
                    "{source_prefix} overlaps nat64.prefix ({}); the gateway's clients need a prefix of their own",
                    nat64.prefix
                ),
            ));
        }
        if let Some(eam) = nat64.eam.iter().find(|e| e.ipv6.contains(&source_prefix) || source_prefix.contains(&e.ipv6)) {
            return Err(
                self.err("nat46.source_prefix", format!("{source_prefix} overlaps the explicit address mapping of {}", eam.ipv6))
            );
        }
        let items = match t.get("gateway") {
            None => Vec::new(),
            Some(Value::Array(items)) => items.iter().collect(),
            Some(v) => return Err(self.type_err("nat46.gateway", "an array of tables ([[nat46.gateway]])", v)),
        };
        let max = v6node_abi::NAT46_FRONTENDS_MAX as usize;
        if items.len() > max {
            return Err(self.err("nat46.gateway", format!("{} frontends; at most {max} are supported", items.len())));
        }
        let mut gateways: Vec<Nat46Gateway> = Vec::with_capacity(items.len());
        let mut backends_total = 0;
        for (i, item) in items.into_iter().enumerate() {
            let gateway = self.nat46_gateway(&format!("nat46.gateway[{i}]"), item, nat64, &source_prefix)?;
            if let Some(j) = gateways.iter().position(|g| g.frontend == gateway.frontend && g.protocol == gateway.protocol) {
                return Err(self.err(
                    &format!("nat46.gateway[{i}].frontend"),
                    format!("{} {} is gateway[{j}]'s already", gateway.protocol, gateway.frontend),
                ));
            }
            backends_total += gateway.backends.len();
            gateways.push(gateway);
        }
        let max = v6node_abi::NAT46_BACKENDS_MAX as usize;
        if backends_total > max {
            return Err(self.err("nat46.gateway", format!("{backends_total} backends in all; at most {max} are supported")));
        }
        let seconds = |key: &str, default: u32| self.lifetime(t, &format!("nat46.{key}"), default);
        Ok(Nat46 {
            source_prefix,
            gateways,
            udp_seconds: seconds("udp_seconds", NAT64_UDP_SECONDS)?,
            tcp_established_seconds: seconds("tcp_established_seconds", NAT64_TCP_ESTABLISHED_SECONDS)?,
            tcp_transitory_seconds: seconds("tcp_transitory_seconds", NAT64_TCP_TRANSITORY_SECONDS)?,
        })
    }

    fn nat46_gateway(&self, key: &str, item: &Value, nat64: &Nat64, source_prefix: &Ipv6Net) -> Result<Nat46Gateway> {
        let Value::Table(t) = item else {
            return Err(self.type_err(
                key,
                "a table { frontend = \"198.51.100.80:443\", protocol = \"tcp\", backends = [...] }",
                item,
            ));
        };
        self.known_keys(t, key, &["frontend", "protocol", "backends"])?;
        let path = format!("{key}.frontend");
        let frontend: SocketAddrV4 = match t.get("frontend") {
            Some(Value::String(s)) => s
                .parse()
                .ok()
                .filter(|f: &SocketAddrV4| f.port() != 0)
                .ok_or_else(|| self.err(&path, format!("`{s}` is not an IPv4 address and port, e.g. 198.51.100.80:443")))?,
            Some(v) => return Err(self.type_err(&path, "a string", v)),
            None => return Err(self.err(&path, "missing; the VIP and port clients connect to, e.g. 198.51.100.80:443")),
        };
        let vip = *frontend.ip();
        if let Some(stateful) = &nat64.stateful {
            if stateful.pool.contains(&vip) {
                return Err(self.err(&path, format!("{vip} is in nat64.stateful.pool")));
            }
        }
        if let Some(eam) = nat64.eam.iter().find(|e| e.ipv4.contains(&vip)) {
            return Err(self.err(&path, format!("{vip} is in the explicit address mapping of {}", eam.ipv4)));
        }
        if let Some(net) = nat64.translatable.iter().find(|n| n.contains(&vip)) {
            return Err(self.err(&path, format!("{vip} is in nat64.translatable ({net})")));
        }
        let path = format!("{key}.protocol");
        let protocol = match self.string(t, &path)? {
            Some(s) => s.parse().map_err(|r| self.err(&path, r))?,
            None => Nat46Protocol::Tcp,
        };
        let path = format!("{key}.backends");
        let items = match t.get("backends") {
            None => Vec::new(),
            Some(Value::Array(items)) => items.iter().collect(),
            Some(v) => {
                return Err(self.type_err(
                    &path,
                    "an array of tables such as [{ address = \"[2001:db8::a]:8080\", weight = 1 }]",
                    v,
                ))
            }
        };
        let max = v6node_abi::BACKENDS_PER_SERVICE_MAX as usize;
        if items.len() > max {
            return Err(self.err(&path, format!("{} backends; at most {max} a frontend are supported", items.len())));
        }
        let mut backends: Vec<Nat46Backend> = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let key = format!("{path}[{i}]");
            let Value::Table(b) = item else {
                return Err(self.type_err(&key, "a table { address = \"[2001:db8::a]:8080\", weight = 1 }", item));
            };
            self.known_keys(b, &key, &["address", "weight"])?;
            let addr_path = format!("{key}.address");
            let address: SocketAddrV6 = match b.get("address") {
                Some(Value::String(s)) => s.parse().ok().filter(|a: &SocketAddrV6| a.port() != 0).ok_or_else(|| {
                    self.err(&addr_path, format!("`{s}` is not an IPv6 address and port, e.g. [2001:db8::a]:8080"))
                })?,
                Some(v) => return Err(self.type_err(&addr_path, "a string", v)),
                None => return Err(self.err(&addr_path, "missing; the backend's IPv6 address and port, e.g. [2001:db8::a]:8080")),
            };
            let ip = address.ip();
            if ip.to_ipv4_mapped().is_some() || ip.is_unspecified() || ip.is_multicast() || source_prefix.contains(ip) {
                return Err(self.err(
                    &addr_path,
                    format!("{ip} cannot be a backend: an IPv4-mapped, unspecified, multicast or gateway-client address"),
                ));
            }
            let weight_path = format!("{key}.weight");
            let weight = match self.integer(b, &weight_path)? {
                None => NAT46_WEIGHT_DEFAULT,
                Some(n) => u32::try_from(n).ok().filter(|n| *n <= NAT46_WEIGHT_MAX).ok_or_else(|| {
                    self.err(&weight_path, format!("{n} is out of range; expected 0..={NAT46_WEIGHT_MAX} (0 drains the backend)"))
                })?,
            };
            if let Some(j) = backends.iter().position(|o| o.address == address) {
                return Err(self.err(&addr_path, format!("{address} is backend {j} already")));
            }
            backends.push(Nat46Backend { address, weight });
        }
        Ok(Nat46Gateway { frontend, protocol, backends })
    }
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

/// `first-last`, with first at least `lowest`.
fn port_range(s: &str, lowest: u16) -> std::result::Result<PortRange, String> {
    let expected = || format!("`{s}` is not a range; expected e.g. 1024-65535");
    let (first, last) = s.split_once('-').ok_or_else(expected)?;
    let first: u16 = first.trim().parse().map_err(|_| expected())?;
    let last: u16 = last.trim().parse().map_err(|_| expected())?;
    if first < lowest || first > last {
        return Err(format!("{first}-{last}: expected {lowest} <= first <= last <= 65535"));
    }
    Ok(PortRange { first, last })
}

impl Validator<'_> {
    /// `[routing]`: BGP is on exactly when `asn` is set; everything else
    /// needs it.
    fn bgp(&self, t: &Table) -> Result<Option<Bgp>> {
        let asn = match self.integer(t, "routing.asn")? {
            Some(n) => asn(n).map_err(|r| self.err("routing.asn", r))?,
            None => {
                if let Some(key) = ["router_id", "peers", "announce"].into_iter().find(|k| t.contains_key(*k)) {
                    return Err(
                        self.err(&format!("routing.{key}"), "needs routing.asn: BGP is configured by its local AS number")
                    );
                }
                return Ok(None);
            }
        };
        let router_id = match self.string(t, "routing.router_id")? {
            None | Some("") => None,
            Some(s) => Some(router_id(s).map_err(|r| self.err("routing.router_id", r))?),
        };
        let peers = match t.get("peers") {
            Some(value) => self.bgp_peers("routing.peers", value)?,
            None => Vec::new(),
        };
        if peers.is_empty() {
            return Err(self.err(
                "routing.peers",
                "no peers; BGP needs at least one, e.g. peers = [{ address = \"2001:db8:1::1\", asn = 64512 }]",
            ));
        }
        let announce = match self.strings(t, "routing.announce")? {
            None => vec![Announce::PodPrefixes],
            Some(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, s) in items.iter().enumerate() {
                    let key = format!("routing.announce[{i}]");
                    let item = announcement(s).map_err(|r| self.err(&key, r))?;
                    if let Some(j) = out.iter().position(|a| *a == item) {
                        return Err(self.err(&key, format!("`{s}` is announced already (item {j})")));
                    }
                    out.push(item);
                }
                out
            }
        };
        Ok(Some(Bgp { asn, router_id, peers, announce }))
    }

    /// `peers = [{ address = "...", asn = N }, ...]`
    fn bgp_peers(&self, path: &str, value: &Value) -> Result<Vec<BgpPeer>> {
        let Value::Array(items) = value else {
            return Err(self.type_err(path, "an array of tables such as [{ address = \"2001:db8:1::1\", asn = 64512 }]", value));
        };
        let mut out: Vec<BgpPeer> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            let Value::Table(t) = item else {
                return Err(self.type_err(&key, "a table { address = \"...\", asn = N }", item));
            };
            self.known_keys(t, &key, &["address", "asn"])?;
            let address = match t.get("address") {
                Some(Value::String(s)) => peer_address(s).map_err(|r| self.err(&format!("{key}.address"), r))?,
                Some(v) => return Err(self.type_err(&format!("{key}.address"), "a string", v)),
                None => return Err(self.err(&format!("{key}.address"), "missing; each peer needs address and asn")),
            };
            let peer_asn = match t.get("asn") {
                Some(Value::Integer(n)) => asn(*n).map_err(|r| self.err(&format!("{key}.asn"), r))?,
                Some(v) => return Err(self.type_err(&format!("{key}.asn"), "an integer", v)),
                None => return Err(self.err(&format!("{key}.asn"), "missing; each peer needs address and asn")),
            };
            if let Some(j) = out.iter().position(|p| p.address == address) {
                return Err(self.err(&format!("{key}.address"), format!("{address} is a peer already (item {j})")));
            }
            out.push(BgpPeer { address, asn: peer_asn });
        }
        Ok(out)
    }
}

/// A 4-byte AS number other than the reserved ones: 0 (RFC 7607), 23456
/// (AS_TRANS, RFC 6793), 65535 and 4294967295 (RFC 7300).
fn asn(n: i64) -> std::result::Result<u32, String> {
    let n = u32::try_from(n).map_err(|_| format!("{n} is not an AS number; expected 1..=4294967294"))?;
    match n {
        0 => Err("AS 0 is reserved (RFC 7607)".into()),
        23456 => Err("AS 23456 is AS_TRANS (RFC 6793), not a real AS".into()),
        65535 | 4294967295 => Err(format!("AS {n} is reserved (RFC 7300)")),
        n => Ok(n),
    }
}

fn router_id(s: &str) -> std::result::Result<Ipv4Addr, String> {
    let id: Ipv4Addr =
        s.parse().map_err(|_| format!("`{s}` is not a router ID; BGP writes it as an IPv4 address, e.g. \"0.0.0.10\""))?;
    if id.is_unspecified() {
        return Err("0.0.0.0 is not a valid router ID".into());
    }
    Ok(id)
}

fn peer_address(s: &str) -> std::result::Result<Ipv6Addr, String> {
    let a: Ipv6Addr = s.parse().map_err(|_| {
        if s.parse::<Ipv4Addr>().is_ok() {
            format!("`{s}` is an IPv4 address; v6node nodes peer over IPv6")
        } else {
            format!("`{s}` is not an IPv6 address")
        }
    })?;
    let first = a.segments()[0];
    if a.is_unspecified() || a.is_loopback() || first & 0xff00 == 0xff00 {
        return Err(format!("{a} is not a unicast address of a router (::, ::1 or multicast)"));
    }
    if first & 0xffc0 == 0xfe80 {
        return Err(format!("{a} is link-local; peer with the router's global or unique-local address"));
    }
    Ok(a)
}

fn announcement(s: &str) -> std::result::Result<Announce, String> {
    if s == ANNOUNCE_POD_PREFIXES {
        return Ok(Announce::PodPrefixes);
    }
    let net: Ipv6Net = s
        .parse()
        .map_err(|_| format!("`{s}` is neither \"{ANNOUNCE_POD_PREFIXES}\" nor an IPv6 prefix such as \"2001:db8:ff::/64\""))?;
    if net.trunc() != net {
        return Err(format!("host bits set; did you mean {}?", net.trunc()));
    }
    if net.prefix_len() == 0 {
        return Err("::/0 would announce a default route".into());
    }
    Ok(Announce::Prefix(net))
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

fn nat64_prefix(s: &str) -> std::result::Result<Ipv6Net, String> {
    let net: Ipv6Net =
        s.parse().map_err(|_| format!("`{s}` is not an IPv6 prefix; expected e.g. 64:ff9b::/96 or 64:ff9b:1::/48"))?;
    if !NAT64_PREFIX_LENGTHS.contains(&net.prefix_len()) {
        return Err(format!(
            "/{} is not an RFC 6052 prefix length; expected one of /32, /40, /48, /56, /64, /96",
            net.prefix_len()
        ));
    }
    if net.trunc() != net {
        return Err(format!("host bits set; did you mean {}?", net.trunc()));
    }
    Ok(net)
}

fn eam_ipv6(s: &str) -> std::result::Result<Ipv6Net, String> {
    let net: Ipv6Net = match s.parse() {
        Ok(n) => n,
        Err(_) => match s.parse::<Ipv6Addr>() {
            Ok(a) => return Err(format!("missing prefix length; write {a}/128 for one address")),
            Err(_) => return Err(format!("`{s}` is not an IPv6 prefix; expected e.g. 2001:db8:6::/120")),
        },
    };
    if net.prefix_len() < 96 {
        return Err(format!("{net} is larger than an IPv4 prefix can match; use /96 or longer"));
    }
    if net.trunc() != net {
        return Err(format!("host bits set; did you mean {}?", net.trunc()));
    }
    Ok(net)
}

fn eam_ipv4(s: &str) -> std::result::Result<Ipv4Net, String> {
    let net: Ipv4Net = match s.parse() {
        Ok(n) => n,
        Err(_) => match s.parse::<Ipv4Addr>() {
            Ok(a) => return Err(format!("missing prefix length; write {a}/32 for one address")),
            Err(_) => return Err(format!("`{s}` is not an IPv4 prefix; expected e.g. 198.51.100.0/24")),
        },
    };
    if net.trunc() != net {
        return Err(format!("host bits set; did you mean {}?", net.trunc()));
    }
    Ok(net)
}

fn deny_prefix(s: &str) -> std::result::Result<Ipv6Net, String> {
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
    if net.trunc() != net {
        return Err(format!("host bits set; did you mean {}?", net.trunc()));
    }
    Ok(net)
}
