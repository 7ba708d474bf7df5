// SPDX-License-Identifier: Apache-2.0
//! The IPv6 routes of the kernel's main table, read over rtnetlink: what the
//! cluster's routes are kept against, and how the translator tells an EAM
//! the IPv6 network routes from one it represents.

use std::net::Ipv6Addr;

use futures::TryStreamExt;
use ipnet::Ipv6Net;
use rtnetlink::{
    packet_route::route::{RouteAddress, RouteAttribute, RouteProtocol, RouteType},
    Handle, RouteMessageBuilder,
};

pub const MAIN_TABLE: u32 = 254;

/// One IPv6 route of the main table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route6 {
    pub prefix: Ipv6Net,
    pub protocol: RouteProtocol,
    pub kind: RouteType,
    pub gateway: Option<Ipv6Addr>,
}

/// The main table's IPv6 routes, in the kernel's order.
pub async fn routes(handle: &Handle) -> anyhow::Result<Vec<Route6>> {
    let mut routes = Vec::new();
    let mut dump = handle.route().get(RouteMessageBuilder::<Ipv6Addr>::new().build()).execute();
    while let Some(route) = dump.try_next().await? {
        let table = route
            .attributes
            .iter()
            .find_map(|a| match a {
                RouteAttribute::Table(t) => Some(*t),
                _ => None,
            })
            .unwrap_or(u32::from(route.header.table));
        if table != MAIN_TABLE {
            continue;
        }
        let mut destination = Ipv6Addr::UNSPECIFIED;
        let mut gateway = None;
        for attribute in &route.attributes {
            match attribute {
                RouteAttribute::Destination(RouteAddress::Inet6(a)) => destination = *a,
                RouteAttribute::Gateway(RouteAddress::Inet6(a)) => gateway = Some(*a),
                _ => {}
            }
        }
        let Ok(prefix) = Ipv6Net::new(destination, route.header.destination_prefix_length) else { continue };
        routes.push(Route6 { prefix, protocol: route.header.protocol, kind: route.header.kind, gateway });
    }
    Ok(routes)
}

/// Whether the IPv6 network routes all of `prefix` natively: a unicast
/// route other than the default covers it. A default route says nothing of
/// where an address lives, and an unreachable or blackhole route is no way
/// there.
pub fn routes_natively(routes: &[Route6], prefix: Ipv6Net) -> bool {
    routes.iter().any(|r| r.kind == RouteType::Unicast && r.prefix.prefix_len() > 0 && r.prefix.contains(&prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, kind: RouteType) -> Route6 {
        Route6 { prefix: prefix.parse().unwrap(), protocol: RouteProtocol::Kernel, kind, gateway: None }
    }

    #[test]
    fn a_prefix_is_routed_natively_by_a_covering_unicast_route_other_than_the_default() {
        let eam: Ipv6Net = "fd00:10:244:1::/120".parse().unwrap();
        assert!(!routes_natively(&[], eam));
        assert!(!routes_natively(&[route("::/0", RouteType::Unicast)], eam), "the default route");
        assert!(routes_natively(&[route("fd00:10:244:1::/64", RouteType::Unicast)], eam));
        assert!(routes_natively(&[route("fd00:10:244:1::/120", RouteType::Unicast)], eam), "the same prefix");
        assert!(!routes_natively(&[route("fd00:10:244:1::/124", RouteType::Unicast)], eam), "a part of it only");
        assert!(!routes_natively(&[route("fd00:10:244:2::/64", RouteType::Unicast)], eam), "another prefix");
        assert!(!routes_natively(&[route("fd00:10:244:1::/64", RouteType::Unreachable)], eam));
        assert!(!routes_natively(&[route("fd00:10:244:1::/64", RouteType::BlackHole)], eam));
    }
}
