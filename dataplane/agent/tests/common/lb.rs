// SPDX-License-Identifier: Apache-2.0
//! Fixtures for the Service tests: frontends and backends written the way
//! the agent lays them out (abi.h: slot 0 with the count, slots 1..count
//! naming backends), and a cgroup of the test's own for the socket hooks.

use std::{
    fs,
    net::{Ipv6Addr, SocketAddrV6},
    path::PathBuf,
};

use aya::{
    maps::{HashMap, MapData, PerCpuHashMap},
    programs::{CgroupAttachMode, CgroupSockAddr},
    Ebpf,
};
use v6node_abi::{
    maps, L4Addr, LbConfig, MaglevTable, ServiceKey, ServiceStats, ServiceValue, MAGLEV_SIZE, SERVICE_AFFINITY, SERVICE_EXTERNAL,
};

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

pub fn key(frontend: SocketAddrV6, proto: u8, slot: u16) -> ServiceKey {
    ServiceKey { addr: frontend.ip().octets(), port: frontend.port().to_be(), proto, slot, ..ServiceKey::default() }
}

fn l4(addr: SocketAddrV6, proto: u8) -> L4Addr {
    L4Addr { addr: addr.ip().octets(), port: addr.port().to_be(), proto, pad: 0 }
}

/// Writes frontend `id` at `frontend` with `backends` (ids `id * 100 + i`),
/// ClientIP affinity for `affinity_seconds` when given.
pub fn add_service(
    ebpf: &mut Ebpf,
    id: u32,
    frontend: SocketAddrV6,
    proto: u8,
    backends: &[SocketAddrV6],
    affinity_seconds: Option<u32>,
) {
    {
        let mut table: HashMap<&mut MapData, u32, L4Addr> = HashMap::try_from(ebpf.map_mut(maps::BACKENDS).unwrap()).unwrap();
        for (i, backend) in backends.iter().enumerate() {
            table.insert(id * 100 + i as u32, l4(*backend, proto), 0).unwrap();
        }
    }
    {
        let mut table: HashMap<&mut MapData, u32, L4Addr> = HashMap::try_from(ebpf.map_mut(maps::FRONTENDS).unwrap()).unwrap();
        table.insert(id, l4(frontend, proto), 0).unwrap();
    }
    let mut services: HashMap<&mut MapData, ServiceKey, ServiceValue> =
        HashMap::try_from(ebpf.map_mut(maps::SERVICES).unwrap()).unwrap();
    for i in 0..backends.len() {
        let value = ServiceValue { backend_id: id * 100 + i as u32, id, ..ServiceValue::default() };
        services.insert(key(frontend, proto, i as u16 + 1), value, 0).unwrap();
    }
    let head = ServiceValue {
        id,
        count: backends.len() as u16,
        flags: if affinity_seconds.is_some() { SERVICE_AFFINITY as u16 } else { 0 },
        affinity_seconds: affinity_seconds.unwrap_or(0),
        ..ServiceValue::default()
    };
    services.insert(key(frontend, proto, 0), head, 0).unwrap();
}

/// Shrinks frontend `frontend` to its first `count` backends, slot 0 first.
pub fn set_count(ebpf: &mut Ebpf, frontend: SocketAddrV6, proto: u8, count: u16) {
    let mut services: HashMap<&mut MapData, ServiceKey, ServiceValue> =
        HashMap::try_from(ebpf.map_mut(maps::SERVICES).unwrap()).unwrap();
    let mut head = services.get(&key(frontend, proto, 0), 0).unwrap();
    head.count = count;
    services.insert(key(frontend, proto, 0), head, 0).unwrap();
}

/// (translated, refused) for frontend `id`, summed over CPUs.
pub fn service_stats(ebpf: &Ebpf, id: u32) -> (u64, u64) {
    let map: PerCpuHashMap<&MapData, u32, ServiceStats> =
        PerCpuHashMap::try_from(ebpf.map(maps::SERVICE_STATS).unwrap()).unwrap();
    match map.get(&id, 0) {
        Ok(per_cpu) => per_cpu.iter().fold((0, 0), |(t, r), s| (t + s.translated, r + s.refused)),
        Err(_) => (0, 0),
    }
}

