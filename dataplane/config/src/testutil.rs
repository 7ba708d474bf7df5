// SPDX-License-Identifier: Apache-2.0
//! What every module's tests build on: one file parsed on top of the
//! defaults, or a whole root directory of files, and checks that an error
//! names the right file and key.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::*;

pub(crate) const NAME: &str = "/etc/v6node/dataplane.d/50-test.toml";

pub(crate) fn ok(text: &str) -> Config {
    match parse_str(Path::new(NAME), text) {
        Ok(l) => l.config,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[track_caller]
pub(crate) fn assert_err(e: &ConfigError, file: &Path, key: Option<&str>, part: &str) {
    assert_eq!(e.file, file, "wrong file in: {e}");
    assert_eq!(e.key.as_deref(), key, "wrong key in: {e}");
    assert!(e.reason.contains(part), "reason lacks {part:?}: {e}");
}

/// One file on top of the defaults must fail at `key` with `part` in the reason.
#[track_caller]
pub(crate) fn bad(text: &str, key: &str, part: &str) -> ConfigError {
    let e = parse_str(Path::new(NAME), text).expect_err(text);
    assert_err(&e, Path::new(NAME), Some(key), part);
    e
}

/// A root directory with config files in it.
pub(crate) struct Tree(TempDir);

impl Tree {
    pub(crate) fn new() -> Self {
        Tree(tempfile::tempdir().unwrap())
    }

    pub(crate) fn root(&self) -> &Path {
        self.0.path()
    }

    pub(crate) fn write(&self, rel: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.root().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        path
    }

    pub(crate) fn vendor(&self, text: &str) -> PathBuf {
        self.write("usr/lib/v6node/dataplane.toml", text)
    }

    pub(crate) fn etc(&self, text: &str) -> PathBuf {
        self.write("etc/v6node/dataplane.toml", text)
    }

    pub(crate) fn dropin(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        self.write(&format!("etc/v6node/dataplane.d/{name}"), text)
    }

    pub(crate) fn load(&self) -> LoadedConfig {
        load(self.root()).unwrap_or_else(|e| panic!("unexpected error: {e}"))
    }

    pub(crate) fn load_err(&self) -> ConfigError {
        load(self.root()).expect_err("config should be rejected")
    }
}

pub(crate) fn strs(patterns: &[DevicePattern]) -> Vec<&str> {
    patterns.iter().map(DevicePattern::as_str).collect()
}
