// SPDX-License-Identifier: Apache-2.0
//! The pod's device pair, through rtnetlink: created in the host's
//! namespace, the pod side moved into the pod's and configured there.

use std::{fs::File, net::Ipv6Addr, os::fd::AsRawFd, path::Path};

use anyhow::{anyhow, bail, Context, Result};
use futures::TryStreamExt;
use rtnetlink::{
    packet_route::{
        address::{AddressAttribute, AddressFlags},
        link::{LinkAttribute, NetkitMode, NetkitPolicy},
    },
    Handle, LinkNetkit, LinkUnspec, LinkVeth, RouteMessageBuilder,
};
use v6node_api::PodDevice;

/// The veth host side's address, the pod's next hop: the same on every
/// pod's link, as link-local addresses may be.
pub const VETH_GATEWAY: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// Runs `f` with an rtnetlink handle in the namespace the calling thread is in.
fn with_netlink<T>(f: impl AsyncFnOnce(Handle) -> Result<T>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    runtime.block_on(async {
        let (connection, handle, _) = rtnetlink::new_connection().context("opening rtnetlink")?;
        tokio::spawn(connection);
        f(handle).await
    })
}

/// Runs `f` with an rtnetlink handle inside the network namespace at
/// `netns`, on a thread of its own (setns changes the calling thread only).
fn in_netns<T: Send + 'static>(netns: &Path, f: impl AsyncFnOnce(Handle) -> Result<T> + Send + 'static) -> Result<T> {
    let file = File::open(netns).with_context(|| format!("opening network namespace {}", netns.display()))?;
    std::thread::spawn(move || {
        // SAFETY: setns on a namespace descriptor we hold, for this thread only.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("entering the pod's network namespace");
        }
        with_netlink(f)
    })
    .join()
    .map_err(|_| anyhow!("netns worker panicked"))?
}

async fn index(handle: &Handle, name: &str) -> Result<Option<u32>> {
    match handle.link().get().match_name(name.to_owned()).execute().try_next().await {
        Ok(Some(message)) => Ok(Some(message.header.index)),
        Ok(None) => Ok(None),
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(None),
        Err(e) => Err(e).with_context(|| format!("looking up {name}")),
    }
}

fn is_unsupported(e: &rtnetlink::Error) -> bool {
    // An unknown link kind is EOPNOTSUPP from rtnl_newlink.
    matches!(e, rtnetlink::Error::NetlinkError(m) if m.raw_code() == -libc::EOPNOTSUPP)
}

/// Creates the pair, both ends in the host's namespace, host side up.
/// `Auto` tries netkit and falls back to veth where the kernel lacks it.
/// The pod side's default policy drops: only the program the agent
/// attaches lets traffic out of the pod.
pub fn create_pair(host: &str, peer: &str, wanted: &str) -> Result<PodDevice> {
    let (host, peer, wanted) = (host.to_owned(), peer.to_owned(), wanted.to_owned());
    with_netlink(async move |handle| {
        if index(&handle, &host).await?.is_some() {
            // Left over from an ADD that died midway: start afresh.
            delete_by_name(&handle, &host).await?;
        }
        let mut device = PodDevice::Veth;
        if wanted != "veth" {
            let netkit = LinkNetkit::new(&host, &peer, NetkitMode::L3)
                .policy(NetkitPolicy::Forward)
                .peer_policy(NetkitPolicy::Drop)
                .build();
            match handle.link().add(netkit).execute().await {
                Ok(()) => device = PodDevice::Netkit,
                Err(e) if wanted == "auto" && is_unsupported(&e) => {}
                Err(e) => {
                    return Err(e)
                        .context("creating the netkit pair (kernel without CONFIG_NETKIT? use device \"auto\" or \"veth\")")
                }
            }
        }
        if device == PodDevice::Veth {
            handle.link().add(LinkVeth::new(&host, &peer).build()).execute().await.context("creating the veth pair")?;
        }
        let host_index = index(&handle, &host).await?.ok_or_else(|| anyhow!("{host} vanished"))?;
        if device == PodDevice::Veth {
            let mut add = handle.address().add(host_index, VETH_GATEWAY.into(), 64);
            add.message_mut().attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
            add.execute().await.context("adding the pod's gateway address")?;
        }
        handle
            .link()
            .set(LinkUnspec::new_with_index(host_index).up().build())
            .execute()
            .await
            .with_context(|| format!("setting {host} up"))?;
        Ok(device)
    })
}

