// SPDX-License-Identifier: Apache-2.0
//! The BPF objects built from ../bpf by build.rs, embedded in the binary.

use std::{borrow::Cow, path::Path};

use anyhow::{Context, Result};
use aya::{
    maps::{Map, MapData, MapError},
    programs::SchedClassifier,
    Ebpf, EbpfLoader,
};

use crate::verifier;

/// Entry object for the node's own devices (bpf/host.bpf.c).
static HOST_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/host.bpf.o"));

/// Developers may point the agent at a freshly built object instead of the
/// embedded one, to iterate on BPF code without relinking the agent.
const HOST_OBJECT_OVERRIDE: &str = "V6NODE_DATAPLANE_HOST_OBJECT";

pub const HOST_INGRESS: &str = "v6n_from_dev";
pub const HOST_EGRESS: &str = "v6n_to_dev";

/// Entry object of the NAT46/64 translator (bpf/nat64.bpf.c).
static NAT64_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/nat64.bpf.o"));
const NAT64_OBJECT_OVERRIDE: &str = "V6NODE_DATAPLANE_NAT64_OBJECT";
pub const NAT64: &str = "v6n_nat64";

/// Entry object of pod devices (bpf/pod.bpf.c).
static POD_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/pod.bpf.o"));
const POD_OBJECT_OVERRIDE: &str = "V6NODE_DATAPLANE_POD_OBJECT";
pub const FROM_POD: &str = "v6n_from_pod";
pub const TO_POD: &str = "v6n_to_pod";

/// Loads the host object into the kernel. Maps declared pinned-by-name are
/// opened from `pin_dir` when they exist there, so counters and tables
/// survive agent restarts; new ones are created and pinned.
pub fn load_host(pin_dir: &Path) -> Result<Ebpf> {
    load(pin_dir, "host", HOST_OBJECT, HOST_OBJECT_OVERRIDE, &[HOST_INGRESS, HOST_EGRESS])
}

/// Loads the translator; its tables are pinned beside the host object's.
pub fn load_nat64(pin_dir: &Path) -> Result<Ebpf> {
    load(pin_dir, "nat64", NAT64_OBJECT, NAT64_OBJECT_OVERRIDE, &[NAT64])
}

/// Loads the pod programs; the endpoint map is pinned beside the others.
pub fn load_pod(pin_dir: &Path) -> Result<Ebpf> {
    load(pin_dir, "pod", POD_OBJECT, POD_OBJECT_OVERRIDE, &[FROM_POD, TO_POD])
}

fn load(pin_dir: &Path, what: &str, embedded: &'static [u8], override_var: &str, programs: &[&str]) -> Result<Ebpf> {
    let bytes: Cow<[u8]> = match std::env::var_os(override_var) {
        Some(path) => {
            log::warn!("loading BPF from {} ({override_var})", Path::new(&path).display());
            Cow::Owned(std::fs::read(&path).with_context(|| format!("reading {}", Path::new(&path).display()))?)
        }
        None => Cow::Borrowed(embedded),
    };
    // No CO-RE relocations in these objects (tc programs see the kernel only
    // through __sk_buff, which the verifier rewrites), so the kernel's BTF is
    // not needed: parsing it would be most of the agent's start time.
    let mut ebpf = EbpfLoader::new()
        .btf(None)
        .default_map_pin_directory(pin_dir)
        .load(&bytes)
        .with_context(|| format!("loading the {what} BPF object"))?;
    for &name in programs {
        let program: &mut SchedClassifier =
            ebpf.program_mut(name).with_context(|| format!("BPF object has no program {name}"))?.try_into()?;
        verifier::load_retrying(program).with_context(|| format!("verifier rejected {name}"))?;
    }
    Ok(ebpf)
}

/// Opens the map pinned as `name` under `pin_dir` as `T` (say
/// `HashMap<MapData, K, V>`); an error names the pin.
pub fn open_pinned_map<T: TryFrom<Map, Error = MapError>>(pin_dir: &Path, name: &str) -> Result<T> {
    let pin = pin_dir.join(name);
    let data = MapData::from_pin(&pin).with_context(|| format!("opening {}", pin.display()))?;
    let map = Map::from_map_data(data).with_context(|| format!("opening {}", pin.display()))?;
    T::try_from(map).with_context(|| format!("opening {}", pin.display()))
}

pub fn classifier<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut SchedClassifier> {
    Ok(ebpf.program_mut(name).with_context(|| format!("BPF object has no program {name}"))?.try_into()?)
}
