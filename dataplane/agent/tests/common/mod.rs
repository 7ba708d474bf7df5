// SPDX-License-Identifier: Apache-2.0
//! Shared by the BPF tests: loading an object with pins of its own; for the
//! translator, a network namespace for the test's
//! thread, the nat64 object loaded with its tables, packet builders and an
//! independent checksum checker.
#![allow(dead_code)]

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::PathBuf,
    process::Command,
};

use aya::{
    maps::{lpm_trie::Key, HashMap, LpmTrie, MapData, PerCpuHashMap},
    programs::{SchedClassifier, TestRun, TestRunOptions},
    Ebpf, EbpfLoader,
};
use v6node_abi::{maps, CounterKey, CounterValue, Direction, EamValue, Nat64Config, Reason};

pub static NAT64_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/nat64.bpf.o"));

pub const TC_ACT_UNSPEC: u32 = -1i32 as u32;
pub const TC_ACT_OK: u32 = 0;
pub const TC_ACT_SHOT: u32 = 2;
pub const TC_ACT_REDIRECT: u32 = 7;

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

pub fn ip(args: &str) {
    let status = Command::new("ip").args(args.split_whitespace()).status().expect("running ip");
    assert!(status.success(), "ip {args} failed");
}

impl Net {
    /// Moves the calling thread (each test has its own) into a new network
    /// namespace and builds the topology there.
    pub fn enter() -> Net {
        // SAFETY: unshare only changes this thread's namespace membership.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "unshare(CLONE_NEWNET): {} (run as root)", std::io::Error::last_os_error());
        ip("link set lo up");
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

pub fn ifindex(name: &str) -> u32 {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(index, 0, "no device {name:?}");
    index
}

/// The nat64 object loaded with its maps pinned in a directory of its own.
pub struct Xlat {
    pub ebpf: Ebpf,
    _pins: PinDir,
}

pub struct Run {
    pub verdict: u32,
    pub packet: Vec<u8>,
}

/// A pin directory of a test's own under /sys/fs/bpf, removed when dropped.
pub struct PinDir(PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Loads `object` with its maps pinned in a directory of the test's own and
/// its classifier `programs` through the verifier.
pub fn load_object(object: &[u8], programs: &[&str], test: &str) -> (Ebpf, PinDir) {
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/v6node-test-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&pin_dir)
        .unwrap_or_else(|e| panic!("creating {} (run as root with a bpffs on /sys/fs/bpf): {e}", pin_dir.display()));
    let mut ebpf = EbpfLoader::new().default_map_pin_directory(&pin_dir).load(object).expect("loading a BPF object (needs root)");
    for name in programs {
        let program: &mut SchedClassifier = ebpf.program_mut(name).unwrap().try_into().unwrap();
        // The verifier gives up with EAGAIN when a signal is pending (the
        // SIGCHLD of another test's `ip`); libbpf retries, so does this.
        let mut attempts = 0;
        loop {
            match program.load() {
                Err(aya::programs::ProgramError::LoadError { io_error, .. })
                    if io_error.raw_os_error() == Some(libc::EAGAIN) && attempts < 5 =>
                {
                    attempts += 1
                }
                result => break result.unwrap_or_else(|e| panic!("verifier rejected {name}: {e:#?}")),
            }
        }
    }
    (ebpf, PinDir(pin_dir))
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
        let mut map: HashMap<&mut MapData, u32, Nat64Config> =
            HashMap::try_from(self.ebpf.map_mut(maps::NAT64_CONFIG).unwrap()).unwrap();
        map.insert(0, Nat64Config { prefix: prefix.octets(), prefix_len: len, pad: [0; 3] }, 0).unwrap();
    }

    pub fn add_eam(&mut self, v6: Ipv6Addr, v6_len: u8, v4: Ipv4Addr, v4_len: u8) {
        let value = EamValue { ipv6: v6.octets(), ipv4: v4.octets(), ipv6_len: v6_len, ipv4_len: v4_len, pad: 0, rule: 0 };
        let mut eam6: LpmTrie<&mut MapData, [u8; 16], EamValue> =
            LpmTrie::try_from(self.ebpf.map_mut(maps::EAM6).unwrap()).unwrap();
        eam6.insert(&Key::new(v6_len.into(), v6.octets()), value, 0).unwrap();
        let mut eam4: LpmTrie<&mut MapData, [u8; 4], EamValue> =
            LpmTrie::try_from(self.ebpf.map_mut(maps::EAM4).unwrap()).unwrap();
        eam4.insert(&Key::new(v4_len.into(), v4.octets()), value, 0).unwrap();
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

    /// Packets counted under (direction, reason), over all devices.
    pub fn counted(&self, direction: Direction, reason: Reason) -> u64 {
        counted(&self.ebpf, direction, reason)
    }

    /// Every counted packet, whatever its slot.
    pub fn counted_total(&self) -> u64 {
        let map: PerCpuHashMap<&MapData, CounterKey, CounterValue> =
            PerCpuHashMap::try_from(self.ebpf.map(maps::COUNTERS).unwrap()).unwrap();
        map.iter().map(Result::unwrap).map(|(_, per_cpu)| per_cpu.iter().map(|v| v.packets).sum::<u64>()).sum()
    }
}

/// Runs `program` on `packet` as if it had arrived on (or been sent
/// through) device `ifindex`, which sets where FIB lookups start.
pub fn try_run_program(ebpf: &Ebpf, program: &str, packet: &[u8], ifindex: u32) -> Result<Run, aya::programs::ProgramError> {
    let program: &SchedClassifier = ebpf.program(program).unwrap().try_into().unwrap();
    // struct __sk_buff: ingress_ifindex at 36, ifindex at 40; 192 bytes.
    let mut ctx = [0u8; 192];
    ctx[36..40].copy_from_slice(&ifindex.to_ne_bytes());
    ctx[40..44].copy_from_slice(&ifindex.to_ne_bytes());
    let mut out = vec![0u8; 16384];
    let options = TestRunOptions { data_in: Some(packet), data_out: Some(&mut out), ctx_in: Some(&ctx), ..TestRunOptions::new() };
    let result = program.test_run(options)?;
    out.truncate(result.data_size_out as usize);
    Ok(Run { verdict: result.return_value, packet: out })
}

/// Packets counted under (direction, reason), over all devices.
pub fn counted(ebpf: &Ebpf, direction: Direction, reason: Reason) -> u64 {
    let map: PerCpuHashMap<&MapData, CounterKey, CounterValue> =
        PerCpuHashMap::try_from(ebpf.map(maps::COUNTERS).unwrap()).unwrap();
    map.iter()
        .map(Result::unwrap)
        .filter(|(k, _)| k.direction == direction as u8 && k.reason == reason as u8)
        .map(|(_, per_cpu)| per_cpu.iter().map(|v| v.packets).sum::<u64>())
        .sum()
}

// --- packets ---------------------------------------------------------------------------

pub const ETH_IPV6: [u8; 2] = [0x86, 0xdd];
pub const ETH_IPV4: [u8; 2] = [0x08, 0x00];

pub fn ethernet(ethertype: [u8; 2], l3: &[u8]) -> Vec<u8> {
    let mut frame = vec![2, 0, 0, 0, 0, 0xaa, 2, 0, 0, 0, 0, 0xbb];
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(l3);
    frame
}

/// One's complement sum of `data` as 16-bit big-endian words.
pub fn sum16(data: &[u8]) -> u32 {
    let mut sum = 0u32;
    for chunk in data.chunks(2) {
        let word = if chunk.len() == 2 { u16::from_be_bytes([chunk[0], chunk[1]]) } else { u16::from(chunk[0]) << 8 };
        sum += u32::from(word);
    }
    sum
}

pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub fn pseudo4(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u32 {
    sum16(src) + sum16(dst) + u32::from(proto) + len as u32
}

pub fn pseudo6(src: &[u8], dst: &[u8], next: u8, len: usize) -> u32 {
    sum16(src) + sum16(dst) + (len as u32 >> 16) + (len as u32 & 0xffff) + u32::from(next)
}

/// An IPv6 packet (no Ethernet) with the given next header and payload; the
/// transport checksum at `csum_at` (offset in payload) is filled in.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, next: u8, payload: &[u8], csum_at: Option<usize>) -> Vec<u8> {
    let mut p = vec![0x60 | 0x0b, 0xa0, 0, 0]; // traffic class 0xba
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.push(next);
    p.push(hop);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let mut payload = payload.to_vec();
    if let Some(at) = csum_at {
        payload[at..at + 2].copy_from_slice(&[0, 0]);
        let c = fold(pseudo6(&src.octets(), &dst.octets(), next, payload.len()) + sum16(&payload));
        payload[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    p.extend_from_slice(&payload);
    p
}

/// An IPv4 packet (no Ethernet); `csum_at` as for `ipv6`, with the IPv4
/// pseudo-header unless `next` is ICMP (which has none).
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, proto: u8, frag: u16, payload: &[u8], csum_at: Option<usize>) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![0x45, 0xba];
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0x12, 0x34]);
    p.extend_from_slice(&frag.to_be_bytes());
    p.push(ttl);
    p.push(proto);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = fold(sum16(&p));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut payload = payload.to_vec();
    if let Some(at) = csum_at {
        payload[at..at + 2].copy_from_slice(&[0, 0]);
        let pseudo = if proto == 1 { 0 } else { pseudo4(&src.octets(), &dst.octets(), proto, payload.len()) };
        let c = fold(pseudo + sum16(&payload));
        payload[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    p.extend_from_slice(&payload);
    p
}

/// `ip` (an IPv4 packet from `ipv4`) with 8 bytes of options inserted, its
/// lengths and header checksum redone.
pub fn with_ipv4_options(mut ip: Vec<u8>, options: [u8; 8]) -> Vec<u8> {
    ip.splice(20..20, options);
    ip[0] = 0x47;
    let total = ip.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let c = fold(sum16(&ip[..28]));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip
}

pub fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

pub fn tcp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&0x01020304u32.to_be_bytes());
    t.extend_from_slice(&0x0a0b0c0du32.to_be_bytes());
    t.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    t
}