/// A cgroup v2 directory of the test's own with this process in it and the
/// socket hooks attached; dropped, the process goes back and the cgroup is
/// removed (its links go with the object that holds them).
pub struct TestCgroup {
    dir: PathBuf,
    home: PathBuf,
}

fn cgroup2_root() -> PathBuf {
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "cgroup2")
        .map(|f| PathBuf::from(f[1]))
        .expect("no cgroup2 mount")
}

impl TestCgroup {
    pub fn enter(ebpf: &mut Ebpf, programs: &[&str], test: &str) -> TestCgroup {
        let root = cgroup2_root();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own.lines().find_map(|l| l.strip_prefix("0::")).expect("not in a cgroup v2 hierarchy");
        let home = root.join(path.trim_start_matches('/'));
        let dir = root.join(format!("v6node-test-{}-{test}", std::process::id()));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).unwrap();
        let file = fs::File::open(&dir).unwrap();
        // From here a failed attach still takes the process back out.
        let guard = TestCgroup { dir, home };
        for name in programs {
            let program: &mut CgroupSockAddr = ebpf.program_mut(name).unwrap().try_into().unwrap();
            program.attach(&file, CgroupAttachMode::Single).unwrap_or_else(|e| panic!("attaching {name}: {e:?}"));
        }
        guard
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Err(e) = fs::write(self.home.join("cgroup.procs"), std::process::id().to_string()) {
            eprintln!("leaving {}: {e}", self.dir.display());
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("removing {}: {e}", self.dir.display());
        }
    }
}

pub const fn addr(ip: Ipv6Addr, port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(ip, port, 0, 0)
}

/// Marks frontend `frontend` as reached from outside, its Maglev table
/// filled with `backend_ids` in turn (an empty list: no table).
pub fn set_external(ebpf: &mut Ebpf, frontend: SocketAddrV6, proto: u8, backend_ids: &[u32]) {
    let id = {
        let mut services: HashMap<&mut MapData, ServiceKey, ServiceValue> =
            HashMap::try_from(ebpf.map_mut(maps::SERVICES).unwrap()).unwrap();
        let mut head = services.get(&key(frontend, proto, 0), 0).unwrap();
        head.flags |= SERVICE_EXTERNAL as u16;
        services.insert(key(frontend, proto, 0), head, 0).unwrap();
        head.id
    };
    let mut tables: HashMap<&mut MapData, u32, MaglevTable> = HashMap::try_from(ebpf.map_mut(maps::MAGLEV).unwrap()).unwrap();
    if backend_ids.is_empty() {
        let _ = tables.remove(&id);
        return;
    }
    let mut table = MaglevTable { backend_ids: [0; MAGLEV_SIZE as usize] };
    for (bucket, slot) in table.backend_ids.iter_mut().enumerate() {
        *slot = backend_ids[bucket % backend_ids.len()];
    }
    tables.insert(id, table, 0).unwrap();
}

/// The node's masquerade address for connections to backends elsewhere.
pub fn set_masquerade(ebpf: &mut Ebpf, addr: Ipv6Addr) {
    set_lb_config(ebpf, addr, 0);
}

/// v6n_lb_cfg: the masquerade address and the LB_* flags.
pub fn set_lb_config(ebpf: &mut Ebpf, masquerade: Ipv6Addr, flags: u32) {
    let mut config: HashMap<&mut MapData, u32, LbConfig> = HashMap::try_from(ebpf.map_mut(maps::LB_CONFIG).unwrap()).unwrap();
    config.insert(0, LbConfig { masquerade_addr: masquerade.octets(), flags }, 0).unwrap();
}

/// Removes backend `id` from v6n_backends, as the agent does when it leaves.
pub fn remove_backend(ebpf: &mut Ebpf, id: u32) {
    let mut table: HashMap<&mut MapData, u32, L4Addr> = HashMap::try_from(ebpf.map_mut(maps::BACKENDS).unwrap()).unwrap();
    table.remove(&id).unwrap();
}
