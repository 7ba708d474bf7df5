// SPDX-License-Identifier: Apache-2.0
//! The kernel's own drops of pods' packets as flows: bpf/trace.bpf.c on the
//! skb:kfree_skb tracepoint (tp_btf), loaded with the running kernel's BTF
//! and attached while the agent runs, and the names of the kernel's drop
//! reasons (enum skb_drop_reason), which differ between kernels, read from
//! the same BTF.

use std::{collections::HashMap, path::Path, sync::OnceLock};

use anyhow::{Context, Result};
use aya::{
    maps::{Array, MapData},
    programs::BtfTracePoint,
    Btf, Ebpf, EbpfLoader,
};
use v6node_abi::{maps, KERNEL_DROP_REASONS_MAX};

use crate::bpf::{open_pinned_map, KERNEL_DROP, TRACE_OBJECT};

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Reasons the kernel frees a packet with that are no drop for a flow to
/// show: not dropped at all, freed without a reason (netkit's drops among
/// them), and the tc hooks' drops, which the datapath's exit reports itself.
const NOT_REPORTED: [&str; 5] = ["NOT_DROPPED_YET", "CONSUMED", "NOT_SPECIFIED", "TC_INGRESS", "TC_EGRESS"];

static REASON_NAMES: OnceLock<HashMap<u32, String>> = OnceLock::new();

/// The name of the running kernel's drop reason `value` (NO_SOCKET, ...).
pub fn reason_name(value: u32) -> String {
    REASON_NAMES.get().and_then(|names| names.get(&value).cloned()).unwrap_or_else(|| format!("reason {value}"))
}

/// The running kernel's enum skb_drop_reason, by value, without the
/// SKB_DROP_REASON_ (or SKB_) prefix.
fn reason_names(btf_path: &Path) -> Result<HashMap<u32, String>> {
    let btf = btf_rs::Btf::from_file(btf_path).with_context(|| format!("reading {}", btf_path.display()))?;
    let types = btf.resolve_types_by_name("skb_drop_reason").context("the kernel's BTF has no enum skb_drop_reason")?;
    let Some(btf_rs::Type::Enum(reasons)) = types.into_iter().find(|t| matches!(t, btf_rs::Type::Enum(_))) else {
        anyhow::bail!("skb_drop_reason in the kernel's BTF is no enum");
    };
    let mut names = HashMap::new();
    for member in &reasons.members {
        let name = btf.resolve_name(member).context("a member of enum skb_drop_reason")?;
        let short = name.strip_prefix("SKB_DROP_REASON_").or_else(|| name.strip_prefix("SKB_")).unwrap_or(&name);
        // MAX and SUBSYS_MASK are bounds, not reasons.
        if member.val() < KERNEL_DROP_REASONS_MAX && short != "MAX" {
            names.insert(member.val(), short.to_string());
        }
    }
    Ok(names)
}

/// The tracepoint program, attached for as long as this lives.
pub struct KernelDrops {
    _ebpf: Ebpf,
    pub reported: usize,
}

/// Loads and attaches the program, and marks the reasons it reports.
/// Blocking: the kernel's BTF is read twice (aya's loader, the names).
pub fn start(pin_dir: &Path) -> Result<KernelDrops> {
    let names = reason_names(Path::new(VMLINUX_BTF))?;
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    let bytes = TRACE_OBJECT.bytes()?;
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .default_map_pin_directory(pin_dir)
        .load(&bytes)
        .context("loading the trace BPF object")?;
    let program: &mut BtfTracePoint =
        ebpf.program_mut(KERNEL_DROP).with_context(|| format!("BPF object has no program {KERNEL_DROP}"))?.try_into()?;
    program.load("kfree_skb", &btf).with_context(|| format!("verifier rejected {KERNEL_DROP}"))?;
    program.attach().context("attaching to the skb:kfree_skb tracepoint")?;
    let mut wanted: Array<MapData, u8> = open_pinned_map(pin_dir, maps::KERNEL_DROP_REASONS)?;
    let mut reported = 0;
    for (&value, name) in &names {
        if !NOT_REPORTED.contains(&name.as_str()) {
            wanted.set(value, 1, 0).with_context(|| format!("writing {}", maps::KERNEL_DROP_REASONS))?;
            reported += 1;
        }
    }
    let _ = REASON_NAMES.set(names);
    Ok(KernelDrops { _ebpf: ebpf, reported })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernels_drop_reasons_are_named() {
        let names = reason_names(Path::new(VMLINUX_BTF)).unwrap();
        let name_of = |wanted: &str| names.iter().find(|(_, n)| *n == wanted).map(|(v, _)| *v);
        assert_eq!(name_of("NOT_SPECIFIED"), Some(2), "{names:?}");
        assert!(name_of("NO_SOCKET").is_some() && name_of("TC_INGRESS").is_some(), "{names:?}");
        assert_eq!((name_of("MAX"), name_of("SUBSYS_MASK")), (None, None), "bounds are no reasons");
    }
}
