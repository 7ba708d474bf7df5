// SPDX-License-Identifier: Apache-2.0
//! The stateless translator's tables (`bpf/lib/nat64.h`): the prefix,
//! explicit address mappings and translatable ranges, kept equal to
//! `[nat64]`, and its one configuration element.

use std::{net::Ipv4Addr, path::Path, time::Instant};

use anyhow::{Context, Result};
use aya::maps::{
    lpm_trie::{Key, LpmTrie},
    HashMap as BpfHashMap, MapData,
};
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use v6node_abi::{
    maps, EamValue, Lpm4Key, Nat64Config, EAM_ROUTED_NATIVELY, NAT64_FILTER_ADDRESS_DEPENDENT, NAT64_FILTER_ENDPOINT_INDEPENDENT,
};
use v6node_config::{Eam, Nat46, Nat64, Nat64Filtering};

use crate::{
    bpf, conntrack,
    main_table::{self, Route6},
    sync::{remove_stale, sync_trie, Prefix, SyncStats},
};

/// aya's LPM key is `{ u32 prefix_len; K data }`; with K = [u8; 4] it must
/// be byte for byte the C side's `struct v6n_lpm4_key`.
const _: () = assert!(std::mem::size_of::<Key<[u8; 4]>>() == std::mem::size_of::<Lpm4Key>());

/// What syncing the translator's tables did, for `status`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Nat64Stats {
    pub prefix: String,
    /// Explicit address mappings; each is one entry in both EAM tables.
    pub eam: SyncStats,
    /// Of them, those whose IPv6 side the main table routes (a route other
    /// than the default covers it): IPv6 traffic to them is not translated.
    #[serde(default)]
    pub eam_routed_natively: usize,
    /// nat64.translatable: IPv4 ranges translated into the prefix.
    #[serde(default)]
    pub translatable: SyncStats,
    /// `[nat64.stateful]`, refreshed by each sweep.
    #[serde(default)]
    pub stateful: Option<super::stateful::StatefulStats>,
    /// `[nat46]`, its flows refreshed by each sweep.
    #[serde(default)]
    pub nat46: Option<super::gateway::Nat46Stats>,
    /// The fragmentation link's MTU: DF-clear IPv4 packets too big for
    /// IPv6 are cut to it; None: they get a Fragmentation Needed.
    #[serde(default)]
    pub fragment_mtu: Option<u32>,
}

/// Each explicit address mapping as the two EAM tables hold it: one value,
/// its rule its place in `nat64.eam`, under its IPv6 prefix in one table and
/// its IPv4 prefix in the other, so that each direction finds it.
#[derive(Debug, PartialEq)]
struct EamEntries {
    by_ipv6: Vec<(Prefix<16>, EamValue)>,
    by_ipv4: Vec<(Prefix<4>, EamValue)>,
}

/// `routes`: the main table's, which say which mappings' IPv6 sides the
/// IPv6 network routes natively (traffic to them from IPv6 stays IPv6).
fn eam_entries(eams: &[Eam], routes: &[Route6]) -> EamEntries {
    let values: Vec<EamValue> = eams
        .iter()
        .enumerate()
        .map(|(rule, e)| EamValue {
            ipv6: e.ipv6.network().octets(),
            ipv4: e.ipv4.network().octets(),
            ipv6_len: e.ipv6.prefix_len(),
            ipv4_len: e.ipv4.prefix_len(),
            flags: if main_table::routes_natively(routes, e.ipv6) { EAM_ROUTED_NATIVELY as u16 } else { 0 },
            rule: rule as u32,
        })
        .collect();
    EamEntries {
        by_ipv6: values.iter().map(|v| ((u32::from(v.ipv6_len), v.ipv6), *v)).collect(),
        by_ipv4: values.iter().map(|v| ((u32::from(v.ipv4_len), v.ipv4), *v)).collect(),
    }
}

/// The translatable table's entries: the table is a set, its values all 1.
fn translatable_entries(ranges: &[Ipv4Net]) -> Vec<(Prefix<4>, u8)> {
    ranges.iter().map(|r| ((u32::from(r.prefix_len()), r.network().octets()), 1u8)).collect()
}

/// Fills the translator's tables from `[nat64]`. New and changed mappings go
/// in first, then the prefix (one atomic element swap), then stale mappings
/// come out: a mapping present before and after never disappears, so a
/// reload does not interrupt the traffic it translates.
pub fn sync_nat64(
    pin_dir: &Path,
    nat64: &Nat64,
    nat46: Option<&Nat46>,
    fragment_addr: Option<Ipv4Addr>,
    routes: &[Route6],
) -> Result<Nat64Stats> {
    let eams = eam_entries(&nat64.eam, routes);
    let mut stats = SyncStats { entries: nat64.eam.len(), ..SyncStats::default() };
    let read_and_write = Instant::now();
    write_eams(pin_dir, &eams, &mut stats, || {
        let mut config: BpfHashMap<MapData, u32, Nat64Config> = bpf::open_pinned_map(pin_dir, maps::NAT64_CONFIG)?;
        let value = nat64_config(nat64, nat46, fragment_addr);
        config.insert(0, value, 0).context("writing the NAT64 prefix")
    })?;
    stats.write_micros = read_and_write.elapsed().as_micros() as u64;
    let translatable = sync_translatable(pin_dir, &nat64.translatable)?;
    Ok(Nat64Stats {
        prefix: nat64.prefix.to_string(),
        eam: stats,
        eam_routed_natively: routed_natively(&eams),
        translatable,
        stateful: None,
        nat46: None,
        fragment_mtu: None,
    })
}