/// Sets the pod's TCP sysctls the agent asked for (paths under
/// /proc/sys/net/ipv4/tcp_*), in its namespace: /proc/sys/net is the
/// namespace of the thread that opens it.
pub fn set_sysctls(netns: &Path, sysctls: &[(String, String)]) -> Result<()> {
    for (path, _) in sysctls {
        if !path.starts_with("net/ipv4/tcp_") || path.contains("..") {
            return Err(anyhow!("refusing sysctl {path}: the agent sets the pods' TCP settings only"));
        }
    }
    let sysctls = sysctls.to_vec();
    in_netns(netns, async move |_| {
        for (path, value) in &sysctls {
            std::fs::write(Path::new("/proc/sys").join(path), value).with_context(|| format!("{path} = {value}"))?;
        }
        Ok(())
    })
}

/// Moves the pod side into `netns` as `ifname` with `address`/128 and a
/// default route, and routes `address` to the host side.
pub fn configure(host: &str, peer: &str, netns: &Path, ifname: &str, address: Ipv6Addr, device: PodDevice) -> Result<String> {
    let ns = File::open(netns).with_context(|| format!("opening network namespace {}", netns.display()))?;
    let (host, peer_name) = (host.to_owned(), peer.to_owned());
    with_netlink(async move |handle| {
        let peer = index(&handle, &peer_name).await?.ok_or_else(|| anyhow!("{peer_name} vanished"))?;
        handle
            .link()
            .set(LinkUnspec::new_with_index(peer).setns_by_fd(ns.as_raw_fd()).build())
            .execute()
            .await
            .context("moving the pod's device into its namespace")?;
        let host_index = index(&handle, &host).await?.ok_or_else(|| anyhow!("{host} vanished"))?;
        let route = RouteMessageBuilder::<Ipv6Addr>::new().destination_prefix(address, 128).output_interface(host_index).build();
        handle.route().add(route).replace().execute().await.with_context(|| format!("routing {address} to {host}"))?;
        Ok(())
    })?;
    let (peer_name, ifname) = (peer.to_owned(), ifname.to_owned());
    in_netns(netns, async move |handle| {
        let index = index(&handle, &peer_name).await?.ok_or_else(|| anyhow!("{peer_name} not in the pod's namespace"))?;
        handle
            .link()
            .set(LinkUnspec::new_with_index(index).name(ifname.clone()).build())
            .execute()
            .await
            .with_context(|| format!("renaming {peer_name} to {ifname}"))?;
        let mut add = handle.address().add(index, address.into(), 128);
        add.message_mut().attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
        add.execute().await.with_context(|| format!("adding {address} to {ifname}"))?;
        handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .with_context(|| format!("setting {ifname} up"))?;
        let default = RouteMessageBuilder::<Ipv6Addr>::new().destination_prefix(Ipv6Addr::UNSPECIFIED, 0).output_interface(index);
        let default = match device {
            // netkit in L3 mode has no neighbours: the device is the next hop.
            PodDevice::Netkit => default,
            PodDevice::Veth => default.gateway(VETH_GATEWAY),
        };
        handle.route().add(default.build()).execute().await.context("adding the pod's default route")?;
        mac(&handle, index).await
    })
}

async fn mac(handle: &Handle, index: u32) -> Result<String> {
    let message =
        handle.link().get().match_index(index).execute().try_next().await?.ok_or_else(|| anyhow!("device {index} vanished"))?;
    Ok(message
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(m) => Some(v6node_api::format_mac(m)),
            _ => None,
        })
        .unwrap_or_default())
}

async fn delete_by_name(handle: &Handle, name: &str) -> Result<bool> {
    let Some(index) = index(handle, name).await? else { return Ok(false) };
    match handle.link().del(index).execute().await {
        Ok(()) => Ok(true),
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(false),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

/// Deletes the pair by its host side (the pod side goes with it); a
/// missing device is fine: DEL may come twice.
pub fn delete_pair(host: &str) -> Result<bool> {
    let host = host.to_owned();
    with_netlink(async move |handle| delete_by_name(&handle, &host).await)
}

/// What CHECK looks at: the host side exists and the pod side carries the
/// address in the pod's namespace.
pub fn check(host: &str, netns: &Path, ifname: &str, address: Ipv6Addr) -> Result<()> {
    let host = host.to_owned();
    if !with_netlink(async move |handle| Ok(index(&handle, &host).await?.is_some()))? {
        bail!("the pod's host-side device is missing");
    }
    let ifname = ifname.to_owned();
    in_netns(netns, async move |handle| {
        let index = index(&handle, &ifname).await?.ok_or_else(|| anyhow!("{ifname} is missing in the pod"))?;
        let mut addresses = handle.address().get().set_link_index_filter(index).execute();
        while let Some(message) = addresses.try_next().await? {
            if message.attributes.iter().any(|a| matches!(a, AddressAttribute::Address(std::net::IpAddr::V6(a)) if *a == address))
            {
                return Ok(());
            }
        }
        bail!("{ifname} in the pod lacks {address}")
    })
}
