// SPDX-License-Identifier: Apache-2.0
//! Shared by the BPF tests: loading an object with pins of its own, running
//! a program, reading its counters, a network namespace for the test's
//! thread. Per feature: the translator's fixtures (`nat64.rs`), and packets
//! built by hand with an independent checksum checker (`packet.rs`).
#![allow(dead_code)]

pub mod events;
pub mod lb;
pub mod nat64;
pub mod node;
pub mod packet;
pub mod policy;

use std::{path::PathBuf, process::Command};

use aya::{
    maps::{MapData, PerCpuHashMap},
    programs::{Program, SchedClassifier, TestRun, TestRunOptions},
    Ebpf, EbpfLoader,
};
use v6node_abi::{maps, CounterKey, CounterValue, Direction, Reason};

#[path = "../../src/verifier.rs"]
mod verifier;

/// What a tc program returns (linux/pkt_cls.h).
pub const TC_ACT_UNSPEC: u32 = -1i32 as u32; // pass on to the stack (TCX_NEXT)
pub const TC_ACT_OK: u32 = 0;
pub const TC_ACT_SHOT: u32 = 2;
pub const TC_ACT_REDIRECT: u32 = 7;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

pub struct Run {
    pub verdict: u32,
    pub packet: Vec<u8>,
    /// skb->mark as the program left it.
    pub mark: u32,
    /// skb->tstamp as the program left it: a departure time it set.
    pub tstamp: u64,
}

/// The __sk_buff fields a test run may set besides the packet.
#[derive(Clone, Copy, Debug, Default)]
pub struct SkbIn {
    pub mark: u32,
    pub tstamp: u64,
    /// A GSO packet of this many segments of `gso_size` bytes.
    pub gso_segs: u32,
    pub gso_size: u32,
}

/// A pin directory of a test's own under /sys/fs/bpf, removed when dropped.
pub struct PinDir(PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Loads `object` with its maps pinned in a directory of the test's own and
/// its `programs` (classifiers or socket hooks) through the verifier.
pub fn load_object(object: &[u8], programs: &[&str], test: &str) -> (Ebpf, PinDir) {
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/v6node-test-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&pin_dir)
        .unwrap_or_else(|e| panic!("creating {} (run as root with a bpffs on /sys/fs/bpf): {e}", pin_dir.display()));
    // Held from here, so that a load the verifier refuses removes the pins too.
    let pins = PinDir(pin_dir);
    let mut ebpf = EbpfLoader::new().default_map_pin_directory(&pins.0).load(object).expect("loading a BPF object (needs root)");
    for name in programs {
        let result = match ebpf.program_mut(name).unwrap_or_else(|| panic!("no program {name}")) {
            Program::SchedClassifier(program) => verifier::load_retrying(program),
            Program::CgroupSockAddr(program) => verifier::load_retrying(program),
            Program::Xdp(program) => verifier::load_retrying(program),
            other => panic!("{name}: unexpected program type {:?}", other.prog_type()),
        };
        result.unwrap_or_else(|e| panic!("verifier rejected {name}: {e:#?}"));
    }
    (ebpf, pins)
}

/// Runs `program` on `packet` as if it had arrived on (or been sent
/// through) device `ifindex`, which sets where FIB lookups start.
pub fn try_run_program(ebpf: &Ebpf, program: &str, packet: &[u8], ifindex: u32) -> Result<Run, aya::programs::ProgramError> {
    try_run_marked(ebpf, program, packet, ifindex, 0)
}

/// As `try_run_program`, the packet carrying skb->mark `mark`.
pub fn try_run_marked(
    ebpf: &Ebpf,
    program: &str,
    packet: &[u8],
    ifindex: u32,
    mark: u32,
) -> Result<Run, aya::programs::ProgramError> {
    try_run_skb(ebpf, program, packet, ifindex, SkbIn { mark, ..SkbIn::default() })
}

