// SPDX-License-Identifier: Apache-2.0
//! RFC 7915 4.1, fragmenting DF-clear IPv4 packets too big for the IPv6
//! next hop: a BPF program sends one packet, so the kernel cuts it. The
//! translator readdresses such a packet to ADDRESS, keeps its destination
//! in its mark and hands it to the stack; the main table routes ADDRESS
//! out of `v6n-frag0`, a veth whose MTU leaves room for what translation
//! adds (20 bytes of header, 8 of Fragment header) to IPv6's minimum MTU,
//! so that the fragments fit every IPv6 link whatever its MTU (RFC 6145's
//! rule; a device's MTU may change under the link); the kernel fragments
//! them there, and the translator, on the peer `v6n-frag1`'s ingress,
//! gives each fragment its destination back and translates it into an
//! IPv6 fragment.
//!
//! A route to an address of its own, not a policy rule on the mark: any
//! rule takes every IPv4 route lookup in the namespace, XDP's included,
//! off the kernel's no-rules fast path for as long as the namespace lives
//! (IPv4 forwarding measured 39% slower, tests/bench/RESULTS.md).

use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use futures::TryStreamExt;
use rtnetlink::{
    packet_route::{
        link::LinkAttribute,
        route::{RouteProtocol, RouteScope},
    },
    Handle, LinkUnspec, LinkVeth, RouteMessageBuilder,
};

/// Where the kernel cuts packets, and where the fragments come back in.
pub const LINK: &str = "v6n-frag0";
pub const PEER: &str = "v6n-frag1";
/// Where packets to fragment are sent. Link-local: no packet to it is meant
/// to leave a node, and a /32 outranks any route a node has into
/// 169.254.0.0/16.
pub const ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 118, 1);
/// IPv6's minimum MTU less what translation adds to a fragment: 20 bytes
/// of header, 8 of Fragment header.
pub const MTU: u32 = 1280 - 28;

async fn index_of(handle: &Handle, name: &str) -> Result<Option<u32>> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(link)) => Ok(Some(link.header.index)),
        Ok(None) => Ok(None),
        // ENODEV: no such link.
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(None),
        Err(e) => Err(e).with_context(|| format!("looking up {name}")),
    }
}

async fn mtu_of(handle: &Handle, index: u32) -> Result<Option<u32>> {
    let mut links = handle.link().get().match_index(index).execute();
    let link = links.try_next().await.context("reading a link")?;
    Ok(link.and_then(|l| {
        l.attributes.into_iter().find_map(|a| match a {
            LinkAttribute::Mtu(mtu) => Some(mtu),
            _ => None,
        })
    }))
}

/// Makes the link pair and its route exist; each step leaves
/// what is right alone, so that a reload changes nothing in flight.
pub async fn ensure(handle: &Handle) -> Result<()> {
    let mtu = MTU;
    if index_of(handle, LINK).await?.is_none() {
        handle
            .link()
            .add(LinkVeth::new(LINK, PEER).mtu(mtu).arp(false).up().build())
            .execute()
            .await
            .with_context(|| format!("creating the fragmentation link {LINK}"))?;
    }
    for name in [LINK, PEER] {
        let index = index_of(handle, name).await?.with_context(|| format!("{name} is missing"))?;
        if mtu_of(handle, index).await? != Some(mtu) {
            handle
                .link()
                .set(LinkUnspec::new_with_index(index).mtu(mtu).build())
                .execute()
                .await
                .with_context(|| format!("setting {name}'s MTU to {mtu}"))?;
        }
        handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .with_context(|| format!("bringing {name} up"))?;
    }
    let index = index_of(handle, LINK).await?.with_context(|| format!("{LINK} is missing"))?;
    let route = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(ADDRESS, 32)
        .output_interface(index)
        .protocol(RouteProtocol::Other(crate::cluster::routes::PROTOCOL))
        .scope(RouteScope::Link)
        .build();
    handle.route().add(route).replace().execute().await.with_context(|| format!("routing {ADDRESS} to {LINK}"))?;
    Ok(())
}

/// Removes the pair (its route goes with it); what is absent already is
/// fine.
pub async fn remove(handle: &Handle) -> Result<()> {
    if let Some(index) = index_of(handle, LINK).await? {
        handle.link().del(index).execute().await.with_context(|| format!("removing {LINK}"))?;
    }
    Ok(())
}