fn routed_natively(eams: &EamEntries) -> usize {
    eams.by_ipv6.iter().filter(|(_, v)| v.flags & EAM_ROUTED_NATIVELY as u16 != 0).count()
}

/// After the main table changed (BGP learnt or lost a prefix): the mappings
/// with their routed-natively flags as `routes` now say, the rest as before.
/// Returns how many are routed natively.
pub fn sync_eam_routes(pin_dir: &Path, nat64: &Nat64, routes: &[Route6]) -> Result<usize> {
    let eams = eam_entries(&nat64.eam, routes);
    write_eams(pin_dir, &eams, &mut SyncStats::default(), || Ok(()))?;
    Ok(routed_natively(&eams))
}

/// Both EAM tables to `eams`: new and changed entries in, then `between`
/// (the prefix's swap), then stale entries out, so a mapping present before
/// and after never disappears. Counts each mapping once in `stats`, though
/// it lives in both tables.
fn write_eams(pin_dir: &Path, eams: &EamEntries, stats: &mut SyncStats, between: impl FnOnce() -> Result<()>) -> Result<()> {
    let mut eam6: LpmTrie<MapData, [u8; 16], EamValue> = bpf::open_pinned_map(pin_dir, maps::EAM6)?;
    let mut eam4: LpmTrie<MapData, [u8; 4], EamValue> = bpf::open_pinned_map(pin_dir, maps::EAM4)?;
    let stale6 = sync_trie(&mut eam6, &eams.by_ipv6, stats, "EAM")?;
    let stale4 = sync_trie(&mut eam4, &eams.by_ipv4, &mut SyncStats::default(), "EAM")?;
    between()?;
    remove_stale(&mut eam6, &stale6, "removing a stale EAM entry")?;
    remove_stale(&mut eam4, &stale4, "removing a stale EAM entry")?;
    stats.removed = stale6.len().max(stale4.len());
    Ok(())
}

/// The translator's single configuration element. Stateful NAT64's pool
/// size counts addresses `stateful::sync` has written by place before.
fn nat64_config(nat64: &Nat64, nat46: Option<&Nat46>, fragment_addr: Option<Ipv4Addr>) -> Nat64Config {
    let mut value = Nat64Config {
        prefix: nat64.prefix.network().octets(),
        prefix_len: nat64.prefix.prefix_len(),
        fragment_addr: fragment_addr.map_or(0, |a| u32::from_ne_bytes(a.octets())),
        ..Nat64Config::default()
    };
    if let Some(stateful) = &nat64.stateful {
        value.filtering = match stateful.filtering {
            Nat64Filtering::EndpointIndependent => NAT64_FILTER_ENDPOINT_INDEPENDENT,
            Nat64Filtering::AddressDependent => NAT64_FILTER_ADDRESS_DEPENDENT,
        } as u8;
        value.lifetimes = conntrack::nat64_lifetimes(stateful);
        value.pool_size = stateful.pool.len() as u32;
        (value.tcp_first, value.tcp_last) = (stateful.tcp_ports.first, stateful.tcp_ports.last);
        (value.udp_first, value.udp_last) = (stateful.udp_ports.first, stateful.udp_ports.last);
        (value.icmp_first, value.icmp_last) = (stateful.icmp_ids.first, stateful.icmp_ids.last);
    }
    if let Some(nat46) = nat46 {
        value.nat46_prefix.copy_from_slice(&nat46.source_prefix.network().octets()[..12]);
        value.nat46_on = 1;
    }
    value
}

