// SPDX-License-Identifier: Apache-2.0
//! The one error type: it names the file to edit and the key in it, because
//! with layered files the key alone does not say where to fix it.

use std::fmt;
use std::path::{Path, PathBuf};

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
    pub(crate) fn new(file: &Path, key: Option<String>, reason: String) -> Self {
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::parse_str;
    use crate::testutil::{bad, NAME};

    #[test]
    fn display_is_one_line() {
        let e = parse_str(Path::new(NAME), "[log]\nlevel = \n").unwrap_err();
        let s = e.to_string();
        assert!(!s.contains('\n') && !s.contains('\r'), "{s:?}");
        assert!(s.starts_with(&format!("{NAME}: line 2, column 9: ")), "{s}");

        let e = bad("bigtcp.size = 1", "bigtcp.size", "out of range");
        assert_eq!(e.to_string(), format!("{NAME}: bigtcp.size: 1 is out of range; expected 65536..=524280 bytes"));

        let e = bad("\"a\\nb\" = 1", "a\nb", "unknown key");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
