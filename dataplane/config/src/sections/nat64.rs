// SPDX-License-Identifier: Apache-2.0
//! `[nat64]`: the stateless NAT46/64 translator, and under it
//! `[nat64.stateful]`.

mod global;
pub(crate) mod stateful;

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use serde::Serialize;
use toml::{Table, Value};

use crate::device::DevicePattern;
use crate::serialize::{serialize_displayed, serialize_one_displayed};
use crate::validator::Network;
use crate::validator::{Result, Validator};
use stateful::Nat64Stateful;

/// RFC 6052 section 2.2: the prefix lengths an IPv4 address can be embedded under.
pub const NAT64_PREFIX_LENGTHS: [u8; 6] = [32, 40, 48, 56, 64, 96];

/// The stateless NAT46/64 translator (SIIT, RFC 7915).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat64 {
    /// Interfaces the translator attaches to (tc ingress); none: off.
    pub devices: Vec<DevicePattern>,
    /// RFC 6052 prefix IPv4 addresses are embedded in.
    #[serde(serialize_with = "serialize_one_displayed")]
    pub prefix: Ipv6Net,
    /// RFC 7757 explicit address mappings, in config order.
    pub eam: Vec<Eam>,
    /// IPv4 destinations translated into `prefix` (IPv4-translatable IPv6
    /// addresses, RFC 6052): stateless NAT46 to IPv6 services numbered so.
    #[serde(serialize_with = "serialize_displayed")]
    pub translatable: Vec<Ipv4Net>,
    /// `[nat64.stateful]`; `None`: every IPv6 source needs a mapping.
    pub stateful: Option<Nat64Stateful>,
}

impl Default for Nat64 {
    fn default() -> Self {
        Nat64 { devices: Vec::new(), prefix: well_known_prefix(), eam: Vec::new(), translatable: Vec::new(), stateful: None }
    }
}

impl Nat64 {
    /// Why `addr` cannot also be the stateful pool's or a NAT46 VIP: the
    /// stateless mappings translate it already, and a packet to it could
    /// only be one or the other.
    pub(crate) fn maps_statelessly(&self, addr: Ipv4Addr) -> Option<String> {
        if let Some(eam) = self.eam.iter().find(|e| e.ipv4.contains(&addr)) {
            return Some(format!("{addr} is in the explicit address mapping of {}", eam.ipv4));
        }
        let net = self.translatable.iter().find(|n| n.contains(&addr))?;
        Some(format!("{addr} is in nat64.translatable ({net})"))
    }

    /// Why `net` cannot be represented under `prefix`: RFC 6052 3.1 keeps
    /// the well-known prefix to global IPv4 addresses.
    pub(crate) fn cannot_represent(&self, net: Ipv4Net) -> Option<String> {
        self.refuse_under_well_known(net, format!("{net} is not a global IPv4 range"))
    }

    /// The same for one address (`nat64.stateful.pool`).
    pub(crate) fn cannot_represent_address(&self, addr: Ipv4Addr) -> Option<String> {
        self.refuse_under_well_known(addr.into(), format!("{addr} is not a global IPv4 address"))
    }

    fn refuse_under_well_known(&self, net: Ipv4Net, what: String) -> Option<String> {
        if self.prefix != well_known_prefix() {
            return None;
        }
        let why = global::non_global(net)?;
        Some(format!(
            "{what} {why}; RFC 6052 3.1 forbids it under the well-known prefix {} (use a network-specific prefix)",
            self.prefix
        ))
    }
}

/// RFC 6052's well-known prefix, 64:ff9b::/96.
pub fn well_known_prefix() -> Ipv6Net {
    Ipv6Net::new(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96).expect("valid prefix")
}

/// One explicit address mapping: both prefixes leave the same number of
/// host bits, which carry over unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Eam {
    #[serde(serialize_with = "serialize_one_displayed")]
    pub ipv6: Ipv6Net,
    #[serde(serialize_with = "serialize_one_displayed")]
    pub ipv4: Ipv4Net,
}

