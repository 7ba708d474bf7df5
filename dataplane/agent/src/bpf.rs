// SPDX-License-Identifier: Apache-2.0
//! The BPF entry objects, compiled from ../bpf/*.bpf.c by build.rs and
//! embedded in the binary. `OBJECTS` below is the one list of them; a test
//! checks it against what build.rs found to compile.

use std::{borrow::Cow, collections::BTreeSet, path::Path};

use anyhow::{Context, Result};
use aya::{
    maps::{Map, MapData, MapError},
    programs::{CgroupSockAddr, Program, SchedClassifier},
    Ebpf, EbpfLoader,
};

use crate::verifier;

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

pub const HOST_INGRESS: &str = "v6n_from_dev";
pub const HOST_EGRESS: &str = "v6n_to_dev";
pub const NAT64: &str = "v6n_nat64";
pub const FROM_POD: &str = "v6n_from_pod";
pub const TO_POD: &str = "v6n_to_pod";
/// The uplinks' native XDP program (xdp.bpf.c).
pub const XDP_UPLINK: &str = "v6n_xdp_uplink";
/// The kernel's drops (tp_btf on skb:kfree_skb), while flows are on.
pub const KERNEL_DROP: &str = "v6n_kernel_drop";
/// The socket hooks, in the order the agent attaches them.
pub const SOCK_PROGRAMS: [&str; 4] = ["v6n_sock_connect", "v6n_sock_sendmsg", "v6n_sock_recvmsg", "v6n_sock_peername"];

/// An entry object (`bpf/<name>.bpf.c`) and the programs the agent attaches
/// from it.
#[derive(Debug)]
pub struct Object {
    pub name: &'static str,
    pub programs: &'static [&'static str],
}

/// For the node's own devices.
pub const HOST_OBJECT: Object = Object { name: "host", programs: &[HOST_INGRESS, HOST_EGRESS] };
/// The NAT46/64 translator; its tables are pinned beside the host object's.
pub const NAT64_OBJECT: Object = Object { name: "nat64", programs: &[NAT64] };
/// For pod devices; the endpoint map is pinned beside the others.
pub const POD_OBJECT: Object = Object { name: "pod", programs: &[FROM_POD, TO_POD] };

/// Services at the cgroup socket hooks; the service tables are pinned beside the others.
pub const SOCK_OBJECT: Object = Object { name: "sock", programs: &SOCK_PROGRAMS };

/// The kernel's drops of pods' packets, as flow events (loaded with the
/// kernel's BTF by flows::kernel_drops, not by `load`).
pub const TRACE_OBJECT: Object = Object { name: "trace", programs: &[KERNEL_DROP] };

/// The uplinks' native XDP program, ahead of the host object's tc one.
pub const XDP_OBJECT: Object = Object { name: "xdp", programs: &[XDP_UPLINK] };

/// Every entry object, by name.
pub const OBJECTS: [&Object; 6] = [&HOST_OBJECT, &NAT64_OBJECT, &POD_OBJECT, &SOCK_OBJECT, &TRACE_OBJECT, &XDP_OBJECT];

impl Object {
    /// Developers may point the agent at a freshly built object instead of
    /// the embedded one (`V6NODE_DATAPLANE_<NAME>_OBJECT=file.o`), to iterate
    /// on BPF code without relinking the agent.
    fn override_var(&self) -> String {
        format!("V6NODE_DATAPLANE_{}_OBJECT", self.name.to_uppercase())
    }

