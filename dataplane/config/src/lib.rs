// SPDX-License-Identifier: Apache-2.0
//! Configuration of `v6node-dataplane`.
//!
//! TOML files are merged the systemd way, later files winning:
//!
//! 1. `<root>/usr/lib/v6node/dataplane.toml` (vendor defaults)
//! 2. `<root>/run/v6node/dataplane.d/*.toml` (this boot only: the node's role
//!    and the `v6node.dataplane` credential, put there by v6node-role.service)
//! 3. `<root>/etc/v6node/dataplane.toml` (admin)
//! 4. `<root>/etc/v6node/dataplane.d/*.toml`
//!
//! Drop-in directories are read by file name in byte order, hidden files
//! skipped.
//!
//! Missing files and a missing drop-in directory are skipped. Tables merge key
//! by key; any other value (arrays included) from a later file replaces the
//! earlier one whole. Keys no file sets keep the built-in defaults of
//! [`Config::default`]. Errors name the file that set the offending key, so
//! the message says which file to edit.

mod merge;
mod model;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use model::*;

use merge::Merged;

/// The effective configuration and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedConfig {
    pub config: Config,
    /// Files actually read, in merge order.
    pub files: Vec<PathBuf>,
    /// Dotted key path (`bigtcp.size`) of each scalar or array a file set ->
    /// the file that set it last.
    pub origins: BTreeMap<String, PathBuf>,
}

/// Loads the file stack under `root` (normally `/`).
pub fn load(root: &Path) -> Result<LoadedConfig, ConfigError> {
    load_with_extra(root, &[])
}

/// Loads the file stack under `root`, then `extra` files as if they were the
/// last drop-ins. Unlike stack files, a missing extra file is an error: it is
/// how `check-config FILE` checks a candidate before installing it.
pub fn load_with_extra(root: &Path, extra: &[PathBuf]) -> Result<LoadedConfig, ConfigError> {
    let mut m = Merged::default();
    for file in merge::stack(root)? {
        m.add_file(&file, false)?;
    }
    for file in extra {
        m.add_file(file, true)?;
    }
    finish(m)
}

/// One file's text on top of the built-in defaults; `name` is used in errors.
pub fn parse_str(name: &Path, text: &str) -> Result<LoadedConfig, ConfigError> {
    let mut m = Merged::default();
    m.add_text(name, text)?;
    finish(m)
}

fn finish(m: Merged) -> Result<LoadedConfig, ConfigError> {
    let config = validate::build(&m)?;
    Ok(LoadedConfig { config, files: m.files, origins: m.origins.leaves })
}

/// Why the configuration cannot be used. Displays on one line as
/// `FILE: KEY: REASON`, or `FILE: REASON` for errors about a whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file to fix: the one that set `key` last, or the file that could
    /// not be read or parsed. `<built-in defaults>` if no file was involved.
    pub file: PathBuf,
    /// Dotted key path, with an index for array items: `filter.deny_sources[3]`.
    pub key: Option<String>,
    pub reason: String,
}

impl ConfigError {
    fn new(file: &Path, key: Option<String>, reason: String) -> Self {
        ConfigError { file: file.to_owned(), key, reason: one_line(&reason) }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Log lines and `check-config` output must stay one line each, even
        // for odd file names or keys.
        write!(f, "{}: ", one_line(&self.file.to_string_lossy()))?;
        if let Some(key) = &self.key {
            write!(f, "{}: ", one_line(key))?;
        }
        f.write_str(&one_line(&self.reason))
    }
}

impl std::error::Error for ConfigError {}

/// toml's messages span several lines; join them with spaces.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}