pub(crate) fn read(v: &Validator, root: &Table, nat64: &mut Nat64) -> Result<()> {
    let Some(t) = v.section(root, "nat64", &["devices", "prefix", "eam", "translatable", "stateful"])? else {
        return Ok(());
    };
    if let Some(items) = v.strings(t, "nat64.devices")? {
        nat64.devices = v.devices("nat64.devices", &items)?;
    }
    if let Some(s) = v.string(t, "nat64.prefix")? {
        nat64.prefix = nat64_prefix(s).map_err(|r| v.err("nat64.prefix", r))?;
    }
    if let Some(value) = t.get("eam") {
        nat64.eam = eams(v, "nat64.eam", value, nat64)?;
    }
    if let Some(items) = v.strings(t, "nat64.translatable")? {
        nat64.translatable = translatable(v, "nat64.translatable", &items, nat64)?;
    }
    if let Some(value) = t.get("stateful") {
        nat64.stateful = Some(stateful::read(v, value, nat64)?);
    }
    Ok(())
}

/// `translatable = ["198.51.100.0/24", ...]`: IPv4 prefixes, none inside
/// another (the table is a longest-prefix match; nesting would mean
/// nothing), each one `nat64` (its prefix read already) may represent.
fn translatable(v: &Validator, path: &str, items: &[&str], nat64: &Nat64) -> Result<Vec<Ipv4Net>> {
    // The translator's table size (abi.h).
    v.at_most(path, items.len(), v6node_abi::XLAT4_MAX as usize, "prefixes")?;
    let mut out: Vec<Ipv4Net> = Vec::with_capacity(items.len());
    for (i, s) in items.iter().enumerate() {
        let key = format!("{path}[{i}]");
        let net = eam_ipv4(s).map_err(|r| v.err(&key, r))?;
        if let Some(j) = out.iter().position(|n| n.contains(&net) || net.contains(n)) {
            return Err(v.err(&key, format!("{net} overlaps {} (item {j})", out[j])));
        }
        if let Some(reason) = nat64.cannot_represent(net) {
            return Err(v.err(&key, reason));
        }
        out.push(net);
    }
    Ok(out)
}

/// `eam = [{ ipv6 = "...", ipv4 = "..." }, ...]`. An IPv6 node reaches an
/// EAM's IPv4 side under `nat64.prefix` too (through DNS64, hairpinned):
/// it must be one the prefix may represent.
fn eams(v: &Validator, path: &str, value: &Value, nat64: &Nat64) -> Result<Vec<Eam>> {
    let Value::Array(items) = value else {
        return Err(v.type_err(
            path,
            "an array of tables such as [{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"198.51.100.0/24\" }]",
            value,
        ));
    };
    // What the translator's EAM tables are sized for (abi.h).
    v.at_most(path, items.len(), v6node_abi::EAM_MAX as usize, "mappings")?;
    let mut seen6 = HashMap::new();
    let mut seen4 = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = format!("{path}[{i}]");
        let Value::Table(t) = item else {
            return Err(v.type_err(&key, "a table { ipv6 = \"...\", ipv4 = \"...\" }", item));
        };
        v.known_keys(t, &key, &["ipv6", "ipv4"])?;
        let get = |field: &str| -> Result<&str> {
            let k = format!("{key}.{field}");
            match t.get(field) {
                Some(Value::String(s)) => Ok(s.as_str()),
                Some(value) => Err(v.type_err(&k, "a string", value)),
                None => Err(v.err(&k, "missing; each mapping needs both ipv6 and ipv4")),
            }
        };
        let ipv6 = eam_ipv6(get("ipv6")?).map_err(|r| v.err(&format!("{key}.ipv6"), r))?;
        let ipv4 = eam_ipv4(get("ipv4")?).map_err(|r| v.err(&format!("{key}.ipv4"), r))?;
        let (host6, host4) = (128 - ipv6.prefix_len(), 32 - ipv4.prefix_len());
        if host6 != host4 {
            return Err(v.err(
                &key,
                format!(
                    "{ipv6} leaves {host6} host bits but {ipv4} leaves {host4}; the two prefixes must cover the same number of addresses"
                ),
            ));
        }
        if let Some(j) = seen6.insert(ipv6, i) {
            return Err(v.err(&format!("{key}.ipv6"), format!("{ipv6} is mapped already (item {j})")));
        }
        if let Some(j) = seen4.insert(ipv4, i) {
            return Err(v.err(&format!("{key}.ipv4"), format!("{ipv4} is mapped already (item {j})")));
        }
        if let Some(reason) = nat64.cannot_represent(ipv4) {
            return Err(v.err(&format!("{key}.ipv4"), reason));
        }
        out.push(Eam { ipv6, ipv4 });
    }
    Ok(out)
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
    net.exact()
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
    net.exact()
}

