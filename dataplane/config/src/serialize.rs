// SPDX-License-Identifier: Apache-2.0
//! Serializing values the way the config writes them (prefixes and addresses
//! as strings, "off" as `""`), so that `check-config`'s output reads back as
//! the same configuration.

use std::fmt;
use std::path::PathBuf;

use serde::Serializer;

pub(crate) fn serialize_displayed<T: fmt::Display, S: Serializer>(items: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(items.iter().map(|n| n.to_string()))
}

pub(crate) fn serialize_one_displayed<T: fmt::Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// TOML has no null: `""` is how the config turns such a setting off.
pub(crate) fn serialize_optional_displayed<T: fmt::Display, S: Serializer>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.collect_str(v),
        None => s.serialize_str(""),
    }
}

pub(crate) fn serialize_optional_displayed_path<S: Serializer>(value: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    serialize_optional_displayed(&value.as_ref().map(|p| p.display().to_string()), s)
}
