// SPDX-License-Identifier: Apache-2.0
//! Port ranges, written `first-last` in the config.

use std::fmt;

use serde::Serialize;

/// `first-last`, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// How many ports: never none, as first <= last.
    pub fn count(self) -> usize {
        usize::from(self.last) - usize::from(self.first) + 1
    }

    pub fn iter(self) -> impl Iterator<Item = u16> {
        self.first..=self.last
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// `first-last`, with first at least `lowest`: ICMP identifiers may start
/// at 0, ports may not.
pub(crate) fn port_range(s: &str, lowest: u16) -> Result<PortRange, String> {
    let expected = || format!("`{s}` is not a range; expected e.g. 1024-65535");
    let (first, last) = s.split_once('-').ok_or_else(expected)?;
    let first: u16 = first.trim().parse().map_err(|_| expected())?;
    let last: u16 = last.trim().parse().map_err(|_| expected())?;
    if first < lowest || first > last {
        return Err(format!("{first}-{last}: expected {lowest} <= first <= last <= 65535"));
    }
    Ok(PortRange { first, last })
}