/// Also how `translatable` ranges are written.
fn eam_ipv4(s: &str) -> std::result::Result<Ipv4Net, String> {
    let net: Ipv4Net = match s.parse() {
        Ok(n) => n,
        Err(_) => match s.parse::<Ipv4Addr>() {
            Ok(a) => return Err(format!("missing prefix length; write {a}/32 for one address")),
            Err(_) => return Err(format!("`{s}` is not an IPv4 prefix; expected e.g. 198.51.100.0/24")),
        },
    };
    net.exact()
}

#[cfg(test)]
mod tests {
    use super::NAT64_PREFIX_LENGTHS;
    use crate::testutil::{bad, ok, strs};
    use crate::Config;

    #[test]
    fn nat64_defaults_to_off_under_the_well_known_prefix() {
        let c = Config::default();
        assert!(c.nat64.devices.is_empty());
        assert_eq!(c.nat64.prefix.to_string(), "64:ff9b::/96");
        assert!(c.nat64.eam.is_empty());
    }

    #[test]
    fn nat64_section_with_prefix_and_mappings() {
        let c = ok(r#"
[nat64]
devices = ["eth0", "eth1"]
prefix = "64:ff9b:1::/48"
eam = [
  { ipv6 = "2001:db8:6::/120", ipv4 = "198.51.100.0/24" },
  { ipv6 = "2001:db8:80::80/128", ipv4 = "203.0.113.80/32" },
]
"#);
        assert_eq!(strs(&c.nat64.devices), ["eth0", "eth1"]);
        assert_eq!(c.nat64.prefix.to_string(), "64:ff9b:1::/48");
        let eam: Vec<String> = c.nat64.eam.iter().map(|e| format!("{} {}", e.ipv6, e.ipv4)).collect();
        assert_eq!(eam, ["2001:db8:6::/120 198.51.100.0/24", "2001:db8:80::80/128 203.0.113.80/32"]);
        for len in NAT64_PREFIX_LENGTHS {
            let prefix = if len == 32 { "2001:db8::".to_owned() } else { "2001:db8:100::".to_owned() };
            let net: ipnet::Ipv6Net = format!("{prefix}/{len}").parse().unwrap();
            let c = ok(&format!("[nat64]\nprefix = \"{}\"\n", net.trunc()));
            assert_eq!(c.nat64.prefix.prefix_len(), len);
        }
    }

    #[test]
    fn bad_nat64_prefix() {
        bad("[nat64]\nprefix = \"64:ff9b::/80\"\n", "nat64.prefix", "not an RFC 6052 prefix length");
        bad("[nat64]\nprefix = \"64:ff9b::1/96\"\n", "nat64.prefix", "host bits set; did you mean 64:ff9b::/96?");
        bad("[nat64]\nprefix = \"192.0.2.0/24\"\n", "nat64.prefix", "not an IPv6 prefix");
        bad("[nat64]\nprefix = 96\n", "nat64.prefix", "expected a string, found an integer");
    }

    #[test]
    fn bad_nat64_mappings() {
        // Documentation addresses are not global: a network-specific prefix.
        let eam = |items: &str| format!("[nat64]\nprefix = \"64:ff9b:1::/48\"\neam = [{items}]\n");
        bad(
            &eam(r#"{ ipv6 = "2001:db8::/120", ipv4 = "198.51.100.0/25" }"#),
            "nat64.eam[0]",
            "leaves 8 host bits but 198.51.100.0/25 leaves 7",
        );
        bad(&eam(r#"{ ipv6 = "2001:db8::/120" }"#), "nat64.eam[0].ipv4", "missing");
        bad(&eam(r#"{ ipv6 = "2001:db8::1", ipv4 = "192.0.2.1/32" }"#), "nat64.eam[0].ipv6", "write 2001:db8::1/128");
        bad(&eam(r#"{ ipv6 = "2001:db8::1/128", ipv4 = "192.0.2.1" }"#), "nat64.eam[0].ipv4", "write 192.0.2.1/32");
        bad(&eam(r#"{ ipv6 = "2001:db8::/64", ipv4 = "10.0.0.0/8" }"#), "nat64.eam[0].ipv6", "use /96 or longer");
        bad(&eam(r#"{ ipv6 = "2001:db8::1/120", ipv4 = "192.0.2.0/24" }"#), "nat64.eam[0].ipv6", "host bits set");
        bad(
            &eam(r#"{ ipv6 = "2001:db8::/120", ipv4 = "192.0.2.1/24" }"#),
            "nat64.eam[0].ipv4",
            "host bits set; did you mean 192.0.2.0/24?",
        );
        bad(&eam(r#"{ ipv6 = "2001:db8::1/128", ipv4 = "192.0.2.1/32", port = 80 }"#), "nat64.eam[0].port", "unknown key `port`");
        bad(
            &eam(r#"{ ipv6 = "2001:db8::1/128", ipv4 = "192.0.2.1/32" }, { ipv6 = "2001:db8::2/128", ipv4 = "192.0.2.1/32" }"#),
            "nat64.eam[1].ipv4",
            "mapped already (item 0)",
        );
        bad(&eam(r#""2001:db8::1/128 192.0.2.1/32""#), "nat64.eam[0]", "expected a table");
        bad("[nat64]\neam = \"2001:db8::/120\"\n", "nat64.eam", "expected an array of tables");
        bad("[nat64]\ndevices = [\"eth0:1\"]\n", "nat64.devices[0]", "contains `:`");
    }

    #[test]
    fn well_known_prefix_refuses_non_global_ipv4() {
        let why = "RFC 6052 3.1 forbids it under the well-known prefix 64:ff9b::/96 (use a network-specific prefix)";
        // The default prefix is the well-known one: what it would represent
        // must be global.
        let eam = |ipv4: &str| format!("[nat64]\neam = [{{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"{ipv4}\" }}]\n");
        let e = bad(&eam("10.0.0.0/24"), "nat64.eam[0].ipv4", why);
        assert!(e.reason.starts_with("10.0.0.0/24 is not a global IPv4 range (in 10.0.0.0/8, private-use"), "{e}");
        let translatable = |net: &str| format!("[nat64]\nprefix = \"64:ff9b::/96\"\ntranslatable = [\"{net}\"]\n");
        for (net, names) in [
            ("10.0.0.0/8", "10.0.0.0/8 is not a global IPv4 range (private-use"),
            ("172.20.0.0/16", "in 172.16.0.0/12, private-use"),
            ("192.168.1.0/24", "in 192.168.0.0/16, private-use"),
            ("100.64.0.0/10", "shared address space"),
            ("127.0.0.1/32", "127.0.0.1/32 is not a global IPv4 range (in 127.0.0.0/8, loopback"),
            ("169.254.0.0/16", "link-local"),
            ("0.0.0.0/8", "\"this network\""),
            ("192.0.0.8/31", "in 192.0.0.0/24, IETF protocol assignments"),
            ("192.0.2.0/24", "documentation"),
            ("198.19.0.0/16", "in 198.18.0.0/15, benchmarking"),
            ("198.51.100.0/24", "documentation"),
            ("203.0.113.10/32", "in 203.0.113.0/24, documentation"),
            ("240.0.0.0/4", "reserved"),
            ("255.255.255.255/32", "in 240.0.0.0/4, reserved"),
            ("224.0.0.0/4", "multicast"),
            ("192.0.0.0/16", "it overlaps 192.0.0.0/24"),
            ("0.0.0.0/0", "0.0.0.0/0 is not a global IPv4 range (it overlaps 0.0.0.0/8"),
        ] {
            let e = bad(&translatable(net), "nat64.translatable[0]", why);
            assert!(e.reason.contains(names), "{net}: {e}");
        }
        let e = bad("[nat64.stateful]\npool = [\"192.0.2.1\"]\nsources = [\"fd00:10::/48\"]\n", "nat64.stateful.pool[0]", why);
        assert!(e.reason.starts_with("192.0.2.1 is not a global IPv4 address (in 192.0.2.0/24, documentation"), "{e}");
        bad(
            "[nat64]\nprefix = \"64:ff9b::/96\"\n[nat64.stateful]\npool = [\"8.8.8.8\", \"172.31.255.255\"]\nsources = [\"fd00:10::/48\"]\n",
            "nat64.stateful.pool[1]",
            "172.31.255.255 is not a global IPv4 address (in 172.16.0.0/12",
        );

        // Global addresses, next to and around the ranges, are fine under it.
        let c = ok("[nat64]\neam = [{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"192.0.3.0/24\" }, { ipv6 = \"2001:db8:7::/128\", ipv4 = \"192.0.0.9/32\" }]\n\
                    translatable = [\"100.128.0.0/9\", \"11.0.0.0/8\", \"172.32.0.0/11\", \"192.0.0.10/32\", \"223.255.255.0/24\"]\n\
                    [nat64.stateful]\npool = [\"8.8.8.8\", \"198.20.0.1\"]\nsources = [\"fd00:10::/48\"]\n");
        assert_eq!((c.nat64.eam.len(), c.nat64.translatable.len()), (2, 5));
        // A network-specific prefix may carry any IPv4 address, even one
        // inside 64:ff9b::/32 (RFC 8215's local-use 64:ff9b:1::/48).
        for prefix in ["64:ff9b:1::/48", "2001:db8:64::/96", "64:ff9b::/64"] {
            let c = ok(&format!(
                "[nat64]\nprefix = \"{prefix}\"\neam = [{{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"10.0.0.0/24\" }}]\n\
                 translatable = [\"192.168.0.0/16\", \"198.51.100.0/24\"]\n\
                 [nat64.stateful]\npool = [\"203.0.113.1\", \"100.64.0.1\"]\nsources = [\"fd00:10::/48\"]\n"
            ));
            assert_eq!(c.nat64.stateful.expect("stateful").pool.len(), 2, "{prefix}");
        }
        // A NAT46 gateway's VIPs are not represented under nat64.prefix (its
        // clients are, under nat46.source_prefix, which may not overlap it).
        let c = ok("[nat64]\ndevices = [\"eth0\"]\n[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n\
                    [[nat46.gateway]]\nfrontend = \"10.0.0.80:443\"\n");
        assert_eq!(c.nat46.expect("nat46").gateways[0].frontend.to_string(), "10.0.0.80:443");
    }

    #[test]
    fn nat64_translatable_ranges() {
        let c = ok("[nat64]\nprefix = \"64:ff9b:1::/48\"\ntranslatable = [\"198.51.100.0/24\", \"203.0.113.10/32\"]\n");
        let ranges: Vec<String> = c.nat64.translatable.iter().map(ToString::to_string).collect();
        assert_eq!(ranges, ["198.51.100.0/24", "203.0.113.10/32"]);
        assert!(ok("").nat64.translatable.is_empty());
        let list = |items: &str| format!("[nat64]\nprefix = \"64:ff9b:1::/48\"\ntranslatable = [{items}]\n");
        bad(&list(r#""198.51.100.0/24", "198.51.100.128/25""#), "nat64.translatable[1]", "overlaps 198.51.100.0/24 (item 0)");
        bad(&list(r#""198.51.100.1/24""#), "nat64.translatable[0]", "host bits set");
        bad(&list(r#""198.51.100.1""#), "nat64.translatable[0]", "write 198.51.100.1/32");
        bad(&list(r#""2001:db8::/120""#), "nat64.translatable[0]", "not an IPv4 prefix");
        bad("[nat64]\ntranslatable = \"198.51.100.0/24\"\n", "nat64.translatable", "array");
    }
}
