// SPDX-License-Identifier: Apache-2.0
//! `[routing]`: BGP towards the site's routers, for peers that are not
//! on-link.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::Ipv6Net;
use serde::{Serialize, Serializer};
use toml::{Table, Value};

use crate::validator::Network;
use crate::validator::{Result, Validator};

/// Reaching peers that are not on-link: BGP announcements of this node's
/// prefixes to the site's routers (bird2, configured by the agent). Direct
/// routes to on-link peers stay as they are; `bgp` is `None` unless an
/// `asn` is configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Routing {
    pub bgp: Option<Bgp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bgp {
    /// This node's autonomous system number.
    pub asn: u32,
    /// `None`: the low 32 bits of the Node's InternalIP.
    pub router_id: Option<Ipv4Addr>,
    /// At least one, each address once.
    pub peers: Vec<BgpPeer>,
    pub announce: Vec<Announce>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct BgpPeer {
    /// A global or unique-local IPv6 address on a link of the node's.
    pub address: Ipv6Addr,
    pub asn: u32,
}

/// What a node announces; written as in the config: `"pod-prefixes"` or a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Announce {
    /// The node's pod prefixes: its Node's `spec.podCIDRs`, or `pods.prefix`.
    PodPrefixes,
    /// A prefix of the operator's, e.g. for addresses the node serves.
    Prefix(Ipv6Net),
}

impl Serialize for Announce {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Announce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Announce::PodPrefixes => f.write_str(ANNOUNCE_POD_PREFIXES),
            Announce::Prefix(p) => write!(f, "{p}"),
        }
    }
}

pub const ANNOUNCE_POD_PREFIXES: &str = "pod-prefixes";

pub(crate) fn read(v: &Validator, root: &Table, routing: &mut Routing) -> Result<()> {
    let Some(t) = v.section(root, "routing", &["asn", "router_id", "peers", "announce"])? else {
        return Ok(());
    };
    routing.bgp = bgp(v, t)?;
    Ok(())
}

/// `[routing]`: BGP is on exactly when `asn` is set; everything else
/// needs it.
fn bgp(v: &Validator, t: &Table) -> Result<Option<Bgp>> {
    let asn = match v.integer(t, "routing.asn")? {
        Some(n) => asn(n).map_err(|r| v.err("routing.asn", r))?,
        None => {
            if let Some(key) = ["router_id", "peers", "announce"].into_iter().find(|k| t.contains_key(*k)) {
                return Err(v.err(&format!("routing.{key}"), "needs routing.asn: BGP is configured by its local AS number"));
            }
            return Ok(None);
        }
    };
    let router_id = match v.string(t, "routing.router_id")? {
        None | Some("") => None,
        Some(s) => Some(router_id(s).map_err(|r| v.err("routing.router_id", r))?),
    };
    let peers = match t.get("peers") {
        Some(value) => bgp_peers(v, "routing.peers", value)?,
        None => Vec::new(),
    };
    if peers.is_empty() {
        return Err(v.err(
            "routing.peers",
            "no peers; BGP needs at least one, e.g. peers = [{ address = \"2001:db8:1::1\", asn = 64512 }]",
        ));
    }
    let announce = match v.strings(t, "routing.announce")? {
        None => vec![Announce::PodPrefixes],
        Some(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, s) in items.iter().enumerate() {
                let key = format!("routing.announce[{i}]");
                let item = announcement(s).map_err(|r| v.err(&key, r))?;
                if let Some(j) = out.iter().position(|a| *a == item) {
                    return Err(v.err(&key, format!("`{s}` is announced already (item {j})")));
                }
                out.push(item);
            }
            out
        }
    };
    Ok(Some(Bgp { asn, router_id, peers, announce }))
}

/// `peers = [{ address = "...", asn = N }, ...]`
fn bgp_peers(v: &Validator, path: &str, value: &Value) -> Result<Vec<BgpPeer>> {
    let Value::Array(items) = value else {
        return Err(v.type_err(path, "an array of tables such as [{ address = \"2001:db8:1::1\", asn = 64512 }]", value));
    };
    let mut out: Vec<BgpPeer> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = format!("{path}[{i}]");
        let Value::Table(t) = item else {
            return Err(v.type_err(&key, "a table { address = \"...\", asn = N }", item));
        };
        v.known_keys(t, &key, &["address", "asn"])?;
        let address = match t.get("address") {
            Some(Value::String(s)) => peer_address(s).map_err(|r| v.err(&format!("{key}.address"), r))?,
            Some(value) => return Err(v.type_err(&format!("{key}.address"), "a string", value)),
            None => return Err(v.err(&format!("{key}.address"), "missing; each peer needs address and asn")),
        };
        let peer_asn = match t.get("asn") {
            Some(Value::Integer(n)) => asn(*n).map_err(|r| v.err(&format!("{key}.asn"), r))?,
            Some(value) => return Err(v.type_err(&format!("{key}.asn"), "an integer", value)),
            None => return Err(v.err(&format!("{key}.asn"), "missing; each peer needs address and asn")),
        };
        if let Some(j) = out.iter().position(|p| p.address == address) {
            return Err(v.err(&format!("{key}.address"), format!("{address} is a peer already (item {j})")));
        }
        out.push(BgpPeer { address, asn: peer_asn });
    }
    Ok(out)
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
    let net = net.exact()?;
    if net.prefix_len() == 0 {
        return Err("::/0 would announce a default route".into());
    }
    Ok(Announce::Prefix(net))
}