/// As `try_run_program`, with the __sk_buff fields of `skb`.
pub fn try_run_skb(
    ebpf: &Ebpf,
    program: &str,
    packet: &[u8],
    ifindex: u32,
    skb: SkbIn,
) -> Result<Run, aya::programs::ProgramError> {
    let program: &SchedClassifier = ebpf.program(program).unwrap().try_into().unwrap();
    // struct __sk_buff: mark at 8, ingress_ifindex at 36, ifindex at 40,
    // tstamp at 152, gso_segs at 164, gso_size at 176; 192 bytes.
    let mut ctx = [0u8; 192];
    ctx[8..12].copy_from_slice(&skb.mark.to_ne_bytes());
    ctx[36..40].copy_from_slice(&ifindex.to_ne_bytes());
    ctx[40..44].copy_from_slice(&ifindex.to_ne_bytes());
    ctx[152..160].copy_from_slice(&skb.tstamp.to_ne_bytes());
    ctx[164..168].copy_from_slice(&skb.gso_segs.to_ne_bytes());
    ctx[176..180].copy_from_slice(&skb.gso_size.to_ne_bytes());
    let mut ctx_out = [0u8; 192];
    let mut out = vec![0u8; 16384];
    let options = TestRunOptions {
        data_in: Some(packet),
        data_out: Some(&mut out),
        ctx_in: Some(&ctx),
        ctx_out: Some(&mut ctx_out),
        ..TestRunOptions::new()
    };
    let result = program.test_run(options)?;
    out.truncate(result.data_size_out as usize);
    Ok(Run {
        verdict: result.return_value,
        packet: out,
        mark: u32::from_ne_bytes(ctx_out[8..12].try_into().unwrap()),
        tstamp: u64::from_ne_bytes(ctx_out[152..160].try_into().unwrap()),
    })
}

/// Runs XDP `program` on `frame` as arriving on device `ifindex`'s first
/// queue (which sets where FIB lookups start): its verdict and the frame as
/// it left.
pub fn run_xdp(ebpf: &Ebpf, program: &str, frame: &[u8], ifindex: u32) -> (u32, Vec<u8>) {
    let program: &aya::programs::Xdp = ebpf.program(program).unwrap().try_into().unwrap();
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
    ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    let mut out = vec![0u8; 4096];
    let options = TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), ctx_in: Some(&ctx), ..TestRunOptions::new() };
    let result = program.test_run(options).expect("BPF_PROG_TEST_RUN");
    out.truncate(result.data_size_out as usize);
    (result.return_value, out)
}

/// Every slot of the object's counter map as (key, packets, bytes), summed
/// over CPUs. Test runs count under the loopback device of the caller's
/// namespace.
pub fn counter_slots(ebpf: &Ebpf) -> Vec<(CounterKey, u64, u64)> {
    let map: PerCpuHashMap<&MapData, CounterKey, CounterValue> =
        PerCpuHashMap::try_from(ebpf.map(maps::COUNTERS).unwrap()).unwrap();
    map.iter()
        .map(Result::unwrap)
        .map(|(key, per_cpu)| (key, per_cpu.iter().map(|v| v.packets).sum(), per_cpu.iter().map(|v| v.bytes).sum()))
        .collect()
}

/// Packets and bytes counted under (direction, reason), over all devices.
pub fn counted_with_bytes(ebpf: &Ebpf, direction: Direction, reason: Reason) -> (u64, u64) {
    counter_slots(ebpf)
        .into_iter()
        .filter(|(k, _, _)| k.direction == direction as u8 && k.reason == reason as u8)
        .fold((0, 0), |(p, b), (_, packets, bytes)| (p + packets, b + bytes))
}

/// Packets counted under (direction, reason), over all devices.
pub fn counted(ebpf: &Ebpf, direction: Direction, reason: Reason) -> u64 {
    counted_with_bytes(ebpf, direction, reason).0
}

pub fn ip(args: &str) {
    let status = Command::new("ip").args(args.split_whitespace()).status().expect("running ip");
    assert!(status.success(), "ip {args} failed");
}

/// Moves the calling thread (each test has its own) into a new network
/// namespace, loopback up: FIB lookups then see only the test's devices.
pub fn enter_netns() {
    // SAFETY: unshare only changes this thread's namespace membership.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "unshare(CLONE_NEWNET): {} (run as root)", std::io::Error::last_os_error());
    ip("link set lo up");
}

/// Keeps the calling thread on the CPU it runs on: a program's per-CPU
/// state is seen again only by runs on the same CPU.
pub fn stay_on_this_cpu() {
    // SAFETY: plain libc calls on a zeroed cpu_set_t of this thread's own.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0, "sched_setaffinity");
    }
}

pub fn ifindex(name: &str) -> u32 {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(index, 0, "no device {name:?}");
    index
}

/// Puts `net/prefix_len` on the deny list (v6n_deny_src) of `ebpf`'s object.
pub fn deny_source(ebpf: &mut Ebpf, net: std::net::Ipv6Addr, prefix_len: u32) {
    let mut trie: aya::maps::LpmTrie<&mut MapData, [u8; 16], v6node_abi::DenyValue> =
        aya::maps::LpmTrie::try_from(ebpf.map_mut(maps::DENY_SRC).unwrap()).unwrap();
    trie.insert(&aya::maps::lpm_trie::Key::new(prefix_len, net.octets()), v6node_abi::DenyValue { rule: 0 }, 0).unwrap();
}
