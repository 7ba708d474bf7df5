// SPDX-License-Identifier: Apache-2.0
//! The agent's side of connection tracking (`bpf/lib/ct.h`, layout in
//! `abi.h`) for the tables it sweeps, stateful NAT64's and the NAT46
//! gateway's: their lifetimes, the one rule that times an entry (the rule
//! of `v6n_ct_lifetime_ns`), the clock BPF keeps, and batched reads and
//! removals. What an entry means stays with its feature.

use std::{path::Path, time::Duration};

use anyhow::{Context, Result};
use aya::maps::MapData;
use v6node_abi::{CtKey, CtLifetimes, CtValue, CT_CLOSING, CT_ESTABLISHED, CT_RESET};
use v6node_config::{Nat46, Nat64Stateful};

/// How often expired entries are removed (and NAT64's ports given back):
/// the longest a port stays out of the pool after its binding expired.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// An entry counts as expired here this much later than in BPF, which
/// writes last_seen at most once a second: the sweep never removes an
/// entry a packet has just found live.
pub const SWEEP_MARGIN_NS: u64 = 2_000_000_000;

const TCP: u8 = libc::IPPROTO_TCP as u8;
const UDP: u8 = libc::IPPROTO_UDP as u8;

/// Stateful NAT64's lifetimes (RFC 6146 4): FINs from both sides (closing)
/// or a RST make a TCP binding transitory again (RFC 6146 3.5.2.2).
pub fn nat64_lifetimes(stateful: &Nat64Stateful) -> CtLifetimes {
    CtLifetimes {
        udp_seconds: stateful.udp_seconds,
        tcp_established_seconds: stateful.tcp_established_seconds,
        tcp_transitory_seconds: stateful.tcp_transitory_seconds,
        icmp_seconds: stateful.icmp_seconds,
        tcp_closing_seconds: stateful.tcp_transitory_seconds,
    }
}

/// The NAT46 gateway's lifetimes: as NAT64's, but it carries no ICMP
/// flows of its own, so anything not TCP lives as UDP does.
pub fn nat46_lifetimes(nat46: &Nat46) -> CtLifetimes {
    CtLifetimes {
        udp_seconds: nat46.udp_seconds,
        tcp_established_seconds: nat46.tcp_established_seconds,
        tcp_transitory_seconds: nat46.tcp_transitory_seconds,
        icmp_seconds: nat46.udp_seconds,
        tcp_closing_seconds: nat46.tcp_transitory_seconds,
    }
}

/// How long `value` outlives its last packet: the rule of
/// `v6n_ct_lifetime_ns`.
pub fn lifetime_ns(lifetimes: &CtLifetimes, proto: u8, value: &CtValue) -> u64 {
    let seconds = match proto {
        TCP if value.flags & CT_CLOSING as u8 != 0 => lifetimes.tcp_closing_seconds,
        TCP if value.flags & (CT_ESTABLISHED | CT_RESET) as u8 == CT_ESTABLISHED as u8 => lifetimes.tcp_established_seconds,
        TCP => lifetimes.tcp_transitory_seconds,
        UDP => lifetimes.udp_seconds,
        _ => lifetimes.icmp_seconds,
    };
    u64::from(seconds) * 1_000_000_000
}

/// Whether a sweep at `now` may remove `value`: expired, and past the margin.
pub fn is_expired(lifetimes: &CtLifetimes, proto: u8, value: &CtValue, now: u64) -> bool {
    now.saturating_sub(value.last_seen_ns) > lifetime_ns(lifetimes, proto, value) + SWEEP_MARGIN_NS
}

/// Whether an entry made at `made` is older than the margin at `now`: what
/// a sweep's read may have missed counts only for entries older than it.
pub fn is_old(made: u64, now: u64) -> bool {
    now.saturating_sub(made) > SWEEP_MARGIN_NS
}

/// CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `union bpf_attr` as the BPF_MAP_*_BATCH commands read it.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
const BATCH: usize = 8192;