    /// The object's ELF bytes: the override's, or the embedded ones.
    pub fn bytes(&self) -> Result<Cow<'static, [u8]>> {
        let var = self.override_var();
        if let Some(path) = std::env::var_os(&var) {
            log::warn!("loading BPF from {} ({var})", Path::new(&path).display());
            return Ok(Cow::Owned(std::fs::read(&path).with_context(|| format!("reading {}", Path::new(&path).display()))?));
        }
        let (_, bytes) = EMBEDDED
            .iter()
            .find(|(name, _)| *name == self.name)
            .with_context(|| format!("no bpf/{}.bpf.c was compiled into this agent", self.name))?;
        Ok(Cow::Borrowed(bytes))
    }

    /// Loads the object into the kernel and its programs through the
    /// verifier. Maps declared pinned-by-name are opened from `pin_dir` when
    /// they exist there, so counters and tables survive agent restarts; new
    /// ones are created and pinned.
    pub fn load(&self, pin_dir: &Path) -> Result<Ebpf> {
        let bytes = self.bytes()?;
        // No CO-RE relocations in these objects (tc programs see the kernel only
        // through __sk_buff, which the verifier rewrites), so the kernel's BTF is
        // not needed: parsing it would be most of the agent's start time.
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .default_map_pin_directory(pin_dir)
            .load(&bytes)
            .with_context(|| format!("loading the {} BPF object", self.name))?;
        for &name in self.programs {
            let result = match ebpf.program_mut(name).with_context(|| format!("BPF object has no program {name}"))? {
                Program::SchedClassifier(program) => verifier::load_retrying(program),
                Program::CgroupSockAddr(program) => verifier::load_retrying(program),
                Program::Xdp(program) => verifier::load_retrying(program),
                other => anyhow::bail!("{name}: a {:?} program, which the agent does not attach", other.prog_type()),
            };
            result.with_context(|| format!("verifier rejected {name}"))?;
        }
        Ok(ebpf)
    }
}

/// The maps the objects pin by name (`LIBBPF_PIN_BY_NAME` where the C side
/// declares them), read from the objects themselves, so that `detach`
/// removes exactly what a load can have pinned.
pub fn pinned_maps() -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for object in OBJECTS {
        let parsed = aya_obj::Object::parse(&object.bytes()?)
            .with_context(|| format!("reading the map declarations of the {} BPF object", object.name))?;
        names.extend(
            parsed.maps.into_iter().filter(|(_, map)| map.pinning() == aya_obj::maps::PinningType::ByName).map(|(name, _)| name),
        );
    }
    Ok(names)
}

/// Opens the map pinned as `name` under `pin_dir` as `T` (say
/// `HashMap<MapData, K, V>`); an error names the pin.
pub fn open_pinned_map<T: TryFrom<Map, Error = MapError>>(pin_dir: &Path, name: &str) -> Result<T> {
    let pin = pin_dir.join(name);
    let data = MapData::from_pin(&pin).with_context(|| format!("opening {}", pin.display()))?;
    let map = Map::from_map_data(data).with_context(|| format!("opening {}", pin.display()))?;
    T::try_from(map).with_context(|| format!("opening {}", pin.display()))
}

pub fn sock_addr<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut CgroupSockAddr> {
    Ok(ebpf.program_mut(name).with_context(|| format!("BPF object has no program {name}"))?.try_into()?)
}

pub fn classifier<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut SchedClassifier> {
    Ok(ebpf.program_mut(name).with_context(|| format!("BPF object has no program {name}"))?.try_into()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compiled_object_is_described_and_every_described_one_compiled() {
        let compiled: Vec<&str> = EMBEDDED.iter().map(|(name, _)| *name).collect();
        let described: Vec<&str> = OBJECTS.iter().map(|o| o.name).collect();
        assert_eq!(compiled, described, "bpf/*.bpf.c against bpf::OBJECTS (both by name)");
    }

    #[test]
    fn every_described_program_is_in_its_object() {
        for object in OBJECTS {
            let parsed = aya_obj::Object::parse(&object.bytes().unwrap()).unwrap();
            for program in object.programs {
                assert!(parsed.programs.contains_key(*program), "{} has no program {program}", object.name);
            }
        }
    }

    #[test]
    fn the_pinned_maps_include_the_agents_tables_and_not_the_scratch_map() {
        use v6node_abi::maps;
        let pinned = pinned_maps().unwrap();
        for map in [
            maps::COUNTERS,
            maps::DENY_SRC,
            maps::EAM4,
            maps::EAM6,
            maps::XLAT4,
            maps::XLAT_DEVICES,
            maps::XDP_PORTS,
            maps::ENDPOINTS,
            maps::NAT64_CONFIG,
            maps::SERVICES,
            maps::BACKENDS,
            maps::FRONTENDS,
            maps::SERVICE_STATS,
            maps::AFFINITY,
            maps::SOCK_REVNAT,
            maps::LB_VIPS,
        ] {
            assert!(pinned.contains(map), "{map} in {pinned:?}");
        }
        assert!(!pinned.contains("v6n_icmp_scratch"), "{pinned:?}");
    }
}