#[cfg(test)]
mod tests {
    use super::{Announce, BgpPeer};
    use crate::testutil::{bad, ok};
    use crate::Config;

    #[test]
    fn routing_bgp_is_off_unless_an_asn_is_set() {
        assert_eq!(Config::default().routing.bgp, None, "direct routes only");
        assert_eq!(ok("[routing]\n").routing.bgp, None);
        let c = ok(concat!(
            "[routing]\nasn = 4200000001\nrouter_id = \"0.0.0.10\"\n",
            "peers = [{ address = \"fd00:a1::1\", asn = 64512 }, { address = \"2001:db8::1\", asn = 4200000001 }]\n",
            "announce = [\"pod-prefixes\", \"2001:db8:ff::/64\"]\n",
        ));
        let bgp = c.routing.bgp.expect("bgp on");
        assert_eq!(bgp.asn, 4_200_000_001);
        assert_eq!(bgp.router_id, Some("0.0.0.10".parse().unwrap()));
        assert_eq!(
            bgp.peers,
            [
                BgpPeer { address: "fd00:a1::1".parse().unwrap(), asn: 64512 },
                BgpPeer { address: "2001:db8::1".parse().unwrap(), asn: 4_200_000_001 }
            ]
        );
        assert_eq!(bgp.announce, [Announce::PodPrefixes, Announce::Prefix("2001:db8:ff::/64".parse().unwrap())]);
        let defaults = ok("[routing]\nasn = 64601\npeers = [{ address = \"fd00:a1::1\", asn = 64512 }]\n").routing.bgp.unwrap();
        assert_eq!((defaults.router_id, defaults.announce), (None, vec![Announce::PodPrefixes]));
    }

    #[test]
    fn routing_refuses_bad_asns_and_peers_with_the_reason() {
        let peer = "peers = [{ address = \"fd00:a1::1\", asn = 64512 }]\n";
        for (asn, why) in [
            ("0", "reserved (RFC 7607)"),
            ("23456", "AS_TRANS"),
            ("65535", "reserved (RFC 7300)"),
            ("4294967295", "reserved (RFC 7300)"),
            ("4294967296", "not an AS number"),
            ("-1", "not an AS number"),
            ("\"64512\"", "expected an integer, found a string"),
        ] {
            bad(&format!("[routing]\nasn = {asn}\n{peer}"), "routing.asn", why);
        }
        bad("[routing]\nasn = 64601\n", "routing.peers", "no peers; BGP needs at least one");
        bad("[routing]\nasn = 64601\npeers = []\n", "routing.peers", "no peers");
        bad(&format!("[routing]\n{peer}"), "routing.peers", "needs routing.asn");
        let with_peer =
            |item: &str| format!("[routing]\nasn = 64601\npeers = [{{ address = \"fd00:a1::1\", asn = 64512 }}, {item}]\n");
        bad(&with_peer("{ address = \"192.0.2.1\", asn = 64512 }"), "routing.peers[1].address", "is an IPv4 address");
        bad(&with_peer("{ address = \"fe80::1\", asn = 64512 }"), "routing.peers[1].address", "is link-local");
        bad(&with_peer("{ address = \"ff02::2\", asn = 64512 }"), "routing.peers[1].address", "not a unicast address");
        bad(&with_peer("{ address = \"router-1\", asn = 64512 }"), "routing.peers[1].address", "is not an IPv6 address");
        bad(&with_peer("{ address = \"fd00:a1::1\", asn = 64513 }"), "routing.peers[1].address", "is a peer already (item 0)");
        bad(&with_peer("{ address = \"fd00:a1::2\", asn = 0 }"), "routing.peers[1].asn", "reserved (RFC 7607)");
        bad(&with_peer("{ address = \"fd00:a1::2\" }"), "routing.peers[1].asn", "missing");
        bad(&with_peer("{ address = \"fd00:a1::2\", asn = 1, password = \"x\" }"), "routing.peers[1].password", "unknown key");
        let with = |line: &str| format!("[routing]\nasn = 64601\n{peer}{line}\n");
        bad(&with("router_id = \"0.0.0.0\""), "routing.router_id", "not a valid router ID");
        bad(&with("router_id = \"fd00::1\""), "routing.router_id", "is not a router ID");
        bad(&with("announce = [\"pods\"]"), "routing.announce[0]", "neither \"pod-prefixes\" nor an IPv6 prefix");
        bad(&with("announce = [\"2001:db8:ff::1/64\"]"), "routing.announce[0]", "host bits set");
        bad(&with("announce = [\"::/0\"]"), "routing.announce[0]", "default route");
        bad(&with("announce = [\"pod-prefixes\", \"pod-prefixes\"]"), "routing.announce[1]", "announced already (item 0)");
    }
}
