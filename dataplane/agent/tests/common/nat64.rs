// SPDX-License-Identifier: Apache-2.0
//! The translator's fixtures: a network namespace with an IPv6 and an IPv4
//! side, and the nat64 object loaded with its tables.

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::{
    maps::{lpm_trie::Key, Array, HashMap, LpmTrie, MapData},
    Ebpf,
};
use v6node_abi::{
    maps, CtKey, CtLifetimes, CtValue, Direction, EamValue, L4Addr, MaglevTable, Nat46Frontend, Nat46FrontendKey, Nat64Config,
    Nat64PoolValue, Reason, MAGLEV_SIZE,
};

use super::{counted, counter_slots, enter_netns, ifindex, ip, load_object, try_run_marked, try_run_program, PinDir, Run};

pub static NAT64_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/nat64.bpf.o"));

/// The translator's two sides inside the test's own network namespace:
/// `v6` (2001:db8:6::1/64, neighbour 2001:db8:6::2) and `v4` (192.0.2.1/24,
/// neighbour 192.0.2.2), forwarding on, neighbours permanent so the FIB
/// lookups resolve without traffic.
pub struct Net {
    pub v6: u32,
    pub v4: u32,
}

pub const V6_GW: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 1);
pub const V6_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
pub const V6_HOST_MAC: [u8; 6] = [2, 0, 0, 0, 6, 2];
pub const V4_GW: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const V4_HOST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const V4_HOST_MAC: [u8; 6] = [2, 0, 0, 0, 4, 2];
/// The IPv6 host's IPv4 face, by explicit address mapping.
pub const V6_HOST_AS_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 6);
/// The IPv4 host's IPv6 face, under the well-known prefix.
pub const V4_HOST_AS_V6: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xc000, 0x0202);

impl Net {
    /// Moves the calling thread (each test has its own) into a new network
    /// namespace and builds the topology there.
    pub fn enter() -> Net {
        enter_netns();
        ip("link add v6 type veth peer name v6peer");
        ip("link add v4 type veth peer name v4peer");
        for dev in ["v6", "v6peer", "v4", "v4peer"] {
            ip(&format!("link set {dev} up"));
        }
        ip("addr add 2001:db8:6::1/64 dev v6 nodad");
        ip("addr add 192.0.2.1/24 dev v4");
        ip("neigh add 2001:db8:6::2 lladdr 02:00:00:00:06:02 dev v6 nud permanent");
        ip("neigh add 192.0.2.2 lladdr 02:00:00:00:04:02 dev v4 nud permanent");
        for (path, value) in [("/proc/sys/net/ipv4/ip_forward", "1"), ("/proc/sys/net/ipv6/conf/all/forwarding", "1")] {
            std::fs::write(path, value).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        Net { v6: ifindex("v6"), v4: ifindex("v4") }
    }

    pub fn set_mtu(&self, dev: &str, mtu: u32) {
        ip(&format!("link set {dev} mtu {mtu}"));
    }
}

/// The nat64 object loaded with its maps pinned in a directory of its own.
pub struct Xlat {
    pub ebpf: Ebpf,
    _pins: PinDir,
}

impl Xlat {
    /// Loaded with the well-known prefix and the EAM 2001:db8:6::2 <-> 198.51.100.6.
    pub fn load(test: &str) -> Xlat {
        let (ebpf, _pins) = load_object(NAT64_OBJECT, &["v6n_nat64"], test);
        let mut xlat = Xlat { ebpf, _pins };
        xlat.set_prefix("64:ff9b::".parse().unwrap(), 96);
        xlat.add_eam(V6_HOST, 128, V6_HOST_AS_V4, 32);
        xlat
    }

    pub fn set_prefix(&mut self, prefix: Ipv6Addr, len: u8) {
        self.update_config(|c| {
            c.prefix = prefix.octets();
            c.prefix_len = len;
        });
    }

    /// RFC 7915 4.1 by the kernel: DF-clear packets too big for IPv6 leave
    /// to be fragmented readdressed to `via`.
    pub fn set_fragment_addr(&mut self, via: Ipv4Addr) {
        self.update_config(|c| c.fragment_addr = u32::from_ne_bytes(via.octets()));
    }

