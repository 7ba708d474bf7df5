// SPDX-License-Identifier: Apache-2.0
//! RFC 6052 3.1: the well-known prefix 64:ff9b::/96 must not represent
//! non-global IPv4 addresses; a network-specific prefix may represent any.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// The IPv4 ranges RFC 6890's special-purpose registry marks not globally
/// reachable, and multicast (RFC 5771), with what each is.
const NOT_GLOBAL: [(Ipv4Net, &str); 14] = [
    (Ipv4Net::new_assert(Ipv4Addr::new(0, 0, 0, 0), 8), "\"this network\", RFC 791"),
    (Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 0, 0), 8), "private-use, RFC 1918"),
    (Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 10), "shared address space, RFC 6598"),
    (Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8), "loopback, RFC 1122"),
    (Ipv4Net::new_assert(Ipv4Addr::new(169, 254, 0, 0), 16), "link-local, RFC 3927"),
    (Ipv4Net::new_assert(Ipv4Addr::new(172, 16, 0, 0), 12), "private-use, RFC 1918"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 0, 0), 24), "IETF protocol assignments, RFC 6890"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 2, 0), 24), "documentation (TEST-NET-1), RFC 5737"),
    (Ipv4Net::new_assert(Ipv4Addr::new(192, 168, 0, 0), 16), "private-use, RFC 1918"),
    (Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15), "benchmarking, RFC 2544"),
    (Ipv4Net::new_assert(Ipv4Addr::new(198, 51, 100, 0), 24), "documentation (TEST-NET-2), RFC 5737"),
    (Ipv4Net::new_assert(Ipv4Addr::new(203, 0, 113, 0), 24), "documentation (TEST-NET-3), RFC 5737"),
    (Ipv4Net::new_assert(Ipv4Addr::new(224, 0, 0, 0), 4), "multicast, RFC 5771"),
    (Ipv4Net::new_assert(Ipv4Addr::new(240, 0, 0, 0), 4), "reserved, RFC 1112"),
];

/// Inside 192.0.0.0/24 and globally reachable all the same: the PCP
/// (RFC 7723) and TURN (RFC 8155) anycast addresses.
const GLOBAL_EXCEPTIONS: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 0, 9), Ipv4Addr::new(192, 0, 0, 10)];

/// Why `net` holds a non-global address, in parentheses: the range it is
/// in or overlaps, and what that is. `None`: every address is global.
pub(crate) fn non_global(net: Ipv4Net) -> Option<String> {
    if net.prefix_len() == 32 && GLOBAL_EXCEPTIONS.contains(&net.addr()) {
        return None;
    }
    // Two prefixes overlap when one contains the other. A prefix that
    // overlaps 192.0.0.0/24 without being one of the exceptions holds
    // another address of it too.
    let (range, what) = NOT_GLOBAL.iter().find(|(range, _)| range.contains(&net) || net.contains(range))?;
    Some(if *range == net {
        format!("({what})")
    } else if range.contains(&net) {
        format!("(in {range}, {what})")
    } else {
        format!("(it overlaps {range}, {what})")
    })
}
