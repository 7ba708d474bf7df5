// SPDX-License-Identifier: Apache-2.0
//! Interface-name patterns, shared by every section that lists devices
//! (`attach`, `bigtcp`, `nat64`) so that all of them refuse the same typos.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::validator::Validator;
use crate::ConfigError;

/// Interface names are at most IFNAMSIZ - 1 bytes.
const IFNAME_MAX: usize = 15;

/// A shell glob over interface names, e.g. `en*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DevicePattern(glob::Pattern);

impl DevicePattern {
    /// Checks the pattern can match a Linux interface name at all, so typos
    /// like `eth0 ` or `eth0:1` fail loudly instead of silently matching nothing.
    pub fn new(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty pattern".into());
        }
        if s.contains('/') {
            return Err(format!("pattern `{s}` contains `/`, which interface names cannot"));
        }
        if s.contains(':') {
            return Err(format!("pattern `{s}` contains `:`, which interface names cannot"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("pattern `{s}` contains whitespace or a control character, which interface names cannot"));
        }
        if !s.contains(['*', '?', '[']) && s.len() > IFNAME_MAX {
            return Err(format!("interface name `{s}` is {} bytes; at most {IFNAME_MAX} are possible", s.len()));
        }
        glob::Pattern::new(s).map(DevicePattern).map_err(|e| format!("invalid glob `{s}`: {e}"))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn matches(&self, ifname: &str) -> bool {
        self.0.matches(ifname)
    }
}

impl FromStr for DevicePattern {
    /// A human-readable reason.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::new(s)
    }
}

impl fmt::Display for DevicePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DevicePattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Where `attach` and `bigtcp` act unless told otherwise: the usual names of
/// wired interfaces.
pub(crate) fn default_devices() -> Vec<DevicePattern> {
    ["en*", "eth*"].into_iter().map(|p| DevicePattern::new(p).expect("built-in pattern is valid")).collect()
}

impl Validator<'_> {
    /// A list of patterns at `path`; a pattern listed twice is most likely a
    /// mistake for another, so it is refused.
    pub(crate) fn devices(&self, path: &str, items: &[&str]) -> Result<Vec<DevicePattern>, ConfigError> {
        let mut out = Vec::with_capacity(items.len());
        for (i, s) in items.iter().enumerate() {
            let key = format!("{path}[{i}]");
            out.push(DevicePattern::new(s).map_err(|r| self.err(&key, r))?);
            if let Some(j) = items[..i].iter().position(|p| p == s) {
                return Err(self.err(&key, format!("duplicate pattern `{s}` (also item {j})")));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::{bad, ok};

    #[test]
    fn device_pattern_matching() {
        let c = ok("attach.devices = [\"en*\", \"eth[0-3]\", \"lo\"]");
        let p = &c.attach.devices;
        assert!(p[0].matches("enp1s0"));
        assert!(!p[0].matches("lo"));
        assert!(p[1].matches("eth2"));
        assert!(!p[1].matches("eth4"));
        assert!(p[2].matches("lo"));
        assert!(!p[2].matches("lo0"));
    }

    #[test]
    fn bad_device_patterns() {
        for section in ["attach", "bigtcp"] {
            let key = format!("{section}.devices[1]");
            let bad_dev = |item: &str, part: &str| {
                bad(&format!("{section}.devices = [\"en*\", {item:?}]"), &key, part);
            };
            bad_dev("", "empty pattern");
            bad_dev("a/b", "contains `/`");
            bad_dev("eth0 ", "contains whitespace");
            bad_dev("eth\t0", "contains whitespace");
            bad_dev("eth0:1", "contains `:`");
            bad_dev("averyverylongname", "is 17 bytes; at most 15");
            bad_dev("en[", "invalid glob `en[`");
            bad_dev("en*", "duplicate pattern `en*` (also item 0)");
        }
        // 15 bytes is fine, 16 is not.
        ok("attach.devices = [\"abcdefghijklmno\"]");
        bad("attach.devices = [\"abcdefghijklmnop\"]", "attach.devices[0]", "16 bytes");
    }
}