    fn update_config(&mut self, change: impl FnOnce(&mut Nat64Config)) {
        let mut map: HashMap<&mut MapData, u32, Nat64Config> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT64_CONFIG).unwrap()).unwrap();
        let mut config = map.get(&0, 0).unwrap_or_default();
        change(&mut config);
        map.insert(0, config, 0).unwrap();
    }

    pub fn add_eam(&mut self, v6: Ipv6Addr, v6_len: u8, v4: Ipv4Addr, v4_len: u8) {
        self.add_eam_with_flags(v6, v6_len, v4, v4_len, 0);
    }

    /// `flags`: V6N_EAM_*, as the agent sets them from the main table.
    pub fn add_eam_with_flags(&mut self, v6: Ipv6Addr, v6_len: u8, v4: Ipv4Addr, v4_len: u8, flags: u16) {
        let value = EamValue { ipv6: v6.octets(), ipv4: v4.octets(), ipv6_len: v6_len, ipv4_len: v4_len, flags, rule: 0 };
        let mut eam6: LpmTrie<&mut MapData, [u8; 16], EamValue> =
            LpmTrie::try_from(self.ebpf.map_mut(maps::EAM6).unwrap()).unwrap();
        eam6.insert(&Key::new(v6_len.into(), v6.octets()), value, 0).unwrap();
        let mut eam4: LpmTrie<&mut MapData, [u8; 4], EamValue> =
            LpmTrie::try_from(self.ebpf.map_mut(maps::EAM4).unwrap()).unwrap();
        eam4.insert(&Key::new(v4_len.into(), v4.octets()), value, 0).unwrap();
    }

    /// nat64.translatable: IPv4 destinations in v4/len go to the prefix.
    pub fn add_translatable(&mut self, v4: Ipv4Addr, len: u8) {
        let mut table: LpmTrie<&mut MapData, [u8; 4], u8> = LpmTrie::try_from(self.ebpf.map_mut(maps::XLAT4).unwrap()).unwrap();
        table.insert(&Key::new(len.into(), v4.octets()), 1, 0).unwrap();
    }

    /// Stateful NAT64 for sources in `source`/`len`: the pool's addresses
    /// with ports (and echo identifiers) `first..=last`; RFC 6146's
    /// lifetimes.
    pub fn enable_stateful(&mut self, pool: &[Ipv4Addr], source: Ipv6Addr, len: u8, first: u16, last: u16, filtering: u32) {
        self.update_config(|c| {
            c.filtering = filtering as u8;
            c.lifetimes = CtLifetimes {
                udp_seconds: 300,
                tcp_established_seconds: 7440,
                tcp_transitory_seconds: 240,
                icmp_seconds: 60,
                tcp_closing_seconds: 240,
            };
            c.pool_size = pool.len() as u32;
            (c.tcp_first, c.tcp_last, c.udp_first, c.udp_last, c.icmp_first, c.icmp_last) =
                (first, last, first, last, first, last);
        });
        let mut sources: LpmTrie<&mut MapData, [u8; 16], u8> =
            LpmTrie::try_from(self.ebpf.map_mut(maps::NAT64_SOURCES).unwrap()).unwrap();
        sources.insert(&Key::new(len.into(), source.octets()), 1, 0).unwrap();
        let mut table: HashMap<&mut MapData, u32, Nat64PoolValue> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT64_POOL).unwrap()).unwrap();
        for (index, addr) in pool.iter().enumerate() {
            table.insert(u32::from_ne_bytes(addr.octets()), Nat64PoolValue { index: index as u32 }, 0).unwrap();
        }
        let mut by_place: Array<&mut MapData, u32> = Array::try_from(self.ebpf.map_mut(maps::NAT64_POOL_ADDRS).unwrap()).unwrap();
        for (index, addr) in pool.iter().enumerate() {
            by_place.set(index as u32, u32::from_ne_bytes(addr.octets()), 0).unwrap();
        }
    }

    /// The NAT46 gateway on, its clients embedded in `prefix`/96.
    pub fn enable_nat46(&mut self, prefix: Ipv6Addr) {
        self.update_config(|c| {
            c.nat46_prefix.copy_from_slice(&prefix.octets()[..12]);
            c.nat46_on = 1;
        });
    }

    /// A NAT46 backend under `id`.
    pub fn set_nat46_backend(&mut self, id: u32, addr: Ipv6Addr, port: u16) {
        let mut backends: HashMap<&mut MapData, u32, L4Addr> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT46_BACKENDS).unwrap()).unwrap();
        backends.insert(id, L4Addr { addr: addr.octets(), port: port.to_be(), proto: 0, pad: 0 }, 0).unwrap();
    }

    pub fn remove_nat46_backend(&mut self, id: u32) {
        let mut backends: HashMap<&mut MapData, u32, L4Addr> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT46_BACKENDS).unwrap()).unwrap();
        backends.remove(&id).unwrap();
    }

    /// The NAT46 frontend `vip`:`port` (`proto`) under `id`, its Maglev
    /// table's buckets going round `pattern` (backend ids; empty: no table,
    /// no backends).
    pub fn set_nat46_frontend(&mut self, vip: Ipv4Addr, port: u16, proto: u8, id: u32, pattern: &[u32]) {
        if !pattern.is_empty() {
            let mut table = MaglevTable { backend_ids: [0; MAGLEV_SIZE as usize] };
            for (i, slot) in table.backend_ids.iter_mut().enumerate() {
                *slot = pattern[i % pattern.len()];
            }
            let mut maglev: HashMap<&mut MapData, u32, MaglevTable> =
                HashMap::try_from(self.ebpf.map_mut(maps::NAT46_MAGLEV).unwrap()).unwrap();
            maglev.insert(id, table, 0).unwrap();
        }
        let mut frontends: HashMap<&mut MapData, Nat46FrontendKey, Nat46Frontend> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT46_FRONTENDS).unwrap()).unwrap();
        let key = Nat46FrontendKey { addr: vip.octets(), port: port.to_be(), proto, pad: 0 };
        frontends.insert(key, Nat46Frontend { id, backends: pattern.len() as u32 }, 0).unwrap();
        let mut vips: HashMap<&mut MapData, u32, u32> = HashMap::try_from(self.ebpf.map_mut(maps::NAT46_VIPS).unwrap()).unwrap();
        vips.insert(u32::from_ne_bytes(vip.octets()), 1, 0).unwrap();
    }

    /// Every entry of the NAT46 gateway's flow table.
    pub fn nat46_state(&self) -> Vec<(CtKey, CtValue)> {
        let table: HashMap<&MapData, CtKey, CtValue> = HashMap::try_from(self.ebpf.map(maps::NAT46_STATE).unwrap()).unwrap();
        table.iter().map(Result::unwrap).collect()
    }

    /// Every entry of the stateful NAT64 state table.
    pub fn state(&self) -> Vec<(CtKey, CtValue)> {
        let table: HashMap<&MapData, CtKey, CtValue> = HashMap::try_from(self.ebpf.map(maps::NAT64_STATE).unwrap()).unwrap();
        table.iter().map(Result::unwrap).collect()
    }

    /// Moves an entry's last packet `seconds` into the past. Wrapping: on a
    /// machine up for less than `seconds` the time lies "before boot", which
    /// the datapath's `now - last_seen` reads right all the same.
    pub fn age(&mut self, key: &CtKey, seconds: u64) {
        let mut table: HashMap<&mut MapData, CtKey, CtValue> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT64_STATE).unwrap()).unwrap();
        let mut value = table.get(key, 0).unwrap();
        value.last_seen_ns = value.last_seen_ns.wrapping_sub(seconds * 1_000_000_000);
        table.insert(key, value, 0).unwrap();
    }

    /// Runs the program on `packet` as if it had arrived on `ifindex`.
    pub fn run(&self, packet: &[u8], ifindex: u32) -> Run {
        self.try_run(packet, ifindex).expect("BPF_PROG_TEST_RUN")
    }

    /// As `run`, for frames the kernel may refuse before the program runs
    /// (BPF_PROG_TEST_RUN wants at least the headers its ethertype implies).
    pub fn try_run(&self, packet: &[u8], ifindex: u32) -> Result<Run, aya::programs::ProgramError> {
        try_run_program(&self.ebpf, "v6n_nat64", packet, ifindex)
    }

    /// As `run`, the packet carrying skb->mark `mark`.
    pub fn run_marked(&self, packet: &[u8], ifindex: u32, mark: u32) -> Run {
        try_run_marked(&self.ebpf, "v6n_nat64", packet, ifindex, mark).expect("BPF_PROG_TEST_RUN")
    }

    /// Packets counted under (direction, reason), over all devices.
    pub fn counted(&self, direction: Direction, reason: Reason) -> u64 {
        counted(&self.ebpf, direction, reason)
    }

    /// Every counted packet, whatever its slot.
    pub fn counted_total(&self) -> u64 {
        counter_slots(&self.ebpf).iter().map(|(_, packets, _)| packets).sum()
    }
}