/// ICMP or ICMPv6 message: type, code, the 4 bytes after the checksum, body.
pub fn icmp(kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    m
}

// --- checking output --------------------------------------------------------------------

/// Fails unless `frame` is a well-formed IPv4 or IPv6 packet whose header and
/// transport checksums (TCP, UDP, ICMP, ICMPv6; first fragments excepted:
/// their checksum covers bytes in later fragments) are valid.
pub fn assert_well_formed(frame: &[u8]) {
    assert!(frame.len() >= 14, "runt frame");
    let l3 = &frame[14..];
    match [frame[12], frame[13]] {
        ETH_IPV4 => {
            assert!(l3.len() >= 20, "short IPv4");
            assert_eq!(l3[0], 0x45, "IPv4 version/IHL");
            assert_eq!(fold(sum16(&l3[..20])), 0, "IPv4 header checksum");
            let total = u16::from_be_bytes([l3[2], l3[3]]) as usize;
            assert_eq!(total, l3.len(), "IPv4 total length vs frame");
            let frag = u16::from_be_bytes([l3[6], l3[7]]);
            if frag & 0x3fff != 0 {
                return; // a fragment: its datagram's checksum cannot be checked alone
            }
            let payload = &l3[20..];
            let (src, dst) = (&l3[12..16], &l3[16..20]);
            match l3[9] {
                1 => assert_eq!(fold(sum16(payload)), 0, "ICMP checksum"),
                6 => assert_eq!(fold(pseudo4(src, dst, 6, payload.len()) + sum16(payload)), 0, "TCP checksum"),
                17 if payload[6..8] != [0, 0] => {
                    assert_eq!(fold(pseudo4(src, dst, 17, payload.len()) + sum16(payload)), 0, "UDP checksum")
                }
                _ => {}
            }
        }
        ETH_IPV6 => {
            assert!(l3.len() >= 40, "short IPv6");
            assert_eq!(l3[0] >> 4, 6, "IPv6 version");
            let plen = u16::from_be_bytes([l3[4], l3[5]]) as usize;
            assert_eq!(40 + plen, l3.len(), "IPv6 payload length vs frame");
            let (src, dst) = (&l3[8..24], &l3[24..40]);
            let (mut next, mut payload) = (l3[6], &l3[40..]);
            if next == 44 {
                let offset = u16::from_be_bytes([payload[2], payload[3]]) & !7;
                let more = payload[3] & 1;
                if offset != 0 || more != 0 {
                    return;
                }
                next = payload[0];
                payload = &payload[8..];
            }
            match next {
                6 | 17 | 58 => {
                    assert_eq!(fold(pseudo6(src, dst, next, payload.len()) + sum16(payload)), 0, "checksum of next header {next}")
                }
                _ => {}
            }
        }
        other => panic!("ethertype {other:02x?} is neither IPv4 nor IPv6"),
    }
}
