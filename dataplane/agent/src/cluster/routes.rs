// SPDX-License-Identifier: Apache-2.0
//! Keeps the routes to other nodes' pod prefixes equal to the cluster view,
//! the way `filter.rs` keeps the BPF tables: new and changed routes first
//! (one atomic replace each), stale ones last. They live in the main table,
//! which BPF host routing's `bpf_fib_lookup` asks, marked with v6node's own
//! route protocol so that no other route is ever touched. The kernel keeps
//! them while the agent is down.

use std::{collections::BTreeMap, net::Ipv6Addr};

use ipnet::Ipv6Net;
use rtnetlink::{
    packet_route::route::{RouteMessage, RouteProtocol, RouteType},
    Handle, RouteMessageBuilder,
};
use serde::{Deserialize, Serialize};

use crate::main_table::{self, MAIN_TABLE};

/// v6node's route protocol number: `ip -6 route show proto 118` lists its routes.
pub const PROTOCOL: u8 = 118;

/// A route the cluster view asks for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Wanted {
    pub prefix: Ipv6Net,
    pub via: Ipv6Addr,
    pub peer: String,
}

/// How a peer's prefix is reached, for `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteState {
    /// A route via the peer's address on a shared link.
    Direct,
    /// No direct route (the peer is not on-link); the peer announces its
    /// prefixes over BGP and the node's routers carry the traffic.
    Bgp,
    /// No route: the kernel refused it (the peer is not on-link, or another
    /// route for the prefix is not v6node's).
    Unreachable,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRoute {
    pub peer: String,
    pub prefix: Ipv6Net,
    pub via: Ipv6Addr,
    pub state: RouteState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kernel refused the direct route (rather than v6node leaving
    /// another protocol's route alone): the peer is not on-link.
    #[serde(skip)]
    pub refused_by_kernel: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteStats {
    pub installed: usize,
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub refused: usize,
}

fn message(prefix: Ipv6Net, via: Option<Ipv6Addr>) -> RouteMessage {
    let mut builder = RouteMessageBuilder::<Ipv6Addr>::new()
        .destination_prefix(prefix.network(), prefix.prefix_len())
        .table_id(MAIN_TABLE)
        .protocol(RouteProtocol::Other(PROTOCOL))
        .kind(RouteType::Unicast);
    if let Some(via) = via {
        builder = builder.gateway(via);
    }
    builder.build()
}

/// IPv6 routes of the main table by prefix: (protocol, gateway).
async fn current(handle: &Handle) -> anyhow::Result<BTreeMap<Ipv6Net, (RouteProtocol, Option<Ipv6Addr>)>> {
    let mut routes = BTreeMap::new();
    for route in main_table::routes(handle).await? {
        // Ours win over any other for the same prefix in the map: they are
        // the ones to compare.
        let ours = route.protocol == RouteProtocol::Other(PROTOCOL);
        if ours || !routes.contains_key(&route.prefix) {
            routes.insert(route.prefix, (route.protocol, route.gateway));
        }
    }
    Ok(routes)
}

/// Makes v6node's routes exactly `wanted`. A route the kernel refuses is
/// reported with its reason and does not stop the others; a prefix another
/// protocol already routes is left alone.
pub async fn sync(handle: &Handle, wanted: &[Wanted]) -> anyhow::Result<(Vec<PeerRoute>, RouteStats)> {
    let mut current = current(handle).await?;
    let mut stats = RouteStats::default();
    let mut report = Vec::new();
    for w in wanted {
        let mut route = PeerRoute {
            peer: w.peer.clone(),
            prefix: w.prefix,
            via: w.via,
            state: RouteState::Direct,
            error: None,
            refused_by_kernel: false,
        };
        match current.remove(&w.prefix) {
            Some((RouteProtocol::Other(PROTOCOL), Some(via))) if via == w.via => {}
            Some((protocol, _)) if protocol != RouteProtocol::Other(PROTOCOL) => {
                route.state = RouteState::Unreachable;
                route.error = Some(format!("a {protocol:?} route for {} exists, not v6node's: left alone", w.prefix));
            }
            existing => match handle.route().add(message(w.prefix, Some(w.via))).replace().execute().await {
                Ok(()) if existing.is_some() => stats.changed += 1,
                Ok(()) => stats.added += 1,
                Err(e) => {
                    route.state = RouteState::Unreachable;
                    route.refused_by_kernel = true;
                    route.error = Some(format!("the kernel refused {} via {}: {e} (is the peer on-link?)", w.prefix, w.via));
                    // A route of ours for this prefix with an old gateway
                    // is wrong now: the stale pass below removes it.
                    if let Some(old) = existing {
                        current.insert(w.prefix, old);
                    }
                }
            },
        }
        match &route.error {
            Some(e) => {
                log::warn!("peer {}: {e}", w.peer);
                stats.refused += 1;
            }
            None => stats.installed += 1,
        }
        report.push(route);
    }
    for (prefix, (protocol, via)) in current {
        if protocol != RouteProtocol::Other(PROTOCOL) {
            continue;
        }
        handle
            .route()
            .del(message(prefix, via))
            .execute()
            .await
            .map_err(|e| anyhow::anyhow!("removing the stale route to {prefix}: {e}"))?;
        stats.removed += 1;
    }
    Ok((report, stats))
}