/// Makes the translatable table hold exactly `ranges`: new ones in first,
/// stale ones out last. Runs after the prefix is written, so a new range
/// never translates into an old prefix.
fn sync_translatable(pin_dir: &Path, ranges: &[Ipv4Net]) -> Result<SyncStats> {
    let mut table: LpmTrie<MapData, [u8; 4], u8> = bpf::open_pinned_map(pin_dir, maps::XLAT4)?;
    let started = Instant::now();
    let mut stats = SyncStats { entries: ranges.len(), ..SyncStats::default() };
    let stale = sync_trie(&mut table, &translatable_entries(ranges), &mut stats, "translatable")?;
    remove_stale(&mut table, &stale, "removing a stale translatable range")?;
    stats.removed = stale.len();
    stats.write_micros = started.elapsed().as_micros() as u64;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> v6node_config::Config {
        v6node_config::parse_str(Path::new("test.toml"), &format!("[nat64]\ndevices = [\"eth0\"]\n{text}")).expect("valid").config
    }

    #[test]
    fn a_mapping_the_main_table_routes_is_flagged_in_both_tables() {
        use rtnetlink::packet_route::route::{RouteProtocol, RouteType};
        let c = config(
            "prefix = \"2001:db8:64::/96\"\neam = [{ ipv6 = \"fd00:10:244::/120\", ipv4 = \"198.51.100.0/24\" }, \
             { ipv6 = \"fd00:10:244:1::/120\", ipv4 = \"198.51.101.0/24\" }]\n",
        );
        let route = |prefix: &str| Route6 {
            prefix: prefix.parse().unwrap(),
            protocol: RouteProtocol::Bird,
            kind: RouteType::Unicast,
            gateway: None,
        };
        let eams = eam_entries(&c.nat64.eam, &[route("::/0"), route("fd00:10:244:1::/64")]);
        let by_ipv6: Vec<u16> = eams.by_ipv6.iter().map(|(_, v)| v.flags).collect();
        let by_ipv4: Vec<u16> = eams.by_ipv4.iter().map(|(_, v)| v.flags).collect();
        assert_eq!(by_ipv6, [0, EAM_ROUTED_NATIVELY as u16], "the default route routes nothing natively");
        assert_eq!(by_ipv4, by_ipv6);
        assert_eq!(routed_natively(&eams), 1);
    }

    #[test]
    fn each_mapping_is_in_both_tables_with_its_rule() {
        let c = config(
            "prefix = \"2001:db8:64::/96\"\neam = [{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"198.51.100.0/24\" }, \
             { ipv6 = \"2001:db8:80::80/128\", ipv4 = \"203.0.113.80/32\" }]\n",
        );
        let eams = eam_entries(&c.nat64.eam, &[]);
        let second = EamValue {
            ipv6: "2001:db8:80::80".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            ipv4: [203, 0, 113, 80],
            ipv6_len: 128,
            ipv4_len: 32,
            flags: 0,
            rule: 1,
        };
        assert_eq!(eams.by_ipv6.len(), 2);
        assert_eq!(eams.by_ipv6[1], ((128, second.ipv6), second));
        assert_eq!(eams.by_ipv4[1], ((32, [203, 0, 113, 80]), second));
        assert_eq!((eams.by_ipv6[0].1.rule, eams.by_ipv4[0].1.rule), (0, 0));
        assert_eq!(eams.by_ipv4[0].0, (24, [198, 51, 100, 0]));
        assert_eq!(eams.by_ipv6[0].1, eams.by_ipv4[0].1, "one value in both tables");
        assert_eq!(eam_entries(&[], &[]), EamEntries { by_ipv6: vec![], by_ipv4: vec![] });
    }

    #[test]
    fn translatable_ranges_are_a_set_of_networks() {
        let ranges: Vec<Ipv4Net> = ["192.0.2.0/24", "203.0.113.7/32"].iter().map(|r| r.parse().unwrap()).collect();
        assert_eq!(translatable_entries(&ranges), [((24, [192, 0, 2, 0]), 1), ((32, [203, 0, 113, 7]), 1)]);
    }

    #[test]
    fn the_config_element_holds_the_prefix_and_no_pool_without_stateful() {
        let c = config("prefix = \"64:ff9b:1::/48\"\n");
        let value = nat64_config(&c.nat64, None, Some(Ipv4Addr::new(169, 254, 0, 1)));
        assert_eq!(value.prefix, "64:ff9b:1::".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(value.fragment_addr.to_ne_bytes(), [169, 254, 0, 1], "in network order");
        assert_eq!((value.prefix_len, value.pool_size), (48, 0));
        assert_eq!((value.filtering, value.lifetimes, value.nat46_on), (0, Default::default(), 0), "no stateful, no gateway");
    }

    #[test]
    fn lifetimes_filtering_and_the_pool_come_from_stateful() {
        let c = config(
            "prefix = \"2001:db8:64::/96\"\n[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00:10::/48\"]\n\
             filtering = \"address-dependent\"\nudp_seconds = 120\n",
        );
        let stateful = c.nat64.stateful.as_ref().unwrap();
        let value = nat64_config(&c.nat64, None, None);
        assert_eq!(value.filtering, NAT64_FILTER_ADDRESS_DEPENDENT as u8);
        assert_eq!(value.lifetimes, conntrack::nat64_lifetimes(stateful));
        assert_eq!(value.lifetimes.udp_seconds, 120);
        assert_eq!(value.pool_size, 1);
        assert_eq!((value.udp_first, value.udp_last, value.icmp_first, value.icmp_last), (1024, 65535, 1024, 65535));
    }

    #[test]
    fn the_nat46_prefix_is_its_first_twelve_bytes() {
        let c = config(
            "[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n\
             [[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::a]:80\" }]\n",
        );
        let value = nat64_config(&c.nat64, c.nat46.as_ref(), None);
        assert_eq!(value.nat46_on, 1);
        assert_eq!(value.nat46_prefix, [0x20, 0x01, 0x0d, 0xb8, 0, 0x46, 0, 0, 0, 0, 0, 0]);
    }
}
