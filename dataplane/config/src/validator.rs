// SPDX-License-Identifier: Apache-2.0
//! Reading typed values out of the merged TOML table. Every section reads
//! through these, so type errors and limits are worded the same everywhere
//! and always name the file that set the key.

use std::path::PathBuf;

use toml::{Table, Value};

use crate::merge::Merged;
use crate::ConfigError;

pub(crate) type Result<T> = std::result::Result<T, ConfigError>;

pub(crate) struct Validator<'a> {
    m: &'a Merged,
}

impl<'a> Validator<'a> {
    pub(crate) fn new(m: &'a Merged) -> Self {
        Validator { m }
    }
}

impl Validator<'_> {
    pub(crate) fn err(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::new(&self.m.file_for(key), Some(key.to_owned()), reason.into())
    }

    pub(crate) fn type_err(&self, key: &str, expected: &str, found: &Value) -> ConfigError {
        let found = match found {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a datetime",
            Value::Array(_) => "an array",
            Value::Table(_) => "a table",
        };
        self.err(key, format!("expected {expected}, found {found}"))
    }

    pub(crate) fn known_keys(&self, t: &Table, path: &str, allowed: &[&str]) -> Result<()> {
        match t.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => {
                let key = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                Err(self.err(&key, format!("unknown key `{k}`; expected one of {}", allowed.join(", "))))
            }
        }
    }

    pub(crate) fn section<'t>(&self, root: &'t Table, name: &str, allowed: &[&str]) -> Result<Option<&'t Table>> {
        match root.get(name) {
            None => Ok(None),
            Some(Value::Table(t)) => {
                self.known_keys(t, name, allowed)?;
                Ok(Some(t))
            }
            Some(v) => Err(self.type_err(name, "a table", v)),
        }
    }

    /// `path` is `section.key`; the key is looked up in the section table `t`.
    fn field<'t>(t: &'t Table, path: &str) -> Option<&'t Value> {
        t.get(path.rsplit('.').next().unwrap_or(path))
    }

    pub(crate) fn string<'t>(&self, t: &'t Table, path: &str) -> Result<Option<&'t str>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.type_err(path, "a string", v)),
        }
    }

    pub(crate) fn boolean(&self, t: &Table, path: &str) -> Result<Option<bool>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(self.type_err(path, "a boolean", v)),
        }
    }

    pub(crate) fn integer(&self, t: &Table, path: &str) -> Result<Option<i64>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::Integer(n)) => Ok(Some(*n)),
            Some(Value::Float(f)) => {
                Err(self.err(path, format!("expected an integer, found a float ({f}); write a whole number of bytes")))
            }
            Some(v) => Err(self.type_err(path, "an integer", v)),
        }
    }

    pub(crate) fn strings<'t>(&self, t: &'t Table, path: &str) -> Result<Option<Vec<&'t str>>> {
        match Self::field(t, path) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.as_str()),
                    v => Err(self.type_err(&format!("{path}[{i}]"), "a string", v)),
                })
                .collect::<Result<_>>()
                .map(Some),
            Some(v) => Err(self.type_err(path, "an array of strings", v)),
        }
    }

    /// The BPF maps are sized when the agent loads them (abi.h), so a list
    /// longer than its map is refused here instead of failing half-applied.
    pub(crate) fn at_most(&self, path: &str, count: usize, max: usize, what: &str) -> Result<()> {
        if count > max {
            return Err(self.err(path, format!("{count} {what}; at most {max} are supported")));
        }
        Ok(())
    }

    /// `""` turns the setting off; a relative path would depend on the
    /// agent's working directory.
    pub(crate) fn absolute_path_or_off(&self, path: &str, s: &str) -> Result<Option<PathBuf>> {
        match s {
            "" => Ok(None),
            s if s.starts_with('/') => Ok(Some(s.into())),
            s => Err(self.err(path, format!("{s:?} is not an absolute path"))),
        }
    }

    /// A state's lifetime in seconds at `path`: 1 s to a week, `default`
    /// when absent.
    pub(crate) fn lifetime(&self, t: &Table, path: &str, default: u32) -> Result<u32> {
        const WEEK: u32 = 86400 * 7;
        match self.integer(t, path)? {
            None => Ok(default),
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| (1..=WEEK).contains(n))
                .ok_or_else(|| self.err(path, format!("{n} is out of range; expected 1..={WEEK} seconds"))),
        }
    }
}

/// A prefix written as its network. `2001:db8::1/32` names none: the error
/// says which one was meant.
pub(crate) trait Network: Sized + Copy + PartialEq + std::fmt::Display {
    fn truncated(&self) -> Self;

    fn exact(self) -> std::result::Result<Self, String> {
        if self.truncated() != self {
            return Err(format!("host bits set; did you mean {}?", self.truncated()));
        }
        Ok(self)
    }
}

impl Network for ipnet::Ipv4Net {
    fn truncated(&self) -> Self {
        self.trunc()
    }
}

impl Network for ipnet::Ipv6Net {
    fn truncated(&self) -> Self {
        self.trunc()
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::bad;

    #[test]
    fn wrong_types() {
        bad("bigtcp.size = \"big\"", "bigtcp.size", "expected an integer, found a string");
        bad("bigtcp.size = true", "bigtcp.size", "expected an integer, found a boolean");
        bad("bigtcp.size = 1.5", "bigtcp.size", "expected an integer, found a float");
        bad("bigtcp.size = { a = 1 }", "bigtcp.size", "expected an integer, found a table");
        bad("attach = 1", "attach", "expected a table, found an integer");
        bad("log = \"info\"", "log", "expected a table, found a string");
        bad("attach.mode = { x = 1 }", "attach.mode", "expected a string, found a table");
        bad("attach.mode = [\"tcx\"]", "attach.mode", "expected a string, found an array");
        bad("attach.devices = \"en*\"", "attach.devices", "expected an array of strings, found a string");
        bad("attach.devices = [\"en*\", 3]", "attach.devices[1]", "expected a string, found an integer");
        bad("bigtcp.devices = [[\"en*\"]]", "bigtcp.devices[0]", "expected a string, found an array");
        bad("filter.deny_sources = \"2001:db8::/32\"", "filter.deny_sources", "expected an array of strings");
        bad("filter.deny_sources = [{}]", "filter.deny_sources[0]", "expected a string, found a table");
        bad("metrics.listen = 9462", "metrics.listen", "expected a string, found an integer");
        bad("log.level = 1979-05-27", "log.level", "expected a string, found a datetime");
    }
}