/// A state table (of connection tracking's key and value types) read and
/// pruned in batches: aya's iterator and removals cost a system call or two
/// per entry, which at a million entries is seconds of a CPU per sweep; a
/// batch moves thousands.
pub struct StateTable(MapData, &'static str);

impl StateTable {
    pub fn open(pin_dir: &Path, name: &'static str) -> Result<StateTable> {
        let pin = pin_dir.join(name);
        Ok(StateTable(MapData::from_pin(&pin).with_context(|| format!("opening {}", pin.display()))?, name))
    }

    fn batch(&self, command: libc::c_long, attr: &mut BatchAttr) -> std::io::Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        attr.map_fd = self.0.fd().as_fd().as_raw_fd() as u32;
        // SAFETY: attr and the buffers it points to outlive the call, sized
        // for attr.count entries of the table's key and value types.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, command, attr as *mut BatchAttr, std::mem::size_of::<BatchAttr>()) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn entries(&self) -> Result<Vec<(CtKey, CtValue)>> {
        let mut keys = vec![CtKey::default(); BATCH];
        let mut values = vec![CtValue::default(); BATCH];
        let mut all = Vec::new();
        let (mut token, mut next) = (0u32, 0u32);
        let mut first = true;
        loop {
            let mut attr = BatchAttr {
                in_batch: if first { 0 } else { &token as *const u32 as u64 },
                out_batch: &mut next as *mut u32 as u64,
                keys: keys.as_mut_ptr() as u64,
                values: values.as_mut_ptr() as u64,
                count: BATCH as u32,
                ..BatchAttr::default()
            };
            let result = self.batch(BPF_MAP_LOOKUP_BATCH, &mut attr);
            let got = attr.count as usize;
            all.extend(keys[..got].iter().copied().zip(values[..got].iter().copied()));
            match result {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(all),
                Err(e) => return Err(e).with_context(|| format!("reading {}", self.1)),
            }
            token = next;
            first = false;
        }
    }

    /// Removes `keys`; one already gone is skipped.
    pub fn remove(&self, keys: &[CtKey]) -> Result<()> {
        let mut rest = keys;
        while !rest.is_empty() {
            let take = rest.len().min(BATCH);
            let mut attr = BatchAttr { keys: rest.as_ptr() as u64, count: take as u32, ..BatchAttr::default() };
            let result = self.batch(BPF_MAP_DELETE_BATCH, &mut attr);
            let done = attr.count as usize;
            match result {
                Ok(()) => rest = &rest[take..],
                // Stopped at a key that is gone already: skip it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => rest = &rest[(done + 1).min(rest.len())..],
                Err(e) => return Err(e).with_context(|| format!("removing from {}", self.1)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(flags: u32) -> CtValue {
        CtValue { flags: flags as u8, ..CtValue::default() }
    }

    const LIFETIMES: CtLifetimes = CtLifetimes {
        udp_seconds: 300,
        tcp_established_seconds: 7440,
        tcp_transitory_seconds: 240,
        icmp_seconds: 60,
        tcp_closing_seconds: 4,
    };

    #[test]
    fn one_rule_times_every_protocol_and_tcp_state() {
        let s = |ns: u64| ns / 1_000_000_000;
        assert_eq!(s(lifetime_ns(&LIFETIMES, TCP, &entry(0))), 240, "unanswered");
        assert_eq!(s(lifetime_ns(&LIFETIMES, TCP, &entry(CT_ESTABLISHED))), 7440);
        assert_eq!(s(lifetime_ns(&LIFETIMES, TCP, &entry(CT_ESTABLISHED | CT_CLOSING))), 4, "closing wins");
        assert_eq!(s(lifetime_ns(&LIFETIMES, UDP, &entry(0))), 300);
        assert_eq!(s(lifetime_ns(&LIFETIMES, UDP, &entry(CT_CLOSING))), 300, "only TCP closes");
        assert_eq!(s(lifetime_ns(&LIFETIMES, libc::IPPROTO_ICMP as u8, &entry(0))), 60);
    }

    #[test]
    fn a_half_closed_tcp_entry_stays_established_and_a_reset_one_transitory() {
        use v6node_abi::{CT_FIN_IN, CT_FIN_OUT};
        let s = |flags: u32| lifetime_ns(&LIFETIMES, TCP, &entry(flags)) / 1_000_000_000;
        assert_eq!(s(CT_ESTABLISHED | CT_FIN_OUT), 7440, "one side's FIN");
        assert_eq!(s(CT_ESTABLISHED | CT_FIN_IN), 7440, "the other side's FIN");
        assert_eq!(s(CT_ESTABLISHED | CT_FIN_OUT | CT_FIN_IN | CT_CLOSING), 4, "both FINs: closing");
        assert_eq!(s(CT_ESTABLISHED | CT_RESET), 240, "a RST: transitory");
        assert_eq!(s(CT_RESET), 240);
        assert_eq!(s(CT_ESTABLISHED | CT_RESET | CT_CLOSING), 4, "closing wins");
        assert_eq!(lifetime_ns(&LIFETIMES, UDP, &entry(CT_RESET)) / 1_000_000_000, 300, "only TCP resets");
    }

    #[test]
    fn a_sweep_waits_out_the_margin_after_bpf_stops_finding_an_entry() {
        let value = CtValue { last_seen_ns: 1_000_000_000_000, ..entry(0) };
        let end = value.last_seen_ns + 300 * 1_000_000_000;
        // BPF finds it live to the nanosecond of its lifetime, expired after.
        let live = |now: u64| now.saturating_sub(value.last_seen_ns) <= lifetime_ns(&LIFETIMES, UDP, &value);
        assert!(live(end) && !live(end + 1));
        assert!(!is_expired(&LIFETIMES, UDP, &value, end + SWEEP_MARGIN_NS));
        assert!(is_expired(&LIFETIMES, UDP, &value, end + SWEEP_MARGIN_NS + 1));
    }
}
