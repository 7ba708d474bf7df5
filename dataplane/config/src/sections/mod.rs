// SPDX-License-Identifier: Apache-2.0
//! One module per `[section]` of the configuration, each with its types,
//! how it is read and checked, and its tests, so that a feature changes its
//! own section's module (and `config.rs` only to add a section).
//!
//! Each module's `read` names its section's keys itself and reads them over
//! the built-in defaults, so that a key, its check and its error message
//! are found in one place.

pub(crate) mod attach;
pub(crate) mod bandwidth;
pub(crate) mod bigtcp;
pub(crate) mod filter;
pub(crate) mod flows;
pub(crate) mod kubernetes;
pub(crate) mod log;
pub(crate) mod metrics;
pub(crate) mod nat46;
pub(crate) mod nat64;
pub(crate) mod pods;
pub(crate) mod policy;
pub(crate) mod routing;
pub(crate) mod services;
