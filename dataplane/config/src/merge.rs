// SPDX-License-Identifier: Apache-2.0
//! Reading the file stack and merging it into one TOML table, remembering
//! which file set each key so errors can name the file to edit.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::ConfigError;

/// Names the file of an error about a key no file set.
pub(crate) const BUILTIN: &str = "<built-in defaults>";

#[derive(Default)]
pub(crate) struct Merged {
    pub table: Table,
    /// Files read, in merge order.
    pub files: Vec<PathBuf>,
    pub origins: Origins,
}

#[derive(Default)]
pub(crate) struct Origins {
    /// Non-table values (scalars and whole arrays) -> file that set them last.
    pub leaves: BTreeMap<String, PathBuf>,
    /// Tables -> last file that wrote into them. Kept apart from `leaves`
    /// only to point errors about a table (an unknown `[section]`, say) at a file.
    tables: BTreeMap<String, PathBuf>,
}

impl Merged {
    /// Merges one file. A missing file is skipped unless `required`.
    pub fn add_file(&mut self, file: &Path, required: bool) -> Result<(), ConfigError> {
        let bytes = match fs::read(file) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !required => return Ok(()),
            Err(e) => return Err(ConfigError::new(file, None, format!("cannot read file: {e}"))),
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            ConfigError::new(file, None, format!("not valid UTF-8 (line {line}, byte offset {at})"))
        })?;
        self.add_text(file, &text)
    }

    pub fn add_text(&mut self, file: &Path, text: &str) -> Result<(), ConfigError> {
        let table: Table = toml::from_str(text).map_err(|e| {
            let reason = match e.span() {
                Some(span) => {
                    let (line, col) = line_col(text, span.start);
                    format!("line {line}, column {col}: {}", e.message())
                }
                None => e.message().to_owned(),
            };
            ConfigError::new(file, None, reason)
        })?;
        self.files.push(file.to_owned());
        self.origins.merge(&mut self.table, table, "", file);
        Ok(())
    }

    /// The file that set `key`, or else the nearest enclosing key a file set:
    /// `filter.deny_sources[3]` is in the file that set the whole array.
    pub fn file_for(&self, key: &str) -> PathBuf {
        let mut k = key;
        loop {
            if let Some(f) = self.origins.get(k) {
                return f.clone();
            }
            match k.rfind(['.', '[']) {
                Some(i) => k = &k[..i],
                None => return self.files.last().cloned().unwrap_or_else(|| BUILTIN.into()),
            }
        }
    }
}

impl Origins {
    fn get(&self, key: &str) -> Option<&PathBuf> {
        self.leaves.get(key).or_else(|| self.tables.get(key))
    }

    fn merge(&mut self, dst: &mut Table, src: Table, prefix: &str, file: &Path) {
        for (key, value) in src {
            let path = join(prefix, &key);
            let value = match (dst.get_mut(&key), value) {
                (Some(Value::Table(old)), Value::Table(new)) => {
                    self.tables.insert(path.clone(), file.to_owned());
                    self.merge(old, new, &path, file);
                    continue;
                }
                (_, value) => value,
            };
            self.forget(&path);
            self.record(&path, &value, file);
            dst.insert(key, value);
        }
    }

    fn forget(&mut self, path: &str) {
        let under = format!("{path}.");
        let keep = |k: &String, _: &mut PathBuf| k != path && !k.starts_with(&under);
        self.leaves.retain(keep);
        self.tables.retain(keep);
    }

    fn record(&mut self, path: &str, value: &Value, file: &Path) {
        if let Value::Table(t) = value {
            self.tables.insert(path.to_owned(), file.to_owned());
            for (k, v) in t {
                self.record(&join(path, k), v, file);
            }
        } else {
            self.leaves.insert(path.to_owned(), file.to_owned());
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// Vendor file, this boot's drop-ins, admin file, then the admin's drop-ins;
/// drop-ins sorted by file name.
pub(crate) fn stack(root: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let mut files = vec![root.join("usr/lib/v6node/dataplane.toml")];
    files.extend(dropins(&root.join("run/v6node/dataplane.d"))?);
    files.push(root.join("etc/v6node/dataplane.toml"));
    files.extend(dropins(&root.join("etc/v6node/dataplane.d"))?);
    Ok(files)
}

/// `*.toml` in `dir` by name in byte order, hidden files skipped; none if
/// the directory does not exist.
fn dropins(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ConfigError::new(dir, None, format!("cannot read directory: {e}"))),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ConfigError::new(dir, None, format!("cannot read directory: {e}")))?;
        let name = entry.file_name();
        let bytes = name.as_encoded_bytes();
        if bytes.ends_with(b".toml") && !bytes.starts_with(b".") {
            names.push(name);
        }
    }
    // OsString orders by bytes on Unix, which is the order systemd uses.
    names.sort();
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}
