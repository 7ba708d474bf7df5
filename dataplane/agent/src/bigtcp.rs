// SPDX-License-Identifier: Apache-2.0
//! BIG TCP: raises a device's GSO/GRO maximum sizes (IPv6 and IPv4) above
//! 64 KiB so the stack builds fewer, larger packets. Clamped to the device's
//! tso_max_size: a driver that cannot segment more would otherwise fall back
//! to software GSO, which costs more than BIG TCP saves.

use anyhow::{anyhow, Context, Result};
use futures::TryStreamExt;
use rtnetlink::{
    packet_route::link::{LinkAttribute, LinkMessage},
    Handle, LinkUnspec,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Sizes {
    pub gso_max_size: Option<u32>,
    pub gro_max_size: Option<u32>,
    pub gso_ipv4_max_size: Option<u32>,
    pub gro_ipv4_max_size: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub device: String,
    pub ifindex: u32,
    pub requested: u32,
    pub tso_max_size: Option<u32>,
    /// The size aimed for: `requested`, clamped to `tso_max_size`.
    pub target: u32,
    /// What the kernel reports after setting.
    pub sizes: Sizes,
    pub changed: bool,
    pub error: Option<String>,
}

fn sizes(message: &LinkMessage) -> (Sizes, Option<u32>) {
    let mut sizes = Sizes::default();
    let mut tso_max = None;
    for attribute in &message.attributes {
        match attribute {
            LinkAttribute::GsoMaxSize(v) => sizes.gso_max_size = Some(*v),
            LinkAttribute::GroMaxSize(v) => sizes.gro_max_size = Some(*v),
            LinkAttribute::GsoIpv4MaxSize(v) => sizes.gso_ipv4_max_size = Some(*v),
            LinkAttribute::GroIpv4MaxSize(v) => sizes.gro_ipv4_max_size = Some(*v),
            LinkAttribute::TsoMaxSize(v) => tso_max = Some(*v),
            _ => {}
        }
    }
    (sizes, tso_max)
}

async fn get(handle: &Handle, ifindex: u32) -> Result<LinkMessage> {
    handle.link().get().match_index(ifindex).execute().try_next().await?.ok_or_else(|| anyhow!("device {ifindex} vanished"))
}

/// Sets every size that differs from the target and reads back the result.
pub async fn apply(handle: &Handle, device: &str, ifindex: u32, requested: u32) -> Report {
    let mut report = Report {
        device: device.to_owned(),
        ifindex,
        requested,
        tso_max_size: None,
        target: requested,
        sizes: Sizes::default(),
        changed: false,
        error: None,
    };
    if let Err(e) = apply_inner(handle, &mut report).await {
        report.error = Some(format!("{e:#}"));
    }
    report
}

async fn apply_inner(handle: &Handle, report: &mut Report) -> Result<()> {
    let (before, tso_max) = sizes(&get(handle, report.ifindex).await?);
    report.tso_max_size = tso_max;
    report.target = tso_max.map_or(report.requested, |max| report.requested.min(max));
    let target = report.target;

    let mut v6 = Vec::new();
    if before.gso_max_size != Some(target) {
        v6.push(LinkAttribute::GsoMaxSize(target));
    }
    if before.gro_max_size != Some(target) {
        v6.push(LinkAttribute::GroMaxSize(target));
    }
    // The IPv4 sizes (Linux 6.3+) go in their own request: an older kernel
    // rejecting them must not undo the IPv6 ones.
    let mut v4 = Vec::new();
    if before.gso_ipv4_max_size.is_some_and(|v| v != target) {
        v4.push(LinkAttribute::GsoIpv4MaxSize(target));
    }
    if before.gro_ipv4_max_size.is_some_and(|v| v != target) {
        v4.push(LinkAttribute::GroIpv4MaxSize(target));
    }
    for attributes in [v6, v4] {
        if attributes.is_empty() {
            continue;
        }
        let mut builder = LinkUnspec::new_with_index(report.ifindex);
        for attribute in attributes {
            builder = builder.append_extra_attribute(attribute);
        }
        handle.link().set(builder.build()).execute().await.with_context(|| format!("setting GSO/GRO sizes to {target}"))?;
        report.changed = true;
    }
    // Read back what the kernel kept, only if something was asked of it.
    report.sizes = if report.changed { sizes(&get(handle, report.ifindex).await?).0 } else { before };
    Ok(())
}
